#include "adapters/http_backend.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "adapters/openai_wire.h"
#include "adapters/sse_parser.h"
#include "adapters/stream_relay.h"
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

// The path of an endpoint on an OpenAI-compatible (or Messages-speaking) server.
const char* endpoint_path(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kChatCompletions:
      return "/chat/completions";
    case Endpoint::kCompletions:
      return "/completions";
    case Endpoint::kMessages:
      return "/messages";
    case Endpoint::kResponses:
      return "/responses";
    case Endpoint::kEmbeddings:
      return "/embeddings";
  }
  return "/chat/completions";
}

using PlainStream = TimedSocket;
using TlsStream = beast::ssl_stream<TimedSocket>;

// The parser of an answer: Beast's HTTP/1.1 response grammar (framing, chunks, keep-alive),
// keeping of the head only what the exchange reads (the status and Content-Type) and writing
// the body into the buffer body() points at, as http::buffer_body does. http::response_parser
// stores every field in a basic_fields, an allocation and a free each.
class AnswerParser final : public http::basic_parser<false> {
 public:
  // The caller's room for body bytes: put() fills it from `data` on, `size` counting down.
  struct Room {
    char* data = nullptr;
    size_t size = 0;
  };

  // `content_type` (the connection's, reused: its capacity survives the exchanges) is cleared
  // and receives the answer's Content-Type.
  explicit AnswerParser(std::string& content_type) : content_type_(content_type) {
    content_type_.clear();
  }

  int status() const { return status_; }
  std::string_view content_type() const { return content_type_; }
  Room& body() { return room_; }

 private:
  void on_request_impl(http::verb, beast::string_view, beast::string_view, int,
                       beast::error_code& ec) override {
    ec = http::error::bad_method;  // a response parser: not reached
  }
  void on_response_impl(int code, beast::string_view, int, beast::error_code&) override {
    status_ = code;
  }
  void on_field_impl(http::field name, beast::string_view, beast::string_view value,
                     beast::error_code&) override {
    // The first, as basic_fields' lookup gives it.
    if (name == http::field::content_type && !seen_content_type_) {
      content_type_.assign(value.data(), value.size());
      seen_content_type_ = true;
    }
  }
  void on_header_impl(beast::error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, beast::error_code&) override {}
  size_t on_body_impl(beast::string_view body, beast::error_code& ec) override {
    return take(body, ec);
  }
  void on_chunk_header_impl(std::uint64_t, beast::string_view, beast::error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, beast::string_view body,
                            beast::error_code& ec) override {
    return take(body, ec);
  }
  void on_finish_impl(beast::error_code&) override {}

  // As buffer_body's writer: copies what fits; need_buffer when not all of it did.
  size_t take(beast::string_view body, beast::error_code& ec) {
    const size_t n = std::min(body.size(), room_.size);
    if (n > 0) std::memcpy(room_.data, body.data(), n);
    room_.data += n;
    room_.size -= n;
    if (n < body.size()) ec = http::error::need_buffer;
    return n;
  }

  std::string& content_type_;
  bool seen_content_type_ = false;
  int status_ = 0;
  Room room_;
};

// One upstream connection: a plain or TLS stream plus its read buffer.
struct Connection {
  std::variant<std::unique_ptr<PlainStream>, std::unique_ptr<TlsStream>> stream;
  beast::flat_buffer buffer;
  // The parser's body buffer (kReadChunk bytes), made on the first body read and kept: on the
  // coroutine's frame it made every exchange allocate (and free) a frame of 17 KB.
  std::unique_ptr<char[]> body_chunk;
  // The parser of the answer being read (one exchange at a time; here, not on the coroutine's
  // frame, which it would take over the allocators' 1 KiB fast path).
  std::optional<AnswerParser> parser;
  std::string content_type;  // the answer's, written by its parser
  // The answer of the exchange under way, moved out when it ends (here, not in a coroutine's
  // frame: it would take HttpBackend::send's over the allocators' 1 KiB fast path).
  BackendReply reply;
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

