#include "gateway/server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "adapters/http_backend.h"
#include "adapters/local_backend.h"
#include "adapters/timed_socket.h"
#include "common/clock.h"
#include "common/ids.h"
#include "gateway/access_log.h"
#include "gateway/admin.h"
#include "gateway/auth.h"
#include "gateway/errors.h"
#include "gateway/http_wire.h"
#include "gateway/metrics.h"
#include "gateway/openai_request.h"
#include "gateway/request_record.h"
#include "gateway/router.h"
#include "policies/store.h"

namespace ferry::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);

using Request = http::request<http::string_body>;

// A response that is ready to write in one piece.
struct Reply {
  http::status status = http::status::ok;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool head_only = false;  // HEAD: the head of the GET answer (its Content-Length), no body
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

// The routing headers ferry stores in the ledger: UTF-8, and the task as long as
// metadata.task_id may be.
constexpr size_t kMaxTaskBytes = 256;

Status check_ferry_headers(std::string_view task, std::string_view tags) {
  if (task.size() > kMaxTaskBytes) {
    return Error::make(
        ErrorCode::kInvalidRequest,
        "the x-ferry-task header must be at most " + std::to_string(kMaxTaskBytes) + " bytes",
        "x-ferry-task", "invalid_value");
  }
  for (auto [name, value] : {std::pair{"x-ferry-task", task}, std::pair{"x-ferry-tags", tags}}) {
    if (!is_valid_utf8(value)) {
      return Error::make(ErrorCode::kInvalidRequest,
                         std::string("the ") + name + " header is not valid UTF-8", name,
                         "invalid_value");
    }
  }
  return {};
}

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

void set_header(std::vector<std::pair<std::string, std::string>>& headers, std::string_view name,
                std::string value) {
  for (auto& [k, v] : headers) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::string(name), std::move(value));
}

// Wakes one coroutine, on its own executor, from any thread. Shared so that a late notify()
// from a worker after the coroutine finished is harmless.
class Notifier : public std::enable_shared_from_this<Notifier> {
 public:
  explicit Notifier(const asio::any_io_executor& ex) : timer_(ex, Clock::time_point::max()) {}
  void notify() {
    asio::post(timer_.get_executor(), [self = shared_from_this()] {
      ++self->signals_;
      self->timer_.cancel();
    });
  }
  // Returns once notify() has been called (since the last wait) and its post has run.
  asio::awaitable<void> wait() {
    while (signals_ == 0) co_await timer_.async_wait(kAwait);
    signals_ = 0;
  }

 private:
  asio::steady_timer timer_;
  int signals_ = 0;  // touched only on the timer's executor
};

// CSV export chunks handed from the worker thread to the connection, with back-pressure.
struct ChunkPipe {
  std::mutex mu;
  std::condition_variable space;
  std::deque<std::string> chunks;  // guarded by mu
  bool done = false;               // guarded by mu
  bool cancelled = false;          // guarded by mu
  Status status;                   // guarded by mu; set with done
  std::shared_ptr<Notifier> notifier;
};

// True when the peer has closed (or reset) a socket that select()ed readable.
// The client-disconnect watch of one backend call (see proxy()).
struct ClientWatch {
  bool done = false;
  adapters::CancelSignal* cancel = nullptr;
  char byte = 0;
};

// On a plain connection, the read of the client's next bytes starts as soon as a request goes
// to the backend. While the backend works it notices a hang-up (end of stream or reset: the
// upstream request is cancelled); afterwards it is the next request's read. So the connection
// never cancels a watch (a posted completion, an extra event-loop turn) and never reads twice.
// It costs no system call to start: the request read left the socket drained, so the reactor
// queues it without trying. Pipelined bytes it reads end the hang-up watch (we cannot tell
// then); they are handed to the request parser like any other. The bytes live here, not in the
// connection's buffer, so a read still pending when the connection ends writes nothing freed.
// It starts only while the connection's buffer has room for all it can bring (back-pressure on
// a client that pipelines), and every later read of the connection waits for it first, so bytes
// are never taken out of order. An end of stream that comes while requests are still buffered
// is a half-close: the client has sent everything and waits for its answers, which it gets.
struct EarlyRead {
  std::array<char, 4096> bytes{};
  bool pending = false;  // the read is under way
  bool fired = false;    // it completed; its result (ec, n, bytes) is not consumed yet
  beast::error_code ec;
  size_t n = 0;
  bool behind = false;  // bytes of later requests were buffered when the read started
  adapters::CancelSignal* cancel = nullptr;  // set while a backend call runs

  // The idle connection's coroutine, resumed when the read completes. (Type-erased by hand:
  // Boost 1.81's any_completion_handler recurses when moved from an lvalue of itself.)
  struct Waiter {
    virtual ~Waiter() = default;
    virtual void resume(beast::error_code ec, size_t n) = 0;
  };
  template <typename Handler>
  struct WaiterFor final : Waiter {
    explicit WaiterFor(Handler h) : handler(std::move(h)) {}
    void resume(beast::error_code ec, size_t n) override { std::move(handler)(ec, n); }
    Handler handler;
  };
  std::unique_ptr<Waiter> waiter;

  bool ended() const { return fired && (ec || n == 0); }
  bool half_closed() const { return ended() && ec == asio::error::eof && behind; }
  bool hung_up() const { return ended() && !half_closed(); }

  // Moves the completed read's bytes into `buffer` (they fit: the read started only with room
  // for them). False when the read ended the input instead; it then stays fired, so no read
  // starts again.
  bool take(beast::flat_buffer& into) {
    if (!fired || ended()) return false;
    auto room = into.prepare(n);
    std::memcpy(room.data(), bytes.data(), n);
    into.commit(n);
    fired = false;
    return true;
  }
};

