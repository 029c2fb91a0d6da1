#include "gateway/translate_sink.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <variant>

#include "api/json_read.h"

namespace ferry::gateway {

namespace {
constexpr size_t kUpstreamRoom = 8 << 10;  // the upstream bytes kept of a stream, at first
}  // namespace

TranslatingSink::Renderer::Renderer(std::unique_ptr<StreamRenderer> renderer,
                                    const RenderContext& context)
    : renderer_(std::move(renderer)),
      model_(context.model),
      prompt_tokens_(context.prompt_tokens) {}

void TranslatingSink::Renderer::on_event(const api::Event& event) {
  if (const auto* start = std::get_if<api::StartEvent>(&event)) {
    // The client's model name and ferry's own prompt count: an OpenAI stream reports usage
    // only at its end, Anthropic's message_start carries the input count.
    api::StartEvent s = *start;
    if (!model_.empty()) s.model = model_;
    if (!s.usage.reported && prompt_tokens_ >= 0) {
      s.usage.prompt_tokens = prompt_tokens_;
      s.usage.reported = true;
    }
    renderer_->render(s, out);
    return;
  }
  if (std::holds_alternative<api::FinishEvent>(event)) finish_at = out.size();
  renderer_->render(event, out);
}

TranslatingSink::TranslatingSink(adapters::StreamSink& client, const FrontEnd& frontend,
                                 const RenderContext& context)
    : client_(client), frontend_(frontend), renderer_(frontend.stream_renderer(context), context) {}

void TranslatingSink::note_render_failure() {
  if (ended_) return;
  if (auto why = renderer_.failure()) {  // the renderer already sent its error event
    ended_ = true;
    error_ = std::move(why);
  }
}

void TranslatingSink::fail(Error error) {
  if (ended_) return;
  ended_ = true;
  error_ = std::move(error);
  api::ErrorEvent e{&*error_};
  renderer_.on_event(e);
}

adapters::ChunkTake TranslatingSink::take_chunk(std::string_view data, adapters::ChunkKeys& keys) {
  took_ = true;
  if (ended_) {
    return adapters::is_json_object(data) ? adapters::ChunkTake::kTaken
                                          : adapters::ChunkTake::kMalformed;
  }
  Status s;
  api::MemberProbe probes[] = {{"usage", simdjson::dom::element_type::OBJECT},
                               {"finish_reason", simdjson::dom::element_type::STRING}};
  if (!parser_.feed_object(data, renderer_, s, probes, std::size(probes))) {
    return adapters::ChunkTake::kMalformed;
  }
  keys.usage = probes[0].found;
  keys.finish_reason = probes[1].found;
  if (!s) fail(s.error());
  note_render_failure();
  return adapters::ChunkTake::kTaken;
}

std::string_view TranslatingSink::translate(std::string_view sse_bytes) {
  if (took_) {
    // Kept as write() would have kept them unread: unless the stream had ended before them.
    // (Room for a short answer's stream at once, rather than a copy at every doubling.)
    if (upstream_.capacity() < kUpstreamRoom) upstream_.reserve(kUpstreamRoom);
    if (!ended_at_write_) upstream_.append(sse_bytes);
    ended_at_write_ = ended_;
    sent_.swap(renderer_.out);
    renderer_.out.clear();
    return sent_;
  }
  renderer_.out.clear();
  if (ended_) return {};
  upstream_.append(sse_bytes);
  const bool framed = sse_.feed(sse_bytes, [&](std::string_view, std::string_view data) {
    if (ended_) return;
    if (Status s = parser_.feed(data, renderer_); !s) fail(s.error());
  });
  if (!framed) fail(Error::make(ErrorCode::kBackendError, "the backend's stream: " + sse_.error()));
  note_render_failure();
  return renderer_.out;
}

boost::asio::awaitable<bool> TranslatingSink::write(std::string_view sse_bytes) {
  // Taken chunks were translated before this write: an error event among them still goes out.
  if (ended_ && !took_) co_return false;
  std::string_view out = translate(sse_bytes);
  bool sent = true;
  if (!out.empty()) sent = co_await client_.write(out);
  renderer_.out.clear();
  co_return sent && !error_;
}

void TranslatingSink::end_upstream() {
  if (ended_) return;
  renderer_.out.clear();
  renderer_.finish_at = std::string::npos;
  if (!parser_.finished()) {
    if (Status s = parser_.end(renderer_); !s) fail(s.error());
  }
  note_render_failure();
  tail_finished_ = !ended_;
  ended_ = true;
  tail_ = std::exchange(renderer_.out, {});
}

std::string TranslatingSink::finish(const std::optional<Error>& error) {
  if (!ended_) {
    renderer_.out.clear();  // chunks taken but never written (the call was cancelled)
    if (error) {
      fail(*error);
      error_.reset();  // not a translation failure: the caller's
    } else {
      end_upstream();
    }
  }
  // The answer was rendered whole, and failed after (the ledger): the error event instead.
  // What the tail holds before the finish (a block's end) still goes out.
  if (error && tail_finished_) {
    std::string out = std::exchange(tail_, {});
    out.resize(std::min(out.size(), renderer_.finish_at));
    renderer_.finish_at = 0;  // a second failure keeps nothing of the tail
    if (!renderer_.fail_after_end(*error, out)) out += frontend_.stream_error(*error);
    return out;
  }
  ended_ = true;
  return std::exchange(tail_, {}) + std::exchange(renderer_.out, {});
}

Result<api::WireBody> translate_body(std::string_view openai_body, const FrontEnd& frontend,
                                     const RenderContext& context) {
  auto answer = api::parse_chat_completion(openai_body);
  if (!answer) return answer.error();
  if (!context.model.empty()) answer->model = std::string(context.model);
  return frontend.render_answer(*answer, context);
}

Status translate_reply(adapters::BackendReply& reply, const FrontEnd& frontend,
                       const RenderContext& context, std::string& upstream) {
  auto body = translate_body(reply.body, frontend, context);
  if (!body) return body.error();
  upstream = std::exchange(reply.body, std::move(body->body));
  reply.status = body->status;
  return {};
}

}  // namespace ferry::gateway
