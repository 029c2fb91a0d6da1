// The translation of an OpenAI chat answer for a client that spoke another API: a stream sink
// between a backend (which writes OpenAI chunk SSE) and the client's sink, that reads each
// upstream event with api::ChatStreamParser and writes the front-end's rendering of the events;
// and the same for a whole body (api::parse_chat_completion, then the front-end's renderer).
// Thread-safety: a TranslatingSink is one per stream, used from the connection's loop only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "adapters/backend.h"
#include "adapters/sse_parser.h"
#include "api/events.h"
#include "api/openai_chat_parse.h"
#include "common/error.h"
#include "gateway/frontend.h"

namespace ferry::gateway {

class TranslatingSink final : public adapters::StreamSink {
 public:
  // `client` receives the rendered bytes; `context` fills what only ferry knows (the client's
  // model name, ferry's prompt count in the start event).
  TranslatingSink(adapters::StreamSink& client, const FrontEnd& frontend,
                  const RenderContext& context);

  // One or more upstream SSE events. False when the client is gone or the upstream stream could
  // not be translated (error() says why; the client got the error event).
  boost::asio::awaitable<bool> write(std::string_view sse_bytes) override;

  // An HTTP backend's relay hands over each chunk as it frames it: parsed once (the relay's
  // check) and translated now; the translation goes out with the write of its bytes.
  // The keys it reports are those of that parse (api::probe_members).
  adapters::ChunkTake take_chunk(std::string_view data, adapters::ChunkKeys& keys) override;

  // What write() sends for `sse_bytes`: their translation, valid until the next call (no I/O).
  // Once chunks were taken (take_chunk), `sse_bytes` are theirs and the translation is what
  // they became.
  std::string_view translate(std::string_view sse_bytes);

  // The backend returned: renders the end of the answer now (the upstream's `[DONE]` is the
  // backend's to consume), so that an answer the front-end cannot render is an error() before
  // the ledger row is settled. finish() sends what it rendered.
  void end_upstream();

  // The bytes that end the client's stream: after success the finish, after `error` (or a
  // translation failure) the error event; `error` after a successful end (the ledger or the
  // response store failed) replaces the end with the front-end's failure event.
  std::string finish(const std::optional<Error>& error);

  // Why the upstream stream could not be translated (a kBackendError), if it could not.
  const std::optional<Error>& error() const { return error_; }
  // The upstream (OpenAI) bytes since the last take, for counting the answer without usage.
  std::string take_upstream() { return std::exchange(upstream_, {}); }
  std::string_view upstream() const { return upstream_; }

 private:
  // Renders each event the parser produces into out_, fixing what only ferry knows.
  class Renderer final : public api::EventSink {
   public:
    Renderer(std::unique_ptr<StreamRenderer> renderer, const RenderContext& context);
    void on_event(const api::Event& event) override;
    std::optional<Error> failure() const { return renderer_->failure(); }
    bool fail_after_end(const Error& error, std::string& out_bytes) {
      return renderer_->fail_after_end(error, out_bytes);
    }
    std::string out;
    size_t finish_at = std::string::npos;  // where in `out` the Finish event's bytes begin

   private:
    std::unique_ptr<StreamRenderer> renderer_;
    std::string model_;
    int64_t prompt_tokens_ = -1;
  };

  void fail(Error error);
  void note_render_failure();  // a renderer that ended the stream on its own is a failure

  adapters::StreamSink& client_;
  const FrontEnd& frontend_;
  adapters::SseParser sse_;
  api::ChatStreamParser parser_;
  Renderer renderer_;
  std::optional<Error> error_;
  std::string upstream_;
  std::string sent_;             // the translation of taken chunks being written
  bool took_ = false;            // chunks come through take_chunk
  bool ended_at_write_ = false;  // ended_ as the last write of taken chunks left it
  std::string tail_;             // end_upstream's rendering, for finish()
  bool ended_ = false;           // the error event or the finish was rendered
  bool tail_finished_ = false;   // tail_ is a successful finish
};

// A whole OpenAI chat body as the front-end's answer; an error when it cannot be read or the
// front-end cannot carry it (the attempt then failed: its ledger row is an error).
Result<api::WireBody> translate_body(std::string_view openai_body, const FrontEnd& frontend,
                                     const RenderContext& context);

// A backend's whole reply translated in place (status and body); its OpenAI body is moved to
// `upstream` (for counting an answer without usage).
Status translate_reply(adapters::BackendReply& reply, const FrontEnd& frontend,
                       const RenderContext& context, std::string& upstream);

}  // namespace ferry::gateway