// The early read's completion handler.
class EarlyReadDone {
 public:
  explicit EarlyReadDone(std::shared_ptr<EarlyRead> e) : e_(std::move(e)) {}
  EarlyReadDone(EarlyReadDone&& other) noexcept : e_(std::move(other.e_)) {}
  EarlyReadDone& operator=(EarlyReadDone&&) = delete;
  // Destroyed without being called: the event loop is being torn down with the read pending.
  // The waiting coroutine's frame is owned by `waiter`, and it owns the EarlyRead in turn:
  // drop it here, or neither would ever be freed.
  ~EarlyReadDone() {
    if (e_) e_->waiter.reset();
  }

  void operator()(const beast::error_code& ec, size_t n) {
    std::shared_ptr<EarlyRead> e = std::move(e_);
    e->pending = false;
    e->fired = true;
    e->ec = ec;
    e->n = n;
    if (e->waiter) {
      std::unique_ptr<EarlyRead::Waiter> waiter = std::move(e->waiter);
      waiter->resume(ec, n);
    } else if (e->cancel != nullptr && e->hung_up()) {
      e->cancel->cancel();
    }
  }

 private:
  std::shared_ptr<EarlyRead> e_;
};

}  // namespace

struct Server::Impl {
  config::Config cfg;
  // One event loop per I/O thread: a connection lives on one loop for its whole life, so its
  // handlers never need a strand or another thread's wake-up. ioc is the first loop (signals,
  // accepting, shutdown); more_iocs are the others.
  asio::io_context ioc;
  std::vector<std::unique_ptr<asio::io_context>> more_iocs;
  size_t next_ioc = 0;
  std::optional<ssl::context> tls;
  std::optional<tcp::acceptor> acceptor;
  asio::signal_set signals{ioc, SIGTERM, SIGINT};
  Authenticator auth;
  Metrics metrics;
  AccessLog access_log;
  std::map<std::string, std::unique_ptr<adapters::Backend>, std::less<>> backends;
  std::vector<adapters::HttpBackend*> http_backends;
  std::vector<const adapters::LocalBackend*> local_backends;
  std::unique_ptr<Router> router;
  // Blocking control-plane work (policy reloads, ledger reports and exports): never on an
  // I/O thread.
  asio::thread_pool workers{1};
  asio::signal_set hup{ioc, SIGHUP};
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};

  explicit Impl(config::Config c)
      : cfg(std::move(c)), ioc(1), auth(cfg.auth), access_log(cfg.log.access_log) {
    for (int i = 1; i < cfg.server.io_threads; ++i) {
      more_iocs.push_back(std::make_unique<asio::io_context>(1));
    }
    if (cfg.server.tls) {
      tls.emplace(ssl::context::tls_server);
      tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::single_dh_use);
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
      if (b.local) {
        // Loads the model and starts its scheduler thread (the engine never runs on I/O threads).
        auto local = adapters::LocalBackend::open(b);
        if (!local) throw std::runtime_error("backend '" + b.name + "': " + local.error().message);
        local_backends.push_back(local->get());
        backends.emplace(b.name, std::move(*local));
        continue;
      }
      auto http = std::make_unique<adapters::HttpBackend>(b);
      http_backends.push_back(http.get());
      backends.emplace(b.name, std::move(http));
    }
    std::map<std::string, adapters::Backend*> by_name;
    for (const auto& [name, b] : backends) by_name.emplace(name, b.get());
    auto r = Router::create(cfg, by_name);
    if (!r) throw std::runtime_error(r.error().message);
    router = std::move(*r);
    if (auto* store = router->policy_store()) {
      store->set_listener([this](const policies::ReloadOutcome& o) {
        if (o.unchanged) return;
        JsonLine j;
        j.utc_micros("ts", unix_micros_now())
            .str("event", o.applied ? "policy_reloaded" : "policy_rejected")
            .str("trigger", o.trigger)
            .str("version", o.version);
        std::string errors;
        for (const auto& d : o.errors) errors += (errors.empty() ? "" : "\n") + d.to_string();
        if (!errors.empty()) j.str("errors", errors);
        if (access_log.enabled()) access_log.write(j.finish());
      });
    }
    // Pool reuse and log drops are counted where they happen; /metrics reads them here.
    metrics.add_collector([this](std::string& out) {
      out +=
          "# HELP ferry_backend_connections_total Upstream connections by backend, opened "
          "or reused from the keep-alive pool.\n"
          "# TYPE ferry_backend_connections_total counter\n";
      for (const auto* b : http_backends) {
        const auto& name = b->name();
        const auto& st = b->stats();
        out += "ferry_backend_connections_total{backend=\"" + name + "\",how=\"opened\"} " +
               std::to_string(st.connections_opened.load()) + "\n";
        out += "ferry_backend_connections_total{backend=\"" + name + "\",how=\"reused\"} " +
               std::to_string(st.connections_reused.load()) + "\n";
      }
      out +=
          "# HELP ferry_access_log_dropped_total Access-log lines dropped because the "
          "writer fell behind.\n# TYPE ferry_access_log_dropped_total counter\n"
          "ferry_access_log_dropped_total " +
          std::to_string(access_log.dropped()) + "\n";
      router->render_metrics(out);
      if (!local_backends.empty()) adapters::LocalBackend::render_metrics(local_backends, out);
    });
  }

  ~Impl() {
    workers.join();
    // Pooled upstream sockets belong to the loops: close them while the loops exist, then let
    // each loop destroy what it still holds while everything its handlers use is alive.
    for (auto* b : http_backends) b->close_idle();
    more_iocs.clear();
  }

  // ---- responses -------------------------------------------------------------------------

  template <typename Stream>
  asio::awaitable<bool> write_reply(Stream& stream, const Reply& reply, const std::string& rid,
                                    bool keep_alive) {
    // The head is written by hand and goes out with the body in one gathered write.
    std::string head;
    head.reserve(256);
    ResponseHead h;
    h.status = static_cast<int>(reply.status);
    h.content_type = reply.content_type;
    h.request_id = rid;
    h.headers = &reply.headers;
    h.content_length = reply.body.size();
    h.keep_alive = keep_alive;
    append_response_head(head, h);
    std::array<asio::const_buffer, 2> bufs{
        asio::buffer(head),
        asio::buffer(reply.body.data(), reply.head_only ? 0 : reply.body.size())};
    beast::get_lowest_layer(stream).expires_after(
        std::chrono::milliseconds(cfg.limits.write_timeout_ms));
    beast::error_code now_ec;
    size_t done = adapters::write_now(stream, bufs, now_ec);
    if (now_ec) co_return false;
    if (done == asio::buffer_size(bufs)) co_return true;
    beast::buffers_suffix<std::array<asio::const_buffer, 2>> rest(bufs);
    rest.consume(done);
    auto [ec, n] = co_await asio::async_write(stream, rest, kAwait);
    co_return !ec;
  }

  // Streams SSE to the client as chunked transfer encoding. Headers go out with the first write.
  template <typename Stream>
  class SseSink final : public adapters::StreamSink {
   public:
    SseSink(Impl& server, Stream& stream, const std::string& rid, RequestRecord& record,
            const std::vector<std::pair<std::string, std::string>>* headers = nullptr)
        : server_(server), stream_(stream), rid_(rid), record_(record), headers_(headers) {}

    bool started() const { return started_; }
    bool broken() const { return broken_; }
    // Every byte sent since the last take, for counting the answer when usage is missing.
    std::string take_captured() { return std::exchange(captured_, {}); }

    void set_content_type(std::string type) { content_type_ = std::move(type); }

    asio::awaitable<bool> write(std::string_view bytes) override {
      co_return co_await send(bytes, false);
    }

    // Ends the stream: [DONE] after success, an error event after a failure; the tail and the
    // last chunk go out in one write.
    asio::awaitable<void> finish(const std::optional<Error>& error) {
      if (broken_) co_return;
      std::string tail = error ? "data: " + error_json(*error) + "\n\n" : "data: [DONE]\n\n";
      co_await send(tail, true);
    }

    // Ends the chunked body without an SSE tail.
    asio::awaitable<void> finish_plain() {
      if (broken_) co_return;
      std::string_view nothing;
      co_await send(nothing, true);
    }

   private:
    // One gathered write: the response head (first call only), `bytes` as one chunk (when not
    // empty: an empty chunk would end the body) and, when `last`, the last chunk.
    asio::awaitable<bool> send(std::string_view bytes, bool last) {
      if (broken_) co_return false;
      framing_.clear();
      if (!started_) {
        started_ = true;
        record_.ttft_us = micros_between(record_.started, Clock::now());
        ResponseHead h;
        h.status = 200;
        h.content_type = content_type_;
        h.no_cache = true;
        h.request_id = rid_;
        h.headers = headers_;
        h.keep_alive = !server_.draining.load();
        append_response_head(framing_, h);
      }
      if (!bytes.empty()) {
        captured_.append(bytes);
        append_chunk_prefix(framing_, bytes.size());
      } else if (framing_.empty() && !last) {
        co_return true;  // nothing to send
      }
      std::array<asio::const_buffer, 3> bufs{
          asio::buffer(framing_), asio::buffer(bytes.data(), bytes.size()),
          asio::buffer(kChunkEnd.data(), bytes.empty() ? 0 : kChunkEnd.size())};
      if (last) {
        // The last chunk follows the chunk end; both are constant text.
        tail_.assign(bytes.empty() ? "" : kChunkEnd);
        tail_.append(kLastChunk);
        bufs[2] = asio::buffer(tail_);
      }
      beast::error_code now_ec;
      size_t done = adapters::write_now(stream_, bufs, now_ec);
      if (now_ec) co_return fail();
      if (done == asio::buffer_size(bufs)) co_return true;
      beast::buffers_suffix<std::array<asio::const_buffer, 3>> rest(bufs);
      rest.consume(done);
      arm();
      auto [ec, n] = co_await asio::async_write(stream_, rest, kAwait);
      if (ec) co_return fail();
      co_return true;
    }

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
    const std::vector<std::pair<std::string, std::string>>* headers_;
    std::string captured_;
    std::string framing_;  // head and chunk-size line of the write in progress
    std::string tail_;     // chunk end and last chunk of the final write
    std::string content_type_ = "text/event-stream";
    bool started_ = false;
    bool broken_ = false;
  };

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

  // ---- the API ---------------------------------------------------------------------------

  // What to do with a request once routed: proxy it along its plan, or run an admin job.
  struct Job {
    enum class Kind { kNone, kProxy, kAdmin, kExport } kind = Kind::kNone;
    RequestContext ctx;
    std::optional<Plan> plan;
    AdminRoute admin = AdminRoute::kNone;
    std::string query;
    ledger::ReportFilter filter;
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
    Reply r = error_reply(e);
    for (auto& h : retry_headers(e)) r.headers.push_back(std::move(h));
    return r;
  }

  // Routes a request without any I/O. Returns the reply for everything that needs no backend;
  // otherwise fills `plan` and returns nullopt. (Kept apart from the coroutine on purpose:
  // plain code, and no temporaries inside co_await expressions, which g++ 12 miscompiles.)
  std::optional<Reply> route(const Request& req, RequestRecord& rec, Job& job) {
    std::string_view target = req.target();
    std::string_view query;
    if (auto q = target.find('?'); q != std::string_view::npos) {
      query = target.substr(q + 1);
      target = target.substr(0, q);
    }
    rec.path = std::string(target);
    rec.method = std::string(req.method_string());
    if (!is_clean_target(req.target())) {
      return fail(rec, Error::make(ErrorCode::kInvalidRequest,
                                   "the request target holds bytes that are not printable ASCII; "
                                   "percent-encode them",
                                   "", "invalid_target"));
    }
    // HEAD is answered as GET (without the body: see handle()) where GET needs no backend.
    bool is_get = req.method() == http::verb::get || req.method() == http::verb::head;
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
    if (draining.load()) {
      Error e = Error::make(ErrorCode::kUnavailable, "ferry is shutting down");
      e.retry_after_s = 1;
      return fail(rec, e);
    }
    bool chat = target == "/v1/chat/completions";
    bool completions = target == "/v1/completions";
    bool models = target == "/v1/models";
    bool one_model = target.starts_with("/v1/models/");
    bool method_ok = false;
    AdminRoute admin = admin_route(req.method_string(), target, method_ok);
    if (admin != AdminRoute::kNone) {
      if (!method_ok) {
        Reply r = fail(rec, Error::make(ErrorCode::kInvalidRequest,
                                        "Method " + rec.method + " is not allowed on " + rec.path,
                                        "", "method_not_allowed"));
        r.status = http::status::method_not_allowed;
        r.headers.emplace_back("allow", admin_allowed_method(admin));
        return r;
      }
      auto principal = auth.authenticate(req[http::field::authorization]);
      if (!principal) return fail(rec, principal.error());
      rec.key_id = principal->key_id;
      if (auto ok = authorize_admin(admin, *principal); !ok) return fail(rec, ok.error());
      job.admin = admin;
      job.query = std::string(query);
      job.ctx.request_id = rec.request_id;
      job.ctx.principal = std::move(*principal);
      if (admin == AdminRoute::kLedgerExport || admin == AdminRoute::kLedgerAttempts) {
        if (router->ledger() == nullptr) {
          return fail(rec, Error::make(ErrorCode::kNotFound,
                                       "no ledger is configured (config key 'ledger')"));
        }
        auto filter = export_filter(query);
        if (!filter) return fail(rec, filter.error());
        job.filter = std::move(*filter);
        job.kind = Job::Kind::kExport;
      } else {
        job.kind = Job::Kind::kAdmin;
      }
      return std::nullopt;
    }
    if (!chat && !completions && !models && !one_model) {
      return fail(rec, Error::make(ErrorCode::kNotFound,
                                   "Unknown request URL: " + rec.method + " " + rec.path, "",
                                   "unknown_url"));
    }
    if (((models || one_model) && !is_get) || ((chat || completions) && !is_post)) {
      Reply r = fail(rec, Error::make(ErrorCode::kInvalidRequest,
                                      "Method " + rec.method + " is not allowed on " + rec.path, "",
                                      "method_not_allowed"));
      r.status = http::status::method_not_allowed;
      r.headers.emplace_back("allow", chat || completions ? "POST" : "GET");
      return r;
    }
    auto principal = auth.authenticate(req[http::field::authorization]);
    if (!principal) return fail(rec, principal.error());
    rec.key_id = principal->key_id;

    if (models) return text_reply(http::status::ok, "application/json", router->models_json());
    if (one_model) {
      std::string id(target.substr(std::string_view("/v1/models/").size()));
      auto m = router->model_json(id);
      if (!m) return fail(rec, m.error());
      return text_reply(http::status::ok, "application/json", std::move(*m));
    }

    auto endpoint = chat ? adapters::Endpoint::kChatCompletions : adapters::Endpoint::kCompletions;
    auto parsed = parse_request(endpoint, std::move(req.body()));
    if (!parsed) return fail(rec, parsed.error());
    rec.model = parsed->model;
    rec.stream = parsed->stream;
    job.ctx.request_id = rec.request_id;
    job.ctx.principal = std::move(*principal);
    if (auto ok = check_ferry_headers(req["x-ferry-task"], req["x-ferry-tags"]); !ok) {
      return fail(rec, ok.error());
    }
    job.ctx.task_header = std::string(req["x-ferry-task"]);
    job.ctx.tags_header = std::string(req["x-ferry-tags"]);
    job.ctx.started_us = rec.started_unix_us;
    auto planned = router->plan(job.ctx, *parsed);
    if (!planned) return fail(rec, planned.error());
    rec.rule = planned->rule_id;
    if (planned->refusal) {
      Reply r = fail(rec, *planned->refusal);
      for (const auto& h : planned->headers) r.headers.push_back(h);
      return r;
    }
    job.plan = std::move(*planned);
    job.kind = Job::Kind::kProxy;
    return std::nullopt;
  }

  // Handles one request. Returns whether the connection may be kept alive.
  template <typename Stream>
  asio::awaitable<bool> handle(Stream& stream, Request& req, RequestRecord& rec,
                               std::shared_ptr<EarlyRead>& early,
                               const beast::flat_buffer& buffer) {
    bool keep_alive = req.keep_alive() && !draining.load();
    Job job;
    std::optional<Reply> direct;
    try {
      direct = route(req, rec, job);
    } catch (const std::exception& e) {
      // A defect, not the client's fault: answer it and keep serving.
      direct =
          fail(rec, Error::make(ErrorCode::kInternal, std::string("internal error: ") + e.what()));
    }
    if (direct) {
      rec.status = static_cast<int>(direct->status);
      // Every answer to HEAD is a direct one (HEAD is refused where GET is not served), and
      // none has a body.
      direct->head_only = req.method() == http::verb::head;
      bool ok = co_await write_reply(stream, *direct, rec.request_id, keep_alive);
      co_return ok&& keep_alive;
    }
    if (job.kind == Job::Kind::kAdmin)
      co_return co_await run_admin_job(stream, job, req, rec, keep_alive);
    if (job.kind == Job::Kind::kExport) co_return co_await run_export(stream, job, rec, keep_alive);
    co_return co_await proxy(stream, job, rec, keep_alive, early, buffer);
  }

  // Runs `fn` on the worker thread and resumes here with its result; an exception `fn` throws
  // comes back as an internal error (it would end the process on the worker thread).
  template <typename T>
  asio::awaitable<Result<T>> offload(std::function<T()> fn) {
    auto notifier = std::make_shared<Notifier>(co_await asio::this_coro::executor);
    auto result = std::make_shared<std::optional<Result<T>>>();
    asio::post(workers, [notifier, result, fn = std::move(fn)] {
      try {
        *result = fn();
      } catch (const std::exception& e) {
        *result = Error::make(ErrorCode::kInternal, std::string("internal error: ") + e.what());
      }
      notifier->notify();
    });
    co_await notifier->wait();
    co_return std::move(**result);
  }

  template <typename Stream>
  asio::awaitable<bool> run_admin_job(Stream& stream, Job& job, Request& req, RequestRecord& rec,
                                      bool keep_alive) {
    std::string body = std::move(req.body());
    std::function<AdminReply()> fn = [this, &job, body = std::move(body)] {
      return run_admin(*router, job.admin, job.ctx.principal, job.query, body, job.ctx.request_id);
    };
    Result<AdminReply> done = co_await offload<AdminReply>(std::move(fn));
    Reply r;
    if (done) {
      r.status = static_cast<http::status>(done->status);
      r.content_type = std::move(done->content_type);
      r.body = std::move(done->body);
    } else {
      r = fail(rec, done.error());
    }
    rec.status = static_cast<int>(r.status);
    bool ok = co_await write_reply(stream, r, rec.request_id, keep_alive);
    co_return ok&& keep_alive;
  }

  // On the worker thread: the export's CSV chunks (rows, or `attempts`) into `pipe`, waiting
  // while it is full.
  Status export_rows(const std::string& path, const ledger::ReportFilter& filter, bool attempts,
                     ChunkPipe& pipe) {
    auto export_csv = attempts ? ledger::export_attempts_csv : ledger::export_csv;
    return export_csv(
        path, filter,
        [&](std::string_view chunk) {
          std::unique_lock lock(pipe.mu);
          while (pipe.chunks.size() >= 4 && !pipe.cancelled && !stopped.load()) {
            pipe.space.wait_for(lock, std::chrono::milliseconds(100));
          }
          if (pipe.cancelled || stopped.load()) return false;
          pipe.chunks.emplace_back(chunk);
          lock.unlock();
          pipe.notifier->notify();
          return true;
        },
        64 * 1024);
  }

  // GET /v1/ledger/export.csv: the worker reads the ledger in chunks; each chunk goes out as it
  // comes, with at most a few chunks in between (back-pressure from a slow client).
  template <typename Stream>
  asio::awaitable<bool> run_export(Stream& stream, Job& job, RequestRecord& rec, bool keep_alive) {
    auto pipe = std::make_shared<ChunkPipe>();
    pipe->notifier = std::make_shared<Notifier>(co_await asio::this_coro::executor);
    std::string path = router->ledger()->config().path;
    const bool attempts = job.admin == AdminRoute::kLedgerAttempts;
    asio::post(workers, [pipe, path, filter = job.filter, attempts, this] {
      Status st;
      try {
        st = export_rows(path, filter, attempts, *pipe);
      } catch (const std::exception& e) {
        st = Error::make(ErrorCode::kInternal, std::string("internal error: ") + e.what());
      }
      {
        std::lock_guard lock(pipe->mu);
        pipe->done = true;
        pipe->status = st;
      }
      pipe->notifier->notify();
    });
    std::vector<std::pair<std::string, std::string>> headers = {
        {"content-disposition", attempts ? "attachment; filename=\"ferry-attempts.csv\""
                                         : "attachment; filename=\"ferry-ledger.csv\""}};
    SseSink<Stream> sink(*this, stream, rec.request_id, rec, &headers);
    sink.set_content_type("text/csv; charset=utf-8");
    bool ok = true;
    for (;;) {
      std::deque<std::string> ready;
      bool done = false;
      Status status;
      {
        std::lock_guard lock(pipe->mu);
        ready.swap(pipe->chunks);
        done = pipe->done;
        status = pipe->status;
      }
      pipe->space.notify_all();
      for (auto& chunk : ready) {
        if (ok) ok = co_await sink.write(chunk);
      }
      if (!ok) {
        std::lock_guard lock(pipe->mu);
        pipe->cancelled = true;
      }
      if (done || !ok) {
        if (ok && !status) {
          // Headers may already be out: end the body short; the client sees a cut transfer.
          rec.error = status.error().message;
          if (!sink.started()) {
            Reply r = fail(rec, status.error());
            rec.status = static_cast<int>(r.status);
            bool w = co_await write_reply(stream, r, rec.request_id, keep_alive);
            co_return w&& keep_alive;
          }
          co_return false;
        }
        break;
      }
      co_await pipe->notifier->wait();
    }
    if (!ok) {
      pipe->space.notify_all();
      rec.status = 499;
      co_return false;
    }
    rec.status = 200;
    if (!sink.started()) {
      bool w = co_await sink.write("");
      if (!w) co_return false;
    }
    co_await sink.finish_plain();
    co_return !sink.broken() && keep_alive;
  }

  // Sends a shadow copy beside the real request; its answer is discarded, its cost recorded.
  asio::awaitable<void> run_shadow(RequestContext ctx, std::shared_ptr<Plan> plan) {
    PlannedHop& hop = *plan->shadow;
    AttemptOutcome o;
    o.hop = &hop;
    o.started_us = unix_micros_now();
    auto t0 = Clock::now();
    adapters::CancelSignal cancel;
    DiscardSink sink;
    bool streaming = hop.request.stream;
    auto result =
        co_await hop.target->backend->send(hop.request, streaming ? &sink : nullptr, cancel);
    o.ended_us = unix_micros_now();
    if (result) {
      o.ok = true;
      o.usage = result->usage;
      o.finish_reason = result->finish_reason;
      o.http_status = result->status;
      if (!usage_billable(*plan, o)) {
        extract_answer_text(
            streaming ? std::string_view(sink.captured) : std::string_view(result->body), streaming,
            o.generated_text, o.reasoning_text);
      }
      if (sink.started_) o.ttft_us = micros_between(t0, sink.first_byte);
    } else {
      o.error = result.error();
      o.http_status = http_status_for(result.error());
    }
    router->note_attempt(o);
    router->finish_shadow(ctx, *plan, o);
  }

  template <typename Stream>
  asio::awaitable<bool> proxy(Stream& stream, Job& job, RequestRecord& rec, bool keep_alive,
                              std::shared_ptr<EarlyRead>& early, const beast::flat_buffer& buffer) {
    Plan& plan = *job.plan;
    if (plan.shadow) {
      auto copy = std::make_shared<Plan>(Router::copy_for_shadow(plan));
      copy->shadow = plan.shadow;
      asio::co_spawn(co_await asio::this_coro::executor, run_shadow(job.ctx, copy), asio::detached);
    }
    std::vector<std::pair<std::string, std::string>> headers = plan.headers;
    SseSink<Stream> sink(*this, stream, rec.request_id, rec, &headers);
    std::vector<AttemptOutcome> attempts;
    attempts.reserve(plan.hops.size());
    Result<adapters::BackendReply> result = Error::make(ErrorCode::kInternal, "not run");
    bool streaming = plan.stream;
    for (size_t i = 0; i < plan.hops.size(); ++i) {
      PlannedHop& hop = plan.hops[i];
      if (hop.target->breaker && !hop.target->breaker->allow_request()) {
        result = Error::make(
            ErrorCode::kUnavailable,
            "target '" + hop.name + "' is unavailable (circuit open after " + "repeated failures)");
        plan.skipped.push_back(hop.name + ": circuit open");
        continue;
      }
      set_header(headers, "x-ferry-target", hop.name);
      set_header(headers, "x-ferry-attempts", std::to_string(attempts.size() + 1));
      AttemptOutcome& a = attempts.emplace_back();
      a.hop = &hop;
      a.started_us = unix_micros_now();
      auto t0 = Clock::now();
      rec.backend = hop.target->backend->name();
      rec.target = hop.name;
      adapters::CancelSignal cancel;
      if constexpr (std::is_same_v<Stream, adapters::TimedSocket>) {
        if (!early) early = std::make_shared<EarlyRead>();  // one per connection, reused
        bool room = buffer.size() + early->bytes.size() <= buffer.max_size();
        if (!early->pending && !early->fired && room) {
          early->pending = true;
          early->behind = buffer.size() != 0;
          stream.async_read_some_untimed(asio::buffer(early->bytes), EarlyReadDone(early));
        }
        if (early->hung_up()) cancel.cancel();  // gone during an earlier attempt
        early->cancel = &cancel;
        result =
            co_await hop.target->backend->send(hop.request, streaming ? &sink : nullptr, cancel);
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
        result =
            co_await hop.target->backend->send(hop.request, streaming ? &sink : nullptr, cancel);
        watch->done = true;
        beast::error_code cancel_ec;
        sock.cancel(cancel_ec);
      }
      a.ended_us = unix_micros_now();
      a.sent_to_client = sink.started();
      if (result) {
        a.ok = true;
        a.usage = result->usage;
        a.finish_reason = result->finish_reason;
        a.http_status = result->status;
        a.ttft_us = streaming ? rec.ttft_us : micros_between(t0, Clock::now());
        rec.backend_ttft_us = result->first_byte_us;
      } else {
        const Error& e = result.error();
        a.error = e;
        a.client_gone = e.code == ErrorCode::kCancelled || sink.broken();
        a.http_status = a.client_gone ? 499 : (sink.started() ? 200 : http_status_for(e));
        if (!a.client_gone && e.code != ErrorCode::kInvalidRequest) {
          metrics.backend_errors.inc({rec.backend, backend_error_kind(e.code)});
        }
      }
      if (!usage_billable(plan, a) && (a.ok || a.sent_to_client)) {
        std::string captured = sink.take_captured();
        std::string_view answer = captured;
        if (!streaming && result) answer = result->body;
        extract_answer_text(answer, streaming, a.generated_text, a.reasoning_text);
      }
      router->note_attempt(a);
      if (result || a.client_gone || sink.started() || !retryable(result.error())) break;
    }
    rec.attempts = static_cast<int>(attempts.size());
    if (!attempts.empty()) {
      auto it = plan.prompt_counts.find(attempts.back().hop->target);
      if (it != plan.prompt_counts.end()) rec.prompt_tokens_counted = it->second.tokens;
    }

    bool client_gone = !attempts.empty() && attempts.back().client_gone;
    // The ledger row is durable before the last byte of the answer leaves.
    Status durable;
    if (router->ledger() != nullptr && !client_gone) {
      auto notifier = std::make_shared<Notifier>(co_await asio::this_coro::executor);
      auto status = std::make_shared<Status>();
      ledger::DurableCallback cb = [notifier, status](const Status& st) {
        *status = st;
        notifier->notify();
      };
      rec.ledger_id = router->finish(job.ctx, plan, attempts, std::move(cb));
      co_await notifier->wait();
      durable = *status;
    } else {
      rec.ledger_id = router->finish(job.ctx, plan, attempts, nullptr);
    }

    if (!result) {
      const Error& e = result.error();
      if (client_gone) {
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
      for (const auto& h : headers) r.headers.push_back(h);
      rec.status = static_cast<int>(r.status);
      bool ok = co_await write_reply(stream, r, rec.request_id, keep_alive);
      co_return ok&& keep_alive;
    }
    adapters::BackendReply& reply = result.value();
    rec.usage = reply.usage;
    rec.finish_reason = reply.finish_reason;
    if (!durable) {
      Error e = Error::make(
          ErrorCode::kUnavailable,
          "the answer could not be recorded in the cost ledger: " + durable.error().message);
      rec.error = e.message;
      if (streaming) {
        rec.status = 200;
        std::optional<Error> cut = e;
        co_await sink.finish(cut);
        co_return false;
      }
      Reply r = fail(rec, e);
      rec.status = static_cast<int>(r.status);
      bool ok = co_await write_reply(stream, r, rec.request_id, keep_alive);
      co_return ok&& keep_alive;
    }
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
    r.headers = std::move(headers);
    rec.status = reply.status;
    bool ok = co_await write_reply(stream, r, rec.request_id, keep_alive);
    co_return ok&& keep_alive;
  }

  void finish_record(const RequestRecord& rec) {
    int64_t latency = micros_between(rec.started, Clock::now());
    if (rec.path.starts_with("/v1/")) {
      metrics.observe_request(rec.model, rec.backend, rec.status, latency,
                              rec.stream ? rec.ttft_us : -1);
    }
    if (access_log.enabled()) access_log.write(access_log_line(rec, latency).close());
  }

  // ---- connections -----------------------------------------------------------------------

  // Waits, under the deadline the caller set, for the early read to complete.
  template <typename Stream>
  asio::awaitable<void> wait_early(Stream& stream, EarlyRead& e) {
    if (!e.pending) co_return;
    auto& timed = beast::get_lowest_layer(stream);
    timed.count_as_pending(true);  // the deadline applies to the early read
    EarlyRead* ep = &e;
    auto wait = [ep](auto handler) {
      ep->waiter = std::make_unique<EarlyRead::WaiterFor<decltype(handler)>>(std::move(handler));
    };
    co_await asio::async_initiate<decltype(kAwait), void(beast::error_code, size_t)>(wait, kAwait);
    timed.count_as_pending(false);
  }

  // Feeds the buffered bytes to `parser` until `enough(parser)`, reading from the socket only
  // when the parser needs more; errors as Beast's reads report them. (Beast's composed reads
  // take an event-loop turn per call even when the whole request is already buffered.)
  // `early`: the connection's early read (plain connections), which comes before any other read.
  template <typename Stream, typename Parser, typename Enough>
  asio::awaitable<beast::error_code> read_until(Stream& stream, beast::flat_buffer& buffer,
                                                Parser& parser, const Enough& enough,
                                                EarlyRead* early) {
    for (;;) {
      if (buffer.size() != 0) {
        beast::error_code ec;
        size_t used = parser.put(buffer.data(), ec);
        buffer.consume(used);
        if (ec && ec != http::error::need_more) co_return ec;
        if (enough(parser)) co_return beast::error_code{};
        if (!ec && used != 0) continue;
      } else if (enough(parser)) {
        co_return beast::error_code{};
      }
      beast::error_code rec;
      if (early != nullptr && (early->pending || early->fired)) {
        co_await wait_early(stream, *early);
        if (early->take(buffer)) continue;
        rec = early->ec ? early->ec : beast::error_code(asio::error::eof);
      } else {
        size_t room = std::min<size_t>(64 * 1024, buffer.max_size() - buffer.size());
        if (room == 0) co_return beast::error_code(http::error::header_limit);
        auto [ec, n] = co_await stream.async_read_some(buffer.prepare(room), kAwait);
        buffer.commit(n);
        rec = ec;
      }
      if (rec == asio::error::eof || rec == ssl::error::stream_truncated) {
        // Nothing more will come: what the parser has, and has not taken, is all there is.
        if (!parser.got_some() && buffer.size() == 0) {
          co_return beast::error_code(http::error::end_of_stream);
        }
        beast::error_code ec;
        parser.put_eof(ec);
        if (ec) co_return ec;
        if (!enough(parser)) co_return beast::error_code(http::error::partial_message);
        continue;
      }
      if (rec) co_return rec;
    }
  }

  template <typename Stream>
  asio::awaitable<void> serve_connection(Stream& stream) {
    beast::flat_buffer buffer(static_cast<size_t>(cfg.limits.max_header_bytes) + 4096);
    const auto& lim = cfg.limits;
    std::shared_ptr<EarlyRead> early;  // plain connections: see EarlyRead
    for (;;) {
      // Idle: wait for the first byte of the next request.
      if (early && early->pending && buffer.size() == 0) {
        beast::get_lowest_layer(stream).expires_after(
            std::chrono::milliseconds(lim.idle_timeout_ms));
        co_await wait_early(stream, *early);
      }
      if (early && early->fired && !early->take(buffer) && buffer.size() == 0) {
        co_return;  // closed, reset or timed out, and every request sent before was answered
      }
      if (buffer.size() == 0) {
        beast::get_lowest_layer(stream).expires_after(
            std::chrono::milliseconds(lim.idle_timeout_ms));
        if constexpr (std::is_same_v<Stream, adapters::TimedSocket>) stream.expect_silence();
        auto [ec, n] = co_await stream.async_read_some(buffer.prepare(4096), kAwait);
        if (ec) co_return;
        buffer.commit(n);
      }
      // While draining, a request that reaches an open connection is still answered (with
      // `connection: close`): /readyz says 503, the API a 503 to retry elsewhere.
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<uint32_t>(lim.max_header_bytes));
      parser.body_limit(static_cast<uint64_t>(lim.max_body_bytes));
      beast::get_lowest_layer(stream).expires_after(
          std::chrono::milliseconds(lim.header_timeout_ms));
      auto header_done = [](const auto& p) { return p.is_header_done(); };
      beast::error_code hec = co_await read_until(stream, buffer, parser, header_done, early.get());
      RequestRecord rec;
      rec.started = Clock::now();
      rec.started_unix_us = unix_micros_now();
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
          Reply r = error_reply(Error::make(
              ErrorCode::kInvalidRequest,
              "request headers exceed " + std::to_string(lim.max_header_bytes) + " bytes", "",
              "headers_too_large"));
          r.status = http::status::request_header_fields_too_large;
          rec.error = "request headers too large";
          co_await write_reply(stream, r, rec.request_id, false);
          finish_record(rec);
          co_await linger_close(stream);
        } else if (hec != beast::error::timeout && hec != http::error::end_of_stream &&
                   hec != asio::error::eof && hec != asio::error::connection_reset &&
                   hec != asio::error::operation_aborted) {
          Reply r = error_reply(Error::make(ErrorCode::kInvalidRequest,
                                            "malformed HTTP request: " + hec.message(), "",
                                            "bad_request"));
          rec.status = 400;
          rec.error = "malformed HTTP request: " + hec.message();
          co_await write_reply(stream, r, rec.request_id, false);
          finish_record(rec);
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
        beast::get_lowest_layer(stream).expires_after(
            std::chrono::milliseconds(lim.write_timeout_ms));
        auto [cec, cn] = co_await http::async_write(stream, cont, kAwait);
        if (cec) co_return;
      }
      if (!parser.is_done()) {
        beast::get_lowest_layer(stream).expires_after(
            std::chrono::milliseconds(lim.body_timeout_ms));
        auto message_done = [](const auto& p) { return p.is_done(); };
        beast::error_code bec =
            co_await read_until(stream, buffer, parser, message_done, early.get());
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
      bool keep = false;
      try {
        keep = co_await handle(stream, req, rec, early, buffer);
      } catch (const std::exception& e) {
        // A defect: the answer may be half written, so the connection ends; the process and
        // the other connections carry on.
        rec.status = 500;
        rec.error = std::string("internal error: ") + e.what();
      }
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
    if constexpr (!std::is_same_v<Stream, adapters::TimedSocket>) {
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
      adapters::TimedSocket stream(std::move(socket));
      co_await serve_connection(stream);
      co_return;
    }
    beast::ssl_stream<adapters::TimedSocket> stream(std::move(socket), *tls);
    beast::get_lowest_layer(stream).expires_after(
        std::chrono::milliseconds(cfg.limits.header_timeout_ms));
    auto [hec] = co_await stream.async_handshake(ssl::stream_base::server, kAwait);
    if (hec) co_return;
    co_await serve_connection(stream);
  }

  asio::awaitable<void> refuse_connection(tcp::socket socket) {
    Reply r = error_reply(
        Error::make(ErrorCode::kUnavailable, "ferry is at its connection limit; retry shortly"));
    adapters::TimedSocket stream(std::move(socket));
    std::string rid = make_request_id();
    if (!tls) co_await write_reply(stream, r, rid, false);
    beast::error_code ec;
    stream.socket().close(ec);
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      // Accepted on this loop, then handed to the next loop in turn (an accept pending on
      // this loop never refers to another loop, which may be gone first at shutdown).
      auto [ec, accepted] = co_await acceptor->async_accept(kAwait);
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor->is_open()) co_return;
        // EMFILE and friends: back off briefly instead of spinning.
        asio::steady_timer pause(ioc, std::chrono::milliseconds(50));
        co_await pause.async_wait(kAwait);
        continue;
      }
      tcp::socket socket = move_to(pick_loop(), std::move(accepted));
      if (!socket.is_open()) continue;
      auto ex = socket.get_executor();
      if (metrics.connections.load() >= cfg.limits.max_connections) {
        metrics.rejected.inc({"connection_limit"});
        asio::co_spawn(ex, refuse_connection(std::move(socket)), asio::detached);
        continue;
      }
      asio::co_spawn(ex, run_session(std::move(socket)), asio::detached);
    }
  }

  // The same connection as a socket of `loop` (closed when the move fails).
  tcp::socket move_to(asio::io_context& loop, tcp::socket socket) {
    if (&loop == &ioc) return socket;
    beast::error_code ec;
    auto protocol = socket.local_endpoint(ec).protocol();
    tcp::socket moved(loop);
    if (ec) return moved;
    auto fd = socket.release(ec);
    if (ec) return moved;
    moved.assign(protocol, fd, ec);
    if (ec) ::close(fd);
    return moved;
  }

  // Round robin over the I/O threads' loops.
  asio::io_context& pick_loop() {
    size_t i = next_ioc++ % (more_iocs.size() + 1);
    return i == 0 ? ioc : *more_iocs[i - 1];
  }

  void stop_loops() {
    ioc.stop();
    for (auto& l : more_iocs) l->stop();
  }

  asio::awaitable<void> drain_then_stop() {
    auto deadline = Clock::now() + std::chrono::milliseconds(cfg.server.shutdown_grace_ms);
    asio::steady_timer tick(ioc);
    while (metrics.in_flight.load() > 0 && Clock::now() < deadline) {
      tick.expires_after(std::chrono::milliseconds(20));
      co_await tick.async_wait(kAwait);
    }
    for (auto* b : http_backends) b->close_idle();
    access_log.flush();
    stopped = true;
    stop_loops();
  }

  // SIGHUP re-reads the policy file on the worker thread (the old policy serves meanwhile).
  void arm_hup() {
    hup.async_wait([this](const beast::error_code& ec, int) {
      if (ec) return;
      if (auto* store = router->policy_store()) {
        asio::post(workers, [store] {
          try {
            store->reload("SIGHUP");
          } catch (const std::exception&) {
            // The old policy keeps serving; a defect must not end the process.
          }
        });
      }
      arm_hup();
    });
  }

  void begin_shutdown() {
    if (draining.exchange(true)) return;
    beast::error_code ec;
    if (acceptor) acceptor->close(ec);
    signals.cancel(ec);
    hup.cancel(ec);
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
  im.arm_hup();
  asio::co_spawn(im.ioc, im.accept_loop(), asio::detached);
  std::vector<std::thread> threads;
  for (auto& loop : im.more_iocs) {
    threads.emplace_back([l = loop.get()] {
      auto guard = asio::make_work_guard(*l);  // idle until stopped, even with no connection
      l->run();
    });
  }
  im.ioc.run();
  im.stop_loops();
  for (auto& t : threads) t.join();
  im.access_log.flush();
}

void Server::request_shutdown() {
  asio::post(impl_->ioc, [this] { impl_->begin_shutdown(); });
}

}  // namespace ferry::gateway
