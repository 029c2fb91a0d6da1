// The Anthropic Messages front-end's parser: a /v1/messages (or /v1/messages/count_tokens) body
// validated into the typed request (api/chat_request.h) in one pass, every error Anthropic's
// invalid_request_error (400) naming the field as Anthropic does ("messages.0.content.1.type:
// ..."). The one place of Messages' parameter rules. Stateless (a parser buffer per thread);
// thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "api/chat_request.h"
#include "common/error.h"

namespace ferry::api {

struct AnthropicParseOptions {
  // count_tokens: `max_tokens` is not required, and `stream` / sampling are not read.
  bool count_tokens = false;
  // Bytes past the end of `body` that may be read (its string's spare capacity): with at least
  // kJsonReadSlack (common/json_text.h) the body is parsed where it is, otherwise copied first.
  size_t readable_past_end = 0;
};

// What the parse learns beside the typed value.
struct AnthropicParseInfo {
  int model_keys = 0;  // top-level members named "model" (for the splicing rewrite)
  // Content only a backend that speaks Messages natively can take (an image or document block,
  // a server tool such as web_search_*): a 400 naming its path when the request is translated.
  std::optional<Error> native_only;
};

// How Messages maps onto the typed request:
// - `system` (a string or text blocks) is the first message, role system (blocks as text
//   parts); `messages` alternate user / assistant; consecutive turns of one role are merged
//   into one, as Anthropic does. The first turn may be the assistant's (a prefill).
// - user content: a string, or blocks: text, image / document (native only), tool_result
//   {tool_use_id, content: string or text blocks, is_error} as a tool message answering that
//   call (placed before the turn's text, as OpenAI orders them; an error result's text is
//   prefixed "Error: "). A tool_result whose tool_use_id no earlier tool_use made is a 400.
// - assistant content: text; tool_use {id, name, input: an object} as a tool call (the input's
//   JSON text as its arguments); thinking {thinking, signature} as the message's
//   `reasoning_content` (kept in its extra: the member vLLM, llama.cpp and the chat templates
//   read); redacted_thinking carries nothing a model other than Anthropic's can read and is
//   dropped when translated. A tool_use id may appear once.
// - `tools`: custom tools {name, description, input_schema (an object), type "custom"}; server
//   tools (web_search_*, web_fetch_*, bash_*, text_editor_*, computer_*, code_execution_*,
//   memory_*) are native only. `tool_choice` {type: auto | any | tool (+ name) | none,
//   disable_parallel_tool_use} is auto / required / function / none, and parallel_tool_calls
//   false when disabled. A tool choice naming no tool of `tools` is a 400.
// - `max_tokens` (required, 1..kMaxTokensLimit), `stop_sequences` (strings), `temperature`
//   (0..1), `top_p` (0..1), `top_k` (>= 0), `metadata.user_id` (as the user), `stream`.
// - `thinking` {type: enabled, budget_tokens >= 1024 and < max_tokens} | {type: disabled}:
//   chat_template_kwargs.enable_thinking true / false in the typed request's extra (what vLLM,
//   llama.cpp and Qwen / DeepSeek templates read); the budget is bounded by max_tokens.
// - `cache_control` on blocks and tools, `context_management` and `output_config` (what Claude
//   Code sends) are hints about the server's own work, not the answer's form: kept for native
//   backends in the raw body, not carried when translated. `thinking` {type: adaptive} is
//   thinking on. `container` and `mcp_servers` are native only.
// - Any other top-level member, an unknown block type, a wrong type, an empty `messages`, a
//   role other than user / assistant: a 400 as Anthropic words it.
Status parse_anthropic_into(std::string_view body, ChatRequest& out, AnthropicParseInfo& info,
                            const AnthropicParseOptions& options = {});

}  // namespace ferry::api
