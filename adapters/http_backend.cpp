#include "adapters/http_backend.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <variant>

#include <nlohmann/json.hpp>

#include "adapters/openai_wire.h"
#include "adapters/sse_parser.h"

namespace ferry::adapters {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);
constexpr size_t kMaxResponseBytes = 64 << 20;   // a non-streaming answer
constexpr size_t kMaxErrorBodyBytes = 1 << 20;   // an error body we read to explain it
constexpr auto kMaxIdleAge = std::chrono::seconds(30);

using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// One upstream connection: a plain or TLS stream plus its read buffer.
struct Connection {
  std::variant<std::unique_ptr<PlainStream>, std::unique_ptr<TlsStream>> stream;
  beast::flat_buffer buffer;
  Clock::time_point idle_since;

  beast::tcp_stream& tcp() {
    if (auto* p = std::get_if<0>(&stream)) return **p;
    return beast::get_lowest_layer(*std::get<1>(stream));
  }
  void close() {
    beast::error_code ec;
    tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
    tcp().socket().close(ec);
  }
  // True when the peer closed or sent unexpected bytes while the connection sat idle.
  bool stale() {
    if (Clock::now() - idle_since > kMaxIdleAge) return true;
    if (buffer.size() != 0) return true;
    char byte = 0;
    ssize_t n = ::recv(tcp().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
  }
};

Error backend_error(ErrorCode code, const std::string& backend, const std::string& what) {
  return Error::make(code, "backend '" + backend + "' " + what);
}

// Maps an upstream error status and body to the error the client sees.
Error upstream_status_error(const std::string& backend, unsigned status, std::string_view body) {
  // OpenAI-compatible servers put the reason under error.message (or error as a string, or a
  // top-level message / detail as FastAPI does).
  std::string message;
  std::string param;
  std::string code;
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    auto err = j.find("error");
    const nlohmann::json& src = (err != j.end() && err->is_object()) ? *err : j;
    auto text = [&](const char* key) -> std::string {
      auto it = src.find(key);
      return (it != src.end() && it->is_string()) ? it->get<std::string>() : std::string();
    };
    message = text("message");
    if (message.empty()) message = text("detail");
    if (message.empty() && err != j.end() && err->is_string()) message = err->get<std::string>();
    param = text("param");
    code = text("code");
  }
  if (message.empty()) message = std::string(body.substr(0, 512));
  Error e;
  if (status == 400 || status == 422) {
    e = Error::make(ErrorCode::kInvalidRequest, message, param, code);
  } else if (status == 429) {
    e = backend_error(ErrorCode::kRateLimited, backend, "is rate limiting: " + message);
  } else if (status == 408 || status == 504) {
    e = backend_error(ErrorCode::kTimeout, backend,
                      "timed out (HTTP " + std::to_string(status) + "): " + message);
  } else if (status == 503) {
    e = backend_error(ErrorCode::kUnavailable, backend, "is unavailable (HTTP 503): " + message);
  } else {
    e = backend_error(ErrorCode::kBackendError, backend,
                      "returned HTTP " + std::to_string(status) + ": " + message);
  }
  e.upstream_status = static_cast<int>(status);
  return e;
}

}  // namespace

struct HttpBackend::Impl {
  asio::any_io_executor executor;
  config::BackendConfig cfg;
  std::optional<ssl::context> tls;
  std::string host_header;
  HttpBackendStats stats;

  std::mutex mu;  // guards idle and endpoints
  std::deque<std::unique_ptr<Connection>> idle;
  std::optional<tcp::resolver::results_type> endpoints;
  bool closing = false;

