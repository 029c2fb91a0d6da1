// Events to OpenAI Responses: the `response` object and its SSE stream (response.created ...
// response.completed), with sequence numbers, output indexes, item ids and content indexes as
// OpenAI sends them. render_response is thread-safe; a ResponsesStreamRenderer is one per
// stream, not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/events.h"
#include "common/error.h"

namespace ferry::api {

// The request's own fields a `response` object echoes, as JSON text the front-end takes from
// the typed request (it must be valid JSON: the renderer copies it as it is, so a temperature
// keeps the client's digits and never passes through floating point).
struct ResponsesEcho {
  std::string instructions = "null";
  std::string tools = "[]";
  std::string tool_choice = "\"auto\"";
  bool parallel_tool_calls = true;
  std::string temperature = "null";
  std::string top_p = "null";
  int64_t max_output_tokens = -1;  // -1: null
  std::string text = "{\"format\":{\"type\":\"text\"}}";
  std::string metadata = "{}";
  std::string previous_response_id;  // "": null
  bool store = false;
};

// The ids of one output item: its own, and a function call's call_id.
struct ResponseItemIds {
  std::string item;
  std::string call;
};

// What every delta event of one output item begins with (its type, up to the sequence number)
// and what follows the number up to the fragment: written once per item.
struct ResponseDeltaHead {
  std::string open;
  std::string middle;
  std::string_view close;
  int kind = -1;  // the DeltaKind they were written for; -1: none
};

struct ResponsesRenderOptions {
  RenderIdentity identity;  // id "resp_" + 48 letters and digits when empty
  ResponsesEcho echo;
};

// Field by field: `output` has one item per block in order: a text block is a `message` item
// (id "msg_…", one `output_text` part with no annotations), a thinking block a `reasoning` item
// (id "rs_…", empty `summary`, one `reasoning_text` part in `content`), a tool call a
// `function_call` item (id "fc_…", the call id as `call_id`, "call_" + 24 when empty, the
// arguments text as sent). `status` is completed (stop, stop sequence, tool calls) or
// incomplete with `incomplete_details.reason` max_output_tokens (length) or content_filter;
// items are completed. `usage`: input_tokens, input_tokens_details.cached_tokens,
// output_tokens, output_tokens_details.reasoning_tokens, total_tokens. A failed answer is an
// OpenAI error body with its status.
WireBody render_response(const Answer& answer, const ResponsesRenderOptions& options = {});

// The stream: response.created and response.in_progress (status in_progress, no output, usage
// null); per block response.output_item.added, then for text and thinking
// response.content_part.added, response.output_text.delta / response.reasoning_text.delta,
// their .done with the whole text, response.content_part.done, and for a tool call
// response.function_call_arguments.delta and .done (with the name); response.output_item.done
// with the whole item; then response.completed or response.incomplete with the whole response.
// An error after the start is response.failed (status failed, `error` {code, message}, the
// output so far); before the start it is an `error` event. Every event has `sequence_number`.
class ResponsesStreamRenderer {
 public:
  explicit ResponsesStreamRenderer(ResponsesRenderOptions options = {});
  // Appends the SSE bytes of `event` to `out` (possibly none).
  void render(const Event& event, std::string& out);
  // Set when the producer's events broke the event grammar: the stream ended with
  // response.failed (or `error`) that the producer did not send.
  const std::optional<Error>& failure() const { return builder_.violation(); }
  // After a stream this renderer ended, the answer failed anyway (e.g. the ledger could not
  // record it): what the end rendered is not sent, and this is sent instead: the last item's
  // output_item.done (incomplete) and response.failed with the output so far, the same id,
  // the sequence numbers going on from before the end. Nothing before a start.
  void fail_after_end(const Error& error, std::string& out);
  // The `response` object the last render() call wrote last, when the last event it appended
  // carries one (response.created ... response.completed, .incomplete, .failed): its bytes in
  // that call's `out`; empty otherwise (an `error` event, or nothing appended). What a client
  // was sent as the final response, without reading the stream back.
  std::string_view last_response(std::string_view out) const;
  // Within last_response: its `output` array, written as api::append_dom_json writes JSON
  // (compact, every string through common/json_text's escaper, each name once), so what a
  // parse and re-write of it would give; empty when last_response is.
  std::string_view last_output(std::string_view out) const;
  // The response's id (once started): what its `id` member reads as.
  const std::string& response_id() const { return id_; }

  // An output item's or the response's status.
  enum class ItemStatus : uint8_t { kInProgress, kCompleted, kIncomplete, kFailed };

 private:
  // `event: <type>\ndata: {"type":"<type>","sequence_number":N` (the caller adds members).
  void begin(std::string& out, std::string_view type);
  void render_response_event(std::string& out, std::string_view type);
  void render_start(const StartEvent& e, std::string& out);
  void render_block_start(const BlockStartEvent& e, std::string& out);
  void render_delta(const DeltaEvent& e, std::string& out);
  void render_block_stop(const BlockStopEvent& e, std::string& out);
  void render_end(std::string& out);
  void render_failed(const Error& error, std::string& out);
  // The output_item.done of the block that stopped last, once the next event says whether it
  // completed (another block starts) or was cut (the answer ended by the limit or a failure).
  void render_item_done(std::string& out, ItemStatus status);

  ResponsesRenderOptions options_;
  AnswerBuilder builder_;             // the answer so far, for the .done events and the end
  std::vector<ResponseItemIds> ids_;  // per block
  std::vector<ResponseDeltaHead> delta_heads_;  // per block
  std::string id_;
  std::string model_;
  int64_t created_at_ = 0;
  int64_t sequence_ = 0;
  bool started_ = false;
  bool done_ = false;
  int64_t pending_done_ = -1;  // the block whose output_item.done waits, or -1
  int64_t end_sequence_ = 0;   // sequence_ and pending_done_ when the end was rendered
  int64_t end_pending_ = -1;
  // Where in `out` the response object of the last event begun lies ([at, end)), when it has
  // one; reset by every event begun and by every render() call.
  size_t response_at_ = 0;
  size_t response_end_ = 0;
  size_t output_at_ = 0;  // its `output` array ([at, end)), within it
  size_t output_end_ = 0;
};

}  // namespace ferry::api