  // The outcome of one exchange on one connection; the answer itself is written into the
  // connection's BackendReply (moved once, out of send, not out of every coroutine it passes
  // through).
  struct Exchange {
    bool answered = false;       // false: retry on a fresh connection
    std::optional<Error> error;  // answered, and the exchange failed
    bool reusable = false;
  };
  static Exchange ended(Error error, bool reusable = false) {
    return Exchange{true, std::move(error), reusable};
  }
  // An exchange's result: the error, or the answer moved out of its connection, which goes back
  // to the pool when the exchange left it reusable (and was not cancelled) and is closed
  // otherwise.
  Result<BackendReply> finish(std::unique_ptr<Connection> conn, Exchange& ex,
                              const CancelSignal& cancel) {
    Result<BackendReply> out = ex.error ? Result<BackendReply>(std::move(*ex.error))
                                        : Result<BackendReply>(std::move(conn->reply));
    if (ex.reusable && !cancel.cancelled()) {
      give_back(std::move(conn));
    } else {
      conn->close();
    }
    return out;
  }
  static Error client_gone() { return Error::make(ErrorCode::kCancelled, "client went away"); }

  // An I/O error of the exchange as the client sees it (the deadline that fired, or why).
  Error io_error(const beast::error_code& ec, const char* during, const CancelSignal& cancel,
                 Clock::time_point total) const {
    if (cancel.cancelled()) return Error::make(ErrorCode::kCancelled, "client went away");
    if (ec == beast::error::timeout) {
      const bool total_hit = Clock::now() >= total;
      return backend_error(
          ErrorCode::kTimeout, cfg.name,
          total_hit ? "did not finish within total_ms=" + std::to_string(cfg.timeouts.total_ms)
                    : std::string("timed out ") + during);
    }
    return backend_error(ErrorCode::kBackendError, cfg.name,
                         std::string("failed ") + during + ": " + ec.message());
  }

  // The request head, written by hand (a serializer costs more than the rest of the call).
  std::string request_head(const BackendRequest& request) const {
    std::string head;
    head.reserve(256 + host_header.size() + cfg.path_prefix.size());
    head.append("POST ");
    head.append(cfg.path_prefix);
    head.append(endpoint_path(request.endpoint));
    head.append(" HTTP/1.1\r\nHost: ");
    head.append(host_header);
    head.append("\r\nUser-Agent: ferry\r\nContent-Type: application/json\r\nAccept: ");
    head.append(request.stream ? "text/event-stream" : "application/json");
    if (cfg.api_key) {
      head.append("\r\nAuthorization: Bearer ");
      head.append(*cfg.api_key);
      if (request.endpoint == Endpoint::kMessages) {
        head.append("\r\nx-api-key: ");  // Anthropic's own header for the same key
        head.append(*cfg.api_key);
      }
    }
    for (const auto& [name, value] : request.headers) {
      head.append("\r\n");
      head.append(name);
      head.append(": ");
      head.append(value);
    }
    if (!request.request_id.empty()) {
      head.append("\r\nx-request-id: ");
      head.append(request.request_id);
    }
    head.append("\r\nContent-Length: ");
    head.append(std::to_string(request.body.size()));
    head.append("\r\n\r\n");
    return head;
  }

  using Parser = AnswerParser;

  // What reading one response body gathers: the whole body (an answer or an error status), or
  // a stream relayed as it comes.
  struct Body {
    std::unique_ptr<StreamRelay> relay;  // streaming (on the heap: it would double the frame)
    size_t limit = 0;                    // not streaming: the most bytes kept
    std::string bytes;                   // not streaming
    std::optional<Error> stream_error;   // a stream that broke after events may have gone out
  };

  // The request head is prebuilt text; head and body go out in one gathered write.
  template <typename Stream>
  asio::awaitable<beast::error_code> write_request(Stream& stream, Connection& conn,
                                                   const std::string& head, std::string_view body,
                                                   Clock::time_point total) {
    conn.tcp().expires_at(step_deadline(cfg.timeouts.idle_ms, total));
    std::array<asio::const_buffer, 2> out_bufs{asio::buffer(head), asio::buffer(body)};
    beast::error_code wec;
    const size_t written = write_now(stream, out_bufs, wec);
    if (!wec && written < asio::buffer_size(out_bufs)) {
      beast::buffers_suffix<std::array<asio::const_buffer, 2>> rest(out_bufs);
      rest.consume(written);
      auto [aec, an] = co_await asio::async_write(stream, rest, kAwait);
      wec = aec;
    }
    co_return wec;
  }