  Impl(asio::any_io_executor ex, config::BackendConfig c)
      : executor(std::move(ex)), cfg(std::move(c)) {
    bool ipv6 = cfg.host.find(':') != std::string::npos;
    host_header = ipv6 ? "[" + cfg.host + "]" : cfg.host;
    if (cfg.port != (cfg.tls ? 443 : 80)) host_header += ":" + std::to_string(cfg.port);
    if (cfg.tls) {
      tls.emplace(ssl::context::tls_client);
      tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                       ssl::context::no_tlsv1_1);
      beast::error_code ec;
      if (cfg.ca_file) {
        tls->load_verify_file(*cfg.ca_file, ec);
        if (ec) {
          throw std::runtime_error("backend '" + cfg.name + "': cannot load ca_file '" +
                                   *cfg.ca_file + "': " + ec.message());
        }
      } else {
        tls->set_default_verify_paths(ec);
      }
      tls->set_verify_mode(cfg.verify_peer ? ssl::verify_peer : ssl::verify_none);
    }
  }

  std::unique_ptr<Connection> take_idle() {
    std::lock_guard lock(mu);
    while (!idle.empty()) {
      auto conn = std::move(idle.back());
      idle.pop_back();
      if (!conn->stale()) return conn;
      conn->close();
    }
    return nullptr;
  }

  void give_back(std::unique_ptr<Connection> conn) {
    conn->idle_since = Clock::now();
    std::lock_guard lock(mu);
    if (closing || static_cast<int64_t>(idle.size()) >= cfg.max_idle_connections) {
      conn->close();
      return;
    }
    idle.push_back(std::move(conn));
  }

  static Clock::time_point step_deadline(int64_t step_ms, Clock::time_point total) {
    return std::min(Clock::now() + std::chrono::milliseconds(step_ms), total);
  }

  asio::awaitable<Result<std::unique_ptr<Connection>>> connect(Clock::time_point total,
                                                               CancelSignal& cancel) {
    std::optional<tcp::resolver::results_type> eps;
    {
      std::lock_guard lock(mu);
      eps = endpoints;
    }
    if (!eps) {
      tcp::resolver resolver(executor);
      std::string port = std::to_string(cfg.port);
      auto [ec, results] = co_await resolver.async_resolve(cfg.host, port, kAwait);
      if (ec) {
        co_return backend_error(ErrorCode::kUnavailable, cfg.name,
                                "cannot be resolved (" + cfg.host + "): " + ec.message());
      }
      eps = results;
      std::lock_guard lock(mu);
      endpoints = results;
    }
    auto conn = std::make_unique<Connection>();
    if (tls) {
      conn->stream = std::make_unique<TlsStream>(executor, *tls);
    } else {
      conn->stream = std::make_unique<PlainStream>(executor);
    }
    Connection* raw = conn.get();
    cancel.set_hook([raw] { raw->close(); });
    conn->tcp().expires_at(step_deadline(cfg.timeouts.connect_ms, total));
    auto [ec, ep] = co_await conn->tcp().async_connect(*eps, kAwait);
    if (ec) {
      std::lock_guard lock(mu);
      endpoints.reset();  // resolve again next time
      if (cancel.cancelled()) co_return Error::make(ErrorCode::kCancelled, "client went away");
      if (ec == beast::error::timeout) {
        co_return backend_error(ErrorCode::kUnavailable, cfg.name,
                                "did not accept a connection within " +
                                    std::to_string(cfg.timeouts.connect_ms) + " ms");
      }
      co_return backend_error(ErrorCode::kUnavailable, cfg.name,
                              "is unreachable at " + cfg.base_url + ": " + ec.message());
    }
    conn->tcp().socket().set_option(tcp::no_delay(true), ec);
    if (auto* t = std::get_if<1>(&conn->stream)) {
      TlsStream& s = **t;
      bool is_ip = false;
      asio::ip::make_address(cfg.host, ec);
      is_ip = !ec;
      if (!is_ip && !SSL_set_tlsext_host_name(s.native_handle(), cfg.host.c_str())) {
        co_return backend_error(ErrorCode::kBackendError, cfg.name, "cannot set TLS SNI");
      }
      s.set_verify_callback(ssl::host_name_verification(cfg.host));
      auto [hec] = co_await s.async_handshake(ssl::stream_base::client, kAwait);
      if (hec) {
        if (cancel.cancelled()) co_return Error::make(ErrorCode::kCancelled, "client went away");
        co_return backend_error(ErrorCode::kBackendError, cfg.name,
                                "TLS handshake failed: " + hec.message());
      }
    }
    stats.connections_opened.fetch_add(1, std::memory_order_relaxed);
    co_return conn;
  }

  // The outcome of one exchange on one connection.
  struct Exchange {
    std::optional<Result<BackendReply>> result;  // empty: retry on a fresh connection
    bool reusable = false;
  };

  template <typename Stream>
  asio::awaitable<Exchange> exchange(Stream& stream, Connection& conn,
                                     http::request<http::string_body>& req,
                                     const BackendRequest& request, StreamSink* sink,
                                     CancelSignal& cancel, bool reused, Clock::time_point total,
                                     Clock::time_point started) {
    Exchange out;
    auto fail = [&](ErrorCode code, const std::string& what) {
      out.result = backend_error(code, cfg.name, what);
      return out;
    };
    auto io_error = [&](const beast::error_code& ec, const char* during) -> Exchange {
      if (cancel.cancelled()) {
        out.result = Error::make(ErrorCode::kCancelled, "client went away");
        return out;
      }
      if (ec == beast::error::timeout) {
        bool total_hit = Clock::now() >= total;
        return fail(ErrorCode::kTimeout,
                    total_hit ? "did not finish within total_ms=" + std::to_string(cfg.timeouts.total_ms)
                              : std::string("timed out ") + during);
      }
      return fail(ErrorCode::kBackendError, std::string("failed ") + during + ": " + ec.message());
    };

    conn.tcp().expires_at(step_deadline(cfg.timeouts.idle_ms, total));
    auto [wec, written] = co_await http::async_write(stream, req, kAwait);
    if (wec) {
      if (reused && !cancel.cancelled()) co_return out;  // stale keep-alive: retry fresh
      co_return io_error(wec, "sending the request");
    }

    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    parser.header_limit(64 * 1024);
    conn.tcp().expires_at(step_deadline(cfg.timeouts.first_byte_ms, total));
    auto [hec, hn] = co_await http::async_read_header(stream, conn.buffer, parser, kAwait);
    if (hec) {
      bool nothing_read = conn.buffer.size() == 0 && hn == 0;
      if (reused && nothing_read && hec != beast::error::timeout && !cancel.cancelled()) {
        co_return out;  // the server closed the idle connection as we reused it
      }
      co_return io_error(hec, "waiting for the response");
    }
    BackendReply reply;
    reply.first_byte_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count();
    auto& res = parser.get();
    reply.status = static_cast<int>(res.result_int());
    bool ok_status = reply.status >= 200 && reply.status < 300;
    bool is_sse = res[http::field::content_type].find("text/event-stream") != std::string_view::npos;

    char buf[16 * 1024];
    std::string body;
    SseParser sse;
    std::string to_client;
    bool saw_done = false;
    bool streaming = ok_status && request.stream;
    if (streaming && !is_sse) {
      co_return fail(ErrorCode::kBackendError,
                     "answered a stream request with '" +
                         std::string(res[http::field::content_type]) + "' instead of an event stream");
    }
    size_t limit = ok_status ? kMaxResponseBytes : kMaxErrorBodyBytes;
    std::optional<Error> stream_error;

    while (!parser.is_done()) {
      res.body().data = buf;
      res.body().size = sizeof buf;
      conn.tcp().expires_at(step_deadline(cfg.timeouts.idle_ms, total));
      auto [rec, rn] = co_await http::async_read_some(stream, conn.buffer, parser, kAwait);
      if (rec == http::error::need_buffer) rec = {};
      if (rec && rec != http::error::end_of_stream) {
        if (streaming) {
          if (cancel.cancelled()) co_return io_error(rec, "");
          stream_error = backend_error(
              rec == beast::error::timeout ? ErrorCode::kTimeout : ErrorCode::kBackendError,
              cfg.name,
              rec == beast::error::timeout ? "stopped sending the stream (idle timeout)"
                                           : "broke the stream: " + rec.message());
          break;
        }
        co_return io_error(rec, "reading the response");
      }
      size_t got = sizeof buf - res.body().size;
      if (!streaming) {
        if (body.size() + got > limit) {
          co_return fail(ErrorCode::kBackendError, "sent a response larger than " +
                                                       std::to_string(limit) + " bytes");
        }
        body.append(buf, got);
      } else if (got > 0) {
        to_client.clear();
        bool malformed = false;
        bool ok = sse.feed(std::string_view(buf, got), [&](std::string_view, std::string_view data) {
          if (saw_done || malformed) return;
          if (data == "[DONE]") {
            saw_done = true;
            return;
          }
          std::string_view trimmed = data;
          while (!trimmed.empty() && (trimmed.back() == ' ' || trimmed.back() == '\n')) {
            trimmed.remove_suffix(1);
          }
          if (trimmed.empty() || trimmed.front() != '{' || trimmed.back() != '}') {
            malformed = true;
            return;
          }
          ChunkAction action = inspect_stream_chunk(data, request.client_wants_usage);
          if (action.usage) reply.usage = *action.usage;
          std::string_view payload = action.rewritten ? std::string_view(*action.rewritten) : data;
          if (reply.finish_reason.empty()) reply.finish_reason = find_finish_reason(payload);
          if (!action.forward) return;
          to_client.append("data: ");
          to_client.append(payload);
          to_client.append("\n\n");
        });
        if (!ok) {
          stream_error = backend_error(ErrorCode::kBackendError, cfg.name, sse.error());
          break;
        }
        if (malformed) {
          stream_error =
              backend_error(ErrorCode::kBackendError, cfg.name, "sent a malformed stream event");
          break;
        }
        if (!to_client.empty() && !(co_await sink->write(to_client))) {
          out.result = Error::make(ErrorCode::kCancelled, "client went away");
          co_return out;
        }
      }
      if (rec == http::error::end_of_stream) break;
    }

    if (!ok_status) {
      out.reusable = parser.is_done() && parser.keep_alive();
      out.result = upstream_status_error(cfg.name, static_cast<unsigned>(reply.status), body);
      co_return out;
    }
    if (streaming) {
      if (stream_error) {
        out.result = *stream_error;
        co_return out;
      }
      if (!saw_done && reply.finish_reason.empty()) {
        co_return fail(ErrorCode::kBackendError, "closed the stream before it finished");
      }
    } else {
      if (!parser.is_done()) co_return fail(ErrorCode::kBackendError, "sent a truncated response");
      if (auto u = find_usage(body)) reply.usage = *u;
      reply.finish_reason = find_finish_reason(body);
      reply.body = std::move(body);
    }
    out.reusable = parser.is_done() && parser.keep_alive();
    out.result = std::move(reply);
    co_return out;
  }
};

