#include "gateway/proxy.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "adapters/backend.h"
#include "common/clock.h"
#include "gateway/errors.h"
#include "gateway/frontend.h"
#include "gateway/gateway.h"
#include "gateway/response_writer.h"
#include "gateway/responses_front.h"
#include "gateway/translate_sink.h"

namespace ferry::gateway {

namespace {

const char* backend_error_kind(ErrorCode code) {
  switch (code) {
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kRateLimited:
      return "rate_limited";
    case ErrorCode::kInvalidRequest:
      return "rejected";
    default:
      return "error";
  }
}

void set_header(HeaderList& headers, std::string_view name, std::string value) {
  for (auto& [k, v] : headers) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::string(name), std::move(value));
}

// ---- shadows --------------------------------------------------------------------------------

// Swallows a shadow copy's stream.
class DiscardSink final : public adapters::StreamSink {
 public:
  asio::awaitable<bool> write(std::string_view bytes) override {
    if (!started_) {
      started_ = true;
      first_byte = Clock::now();
    }
    captured.append(bytes);
    co_return true;
  }
  bool started_ = false;
  Clock::time_point first_byte;
  std::string captured;
};

// One shadow copy in flight: its plan, and the signal shutdown cancels it with.
struct ShadowRun {
  Plan plan;
  adapters::CancelSignal cancel;
  uint64_t id = 0;  // in ServerState::shadows
};

// Sends a shadow copy beside the real request; its answer is discarded, its cost recorded.
asio::awaitable<void> run_shadow(ServerState& server, RequestContext ctx,
                                 std::shared_ptr<ShadowRun> run) {
  Plan& plan = run->plan;
  PlannedHop& hop = *plan.shadow;
  AttemptOutcome o;
  o.hop = &hop;
  o.started_us = unix_micros_now();
  auto t0 = Clock::now();
  DiscardSink sink;
  bool streaming = hop.request.stream;
  auto result =
      co_await hop.target->backend->send(hop.request, streaming ? &sink : nullptr, run->cancel);
  o.ended_us = unix_micros_now();
  if (result) {
    o.ok = true;
    o.usage = result->usage;
    o.finish_reason = result->finish_reason;
    o.http_status = result->status;
    if (!usage_billable(plan, o)) {
      extract_answer_text(
          streaming ? std::string_view(sink.captured) : std::string_view(result->body), streaming,
          o.generated_text, o.reasoning_text);
    }
    if (sink.started_) o.ttft_us = micros_between(t0, sink.first_byte);
  } else {
    o.error = result.error();
    o.http_status = http_status_for(result.error());
  }
  server.gateway->recorder().note_attempt(o);
  server.gateway->recorder().settle_shadow(ctx, plan, o);
}

// Starts the plan's shadow copy on `ex` (the request's loop), unless ShadowTracker's limit of
// copies is in flight or the server is shutting down: then it is counted as skipped.
void start_shadow(ServerState& server, const RequestContext& ctx, const Plan& plan,
                  const asio::any_io_executor& ex) {
  auto run = std::make_shared<ShadowRun>();
  run->plan = Planner::copy_for_shadow(plan);
  run->plan.shadow = plan.shadow;
  std::weak_ptr<ShadowRun> weak = run;
  auto id = server.shadows.begin([ex, weak] {
    asio::post(ex, [weak] {
      if (auto r = weak.lock()) r->cancel.cancel();
    });
  });
  if (!id) {
    server.gateway->recorder().skip_shadow(*plan.shadow);
    return;
  }
  run->id = *id;
  asio::co_spawn(
      ex,
      [](ServerState& s, RequestContext c, std::shared_ptr<ShadowRun> r) -> asio::awaitable<void> {
        try {
          co_await run_shadow(s, std::move(c), r);
        } catch (const std::exception&) {
          // A defect in one copy must not end the process; its row is lost, the count is not.
        }
        s.shadows.end(r->id);
      }(server, ctx, std::move(run)),
      asio::detached);
}

// ---- one hop --------------------------------------------------------------------------------

// (The plain functions below keep their locals out of the coroutines' frames: g++ gives every
// named local of a coroutine, and every temporary inside a co_await, a slot of its own for the
// whole call, and a frame over 1 KiB misses the allocators' fast path. See ARCHITECTURE,
// "Coroutine frames stay under 1 KiB".)

// False when the hop's circuit is open: `result` says so, and the plan notes the hop skipped.
bool hop_allowed(Plan& plan, const PlannedHop& hop, Result<adapters::BackendReply>& result) {
  if (!hop.target->breaker || hop.target->breaker->allow_request()) return true;
  result = Error::make(
      ErrorCode::kUnavailable,
      "target '" + hop.name + "' is unavailable (circuit open after " + "repeated failures)");
  plan.skipped.push_back(hop.name + ": circuit open");
  return false;
}

// The answer's headers that name the hop being tried.
void label_attempt(HeaderList& headers, const PlannedHop& hop, size_t attempt) {
  set_header(headers, "x-ferry-target", hop.name);
  set_header(headers, "x-ferry-attempts", std::to_string(attempt));
  if (!hop.reasoning.empty()) set_header(headers, "x-ferry-reasoning", hop.reasoning);
}

// The client-disconnect watch of one backend call on a TLS connection.
struct ClientWatch {
  bool done = false;
  adapters::CancelSignal* cancel = nullptr;
  char byte = 0;
};

// Sends the hop's request while watching the client: a hang-up cancels the backend call. The
// backend's result goes into `result` (one move less than returning it through this coroutine).
template <typename Stream, typename Sink>
asio::awaitable<void> send_watched(Stream& stream, PlannedHop& hop, Sink* sink,
                                   adapters::CancelSignal& cancel,
                                   std::shared_ptr<EarlyRead>& early,
                                   const beast::flat_buffer& buffer,
                                   Result<adapters::BackendReply>& result) {
  if constexpr (std::is_same_v<Stream, PlainStream>) {
    if (!early) early = std::make_shared<EarlyRead>();  // one per connection, reused
    early->start(stream, early, buffer);
    if (early->hung_up()) cancel.cancel();  // gone during an earlier attempt
    early->cancel = &cancel;
    result = co_await hop.target->backend->send(hop.request, sink, cancel);
    early->cancel = nullptr;
  } else {
    // TLS: the bytes under the TLS layer are not ours to read, so a peek at the socket
    // watches for a hang-up while the backend works; it is cancelled when the call returns.
    auto watch = std::make_shared<ClientWatch>();
    watch->cancel = &cancel;
    auto& sock = beast::get_lowest_layer(stream).socket();
    sock.async_receive(asio::buffer(&watch->byte, 1), tcp::socket::message_peek,
                       [watch](const beast::error_code& ec, size_t n) {
                         if (watch->done || ec == asio::error::operation_aborted) return;
                         if (ec || n == 0) watch->cancel->cancel();
                       });
    result = co_await hop.target->backend->send(hop.request, sink, cancel);
    watch->done = true;
    beast::error_code cancel_ec;
    sock.cancel(cancel_ec);
  }
}

// What only ferry knows of a translated answer: the client's model name, its prompt count.
RenderContext render_context(Plan& plan, const PlannedHop& hop, const RequestRecord& rec) {
  RenderContext c;
  c.request_id = rec.request_id;
  c.model = plan.requested_model;
  if (plan.responses) {  // the echo, and the slot of the final response object for the store
    c.responses = plan.responses.get();
    // Only a response to be stored needs its final object kept (response_to_store): the stream
    // renderer re-reads it from the last event, which costs more than the rest of the stream.
    if (plan.responses->store) c.final_response = &plan.response_json;
  }
  if (auto it = plan.prompt_counts.find(hop.target); it != plan.prompt_counts.end()) {
    c.prompt_tokens = it->second.tokens;
  }
  return c;
}

// One try on one hop: its answer in `result`, its outcome in `a` (and the breaker and recent stats
// fed). A stream to a backend that does not speak the client's API goes through `translator` (made
// here).
template <typename Stream>
asio::awaitable<void> try_hop(ServerState& server, Stream& stream, Plan& plan, PlannedHop& hop,
                              ChunkedSink<Stream>& sink,
                              std::unique_ptr<TranslatingSink>& translator, AttemptOutcome& a,
                              RequestRecord& rec, std::shared_ptr<EarlyRead>& early,
                              const beast::flat_buffer& buffer,
                              Result<adapters::BackendReply>& result) {
  const bool streaming = plan.stream;
  a.hop = &hop;
  a.started_us = unix_micros_now();
  auto t0 = Clock::now();
  rec.backend = hop.target->backend->name();
  rec.target = hop.name;
  adapters::CancelSignal cancel;
  adapters::StreamSink* to = streaming ? &sink : nullptr;
  translator.reset();
  if (streaming && translates(plan.api, hop.request.endpoint)) {
    translator =
        std::make_unique<TranslatingSink>(sink, frontend(plan.api), render_context(plan, hop, rec));
    to = translator.get();
  }
  sink.set_capture(!translator);  // a translator keeps the backend's bytes (upstream())
  co_await send_watched(stream, hop, to, cancel, early, buffer, result);
  // An answer that could not be translated failed there, not at the client.
  std::string upstream_body;  // a translated body's OpenAI original
  if (translator && result) translator->end_upstream();
  if (translator && translator->error()) result = *translator->error();
  if (result && !streaming && translates(plan.api, hop.request.endpoint)) {
    Status s =
        translate_reply(*result, frontend(plan.api), render_context(plan, hop, rec), upstream_body);
    if (!s) result = s.error();
  }
  a.ended_us = unix_micros_now();
  a.sent_to_client = sink.started();
  if (result) {
    a.ok = true;
    a.usage = result->usage;
    a.finish_reason = result->finish_reason;
    a.constraint = result->constraint;
    a.constraint_hash = result->constraint_hash;
    a.http_status = result->status;
    a.ttft_us = streaming ? rec.ttft_us : micros_between(t0, Clock::now());
    rec.backend_ttft_us = result->first_byte_us;
  } else {
    const Error& e = result.error();
    a.error = e;
    a.client_gone = e.code == ErrorCode::kCancelled || sink.broken();
    a.http_status = a.client_gone ? 499 : (sink.started() ? 200 : http_status_for(e));
    if (!a.client_gone && e.code != ErrorCode::kInvalidRequest) {
      server.metrics.backend_errors.inc({rec.backend, backend_error_kind(e.code)});
    }
  }
  if (a.ok && plan.cache && !plan.cache->key.empty() && plan.cache->store) {
    // The answer as the backend wrote it (OpenAI chat, before a front-end's translation), for
    // the response cache.
    a.cache_bytes = !streaming
                        ? std::string_view(upstream_body.empty() ? result->body : upstream_body)
                    : translator ? translator->upstream()
                                 : sink.captured();
  }
  if (!usage_billable(plan, a) && (a.ok || a.sent_to_client)) {
    std::string captured = sink.take_captured();
    if (translator) captured = translator->take_upstream();  // the backend's OpenAI bytes
    std::string_view answer = captured;
    if (!streaming && result) answer = upstream_body.empty() ? result->body : upstream_body;
    extract_answer_text(answer, streaming, a.generated_text, a.reasoning_text);
  }
  server.gateway->recorder().note_attempt(a);
}

// ---- settling and answering -----------------------------------------------------------------

// Queues the ledger row; unless the client is gone, waits until it is durable (the row is
// durable before the last byte of the answer leaves). Returns the ledger's verdict.
asio::awaitable<Status> settle(ServerState& server, Job& job, std::vector<AttemptOutcome>& attempts,
                               RequestRecord& rec, bool client_gone) {
  Plan& plan = *job.plan;
  if (server.gateway->ledger() == nullptr || client_gone) {
    rec.ledger_id = server.gateway->recorder().settle(job.ctx, plan, attempts, nullptr);
    co_return Status{};
  }
  auto notifier = std::make_shared<Notifier>(co_await asio::this_coro::executor);
  auto status = std::make_shared<Status>();
  ledger::DurableCallback cb = [notifier, status](const Status& st) {
    *status = st;
    notifier->notify();
  };
  rec.ledger_id = server.gateway->recorder().settle(job.ctx, plan, attempts, std::move(cb));
  co_await notifier->wait();
  co_return *status;
}

// The answer when no hop succeeded, or the ledger could not record a success: an error reply,
// or an error event when the stream has begun.
// The client's side of the answer: its front-end, and the translator of the stream when the
// last hop did not speak the client's API (`translated` for a whole body).
struct ClientSide {
  const FrontEnd& fe;
  TranslatingSink* translator = nullptr;
  bool translated = false;
  RenderContext context;
  // The bytes that end a stream after `error` (or, without one, after success).
  std::string tail(const std::optional<Error>& error) const {
    if (translator != nullptr) return translator->finish(error);
    return error ? fe.stream_error(*error) : std::string(fe.stream_done);
  }
};

// The client's side of the answer of the last attempt (or of none).
ClientSide client_side(Plan& plan, TranslatingSink* translator,
                       const std::vector<AttemptOutcome>& attempts, const RequestRecord& rec) {
  ClientSide client{frontend(plan.api), translator, false, {}};
  if (!attempts.empty()) {
    const PlannedHop& last = *attempts.back().hop;
    client.translated = translates(plan.api, last.request.endpoint);
    client.context = render_context(plan, last, rec);
  }
  return client;
}

template <typename Stream>
asio::awaitable<bool> answer_error(ServerState& server, Stream& stream, ChunkedSink<Stream>& sink,
                                   const ClientSide& client, const Error& e,
                                   const HeaderList* headers, RequestRecord& rec, bool keep_alive) {
  if (sink.started()) {
    rec.status = 200;
    rec.error = e.message;
    std::string cut = client.tail(e);
    co_await sink.finish(cut);
    co_return false;  // the stream was cut: do not reuse the connection
  }
  Reply r = reply_error(rec, e, &client.fe);
  if (headers != nullptr) {
    for (const auto& h : *headers) r.headers.push_back(h);
  }
  rec.status = r.status;
  bool ok = co_await write_reply(server, stream, r, rec.request_id, keep_alive);
  co_return ok&& keep_alive;
}

// Whether the answer may be one to keep: a Responses request's, with a response store. (Checked
// before store_response is called: a coroutine's frame is allocated even when it returns at once.)
bool may_store(const ServerState& server, const ClientSide& client) {
  const RenderContext& c = client.context;
  return server.gateway->responses() != nullptr && c.responses != nullptr &&
         c.final_response != nullptr;
}

// Keeps a Responses answer (store: true) before its last byte leaves, as the ledger row is:
// the response store's verdict; ok when there is nothing to keep or no store.
asio::awaitable<Status> store_response(ServerState& server, const ClientSide& client,
                                       const RequestRecord& rec) {
  ledger::ResponseStore* store = server.gateway->responses();
  const RenderContext& c = client.context;
  if (!may_store(server, client)) co_return Status{};
  auto kept = response_to_store(*c.responses, *c.final_response, rec.key_id);
  if (!kept) co_return Status{};
  auto notifier = std::make_shared<Notifier>(co_await asio::this_coro::executor);
  auto status = std::make_shared<Status>();
  store->put(std::move(*kept), [notifier, status](const Status& st) {
    *status = st;
    notifier->notify();
  });
  co_await notifier->wait();
  co_return *status;
}

Error not_stored(const Status& kept) {
  return Error::make(ErrorCode::kUnavailable,
                     "the response could not be stored: " + kept.error().message);
}

// The end of a stream whose row is durable: the stored response's verdict, then the last bytes.
template <typename Stream>
asio::awaitable<bool> end_stream(ServerState& server, ChunkedSink<Stream>& sink,
                                 const ClientSide& client, RequestRecord& rec, bool keep_alive) {
  rec.status = 200;
  std::string done = client.tail(std::nullopt);
  bool stored = true;
  if (may_store(server, client)) {
    Status kept = co_await store_response(server, client, rec);
    if (!kept) {
      stored = false;
      rec.error = kept.error().message;
      done = client.tail(not_stored(kept));
    }
  }
  co_await sink.finish(done);
  co_return stored && !sink.broken() && keep_alive;
}

// The answer to the client once the row is settled.
template <typename Stream>
asio::awaitable<bool> answer(ServerState& server, Stream& stream, ChunkedSink<Stream>& sink,
                             Plan& plan, TranslatingSink* translator,
                             const std::vector<AttemptOutcome>& attempts,
                             Result<adapters::BackendReply>& result, const Status& durable,
                             HeaderList& headers, RequestRecord& rec, bool keep_alive,
                             bool client_gone) {
  const bool streaming = plan.stream;
  const ClientSide client = client_side(plan, translator, attempts, rec);
  if (!result) {
    if (client_gone) {
      rec.status = 499;
      rec.error = "client closed the connection";
      co_return false;
    }
    co_return co_await answer_error(server, stream, sink, client, result.error(), &headers, rec,
                                    keep_alive);
  }
  adapters::BackendReply& reply = result.value();
  rec.usage = reply.usage;
  rec.finish_reason = reply.finish_reason;
  if (!durable) {
    Error e = Error::make(
        ErrorCode::kUnavailable,
        "the answer could not be recorded in the cost ledger: " + durable.error().message);
    if (streaming) {
      rec.status = 200;
      rec.error = e.message;
      std::string cut = client.tail(e);
      co_await sink.finish(cut);
      co_return false;
    }
    co_return co_await answer_error(server, stream, sink, client, e, nullptr, rec, keep_alive);
  }
  if (streaming) co_return co_await end_stream(server, sink, client, rec, keep_alive);
  rec.ttft_us = micros_between(rec.started, Clock::now());
  Reply r;
  r.status = reply.status;
  r.body = std::move(reply.body);  // translated in try_hop when the backend spoke another API
  // A native Responses answer: the body is the response object.
  if (!client.translated && client.context.final_response != nullptr && r.status == 200) {
    client.context.final_response->assign(r.body);
  }
  if (may_store(server, client)) {
    Status kept = co_await store_response(server, client, rec);
    if (!kept) {
      co_return co_await answer_error(server, stream, sink, client, not_stored(kept), nullptr, rec,
                                      keep_alive);
    }
  }
  r.headers = std::move(headers);
  for (auto& h : reply.headers) r.headers.push_back(std::move(h));
  rec.status = reply.status;
  bool ok = co_await write_reply(server, stream, r, rec.request_id, keep_alive);
  co_return ok&& keep_alive;
}

// ---- the response cache ---------------------------------------------------------------------

// Collects a replayed answer's rendering.
class RenderInto final : public api::EventSink {
 public:
  RenderInto(StreamRenderer& renderer, std::string& out) : renderer_(renderer), out_(out) {}
  void on_event(const api::Event& event) override { renderer_.render(event, out_); }

