#include "gateway/connection.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/ids.h"
#include "gateway/endpoints.h"
#include "gateway/http_reader.h"
#include "gateway/proxy.h"
#include "gateway/response_writer.h"
#include "gateway/worker_jobs.h"

namespace ferry::gateway {

namespace {

// A client-supplied request id is honoured when it is short and printable.
std::string request_id_from(const RequestParser& req) {
  std::string_view v = req["x-request-id"];
  bool ok = !v.empty() && v.size() <= 128 &&
            std::all_of(v.begin(), v.end(), [](char c) { return c > 32 && c < 127; });
  if (ok) return std::string(v);
  return make_request_id();
}

// After an error response on a connection whose input we did not read: stop sending, then
// read and discard for a moment so the client sees the response instead of a reset.
template <typename Stream>
asio::awaitable<void> linger_close(Stream& stream) {
  auto& tcp_stream = beast::get_lowest_layer(stream);
  beast::error_code ec;
  tcp_stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  tcp_stream.expires_after(std::chrono::seconds(2));
  char sink[16384];
  size_t total = 0;
  while (total < (8u << 20)) {
    auto [rec, n] = co_await tcp_stream.async_read_some(asio::buffer(sink), kAwait);
    if (rec) break;
    total += n;
  }
  tcp_stream.socket().close(ec);
}

template <typename Stream>
asio::awaitable<void> graceful_close(Stream& stream) {
  beast::error_code ec;
  if constexpr (!std::is_same_v<Stream, PlainStream>) {
    beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(1));
    co_await stream.async_shutdown(kAwait);
  }
  beast::get_lowest_layer(stream).socket().shutdown(tcp::socket::shutdown_send, ec);
}

// Answers a request that could not be read (ReadFailure), then the connection ends.
template <typename Stream>
asio::awaitable<void> refuse_request(ServerState& server, Stream& stream, RequestRecord& rec,
                                     const ReadFailure& failure) {
  if (failure.reply) {
    co_await write_reply(server, stream, *failure.reply, rec.request_id, false);
    server.finish_record(rec);
  }
  if (failure.linger) co_await linger_close(stream);
}

// Dispatches a request that was read whole: the reply when it needs no backend and no worker,
// otherwise nullopt with `job` filled. (A plain function: a coroutine's frame would keep every
// local of it for the whole request.)
std::optional<Reply> dispatch_request(ServerState& server, RequestParser& req, RequestRecord& rec,
                                      Job& job) {
  try {
    HttpRequestView view{req.method_string(), req.target(),        req[http::field::authorization],
                         req["x-ferry-task"], req["x-ferry-tags"], std::move(req.body())};
    view.api_key = req["x-api-key"];
    view.session_header = req["x-claude-code-session-id"];
    view.cache_header = req["x-ferry-cache"];
    view.anthropic_version = req["anthropic-version"];
    view.anthropic_beta = req["anthropic-beta"];
    view.cookie = req[http::field::cookie];
    view.csrf_header = req["x-ferry-csrf"];
    view.if_none_match = req[http::field::if_none_match];
    return server.endpoints->dispatch(view, rec, job);
  } catch (const std::exception& e) {
    // A defect, not the client's fault: answer it and keep serving.
    return reply_error(
        rec, Error::make(ErrorCode::kInternal, std::string("internal error: ") + e.what()));
  }
}

// Handles one request. Returns whether the connection may be kept alive. `job` is the
// connection's (serve_connection's frame holds it, so this frame stays small: the allocators'
// fast paths serve frames under 1 KiB, larger ones cost more).
template <typename Stream>
asio::awaitable<bool> handle(ServerState& server, Stream& stream, RequestParser& req,
                             RequestRecord& rec, Job& job, std::shared_ptr<EarlyRead>& early,
                             const beast::flat_buffer& buffer) {
  bool keep_alive = req.keep_alive() && !server.draining.load();
  std::optional<Reply> direct = dispatch_request(server, req, rec, job);
  if (!direct && job.kind == Job::Kind::kLookup) direct = co_await run_lookup(server, job, rec);
  if (direct) {
    rec.status = direct->status;
    // Every answer to HEAD is a direct one (HEAD is refused where GET is not served), and
    // none has a body.
    direct->head_only = req.method() == http::verb::head;
    bool ok = co_await write_reply(server, stream, *direct, rec.request_id, keep_alive);
    co_return ok&& keep_alive;
  }
  if (job.kind == Job::Kind::kAdmin) {
    co_return co_await run_admin_job(server, stream, job, rec, keep_alive);
  }
  if (job.kind == Job::Kind::kExport) {
    co_return co_await run_export(server, stream, job, rec, keep_alive);
  }
  co_return co_await proxy(server, stream, job, rec, keep_alive, early, buffer);
}

// The request loop of one connection: wait for a request, read it, answer it; again while
// the connection is kept alive.
template <typename Stream>
asio::awaitable<void> serve_connection(ServerState& server, Stream& stream) {
  const auto& lim = server.cfg.limits;
  beast::flat_buffer buffer(static_cast<size_t>(lim.max_header_bytes) + 4096);
  std::shared_ptr<EarlyRead> early;  // plain connections: see EarlyRead
  RequestParser parser;              // reset for each request, its buffers kept
  for (;;) {
    // Idle: wait for the first byte of the next request.
    if (early && early->pending && buffer.size() == 0) {
      beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(lim.idle_timeout_ms));
      co_await wait_early(stream, *early);
    }
    if (early && early->fired && !early->take(buffer) && buffer.size() == 0) {
      co_return;  // closed, reset or timed out, and every request sent before was answered
    }
    if (buffer.size() == 0) {
      beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(lim.idle_timeout_ms));
      if constexpr (std::is_same_v<Stream, PlainStream>) stream.expect_silence();
      auto [ec, n] = co_await stream.async_read_some(buffer.prepare(4096), kAwait);
      if (ec) co_return;
      buffer.commit(n);
    }
    // While draining, a request that reaches an open connection is still answered (with
    // `connection: close`): /readyz says 503, the API a 503 to retry elsewhere.
    parser.reset();
    RequestRecord rec;
    // Most requests are whole in the buffer by now: parsed here, no reading coroutine is made.
    Fed fed;
    const bool whole = take_buffered(buffer, parser, lim, fed);
    std::optional<ReadFailure> failed;
    if (!whole) {
      failed = co_await read_head(stream, buffer, parser, early.get(), lim, rec, fed.head);
    }
    rec.started = Clock::now();
    rec.started_unix_us = unix_micros_now();
    if (failed) {
      rec.request_id = make_request_id();
      co_await refuse_request(server, stream, rec, *failed);
      co_return;
    }
    rec.request_id = request_id_from(parser);
    rec.method = std::string(parser.method_string());
    rec.path = std::string(parser.target());
    server.metrics.in_flight.fetch_add(1, std::memory_order_relaxed);
    struct InFlight {
      std::atomic<int64_t>& n;
      ~InFlight() { n.fetch_sub(1, std::memory_order_relaxed); }
    } in_flight{server.metrics.in_flight};
    if (!whole) {
      failed = co_await read_body(stream, buffer, parser, early.get(), lim, rec, fed.body);
    }
    if (failed) {
      co_await refuse_request(server, stream, rec, *failed);
      co_return;
    }
    Job job;
    bool keep = false;
    try {
      keep = co_await handle(server, stream, parser, rec, job, early, buffer);
    } catch (const std::exception& e) {
      // A defect: the answer may be half written, so the connection ends; the process and
      // the other connections carry on.
      rec.status = 500;
      rec.error = std::string("internal error: ") + e.what();
    }
    server.finish_record(rec);
    if (!keep) {
      co_await graceful_close(stream);
      co_return;
    }
  }
}

}  // namespace

