// The typed request: what a client asked for (messages or a prompt, tools and constraints,
// sampling, limits, stream options, metadata), whatever API it spoke. A front-end parses its wire
// format into a ChatRequest once (OpenAI chat/completions: api/openai_parse.h); routing and
// every backend read it (the local engine runs it, api/openai_render.h writes it back as OpenAI
// JSON). Plain values; immutable once parsed and shared read-only between threads
// (std::shared_ptr<const ChatRequest>).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace ferry::api {

// JSON that ferry keeps but does not interpret (a JSON Schema, a client's extra members): kept
// as the client sent it, members in their order.
using Json = nlohmann::ordered_json;

// The API a request came in through (the front-end), and the API a backend is spoken to in:
// OpenAI chat/completions and completions, Anthropic Messages, OpenAI Responses. A typed
// ChatRequest itself is chat- or completions-shaped (its `endpoint`); kMessages and kResponses
// name front-ends and the backends that speak them natively. kEmbeddings: `/v1/embeddings` (its own
// typed request, api/embeddings_parse.h).
enum class Endpoint { kChatCompletions, kCompletions, kMessages, kResponses, kEmbeddings };
// The API's short name: chat, completions, messages, responses (the policy fact `api`, the
// backend config's `apis`, the metrics label).
constexpr std::string_view endpoint_name(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kChatCompletions:
      return "chat";
    case Endpoint::kCompletions:
      return "completions";
    case Endpoint::kMessages:
      return "messages";
    case Endpoint::kResponses:
      return "responses";
    case Endpoint::kEmbeddings:
      return "embeddings";
  }
  return "chat";
}

struct EmbeddingsRequest;  // api/embeddings_parse.h

enum class Role { kSystem, kDeveloper, kUser, kAssistant, kTool, kFunction };
std::string_view role_name(Role role);
std::optional<Role> role_from_name(std::string_view name);

// Unknown members of an object (an object Json, or null when there are none) are kept in `extra`
// in their order, and written back after the known ones. A member whose value ferry cannot type
// (null, or not the documented shape) is kept in `extra` as sent, and its typed field stays
// empty: nothing a client sent is dropped, and no request valid today is refused.

// One part of a message's content: text, or another kind (image_url, input_audio, file, ...)
// whose members other than `type` stay in `extra`.
struct ContentPart {
  std::string type;  // "text", "image_url", ...
  std::string text;  // type "text"
  Json extra;
};

struct Content {
  enum class Form { kAbsent, kText, kParts };
  Form form = Form::kAbsent;
  std::string text;                // kText
  std::vector<ContentPart> parts;  // kParts
};

// A tool call an assistant message made (function calls: name and JSON-text arguments).
struct ToolCall {
  std::string id;
  std::string type = "function";
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it
  Json extra;             // other members of the call
};

struct Message {
  Role role = Role::kUser;
  Content content;
  std::optional<std::string> name;
  std::optional<std::vector<ToolCall>> tool_calls;  // an assistant's calls
  std::optional<std::string> tool_call_id;          // a tool result: the call it answers
  Json extra;
};

// A function tool the model may call.
struct Tool {
  std::string name;
  std::optional<std::string> description;
  // The JSON Schema object as compact JSON text, the client's members in their order (the text
  // nlohmann::json::dump() writes of it: api::append_dom_json); empty when absent. Text, not a
  // tree: a backend is sent it as it is, and only a grammar or a chat template parses it.
  std::string parameters;
  std::optional<bool> strict;
  Json function_extra;  // other members of `function`
  Json extra;           // other members of the tool
};

struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kFunction };
  Mode mode = Mode::kAuto;
  std::string name;  // kFunction
};

// A constraint on the answer's form (OpenAI response_format).
struct ResponseFormat {
  std::string type;  // "text", "json_object", "json_schema"
  Json json_schema;  // type json_schema: {name, schema, strict, ...}; null otherwise
  Json extra;
};

// A completions prompt: a string, or an array of strings, token ids and token-id arrays.
struct PromptItem {
  enum class Kind { kText, kTokenId, kTokenIds };
  Kind kind = Kind::kText;
  std::string text;             // kText
  std::vector<int32_t> tokens;  // kTokenId (one), kTokenIds; each 0..kMaxTokenId
};
struct Prompt {
  bool array = false;  // sent as an array (else one string: items has one kText item)
  std::vector<PromptItem> items;
};