 private:
  StreamRenderer& renderer_;
  std::string& out_;
};

// Keeps the answer of a request's only attempt when it is reusable: completed (not an error,
// not from a fallback hop after a failure) and read whole as a typed answer.
void keep_answer(ServerState& server, const Plan& plan, const std::vector<AttemptOutcome>& attempts,
                 bool streaming) {
  if (!plan.cache || plan.cache->key.empty() || !plan.cache->store) return;
  if (attempts.size() != 1 || !attempts.front().ok || attempts.front().cache_bytes.empty()) return;
  const AttemptOutcome& a = attempts.front();
  auto answer = answer_from_openai(a.cache_bytes, streaming);
  if (!answer || answer->finish == api::FinishReason::kError || answer->error) return;
  auto kept = std::make_shared<CachedAnswer>();
  kept->answer = std::move(*answer);
  kept->target = a.hop->target->model->name;
  auto count = plan.prompt_counts.find(a.hop->target);
  kept->prompt_tokens = count != plan.prompt_counts.end() ? count->second.tokens : -1;
  const api::Usage& u = kept->answer.usage;
  if (usage_billable(plan, a)) {
    kept->tokens = ledger::split_openai_usage(a.usage.prompt_tokens, a.usage.cached_tokens,
                                              a.usage.completion_tokens, a.usage.reasoning_tokens,
                                              ledger::TokenSource::kBackend);
  } else if (u.reported) {
    kept->tokens = ledger::split_openai_usage(u.prompt_tokens, u.cached_tokens, u.completion_tokens,
                                              u.reasoning_tokens, ledger::TokenSource::kBackend);
  } else {
    kept->tokens.input = {std::max<int64_t>(kept->prompt_tokens, 0),
                          ledger::TokenSource::kTokenizer};
  }
  const int64_t now = response_cache_now_ms();
  if (PersistentCache* tier = server.gateway->persistent_cache()) {
    tier->save(plan.cache->key, kept, now + plan.cache->ttl_ms);  // written behind, off this loop
  }
  server.gateway->response_cache().put(plan.cache->key, std::move(kept), plan.cache->ttl_ms, now);
}

// Answers from the cache: the hit's row durable first, then the answer rendered in the
// client's API, a body or the replayed stream.
template <typename Stream>
asio::awaitable<bool> serve_hit(ServerState& server, Stream& stream, ChunkedSink<Stream>& sink,
                                Job& job, const CachedAnswer& hit, HeaderList& headers,
                                RequestRecord& rec, bool keep_alive) {
  Plan& plan = *job.plan;
  const PlannedHop& hop = plan.hops.front();
  rec.backend = "cache";
  rec.target = hop.name;
  rec.prompt_tokens_counted = hit.prompt_tokens;
  set_header(headers, "x-ferry-target", hop.name);
  Status durable;
  if (server.gateway->ledger() == nullptr) {
    rec.ledger_id = server.gateway->recorder().settle_cache_hit(job.ctx, plan, hit, nullptr);
  } else {
    auto notifier = std::make_shared<Notifier>(co_await asio::this_coro::executor);
    auto status = std::make_shared<Status>();
    rec.ledger_id = server.gateway->recorder().settle_cache_hit(
        job.ctx, plan, hit, [notifier, status](const Status& st) {
          *status = st;
          notifier->notify();
        });
    co_await notifier->wait();
    durable = *status;
  }
  ClientSide client{frontend(plan.api), nullptr, true, render_context(plan, hop, rec)};
  if (!durable) {
    Error e = Error::make(
        ErrorCode::kUnavailable,
        "the answer could not be recorded in the cost ledger: " + durable.error().message);
    co_return co_await answer_error(server, stream, sink, client, e, &headers, rec, keep_alive);
  }
  api::Answer answer = hit.answer;
  answer.model = plan.requested_model;
  rec.finish_reason = std::string(api::finish_reason_name(answer.finish));
  rec.status = 200;
  if (plan.stream) {
    std::string out;
    auto renderer = client.fe.stream_renderer(client.context);
    RenderInto into(*renderer, out);
    api::Usage start;
    if (hit.prompt_tokens >= 0) {
      start.prompt_tokens = hit.prompt_tokens;
      start.reported = true;
    }
    api::replay(answer, into, 0, start);
    out += client.fe.stream_done;
    bool stored = true;
    if (may_store(server, client)) {
      Status kept = co_await store_response(server, client, rec);
      if (!kept) {
        stored = false;
        out = client.fe.stream_error(not_stored(kept));
      }
    }
    co_await sink.finish(out);
    co_return stored && !sink.broken() && keep_alive;
  }
  rec.ttft_us = micros_between(rec.started, Clock::now());
  // A hit kept from one front-end may not render in another's shape (say, a call cut by its
  // limit): then it is that front-end's error, recorded as one, never a success.
  auto rendered = client.fe.render_answer(answer, client.context);
  if (!rendered) {
    co_return co_await answer_error(server, stream, sink, client, rendered.error(), nullptr, rec,
                                    keep_alive);
  }
  api::WireBody body = std::move(*rendered);
  if (may_store(server, client)) {
    Status kept = co_await store_response(server, client, rec);
    if (!kept) {
      co_return co_await answer_error(server, stream, sink, client, not_stored(kept), nullptr, rec,
                                      keep_alive);
    }
  }
  Reply r;
  r.status = body.status;
  r.body = std::move(body.body);
  r.headers = std::move(headers);
  bool ok = co_await write_reply(server, stream, r, rec.request_id, keep_alive);
  co_return ok&& keep_alive;
}

}  // namespace

