#include "gateway/server.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "adapters/http_backend.h"
#include "common/clock.h"
#include "common/ids.h"
#include "gateway/access_log.h"
#include "gateway/auth.h"
#include "gateway/errors.h"
#include "gateway/metrics.h"
#include "gateway/openai_request.h"

namespace ferry::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);

using Request = http::request<http::string_body>;

// A response that is ready to write in one piece.
struct Reply {
  http::status status = http::status::ok;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

Reply error_reply(const Error& error) {
  HttpError e = to_http_error(error);
  Reply r;
  r.status = static_cast<http::status>(e.status);
  r.body = std::move(e.body);
  return r;
}

// A client-supplied request id is honoured when it is short and printable.
std::string request_id_from(const Request& req) {
  auto it = req.find("x-request-id");
  if (it != req.end()) {
    std::string_view v = it->value();
    bool ok = !v.empty() && v.size() <= 128 &&
              std::all_of(v.begin(), v.end(), [](char c) { return c > 32 && c < 127; });
    if (ok) return std::string(v);
  }
  return make_request_id();
}

// Everything one request leaves behind for the access log and metrics.
struct RequestRecord {
  std::string request_id;
  std::string method;
  std::string path;
  std::string key_id;
  std::string model;
  std::string backend;
  int status = 0;
  bool stream = false;
  adapters::Usage usage;
  std::string finish_reason;
  std::string error;
  Clock::time_point started;
  int64_t ttft_us = -1;
};

std::string access_log_line(const RequestRecord& r, int64_t latency_us) {
  JsonLine j;
  j.str("ts", format_utc_micros(unix_micros_now()))
      .str("request_id", r.request_id)
      .str("method", r.method)
      .str("path", r.path)
      .integer("status", r.status)
      .millis("latency_ms", latency_us);
  if (!r.key_id.empty()) j.str("key_id", r.key_id);
  if (!r.model.empty()) j.str("model", r.model);
  if (!r.backend.empty()) j.str("backend", r.backend);
  if (!r.path.starts_with("/v1/")) return j.finish();
  j.boolean("stream", r.stream);
  if (r.usage.prompt_tokens >= 0) j.integer("prompt_tokens", r.usage.prompt_tokens);
  if (r.usage.completion_tokens >= 0) j.integer("completion_tokens", r.usage.completion_tokens);
  if (r.usage.cached_tokens > 0) j.integer("cached_tokens", r.usage.cached_tokens);
  if (r.ttft_us >= 0) j.millis("ttft_ms", r.ttft_us);
  if (!r.finish_reason.empty()) j.str("finish_reason", r.finish_reason);
  if (!r.error.empty()) j.str("error", r.error);
  return j.finish();
}

const char* backend_error_kind(ErrorCode code) {
  switch (code) {
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kRateLimited: return "rate_limited";
    case ErrorCode::kInvalidRequest: return "rejected";
    default: return "error";
  }
}

// True when the peer has closed (or reset) a socket that select()ed readable.
bool peer_closed(int fd) {
  char byte = 0;
  ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace

struct Server::Impl {
  config::Config cfg;
  asio::io_context ioc;
  std::optional<ssl::context> tls;
  std::optional<tcp::acceptor> acceptor;
  asio::signal_set signals{ioc, SIGTERM, SIGINT};
  Authenticator auth;
  Metrics metrics;
  AccessLog access_log;
  std::map<std::string, std::unique_ptr<adapters::HttpBackend>, std::less<>> backends;
  std::string models_json;  // GET /v1/models, built once
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};

  explicit Impl(config::Config c)
      : cfg(std::move(c)),
        ioc(cfg.server.io_threads),
        auth(cfg.auth),
        access_log(cfg.log.access_log) {
    if (cfg.server.tls) {
      tls.emplace(ssl::context::tls_server);
      tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                       ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
      beast::error_code ec;
      tls->use_certificate_chain_file(cfg.server.tls->cert_file, ec);
      if (ec) {
        throw std::runtime_error("server.tls.cert: cannot load '" + cfg.server.tls->cert_file +
                                 "': " + ec.message());
      }
      tls->use_private_key_file(cfg.server.tls->key_file, ssl::context::pem, ec);
      if (ec) {
        throw std::runtime_error("server.tls.key: cannot load '" + cfg.server.tls->key_file +
                                 "': " + ec.message());
      }
    }
    for (const auto& b : cfg.backends) {
      backends.emplace(b.name, std::make_unique<adapters::HttpBackend>(ioc.get_executor(), b));
    }
    // Pool reuse and log drops are counted where they happen; /metrics reads them here.
    metrics.add_collector([this](std::string& out) {
      out += "# HELP ferry_backend_connections_total Upstream connections by backend, opened "
             "or reused from the keep-alive pool.\n"
             "# TYPE ferry_backend_connections_total counter\n";
      for (const auto& [name, b] : backends) {
        const auto& st = b->stats();
        out += "ferry_backend_connections_total{backend=\"" + name + "\",how=\"opened\"} " +
               std::to_string(st.connections_opened.load()) + "\n";
        out += "ferry_backend_connections_total{backend=\"" + name + "\",how=\"reused\"} " +
               std::to_string(st.connections_reused.load()) + "\n";
      }
      out += "# HELP ferry_access_log_dropped_total Access-log lines dropped because the "
             "writer fell behind.\n# TYPE ferry_access_log_dropped_total counter\n"
             "ferry_access_log_dropped_total " + std::to_string(access_log.dropped()) + "\n";
    });
    nlohmann::json data = nlohmann::json::array();
    for (const auto& m : cfg.models) {
      data.push_back({{"id", m.name}, {"object", "model"}, {"created", 0}, {"owned_by", "ferry"}});
    }
    models_json = nlohmann::json{{"object", "list"}, {"data", data}}.dump();
  }

  // ---- responses -------------------------------------------------------------------------

  template <typename Stream>
  asio::awaitable<bool> write_reply(Stream& stream, const Reply& reply, const std::string& rid,
                                    bool keep_alive) {
    http::response<http::string_body> res{reply.status, 11};
    res.set(http::field::server, "ferry");
    res.set(http::field::content_type, reply.content_type);
    res.set("x-request-id", rid);
    for (const auto& [k, v] : reply.headers) res.set(k, v);
    res.keep_alive(keep_alive);
    res.body() = reply.body;
    res.prepare_payload();
    beast::get_lowest_layer(stream).expires_after(
        std::chrono::milliseconds(cfg.limits.write_timeout_ms));
    auto [ec, n] = co_await http::async_write(stream, res, kAwait);
    co_return !ec;
  }

  // Streams SSE to the client as chunked transfer encoding. Headers go out with the first write.
  template <typename Stream>
  class SseSink final : public adapters::StreamSink {
   public:
    SseSink(Impl& server, Stream& stream, const std::string& rid, RequestRecord& record)
        : server_(server), stream_(stream), rid_(rid), record_(record) {}

    bool started() const { return started_; }
    bool broken() const { return broken_; }

    asio::awaitable<bool> write(std::string_view bytes) override {
      if (broken_) co_return false;
      if (!started_) {
        started_ = true;
        record_.ttft_us = micros_between(record_.started, Clock::now());
        http::response<http::empty_body> res{http::status::ok, 11};
        res.set(http::field::server, "ferry");
        res.set(http::field::content_type, "text/event-stream");
        res.set(http::field::cache_control, "no-cache");
        res.set("x-request-id", rid_);
        res.keep_alive(!server_.draining.load());
        res.chunked(true);
        http::response_serializer<http::empty_body> sr{res};
        arm();
        auto [ec, n] = co_await http::async_write_header(stream_, sr, kAwait);
        if (ec) co_return fail();
      }
      arm();
      auto chunk = http::make_chunk(asio::buffer(bytes));
      auto [ec, n] = co_await asio::async_write(stream_, chunk, kAwait);
      if (ec) co_return fail();
      co_return true;
    }

    // Ends the stream: [DONE] after success, an error event after a failure.
    asio::awaitable<void> finish(const std::optional<Error>& error) {
      if (broken_) co_return;
      std::string tail = error ? "data: " + error_json(*error) + "\n\n" : "data: [DONE]\n\n";
      if (!(co_await write(tail))) co_return;
      arm();
      auto last = http::make_chunk_last();
      auto [ec, n] = co_await asio::async_write(stream_, last, kAwait);
      if (ec) fail();
    }

   private:
    void arm() {
      beast::get_lowest_layer(stream_).expires_after(
          std::chrono::milliseconds(server_.cfg.limits.write_timeout_ms));
    }
    bool fail() {
      broken_ = true;
      return false;
    }
    Impl& server_;
    Stream& stream_;
    const std::string& rid_;
    RequestRecord& record_;
    bool started_ = false;
    bool broken_ = false;
  };

  // ---- the API ---------------------------------------------------------------------------

  // What to do with a request once routed: answer at once, or proxy to a backend.
  struct ProxyPlan {
    adapters::Backend* backend = nullptr;
    adapters::BackendRequest request;
  };

  static Reply text_reply(http::status status, std::string content_type, std::string body) {
    Reply r;
    r.status = status;
    r.content_type = std::move(content_type);
    r.body = std::move(body);
    return r;
  }

  Reply fail(RequestRecord& rec, const Error& e) {
    rec.error = e.message;
    return error_reply(e);
  }

  // Routes a request without any I/O. Returns the reply for everything that needs no backend;
  // otherwise fills `plan` and returns nullopt. (Kept apart from the coroutine on purpose:
  // plain code, and no temporaries inside co_await expressions, which g++ 12 miscompiles.)
  std::optional<Reply> route(const Request& req, RequestRecord& rec, ProxyPlan& plan) {
    std::string_view target = req.target();
    if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
    rec.path = std::string(target);
    rec.method = std::string(req.method_string());
    bool is_get = req.method() == http::verb::get;
    bool is_post = req.method() == http::verb::post;
    if (target == "/healthz" && is_get) return text_reply(http::status::ok, "text/plain", "ok\n");
    if (target == "/readyz" && is_get) {
      if (draining.load()) {
        return text_reply(http::status::service_unavailable, "text/plain", "draining\n");
      }
      return text_reply(http::status::ok, "text/plain", "ready\n");
    }
    if (target == "/metrics" && is_get) {
      return text_reply(http::status::ok, "text/plain; version=0.0.4", metrics.render());
    }
    bool chat = target == "/v1/chat/completions";
    bool completions = target == "/v1/completions";
    bool models = target == "/v1/models";
    bool one_model = target.starts_with("/v1/models/");
    if (!chat && !completions && !models && !one_model) {
      return fail(rec, Error::make(ErrorCode::kNotFound,
                                   "Unknown request URL: " + rec.method + " " + rec.path, "",
                                   "unknown_url"));
    }
    if (((models || one_model) && !is_get) || ((chat || completions) && !is_post)) {
      Reply r = fail(rec, Error::make(ErrorCode::kInvalidRequest,
                                      "Method " + rec.method + " is not allowed on " + rec.path,
                                      "", "method_not_allowed"));
      r.status = http::status::method_not_allowed;
      r.headers.emplace_back("allow", chat || completions ? "POST" : "GET");
      return r;
    }
    auto principal = auth.authenticate(req[http::field::authorization]);
    if (!principal) return fail(rec, principal.error());
    rec.key_id = principal->key_id;

    if (models) return text_reply(http::status::ok, "application/json", models_json);
    if (one_model) {
      std::string id(target.substr(std::string_view("/v1/models/").size()));
      const auto* m = cfg.find_model(id);
      if (m == nullptr) {
        return fail(rec, Error::make(ErrorCode::kNotFound, "The model '" + id + "' does not exist",
                                     "model", "model_not_found"));
      }
      nlohmann::json j = {{"id", m->name}, {"object", "model"}, {"created", 0}, {"owned_by", "ferry"}};
      return text_reply(http::status::ok, "application/json", j.dump());
    }

    auto endpoint = chat ? adapters::Endpoint::kChatCompletions : adapters::Endpoint::kCompletions;
    auto parsed = parse_request(endpoint, req.body());
    if (!parsed) return fail(rec, parsed.error());
    rec.model = parsed->model;
    rec.stream = parsed->stream;
    const config::ModelConfig* model = cfg.find_model(parsed->model);
    if (model == nullptr) {
      std::string names;
      for (const auto& m : cfg.models) names += (names.empty() ? "" : ", ") + m.name;
      return fail(rec, Error::make(ErrorCode::kNotFound,
                                   "The model '" + parsed->model +
                                       "' does not exist. Available models: " + names,
                                   "model", "model_not_found"));
    }
    auto backend_it = backends.find(model->backend);
    if (backend_it == backends.end()) {
      return fail(rec, Error::make(ErrorCode::kUnavailable,
                                   "no backend available for model '" + model->name + "'"));
    }
    plan.backend = backend_it->second.get();
    rec.backend = plan.backend->name();
    plan.request.endpoint = endpoint;
    plan.request.stream = parsed->stream;
    plan.request.client_wants_usage = parsed->include_usage;
    plan.request.request_id = rec.request_id;
    plan.request.body = upstream_body(*parsed, model->upstream_model);
    return std::nullopt;
  }

  // Handles one request. Returns whether the connection may be kept alive.
  template <typename Stream>
  asio::awaitable<bool> handle(Stream& stream, Request& req, RequestRecord& rec) {
    bool keep_alive = req.keep_alive() && !draining.load();
    ProxyPlan plan;
    std::optional<Reply> direct = route(req, rec, plan);
    if (direct) {
      rec.status = static_cast<int>(direct->status);
      bool ok = co_await write_reply(stream, *direct, rec.request_id, keep_alive);
      co_return ok && keep_alive;
    }
    co_return co_await proxy(stream, plan, rec, keep_alive);
  }

  template <typename Stream>
  asio::awaitable<bool> proxy(Stream& stream, ProxyPlan& plan, RequestRecord& rec,
                              bool keep_alive) {
    adapters::CancelSignal cancel;
    SseSink<Stream> sink(*this, stream, rec.request_id, rec);
    Result<adapters::BackendReply> result = Error::make(ErrorCode::kInternal, "not run");
    bool streaming = plan.request.stream;
    int fd = beast::get_lowest_layer(stream).socket().native_handle();
    auto call = [&]() -> asio::awaitable<void> {
      result = co_await plan.backend->send(plan.request, streaming ? &sink : nullptr, cancel);
    };
    // Runs beside the backend call: when the client hangs up, cancel the upstream request.
    // It never finishes first; the call finishing cancels it.
    auto watch = [&]() -> asio::awaitable<void> {
      auto& sock = beast::get_lowest_layer(stream).socket();
      auto [ec] = co_await sock.async_wait(tcp::socket::wait_read, kAwait);
      if (ec) co_return;  // cancelled: the call finished
      // Closed, or a pipelined request is waiting (then we cannot tell and stop looking).
      if (peer_closed(fd)) cancel.cancel();
      asio::steady_timer forever(co_await asio::this_coro::executor, Clock::time_point::max());
      co_await forever.async_wait(kAwait);
    };
    co_await (call() || watch());

    if (!result) {
      const Error& e = result.error();
      if (e.code != ErrorCode::kCancelled && e.code != ErrorCode::kInvalidRequest) {
        metrics.backend_errors.inc({rec.backend, backend_error_kind(e.code)});
      }
      if (e.code == ErrorCode::kCancelled || sink.broken()) {
        rec.status = 499;
        rec.error = "client closed the connection";
        co_return false;
      }
      if (sink.started()) {
        rec.status = 200;
        rec.error = e.message;
        std::optional<Error> cut = e;
        co_await sink.finish(cut);
        co_return false;  // the stream was cut: do not reuse the connection
      }
      Reply r = fail(rec, e);
      rec.status = static_cast<int>(r.status);
      bool ok = co_await write_reply(stream, r, rec.request_id, keep_alive);
      co_return ok && keep_alive;
    }
    adapters::BackendReply& reply = result.value();
    rec.usage = reply.usage;
    rec.finish_reason = reply.finish_reason;
    if (streaming) {
      rec.status = 200;
      std::optional<Error> none;
      co_await sink.finish(none);
      co_return !sink.broken() && keep_alive;
    }
    rec.ttft_us = micros_between(rec.started, Clock::now());
    Reply r;
    r.status = static_cast<http::status>(reply.status);
    r.body = std::move(reply.body);
    rec.status = reply.status;
    bool ok = co_await write_reply(stream, r, rec.request_id, keep_alive);
    co_return ok && keep_alive;
  }

  void finish_record(const RequestRecord& rec) {
    int64_t latency = micros_between(rec.started, Clock::now());
    std::string status = std::to_string(rec.status);
    if (rec.path.starts_with("/v1/")) {
      metrics.requests.inc({rec.model, rec.backend, status});
      if (!rec.model.empty()) {
        metrics.latency.observe_micros({rec.model}, latency);
        if (rec.ttft_us >= 0 && rec.stream) metrics.ttft.observe_micros({rec.model}, rec.ttft_us);
      }
    }
    if (access_log.enabled()) access_log.write(access_log_line(rec, latency));
  }

  // ---- connections -----------------------------------------------------------------------

  template <typename Stream>
  asio::awaitable<void> serve_connection(Stream& stream) {
    beast::flat_buffer buffer(static_cast<size_t>(cfg.limits.max_header_bytes) + 4096);
    const auto& lim = cfg.limits;
    for (;;) {
      // Idle: wait for the first byte of the next request.
      if (buffer.size() == 0) {
        beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(lim.idle_timeout_ms));
        auto [ec, n] = co_await stream.async_read_some(buffer.prepare(4096), kAwait);
        if (ec) co_return;
        buffer.commit(n);
      }
      if (draining.load()) co_return;
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<uint32_t>(lim.max_header_bytes));
      parser.body_limit(static_cast<uint64_t>(lim.max_body_bytes));
      beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(lim.header_timeout_ms));
      auto [hec, hn] = co_await http::async_read_header(stream, buffer, parser, kAwait);
      RequestRecord rec;
      rec.started = Clock::now();
      rec.request_id = make_request_id();
      if (hec == http::error::body_limit) {
        // The Content-Length alone is over the limit: refuse without reading the body.
        rec.method = std::string(parser.get().method_string());
        rec.path = std::string(parser.get().target());
        co_await reject_body_too_large(stream, rec);
        co_return;
      }
      if (hec) {
        if (hec == http::error::header_limit) {
          rec.status = 431;
          Reply r = error_reply(Error::make(ErrorCode::kInvalidRequest,
                                            "request headers exceed " +
                                                std::to_string(lim.max_header_bytes) + " bytes",
                                            "", "headers_too_large"));
          r.status = http::status::request_header_fields_too_large;
          co_await write_reply(stream, r, rec.request_id, false);
          co_await linger_close(stream);
        } else if (hec != beast::error::timeout && hec != http::error::end_of_stream &&
                   hec != asio::error::eof && hec != asio::error::connection_reset &&
                   hec != asio::error::operation_aborted) {
          Reply r = error_reply(Error::make(ErrorCode::kInvalidRequest,
                                            "malformed HTTP request: " + hec.message(), "",
                                            "bad_request"));
          co_await write_reply(stream, r, rec.request_id, false);
          co_await linger_close(stream);
        }
        co_return;
      }
      Request& head = parser.get();
      rec.request_id = request_id_from(head);
      rec.method = std::string(head.method_string());
      rec.path = std::string(head.target());
      metrics.in_flight.fetch_add(1, std::memory_order_relaxed);
      struct InFlight {
        std::atomic<int64_t>& n;
        ~InFlight() { n.fetch_sub(1, std::memory_order_relaxed); }
      } in_flight{metrics.in_flight};

