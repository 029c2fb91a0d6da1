// Events to Anthropic Messages: the `message` body, the SSE stream exactly as Anthropic sends
// it, and Anthropic's error shape with the mapping from ferry's error codes. render_* and the
// error functions are thread-safe; an AnthropicStreamRenderer is one per stream, not
// thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "api/events.h"
#include "common/error.h"

namespace ferry::api {

struct AnthropicRenderOptions {
  RenderIdentity identity;  // id "msg_" + 24 letters and digits when empty; `created` unused
};

// Field by field:
// - content: text {type,text}; tool_use {type,id,name,input} with the arguments as `input`
//   (a JSON object; empty arguments are {}; the call id is kept, "toolu_" + 24 when empty);
//   thinking {type,thinking,signature} (the producer's signature, "" when it had none).
// - stop_reason: end_turn (stop), max_tokens (length), stop_sequence (+ `stop_sequence`),
//   tool_use (tool_calls), refusal (content_filter).
// - usage: input_tokens = prompt - cached (Anthropic counts cache reads apart),
//   cache_read_input_tokens = cached, cache_creation_input_tokens = 0, output_tokens =
//   completion (thinking included), output_tokens_details.thinking_tokens when there are any.
// A tool call whose arguments are not a JSON object is an error body, unless it is the last
// block of an answer max_tokens ended: then its `input` is what the model wrote, closed
// (close_json_object_prefix), and stop_reason is max_tokens, as Anthropic answers. A failed
// answer is an error body.
WireBody render_anthropic_message(const Answer& answer, const AnthropicRenderOptions& options = {});
// Why `answer` (not a failed one) cannot be a Messages body (a tool call's arguments), if so.
std::optional<Error> anthropic_render_problem(const Answer& answer);

// The stream: `message_start` (the message with empty content and the usage known at the start)
// then one `ping`; per block `content_block_start`, `content_block_delta` (`text_delta`,
// `input_json_delta` with `partial_json`, `thinking_delta`; a thinking block's signature as one
// `signature_delta` just before its stop, since clients replace rather than append it),
// `content_block_stop`; then `message_delta` (stop_reason, stop_sequence, usage: the final
// output_tokens, and the input counts when the finish knows them) and `message_stop`. An error
// is `event: error` and ends the stream, as does a tool call whose arguments turn out not to be
// a JSON object when its block stops, unless the finish that follows is max_tokens (the call
// was cut: its `input_json_delta`s were sent, then its stop and `message_delta`).
class AnthropicStreamRenderer {
 public:
  explicit AnthropicStreamRenderer(AnthropicRenderOptions options = {})
      : options_(std::move(options)) {}
  // Appends the SSE bytes of `event` to `out` (possibly none).
  void render(const Event& event, std::string& out);
  // A keep-alive `ping` event (any time after the start).
  static void ping(std::string& out);
  // Set when the answer could not be rendered (a call's arguments not an object): the stream
  // ended with an error event the producer did not send.
  const std::optional<Error>& failure() const { return failure_; }

 private:
  void render_delta(const DeltaEvent& e, std::string& out);
  void render_block_stop(uint32_t index, std::string& out);
  bool stop_cut_call(const Event& event, std::string& out);
  void render_error(const Error& error, std::string& out);
  AnthropicRenderOptions options_;
  Usage start_usage_;
  BlockKind open_kind_ = BlockKind::kText;
  std::string tool_name_;             // of the open tool call
  std::string arguments_;             // of the open tool call, checked when it stops
  std::string signature_;             // of the open thinking block, sent when it stops
  std::optional<uint32_t> cut_call_;  // a call whose arguments are not an object, not yet stopped
  std::optional<Error> failure_;
  bool done_ = false;
  // The bytes of a content_block_delta up to its text, for the block and kind last written.
  std::string delta_head_;
  uint32_t delta_index_ = 0;
  DeltaKind delta_kind_ = DeltaKind::kSignature;  // none yet (signatures are not sent as deltas)
};

// Anthropic's error type and the status ferry answers with, for each ferry error code:
// invalid_request_error 400 (bad input, context overflow), authentication_error 401,
// permission_error 403, not_found_error 404, request_too_large 413, rate_limit_error 429 (rate
// limits and spent budgets), api_error 500/502 (internal, backend errors), overloaded_error 529
// (no backend available), timeout_error 504.
struct AnthropicErrorKind {
  int status = 500;
  std::string_view type;
};
AnthropicErrorKind anthropic_error_kind(const Error& error);
// {"type":"error","error":{"type":...,"message":...}} (+ "request_id" when given).
std::string anthropic_error_json(const Error& error, std::string_view request_id = {});

}  // namespace ferry::api
