// Events to OpenAI chat completions: the `chat.completion` body and the `chat.completion.chunk`
// stream (so the local engine can produce events only and the chat front-end renders them like
// the others), and OpenAI's error shape. render_* and openai_error_* are thread-safe; a
// ChatStreamRenderer is one per stream, not thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "api/events.h"
#include "common/error.h"

namespace ferry::api {

struct ChatRenderOptions {
  RenderIdentity identity;     // id "chatcmpl-" + 29 letters and digits when empty
  bool include_usage = false;  // streams: stream_options.include_usage (a final usage chunk)
};

// The body of a non-stream answer: text blocks joined as `content` (null when none), thinking
// as `reasoning_content` (as vLLM and llama.cpp send it), tool calls as `tool_calls`;
// finish_reason stop (also for a stop sequence: chat has no other word), length, tool_calls,
// content_filter; usage with the cached and reasoning details. A failed answer is its error.
// Thinking signatures have no place in chat and are not rendered.
WireBody render_chat_completion(const Answer& answer, const ChatRenderOptions& options = {});

// The stream: a role chunk at the start (`"role":"assistant","content":""`), one chunk per
// delta (`content`, `reasoning_content`, or a `tool_calls` fragment whose `index` counts the
// tool calls, the first with id, type and name), the finish_reason chunk, the usage chunk when
// asked for, then `data: [DONE]`. An error ends the stream with `data: {"error":{...}}`.
class ChatStreamRenderer {
 public:
  explicit ChatStreamRenderer(ChatRenderOptions options = {}) : options_(std::move(options)) {}
  // Appends the SSE bytes of `event` to `out` (possibly none).
  void render(const Event& event, std::string& out);

 private:
  void open_chunk(std::string& out) const;
  ChatRenderOptions options_;
  std::string prefix_;  // `data: {"id":...,"model":...,"choices":[` of every chunk
  int64_t tool_calls_ = 0;
  bool done_ = false;
};

// OpenAI's error shape and status for a ferry error: {"error":{"message","type","param",
// "code"}}; the one mapping (gateway/errors.h answers every endpoint's errors with it). A
// message's bytes that are not UTF-8 are written as U+FFFD.
int openai_error_status(const Error& error);
std::string openai_error_json(const Error& error);

}  // namespace ferry::api