struct Sampling {
  std::optional<double> temperature;        // 0..2
  std::optional<double> top_p;              // 0..1
  std::optional<double> presence_penalty;   // -2..2
  std::optional<double> frequency_penalty;  // -2..2
  std::optional<int64_t> seed;
  std::optional<std::vector<std::pair<int32_t, double>>> logit_bias;  // token id -> -100..100
  std::optional<std::vector<std::string>> stop;
  bool stop_is_array = false;  // stop sent as an array (else one string)
  // Extensions of vLLM and llama.cpp (not OpenAI's); passed through to HTTP backends unchecked.
  std::optional<double> min_p;               // 0..1
  std::optional<int64_t> top_k;              // <= 0: off
  std::optional<double> repetition_penalty;  // 0.01..10
  std::optional<bool> ignore_eos;
};

// Token logprobs: chat `logprobs` (bool) + `top_logprobs` (0..20); completions `logprobs` (0..5)
// is logprobs = true with top_logprobs = that number.
struct Logprobs {
  std::optional<bool> logprobs;
  std::optional<int64_t> top_logprobs;
};

struct Limits {
  std::optional<int64_t> max_tokens;             // 1..kMaxTokensLimit
  std::optional<int64_t> max_completion_tokens;  // the same, its newer name (wins over the other)
  std::optional<int64_t> n;                      // choices, 1..kMaxChoices
  std::optional<bool> echo;                      // completions: the prompt in the answer
  std::optional<double> best_of;                 // completions: sample several, answer the best
  // The completion budget asked for: max_completion_tokens, else max_tokens; -1 when neither.
  int64_t effective_max_tokens() const {
    return max_completion_tokens ? *max_completion_tokens : max_tokens ? *max_tokens : -1;
  }
  int64_t choices() const { return n.value_or(1); }
};

struct StreamOptions {
  std::optional<bool> include_usage;
  Json extra;
};

struct Metadata {
  std::optional<std::string> user;
  Json metadata;        // the metadata object as sent (its keys are the client's); null: none
  std::string task_id;  // metadata.task_id, at most 256 bytes (the x-ferry-task header wins)
  std::vector<std::string> tags;  // metadata.tags split (untrusted claims)
};

struct ChatRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;
  std::vector<Message> messages;  // chat
  Prompt prompt;                  // completions
  std::optional<std::vector<Tool>> tools;
  std::optional<ToolChoice> tool_choice;
  std::optional<bool> parallel_tool_calls;
  Json functions;  // the legacy `functions` array, as sent; null: none
  std::optional<ResponseFormat> response_format;
  Sampling sampling;
  Logprobs logprobs;
  Limits limits;
  std::optional<bool> stream;
  std::optional<StreamOptions> stream_options;
  Metadata metadata;
  Json extra;  // top-level members ferry does not read (chat_template_kwargs, ...), as sent
  // A problem with a field HTTP backends receive unchecked today (an extension out of range,
  // top_logprobs without logprobs): a consumer that acts on these fields (the local engine)
  // answers with it; pass-through leaves them to the backend.
  std::optional<Error> extension_error;
  // endpoint kEmbeddings: the embeddings request (api/embeddings_parse.h); `model` and
  // metadata.user are set from it, the chat and completions members stay empty.
  std::shared_ptr<const EmbeddingsRequest> embeddings;

  bool streams() const { return stream.value_or(false); }
  bool chat() const { return endpoint == Endpoint::kChatCompletions; }
  // tools or functions given (a routing fact).
  bool has_tools() const { return tools_given || !functions.is_null(); }
  bool has_response_format() const { return response_format_given; }
  bool tools_given = false;            // `tools` present and not null (typed or kept in extra)
  bool response_format_given = false;  // likewise `response_format`
};

// Parameter changes a routing rule made (`set`); absent = keep the client's value.
struct Overrides {
  std::optional<int64_t> max_tokens;
  std::optional<double> temperature;
  std::optional<double> top_p;
  bool any() const { return max_tokens || temperature || top_p; }
};

}  // namespace ferry::api