      auto cl = parser.content_length();
      if (cl && *cl > static_cast<uint64_t>(lim.max_body_bytes)) {
        co_await reject_body_too_large(stream, rec);
        co_return;
      }
      if (beast::iequals(head[http::field::expect], "100-continue")) {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(lim.write_timeout_ms));
        auto [cec, cn] = co_await http::async_write(stream, cont, kAwait);
        if (cec) co_return;
      }
      if (!parser.is_done()) {
        beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(lim.body_timeout_ms));
        auto [bec, bn] = co_await http::async_read(stream, buffer, parser, kAwait);
        if (bec == http::error::body_limit) {
          co_await reject_body_too_large(stream, rec);
          co_return;
        }
        if (bec) {
          if (bec == beast::error::timeout) {
            rec.status = 408;
            rec.error = "request body not received in time";
            Reply r = error_reply(Error::make(ErrorCode::kInvalidRequest,
                                              "the request body was not received within " +
                                                  std::to_string(lim.body_timeout_ms) + " ms",
                                              "", "request_timeout"));
            r.status = http::status::request_timeout;
            co_await write_reply(stream, r, rec.request_id, false);
            finish_record(rec);
          }
          co_return;
        }
      }
      Request req = parser.release();
      bool keep = co_await handle(stream, req, rec);
      finish_record(rec);
      if (!keep) {
        co_await graceful_close(stream);
        co_return;
      }
    }
  }

  template <typename Stream>
  asio::awaitable<void> reject_body_too_large(Stream& stream, RequestRecord& rec) {
    Error e = Error::make(ErrorCode::kPayloadTooLarge,
                          "the request body exceeds the limit of " +
                              std::to_string(cfg.limits.max_body_bytes) + " bytes",
                          "", "request_too_large");
    rec.status = 413;
    rec.error = e.message;
    Reply r = error_reply(e);
    co_await write_reply(stream, r, rec.request_id, false);
    finish_record(rec);
    co_await linger_close(stream);
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
    if constexpr (!std::is_same_v<Stream, beast::tcp_stream>) {
      beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(1));
      co_await stream.async_shutdown(kAwait);
    }
    beast::get_lowest_layer(stream).socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  asio::awaitable<void> run_session(tcp::socket socket) {
    metrics.connections.fetch_add(1, std::memory_order_relaxed);
    struct Count {
      std::atomic<int64_t>& n;
      ~Count() { n.fetch_sub(1, std::memory_order_relaxed); }
    } count{metrics.connections};
    beast::error_code ec;
    socket.set_option(tcp::no_delay(true), ec);
    if (!tls) {
      beast::tcp_stream stream(std::move(socket));
      co_await serve_connection(stream);
      co_return;
    }
    beast::ssl_stream<beast::tcp_stream> stream(std::move(socket), *tls);
    beast::get_lowest_layer(stream).expires_after(
        std::chrono::milliseconds(cfg.limits.header_timeout_ms));
    auto [hec] = co_await stream.async_handshake(ssl::stream_base::server, kAwait);
    if (hec) co_return;
    co_await serve_connection(stream);
  }

  asio::awaitable<void> refuse_connection(tcp::socket socket) {
    Reply r = error_reply(Error::make(ErrorCode::kUnavailable,
                                      "ferry is at its connection limit; retry shortly"));
    beast::tcp_stream stream(std::move(socket));
    std::string rid = make_request_id();
    if (!tls) co_await write_reply(stream, r, rid, false);
    beast::error_code ec;
    stream.socket().close(ec);
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor->async_accept(asio::make_strand(ioc), kAwait);
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor->is_open()) co_return;
        // EMFILE and friends: back off briefly instead of spinning.
        asio::steady_timer pause(ioc, std::chrono::milliseconds(50));
        co_await pause.async_wait(kAwait);
        continue;
      }
      auto ex = socket.get_executor();
      if (metrics.connections.load() >= cfg.limits.max_connections) {
        metrics.rejected.inc({"connection_limit"});
        asio::co_spawn(ex, refuse_connection(std::move(socket)), asio::detached);
        continue;
      }
      asio::co_spawn(ex, run_session(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> drain_then_stop() {
    auto deadline = Clock::now() + std::chrono::milliseconds(cfg.server.shutdown_grace_ms);
    asio::steady_timer tick(ioc);
    while (metrics.in_flight.load() > 0 && Clock::now() < deadline) {
      tick.expires_after(std::chrono::milliseconds(20));
      co_await tick.async_wait(kAwait);
    }
    for (auto& [name, b] : backends) b->close_idle();
    access_log.flush();
    stopped = true;
    ioc.stop();
  }

  void begin_shutdown() {
    if (draining.exchange(true)) return;
    beast::error_code ec;
    if (acceptor) acceptor->close(ec);
    signals.cancel(ec);
    asio::co_spawn(ioc, drain_then_stop(), asio::detached);
  }
};

Server::Server(config::Config config) : impl_(std::make_unique<Impl>(std::move(config))) {}

Server::~Server() = default;

Result<std::string> Server::listen(const std::string& host, uint16_t port) {
  Impl& im = *impl_;
  beast::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) {
    tcp::resolver resolver(im.ioc);
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) {
      return Error::make(ErrorCode::kInvalidRequest, "cannot resolve listen host '" + host + "'");
    }
    address = results.begin()->endpoint().address();
  }
  tcp::endpoint endpoint(address, port);
  im.acceptor.emplace(im.ioc);
  im.acceptor->open(endpoint.protocol(), ec);
  if (!ec) im.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) im.acceptor->bind(endpoint, ec);
  if (!ec) im.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Error::make(ErrorCode::kUnavailable, "cannot listen on " + host + ":" +
                                                    std::to_string(port) + ": " + ec.message());
  }
  auto bound = im.acceptor->local_endpoint();
  std::string host_text = bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                                  : bound.address().to_string();
  return std::string(im.tls ? "https://" : "http://") + host_text + ":" +
         std::to_string(bound.port());
}

void Server::run() {
  Impl& im = *impl_;
  im.signals.async_wait([&im](const beast::error_code& ec, int) {
    if (!ec) im.begin_shutdown();
  });
  asio::co_spawn(im.ioc, im.accept_loop(), asio::detached);
  std::vector<std::thread> threads;
  for (int i = 1; i < im.cfg.server.io_threads; ++i) threads.emplace_back([&im] { im.ioc.run(); });
  im.ioc.run();
  for (auto& t : threads) t.join();
  im.access_log.flush();
}

void Server::request_shutdown() {
  asio::post(impl_->ioc, [this] { impl_->begin_shutdown(); });
}

}  // namespace ferry::gateway
