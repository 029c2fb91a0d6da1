// OpenAI request bodies: parse, validate (400 naming the field) and rewrite for a backend.
// Stateless functions over values; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "adapters/backend.h"
#include "api/chat_request.h"
#include "api/openai_parse.h"
#include "common/error.h"

namespace ferry::api {
struct ResponsesRequest;
}

namespace ferry::gateway {

// The edge's limits (api/openai_parse.h), under their gateway names.
constexpr int64_t kMaxTokensLimit = api::kMaxTokensLimit;
constexpr int64_t kMaxChoices = api::kMaxChoices;
constexpr int64_t kMaxTokenId = api::kMaxTokenId;

// The request as routing reads it: the typed value (parsed once, shared by every hop and the
// backends), the routing fields taken from it, and the raw body for pass-through.
struct ParsedRequest {
  // The typed request's shape (chat or completions; a Messages request is chat-shaped).
  adapters::Endpoint endpoint = adapters::Endpoint::kChatCompletions;
  // The API the client spoke (gateway/frontend.h): the backend that speaks it gets `raw`
  // spliced, any other the typed value as OpenAI chat, its answer translated back.
  api::Endpoint api = api::Endpoint::kChatCompletions;
  // Why only a backend that speaks `api` natively can take the request (an image block, a
  // server tool): translating it would drop what the client asked for. Unset: any backend.
  std::optional<Error> native_only;
  // Headers a native backend gets as the client sent them (anthropic-version, anthropic-beta).
  std::vector<std::pair<std::string, std::string>> native_headers;
  std::string raw;  // the body exactly as the client sent it
  std::shared_ptr<const api::ChatRequest> typed;
  // A Responses request's own side (api/responses_parse.h); `typed` points into it. Null else.
  std::shared_ptr<api::ResponsesRequest> responses;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage as the client sent it
  int64_t max_tokens = -1;     // max_completion_tokens or max_tokens; -1 when absent
  int64_t n = 1;               // choices asked for, 1..kMaxChoices
  std::optional<double> temperature;
  std::optional<double> top_p;
  bool tools = false;                     // tools or functions present
  bool response_format = false;           // response_format present
  std::string task_id;                    // metadata.task_id (the x-ferry-task header wins)
  std::vector<std::string> claimed_tags;  // metadata.tags, comma-separated (untrusted)
  // Top-level members named "model" (escapes decoded), for upstream_body to stop scanning
  // once it has passed them all; 0 when unknown (a request not made by parse_request).
  int model_keys = 0;
};

// Parameter changes a routing rule made (`set`); absent = keep the client's value.
using BodyOverrides = api::Overrides;

// Parses and validates a request body for the endpoint (api::parse_openai: the one parser of
// OpenAI's rules; api::parse_embeddings_into for kEmbeddings, max_tokens 0). The body becomes
// ParsedRequest::raw: pass it with std::move when the caller no longer needs it (no copy then).
Result<ParsedRequest> parse_request(adapters::Endpoint endpoint, std::string body);

// The body to send upstream: `model` replaced by the backend's name for it and, for streams,
// stream_options.include_usage forced on so usage always comes back. Every other byte is
// passed through untouched (the client's text is spliced, not re-serialised: cheaper, and
// numbers and key order reach the backend exactly as sent). A request without raw bytes (one
// another front-end parsed) is rendered from its typed value (api::render_openai).
// A key the splice cannot follow (written with escapes) re-serialises the client's body.
std::string upstream_body(const ParsedRequest& request, const std::string& upstream_model,
                          const BodyOverrides& overrides = {});

// Splits "a, b,c" into trimmed, non-empty tags (at most 32, each at most 64 bytes).
using api::split_tags;

}  // namespace ferry::gateway