template <typename Stream>
asio::awaitable<bool> proxy(ServerState& server, Stream& stream, Job& job, RequestRecord& rec,
                            bool keep_alive, std::shared_ptr<EarlyRead>& early,
                            const beast::flat_buffer& buffer) {
  Plan& plan = *job.plan;
  if (plan.shadow) {
    asio::any_io_executor ex = co_await asio::this_coro::executor;
    start_shadow(server, job.ctx, plan, ex);
  }
  HeaderList headers;
  headers.reserve(plan.headers.size() + 4);  // and target, attempts, reasoning, cache: no regrowth
  headers.assign(plan.headers.begin(), plan.headers.end());
  ChunkedSink<Stream> sink(server, stream, rec.request_id, rec, &headers);
  std::vector<AttemptOutcome> attempts;
  attempts.reserve(plan.hops.size());
  Result<adapters::BackendReply> result = Error::make(ErrorCode::kInternal, "not run");
  std::unique_ptr<TranslatingSink> translator;  // on the heap: rare, and 600 bytes of frame
  if (plan.cache && !plan.cache->key.empty()) {
    if (const std::shared_ptr<const CachedAnswer> hit = plan.cache->hit) {
      // Found by the planner before admission: no budget was reserved for it, and the rate
      // limits took from it as its rule says; its row is settled at zero cost.
      set_header(headers, "x-ferry-cache", "hit");
      co_return co_await serve_hit(server, stream, sink, job, *hit, headers, rec, keep_alive);
    }
    set_header(headers, "x-ferry-cache", "miss");
  }
  for (size_t i = 0; i < plan.hops.size(); ++i) {
    PlannedHop& hop = plan.hops[i];
    if (!hop_allowed(plan, hop, result)) continue;
    label_attempt(headers, hop, attempts.size() + 1);
    AttemptOutcome& a = attempts.emplace_back();
    co_await try_hop(server, stream, plan, hop, sink, translator, a, rec, early, buffer, result);
    if (result || a.client_gone || sink.started() || !falls_through(result.error())) break;
  }
  rec.attempts = static_cast<int>(attempts.size());
  if (!attempts.empty()) {
    auto it = plan.prompt_counts.find(attempts.back().hop->target);
    if (it != plan.prompt_counts.end()) rec.prompt_tokens_counted = it->second.tokens;
  }
  bool client_gone = !attempts.empty() && attempts.back().client_gone;
  Status durable = co_await settle(server, job, attempts, rec, client_gone);
  if (result && durable) keep_answer(server, plan, attempts, plan.stream);
  co_return co_await answer(server, stream, sink, plan, translator.get(), attempts, result, durable,
                            headers, rec, keep_alive, client_gone);
}

template asio::awaitable<bool> proxy(ServerState&, PlainStream&, Job&, RequestRecord&, bool,
                                     std::shared_ptr<EarlyRead>&, const beast::flat_buffer&);
template asio::awaitable<bool> proxy(ServerState&, TlsStream&, Job&, RequestRecord&, bool,
                                     std::shared_ptr<EarlyRead>&, const beast::flat_buffer&);

}  // namespace ferry::gateway
