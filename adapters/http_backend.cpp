#include "adapters/http_backend.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <array>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <variant>

#include <nlohmann/json.hpp>

#include "adapters/openai_wire.h"
#include "adapters/sse_parser.h"
#include "adapters/timed_socket.h"

namespace ferry::adapters {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);
constexpr size_t kMaxResponseBytes = 64 << 20;  // a non-streaming answer
constexpr size_t kReadChunk = 16 * 1024;        // room for one read from the backend
constexpr size_t kMaxErrorBodyBytes = 1 << 20;  // an error body we read to explain it
constexpr auto kMaxIdleAge = std::chrono::seconds(30);
constexpr auto kPeekAfter = std::chrono::milliseconds(1000);

using PlainStream = TimedSocket;
using TlsStream = beast::ssl_stream<TimedSocket>;

// One upstream connection: a plain or TLS stream plus its read buffer.
struct Connection {
  std::variant<std::unique_ptr<PlainStream>, std::unique_ptr<TlsStream>> stream;
  beast::flat_buffer buffer;
  Clock::time_point idle_since;
  const asio::execution_context* loop = nullptr;  // the event loop its socket belongs to

  TimedSocket& tcp() {
    if (auto* p = std::get_if<0>(&stream)) return **p;
    return beast::get_lowest_layer(*std::get<1>(stream));
  }
  void close() {
    beast::error_code ec;
    tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
    tcp().socket().close(ec);
  }
  // True when the peer closed or sent unexpected bytes while the connection sat idle. A
  // connection idle for less than kPeekAfter is not probed (a system call per request under
  // load): servers close idle connections after seconds, and a request that finds the
  // connection closed all the same is retried on a fresh one before any answer byte (send()).
  bool stale() {
    auto idle = Clock::now() - idle_since;
    if (idle > kMaxIdleAge) return true;
    if (buffer.size() != 0) return true;
    if (idle < kPeekAfter) return false;
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
  config::BackendConfig cfg;
  std::optional<ssl::context> tls;
  std::string host_header;
  HttpBackendStats stats;

  std::mutex mu;  // guards idle and endpoints
  std::deque<std::unique_ptr<Connection>> idle;
  std::optional<tcp::resolver::results_type> endpoints;
  bool closing = false;

  explicit Impl(config::BackendConfig c) : cfg(std::move(c)) {
    bool ipv6 = cfg.host.find(':') != std::string::npos;
    host_header = ipv6 ? "[" + cfg.host + "]" : cfg.host;
    if (cfg.port != (cfg.tls ? 443 : 80)) host_header += ":" + std::to_string(cfg.port);
    if (cfg.tls) {
      tls.emplace(ssl::context::tls_client);
      tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
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

  // The most recently used idle connection of the caller's event loop (connections never
  // move between loops, so their completions never cross threads).
  std::unique_ptr<Connection> take_idle(const asio::execution_context* loop) {
    std::lock_guard lock(mu);
    for (size_t i = idle.size(); i-- > 0;) {
      if (idle[i]->loop != loop) continue;
      auto conn = std::move(idle[i]);
      idle.erase(idle.begin() + static_cast<std::ptrdiff_t>(i));
      if (!conn->stale()) return conn;
      conn->close();
    }
    return nullptr;
  }

  void give_back(std::unique_ptr<Connection> conn) {
    conn->idle_since = Clock::now();
    conn->tcp().expires_never();
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
    asio::any_io_executor loop_ex = co_await asio::this_coro::executor;
    std::optional<tcp::resolver::results_type> eps;
    {
      std::lock_guard lock(mu);
      eps = endpoints;
    }
    if (!eps) {
      tcp::resolver resolver(loop_ex);
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
    conn->loop = &asio::query(loop_ex, asio::execution::context);
    if (tls) {
      conn->stream = std::make_unique<TlsStream>(loop_ex, *tls);
    } else {
      conn->stream = std::make_unique<PlainStream>(loop_ex);
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
  asio::awaitable<Exchange> exchange(Stream& stream, Connection& conn, const std::string& head,
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
        return fail(ErrorCode::kTimeout, total_hit ? "did not finish within total_ms=" +
                                                         std::to_string(cfg.timeouts.total_ms)
                                                   : std::string("timed out ") + during);
      }
      return fail(ErrorCode::kBackendError, std::string("failed ") + during + ": " + ec.message());
    };

    conn.tcp().expires_at(step_deadline(cfg.timeouts.idle_ms, total));
    // The request head is prebuilt text; head and body go out in one gathered write.
    std::array<asio::const_buffer, 2> out_bufs{asio::buffer(head), asio::buffer(request.body)};
    beast::error_code wec;
    size_t written = write_now(stream, out_bufs, wec);
    if (!wec && written < asio::buffer_size(out_bufs)) {
      beast::buffers_suffix<std::array<asio::const_buffer, 2>> rest(out_bufs);
      rest.consume(written);
      auto [aec, an] = co_await asio::async_write(stream, rest, kAwait);
      wec = aec;
    }
    if (wec) {
      if (reused && !cancel.cancelled()) co_return out;  // stale keep-alive: retry fresh
      co_return io_error(wec, "sending the request");
    }

    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    parser.header_limit(64 * 1024);
    conn.tcp().expires_at(step_deadline(cfg.timeouts.first_byte_ms, total));
    // Beast reads into the buffer's free capacity (at least 512 bytes): make room for a whole
    // typical answer, so that it takes one recv.
    if (conn.buffer.capacity() < kReadChunk) conn.buffer.reserve(kReadChunk);
    if constexpr (std::is_same_v<Stream, TimedSocket>) {
      // Nothing comes before the request is answered, and with nothing buffered the header
      // read below reads from this socket.
      if (conn.buffer.size() == 0) stream.expect_silence();
    }
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
    bool is_sse =
        res[http::field::content_type].find("text/event-stream") != std::string_view::npos;

    char buf[16 * 1024];
    std::string body;
    SseParser sse;
    std::string to_client;
    bool saw_done = false;
    // The name the client asked for, quoted once for every chunk's rename.
    const std::string reply_model =
        request.reply_model.empty() ? std::string() : quote_model(request.reply_model);
    bool streaming = ok_status && request.stream;
    if (streaming && !is_sse) {
      co_return fail(ErrorCode::kBackendError, "answered a stream request with '" +
                                                   std::string(res[http::field::content_type]) +
                                                   "' instead of an event stream");
    }
    size_t limit = ok_status ? kMaxResponseBytes : kMaxErrorBodyBytes;
    std::optional<Error> stream_error;

    while (!parser.is_done()) {
      res.body().data = buf;
      res.body().size = sizeof buf;
      // Parse what is buffered; read from the socket only when the parser needs more. (Beast's
      // composed read costs an event-loop turn per chunk piece even when the bytes are here.)
      beast::error_code rec;
      bool need_read = conn.buffer.size() == 0;
      if (!need_read) {
        size_t used = parser.put(conn.buffer.data(), rec);
        conn.buffer.consume(used);
        if (rec == http::error::need_more) {
          rec = {};
          need_read = true;
        } else if (rec == http::error::need_buffer) {
          rec = {};
        }
      }
      if (!rec && need_read && res.body().size == sizeof buf && !parser.is_done()) {
        // Everything buffered is parsed: forward its events in one write, then wait for more.
        if (!to_client.empty()) {
          bool sent = co_await sink->write(to_client);
          to_client.clear();
          if (!sent) {
            out.result = Error::make(ErrorCode::kCancelled, "client went away");
            co_return out;
          }
        }
        conn.tcp().expires_at(step_deadline(cfg.timeouts.idle_ms, total));
        auto space = conn.buffer.prepare(sizeof buf);
        auto [xec, xn] = co_await stream.async_read_some(space, kAwait);
        conn.buffer.commit(xn);
        if (xec == asio::error::eof || xec == ssl::error::stream_truncated) {
          // The server closed: that ends a body delimited by the close, anything else is cut.
          if (parser.got_some()) {
            parser.put_eof(rec);
          } else {
            rec = http::error::end_of_stream;
          }
        } else if (xec) {
          rec = xec;
        } else {
          continue;  // parse what came
        }
      }
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
          co_return fail(ErrorCode::kBackendError,
                         "sent a response larger than " + std::to_string(limit) + " bytes");
        }
        body.append(buf, got);
      } else if (got > 0) {
        bool malformed = false;
        bool ok =
            sse.feed(std::string_view(buf, got), [&](std::string_view, std::string_view data) {
              if (saw_done || malformed) return;
              if (data == "[DONE]") {
                saw_done = true;
                return;
              }
              // Every event is an OpenAI chunk: anything else is a broken stream, never forwarded.
              if (!is_json_object(data)) {
                malformed = true;
                return;
              }
              ChunkAction action = inspect_stream_chunk(data, request.client_wants_usage);
              if (action.usage) reply.usage = *action.usage;
              if (!reply_model.empty()) {
                std::string_view current =
                    action.rewritten ? std::string_view(*action.rewritten) : data;
                if (auto renamed = with_quoted_model(current, reply_model)) {
                  action.rewritten = std::move(renamed);
                }
              }
              std::string_view payload =
                  action.rewritten ? std::string_view(*action.rewritten) : data;
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
      }
      if (rec == http::error::end_of_stream) break;
    }
    // The events parsed since the last write (before the end, or before a broken event).
    if (streaming && !to_client.empty()) {
      bool sent = co_await sink->write(to_client);
      to_client.clear();
      if (!sent) {
        out.result = Error::make(ErrorCode::kCancelled, "client went away");
        co_return out;
      }
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
      if (!is_openai_answer(body)) {
        out.reusable = parser.keep_alive();  // the exchange was whole; only the answer is bad
        co_return fail(ErrorCode::kBackendError,
                       "answered with a body that is not an OpenAI JSON answer (valid JSON with a "
                       "'choices' array)");
      }
      if (auto u = find_usage(body)) reply.usage = *u;
      reply.finish_reason = find_finish_reason(body);
      if (!reply_model.empty()) {
        if (auto renamed = with_quoted_model(body, reply_model)) body = std::move(*renamed);
      }
      reply.body = std::move(body);
    }
    out.reusable = parser.is_done() && parser.keep_alive();
    out.result = std::move(reply);
    co_return out;
  }
};

HttpBackend::HttpBackend(config::BackendConfig config)
    : impl_(std::make_unique<Impl>(std::move(config))) {}

HttpBackend::~HttpBackend() {
  close_idle();
}

const std::string& HttpBackend::name() const {
  return impl_->cfg.name;
}

const HttpBackendStats& HttpBackend::stats() const {
  return impl_->stats;
}

void HttpBackend::close_idle() {
  std::lock_guard lock(impl_->mu);
  impl_->closing = true;
  for (auto& c : impl_->idle) c->close();
  impl_->idle.clear();
}

// g++ 12 reports a false -Wmismatched-new-delete on this coroutine's frame (Asio's frame
// allocator pairs its own operator new and delete); the pairing is Asio's and is correct.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
asio::awaitable<Result<BackendReply>> HttpBackend::send(const BackendRequest& request,
                                                        StreamSink* sink, CancelSignal& cancel) {
  Impl& im = *impl_;
  auto started = Clock::now();
  auto total = started + std::chrono::milliseconds(im.cfg.timeouts.total_ms);

  // The request head, written by hand (a serializer costs more than the rest of the call).
  std::string head;
  head.reserve(256 + im.host_header.size() + im.cfg.path_prefix.size());
  head.append("POST ");
  head.append(im.cfg.path_prefix);
  head.append(request.endpoint == Endpoint::kChatCompletions ? "/chat/completions"
                                                             : "/completions");
  head.append(" HTTP/1.1\r\nHost: ");
  head.append(im.host_header);
  head.append("\r\nUser-Agent: ferry\r\nContent-Type: application/json\r\nAccept: ");
  head.append(request.stream ? "text/event-stream" : "application/json");
  if (im.cfg.api_key) {
    head.append("\r\nAuthorization: Bearer ");
    head.append(*im.cfg.api_key);
  }
  if (!request.request_id.empty()) {
    head.append("\r\nx-request-id: ");
    head.append(request.request_id);
  }
  head.append("\r\nContent-Length: ");
  head.append(std::to_string(request.body.size()));
  head.append("\r\n\r\n");

  asio::any_io_executor loop_ex = co_await asio::this_coro::executor;
  const asio::execution_context* loop = &asio::query(loop_ex, asio::execution::context);
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<Connection> conn = attempt == 0 ? im.take_idle(loop) : nullptr;
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
      ex = co_await im.exchange(**p, *conn, head, request, sink, cancel, reused, total, started);
    } else {
      ex = co_await im.exchange(*std::get<1>(conn->stream), *conn, head, request, sink, cancel,
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

#pragma GCC diagnostic pop

}  // namespace ferry::adapters