asio::awaitable<void> run_session(ServerState& server, tcp::socket socket) {
  server.metrics.connections.fetch_add(1, std::memory_order_relaxed);
  struct Count {
    std::atomic<int64_t>& n;
    ~Count() { n.fetch_sub(1, std::memory_order_relaxed); }
  } count{server.metrics.connections};
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  if (!server.tls) {
    PlainStream stream(std::move(socket));
    co_await serve_connection(server, stream);
    co_return;
  }
  TlsStream stream(std::move(socket), *server.tls);
  beast::get_lowest_layer(stream).expires_after(
      std::chrono::milliseconds(server.cfg.limits.header_timeout_ms));
  auto [hec] = co_await stream.async_handshake(ssl::stream_base::server, kAwait);
  if (hec) co_return;
  co_await serve_connection(server, stream);
}

asio::awaitable<void> refuse_connection(ServerState& server, tcp::socket socket) {
  Reply r = error_reply(
      Error::make(ErrorCode::kUnavailable, "ferry is at its connection limit; retry shortly"));
  PlainStream stream(std::move(socket));
  std::string rid = make_request_id();
  if (!server.tls) co_await write_reply(server, stream, r, rid, false);
  beast::error_code ec;
  stream.socket().close(ec);
}

}  // namespace ferry::gateway