HttpBackend::HttpBackend(asio::any_io_executor executor, config::BackendConfig config)
    : impl_(std::make_unique<Impl>(std::move(executor), std::move(config))) {}

HttpBackend::~HttpBackend() { close_idle(); }

const std::string& HttpBackend::name() const { return impl_->cfg.name; }

const HttpBackendStats& HttpBackend::stats() const { return impl_->stats; }

void HttpBackend::close_idle() {
  std::lock_guard lock(impl_->mu);
  impl_->closing = true;
  for (auto& c : impl_->idle) c->close();
  impl_->idle.clear();
}

asio::awaitable<Result<BackendReply>> HttpBackend::send(const BackendRequest& request,
                                                        StreamSink* sink, CancelSignal& cancel) {
  Impl& im = *impl_;
  auto started = Clock::now();
  auto total = started + std::chrono::milliseconds(im.cfg.timeouts.total_ms);

  http::request<http::string_body> req{
      http::verb::post,
      im.cfg.path_prefix +
          (request.endpoint == Endpoint::kChatCompletions ? "/chat/completions" : "/completions"),
      11};
  req.set(http::field::host, im.host_header);
  req.set(http::field::user_agent, "ferry");
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, request.stream ? "text/event-stream" : "application/json");
  if (im.cfg.api_key) req.set(http::field::authorization, "Bearer " + *im.cfg.api_key);
  if (!request.request_id.empty()) req.set("x-request-id", request.request_id);
  req.keep_alive(true);
  req.body() = request.body;
  req.prepare_payload();

  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<Connection> conn = attempt == 0 ? im.take_idle() : nullptr;
    bool reused = conn != nullptr;
    if (reused) {
      im.stats.connections_reused.fetch_add(1, std::memory_order_relaxed);
      Connection* raw = conn.get();
      cancel.set_hook([raw] { raw->close(); });
    } else {
      auto fresh = co_await im.connect(total, cancel);
      if (!fresh) {
        cancel.clear_hook();
        co_return std::move(fresh).error();
      }
      conn = std::move(fresh.value());
    }
    Impl::Exchange ex;
    if (auto* p = std::get_if<0>(&conn->stream)) {
      ex = co_await im.exchange(**p, *conn, req, request, sink, cancel, reused, total, started);
    } else {
      ex = co_await im.exchange(*std::get<1>(conn->stream), *conn, req, request, sink, cancel,
                                reused, total, started);
    }
    cancel.clear_hook();
    if (!ex.result) {
      conn->close();
      continue;  // the reused connection was stale; try a fresh one
    }
    if (ex.reusable && !cancel.cancelled()) {
      im.give_back(std::move(conn));
    } else {
      conn->close();
    }
    co_return std::move(*ex.result);
  }
  co_return backend_error(ErrorCode::kBackendError, im.cfg.name, "dropped the connection");
}

}  // namespace ferry::adapters