  // One request and its answer on one connection: the request written, the head read, the body
  // relayed (a stream) or gathered, the answer checked. A reused connection that turns out
  // closed before any answer byte ends with an empty result (retry on a fresh one).
  // (Two coroutines, the answer's parser in the Connection: g++ gives every named local of a
  // coroutine, and every temporary inside a co_await, a slot of its own in the frame, and a
  // frame over 1 KiB misses the allocators' fast path.)
  template <typename Stream>
  asio::awaitable<Exchange> exchange(Stream& stream, Connection& conn, const std::string& head,
                                     const BackendRequest& request, StreamSink* sink,
                                     CancelSignal& cancel, bool reused, Clock::time_point total,
                                     Clock::time_point started) {
    if (beast::error_code wec = co_await write_request(stream, conn, head, request.body, total)) {
      co_return not_sent(wec, reused, cancel, total);
    }
    Parser& parser = conn.parser.emplace(conn.content_type);
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
    // The head: what is buffered parsed first, the socket read only while the parser needs more
    // (here rather than Beast's composed async_read_header, whose layers of operations cost
    // ~2k instructions an answer).
    beast::error_code hec;
    bool nothing_read = conn.buffer.size() == 0;
    for (;;) {
      parse_buffered(parser, conn.buffer, hec);
      if (hec || parser.is_header_done()) break;
      auto [rec, n] =
          co_await stream.async_read_some(conn.buffer.prepare(read_room(conn.buffer)), kAwait);
      conn.buffer.commit(n);
      if (n > 0) nothing_read = false;
      if (rec) {
        hec = read_ended(parser, rec);
        break;
      }
    }
    if (hec) co_return no_head(hec, nothing_read && conn.buffer.size() == 0, reused, cancel, total);
    co_return co_await take_answer(stream, conn, parser, request, sink, cancel, total, started);
  }

  // The exchange's end when the request could not be written.
  Exchange not_sent(const beast::error_code& ec, bool reused, const CancelSignal& cancel,
                    Clock::time_point total) const {
    if (reused && !cancel.cancelled()) return Exchange{};  // stale keep-alive: retry fresh
    return ended(io_error(ec, "sending the request", cancel, total));
  }

  // The exchange's end when no response head came.
  Exchange no_head(const beast::error_code& ec, bool nothing_read, bool reused,
                   const CancelSignal& cancel, Clock::time_point total) const {
    if (reused && nothing_read && ec != beast::error::timeout && !cancel.cancelled()) {
      return Exchange{};  // the server closed the idle connection as we reused it
    }
    return ended(io_error(ec, "waiting for the response", cancel, total));
  }

  // The body after the head, relayed or gathered, and the answer checked, into conn.reply.
  template <typename Stream>
  asio::awaitable<Exchange> take_answer(Stream& stream, Connection& conn, Parser& parser,
                                        const BackendRequest& request, StreamSink* sink,
                                        CancelSignal& cancel, Clock::time_point total,
                                        Clock::time_point started) {
    BackendReply& reply = conn.reply;
    reply = BackendReply{};  // the connection's last answer was moved out
    reply.first_byte_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count();
    reply.status = parser.status();
    // The name the client asked for, quoted once for every chunk's rename.
    const std::string reply_model =
        request.reply_model.empty() ? std::string() : quote_model(request.reply_model);
    Body body;
    // Why the exchange failed outright (an error, its connection not reusable): an Error, not an
    // Exchange, keeps this frame under 1 KiB.
    std::optional<Error> failed = start_body(parser, request, reply_model, reply, sink, body);
    if (!failed) co_await read_body(stream, conn, parser, body, sink, cancel, total, failed);
    if (failed) co_return ended(std::move(*failed));
    co_return settle(parser, body, reply, reply_model, request.endpoint);
  }

  // Sets `body` up for the answer whose head `parser` holds: a stream's relay, or a whole
  // body's limit. The error when a stream request was answered with something else.
  std::optional<Error> start_body(const Parser& parser, const BackendRequest& request,
                                  const std::string& reply_model, BackendReply& reply,
                                  StreamSink* sink, Body& body) const {
    const bool ok_status = reply.status >= 200 && reply.status < 300;
    if (!ok_status || !request.stream) {
      body.limit = ok_status ? kMaxResponseBytes : kMaxErrorBodyBytes;
      return std::nullopt;
    }
    std::string_view type = parser.content_type();
    if (type.find("text/event-stream") == std::string_view::npos) {
      return backend_error(
          ErrorCode::kBackendError, cfg.name,
          "answered a stream request with '" + std::string(type) + "' instead of an event stream");
    }
    body.relay = std::make_unique<StreamRelay>(
        StreamRelay{request, reply_model, reply, sink, SseParser(), {}, false});
    return std::nullopt;
  }

