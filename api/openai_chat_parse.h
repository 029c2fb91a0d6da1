// From OpenAI chat completions to the typed answer: a `chat.completion` body, or the data of
// each `chat.completion.chunk` SSE event of a stream, into an Answer or Events (events.h). This
// is how an OpenAI-compatible backend's reply reaches an Anthropic or Responses client.
// parse_chat_completion is thread-safe; a ChatStreamParser is one per stream, not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/events.h"
#include "common/error.h"

namespace simdjson::dom {
class object;
}

namespace ferry::api {

struct MemberProbe;  // api/json_read.h

// What is read, per field:
// - `id`, `model`, `created` (an integer; 0 when absent).
// - `choices[0]` only; more than one choice, or an index other than 0, is an error (one answer
//   is all a Messages or Responses client can take).
// - `message` / `delta`: `reasoning_content` (vLLM, llama.cpp) or `reasoning` (newer vLLM) as a
//   thinking block; `content` as text; `refusal` as text; `tool_calls` (id, function.name,
//   function.arguments) as tool calls, in that order; empty strings make no block.
// - `finish_reason`: stop, length, tool_calls, content_filter; "stop" with vLLM's string
//   `stop_reason` is kStopSequence with that sequence; any other value is an error.
// - `usage`: prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens,
//   completion_tokens_details.reasoning_tokens; a count that is not a non-negative integer
//   within int64 leaves the usage unreported (the gateway then bills on its own count).
// - A body or chunk `{"error": {...}}` is the backend's error: kBackendError with its message.
// Other members (system_fingerprint, logprobs, service_tier) are not carried.
// Every error is kBackendError (the backend sent something ferry cannot render faithfully).
Result<Answer> parse_chat_completion(std::string_view body);

// Turns a chat completion stream into Events, one SSE event's data at a time (the SSE framing
// is adapters/sse_parser.h's job). Tool-call fragments are matched by their `index`; a
// fragment for a call whose block is already closed (interleaved calls) is an error, since
// the event sequence keeps blocks apart. Finish is sent at `[DONE]` (or end()), after the
// usage chunk that may follow the finish_reason chunk.
class ChatStreamParser {
 public:
  // Feeds the data of one SSE event: a chunk's JSON or "[DONE]". An upstream `{"error":...}`
  // chunk becomes an ErrorEvent. Returns an error (and sends nothing more, ever) when the data
  // is not a chunk it can render; the caller then ends the stream with that error.
  Status feed(std::string_view data, EventSink& sink);
  // feed() of a chunk's JSON (never "[DONE]") for a caller that tells a chunk which is not one
  // JSON object apart from one that cannot be rendered (an HTTP backend's relay breaks the
  // stream for the former with its own error): false, with nothing changed, when it is not one
  // JSON object (checked even after the stream ended or failed); true otherwise, `status` then
  // being feed()'s. The `count` probes are looked for in the chunk (api/json_read.h
  // probe_members) from the same parse, so the caller need not scan its text for them.
  bool feed_object(std::string_view data, EventSink& sink, Status& status,
                   MemberProbe* probes = nullptr, size_t count = 0);
  // The upstream stream ended without `[DONE]`: sends Finish when a finish_reason was seen,
  // else returns an error (a stream cut short).
  Status end(EventSink& sink);
  bool finished() const { return finished_; }

 private:
  Status feed_root(const simdjson::dom::object& root, EventSink& sink);
  Status fail(std::string message);
  Status fail(Error error);
  Status finish(EventSink& sink);
  void close_block(EventSink& sink);
  Status on_tool_fragment(int64_t tool_index, std::string_view id, std::string_view name,
                          std::string_view arguments, bool has_name, EventSink& sink);
  void open_block(BlockKind kind, std::string_view call_id, std::string_view name, EventSink& sink);
  void on_fragment(BlockKind kind, DeltaKind delta, std::string_view text, EventSink& sink);

  static constexpr int64_t kMaxToolCalls = 128;
  std::vector<int32_t> tool_blocks_;  // tool index -> block index (-1: not seen)
  uint32_t blocks_ = 0;               // blocks started so far
  int32_t open_tool_ = -1;            // the tool index of the open block, when it is a call
  bool open_ = false;
  BlockKind open_kind_ = BlockKind::kText;
  bool started_ = false;
  bool finished_ = false;
  bool failed_ = false;
  bool have_finish_ = false;
  FinishReason finish_ = FinishReason::kStop;
  std::string stop_sequence_;
  Usage usage_;
};

}  // namespace ferry::api