  // Reads the body after the head: parses what is buffered, reads from the socket only when the
  // parser needs more (Beast's composed read costs an event-loop turn per chunk piece even when
  // the bytes are here), and forwards a stream's events in one write before each read. Sets
  // `failed` when the exchange fails outright; leaves it empty when the body ended
  // (whole, too large for a stream, or a stream cut: body.stream_error).
  template <typename Stream>
  asio::awaitable<void> read_body(Stream& stream, Connection& conn, Parser& parser, Body& body,
                                  StreamSink* sink, const CancelSignal& cancel,
                                  Clock::time_point total, std::optional<Error>& failed) {
    if (!conn.body_chunk) conn.body_chunk = std::make_unique_for_overwrite<char[]>(kReadChunk);
    char* const buf = conn.body_chunk.get();
    AnswerParser::Room& room = parser.body();
    while (!parser.is_done()) {
      room = {buf, kReadChunk};
      beast::error_code rec;
      const bool need_read = parse_buffered(parser, conn.buffer, rec);
      if (!rec && need_read && room.size == kReadChunk && !parser.is_done()) {
        if (body.relay && !body.relay->to_client.empty() && !co_await flush(*body.relay, sink)) {
          failed = client_gone();
          co_return;
        }
        conn.tcp().expires_at(step_deadline(cfg.timeouts.idle_ms, total));
        auto [xec, xn] = co_await stream.async_read_some(conn.buffer.prepare(kReadChunk), kAwait);
        conn.buffer.commit(xn);
        if (!xec) continue;  // parse what came
        rec = read_ended(parser, xec);
      }
      if (rec && rec != http::error::end_of_stream) {
        if (!body.relay || cancel.cancelled()) {
          failed = io_error(rec, "reading the response", cancel, total);
          co_return;
        }
        const bool idle = rec == beast::error::timeout;
        body.stream_error =
            backend_error(idle ? ErrorCode::kTimeout : ErrorCode::kBackendError, cfg.name,
                          idle ? "stopped sending the stream (idle timeout)"
                               : "broke the stream: " + rec.message());
        break;
      }
      const std::string_view got(buf, kReadChunk - room.size);
      if (!body.relay) {
        if (body.bytes.size() + got.size() > body.limit) {
          failed =
              backend_error(ErrorCode::kBackendError, cfg.name,
                            "sent a response larger than " + std::to_string(body.limit) + " bytes");
          co_return;
        }
        body.bytes.append(got);
      } else if (!got.empty()) {
        if (auto broken = body.relay->feed(got)) {
          body.stream_error = backend_error(ErrorCode::kBackendError, cfg.name, *broken);
          break;
        }
      }
      if (rec == http::error::end_of_stream) break;
    }
    // The events parsed since the last write (before the end, or before a broken event).
    if (body.relay && !body.relay->to_client.empty() && !co_await flush(*body.relay, sink)) {
      failed = client_gone();
      co_return;
    }
  }

  // How many bytes the next head read asks for: the buffer's free room, at least 512 (Beast's
  // read_size).
  static size_t read_room(const beast::flat_buffer& buffer) {
    return std::clamp<size_t>(buffer.capacity() - buffer.size(), 512, 64 * 1024);
  }

  // Parses what is buffered: the head, or body bytes into the parser's body buffer. True when
  // the parser needs more bytes from the socket; `ec` says why parsing stopped otherwise.
  static bool parse_buffered(Parser& parser, beast::flat_buffer& buffer, beast::error_code& ec) {
    if (buffer.size() == 0) return true;
    const size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more) {
      ec = {};
      return true;
    }
    if (ec == http::error::need_buffer) ec = {};
    return false;
  }

  // A read that failed: the server's close ends a body delimited by the close; anything else is
  // cut.
  static beast::error_code read_ended(Parser& parser, const beast::error_code& ec) {
    if (ec != asio::error::eof && ec != ssl::error::stream_truncated) return ec;
    beast::error_code rec;
    if (parser.got_some()) {
      parser.put_eof(rec);
    } else {
      rec = http::error::end_of_stream;
    }
    return rec;
  }

  static asio::awaitable<bool> flush(StreamRelay& relay, StreamSink* sink) {
    const bool sent = co_await sink->write(relay.to_client);
    relay.to_client.clear();
    co_return sent;
  }

  // The answer once the body is read: an error status explained, a stream that broke or ended
  // early, a whole answer checked (OpenAI JSON), its usage and finish reason taken, its model
  // renamed.
  Exchange settle(const Parser& parser, Body& body, BackendReply& reply,
                  const std::string& reply_model, Endpoint request_endpoint) const {
    const bool whole = parser.is_done() && parser.keep_alive();
    if (reply.status < 200 || reply.status >= 300) {
      return ended(upstream_status_error(cfg.name, static_cast<unsigned>(reply.status), body.bytes),
                   whole);
    }
    if (body.relay) {
      if (body.stream_error) return ended(*body.stream_error);
      if (!body.relay->saw_done && reply.finish_reason.empty()) {
        return ended(backend_error(ErrorCode::kBackendError, cfg.name,
                                   "closed the stream before it finished"));
      }
    } else {
      if (!parser.is_done()) {
        return ended(
            backend_error(ErrorCode::kBackendError, cfg.name, "sent a truncated response"));
      }
      const bool embeddings = request_endpoint == Endpoint::kEmbeddings;
      if (request_endpoint == Endpoint::kMessages) {
        auto j = nlohmann::json::parse(body.bytes, nullptr, /*allow_exceptions=*/false);
        if (!j.is_object() || !j.contains("content") || !j["content"].is_array()) {
          return ended(backend_error(ErrorCode::kBackendError, cfg.name,
                                     "answered with a body that is not a Messages answer (a JSON "
                                     "object with a 'content' array)"),
                       parser.keep_alive());
        }
        read_anthropic_usage(j.value("usage", nlohmann::json()), reply.usage);
        const auto& stop = j.value("stop_reason", nlohmann::json());
        if (stop.is_string()) reply.finish_reason = stop.get<std::string>();
      } else if (request_endpoint == Endpoint::kResponses) {
        auto j = nlohmann::json::parse(body.bytes, nullptr, /*allow_exceptions=*/false);
        if (!j.is_object() || !j.contains("output") || !j["output"].is_array()) {
          return ended(backend_error(ErrorCode::kBackendError, cfg.name,
                                     "answered with a body that is not a Responses answer (a JSON "
                                     "object with an 'output' array)"),
                       parser.keep_alive());
        }
        read_responses_usage(j.value("usage", nlohmann::json()), reply.usage);
        reply.finish_reason = responses_finish(j);
      } else if (embeddings) {
        if (!is_embeddings_answer(body.bytes)) {
          // The exchange was whole; only the answer is bad.
          return ended(backend_error(ErrorCode::kBackendError, cfg.name,
                                     "answered with a body that is not an OpenAI embeddings "
                                     "answer (valid JSON with a 'data' array)"),
                       parser.keep_alive());
        }
        if (auto u = find_usage(body.bytes)) reply.usage = *u;
        // Embeddings usage has prompt and total tokens only: no output.
        if (reply.usage.prompt_tokens >= 0 && reply.usage.completion_tokens == -1) {
          reply.usage.completion_tokens = 0;
        }
      } else {
        // Checked, and its usage and finish reason read, in one parse.
        if (!read_openai_answer(body.bytes, reply.usage, reply.finish_reason)) {
          return ended(backend_error(ErrorCode::kBackendError, cfg.name,
                                     "answered with a body that is not an OpenAI JSON answer "
                                     "(valid JSON with a 'choices' array)"),
                       parser.keep_alive());
        }
      }
      if (!reply_model.empty()) {
        if (auto renamed = with_quoted_model(body.bytes, reply_model)) {
          body.bytes = std::move(*renamed);
        }
      }
      reply.body = std::move(body.bytes);
    }
    return Exchange{true, std::nullopt, whole};
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

  const std::string head = im.request_head(request);

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
    // One co_await (and one slot for its result) whichever the stream is.
    Impl::Exchange ex = co_await std::visit(
        [&](auto& on) {
          return im.exchange(*on, *conn, head, request, sink, cancel, reused, total, started);
        },
        conn->stream);
    cancel.clear_hook();
    if (!ex.answered) {
      conn->close();
      continue;  // the reused connection was stale; try a fresh one
    }
    // (A plain function: a named result here would be one more slot in this frame.)
    co_return im.finish(std::move(conn), ex, cancel);
  }
  co_return backend_error(ErrorCode::kBackendError, im.cfg.name, "dropped the connection");
}

#pragma GCC diagnostic pop

}  // namespace ferry::adapters
