#include "gateway/server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/signal_set.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "adapters/http_backend.h"
#include "adapters/local_backend.h"
#include "adapters/replica_pool.h"
#include "common/clock.h"
#include "gateway/connection.h"
#include "gateway/net.h"
#include "gateway/server_state.h"
#include "policies/store.h"

namespace ferry::gateway {

namespace {

// After the grace, how long shutdown waits for the shadow copies it cancelled to record
// their outcome.
constexpr auto kShadowCancelWait = std::chrono::milliseconds(1000);

// The server's TLS context from server.tls (cert chain and key files).
void load_tls(const config::TlsConfig& cfg, std::optional<ssl::context>& tls) {
  tls.emplace(ssl::context::tls_server);
  tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  beast::error_code ec;
  tls->use_certificate_chain_file(cfg.cert_file, ec);
  if (ec) {
    throw std::runtime_error("server.tls.cert: cannot load '" + cfg.cert_file +
                             "': " + ec.message());
  }
  tls->use_private_key_file(cfg.key_file, ssl::context::pem, ec);
  if (ec) {
    throw std::runtime_error("server.tls.key: cannot load '" + cfg.key_file + "': " + ec.message());
  }
}

}  // namespace

// ---- the shared state -----------------------------------------------------------------------

ServerState::ServerState(config::Config c)
    : cfg(std::move(c)), auth(cfg.auth), access_log(cfg.log.access_log) {
  if (cfg.server.tls) load_tls(*cfg.server.tls, tls);
  for (const auto& b : cfg.backends) {
    if (b.local) {
      // Loads the model and starts its scheduler thread (the engine never runs on I/O threads).
      auto local = adapters::LocalBackend::open(b);
      if (!local) throw std::runtime_error("backend '" + b.name + "': " + local.error().message);
      local_backends.push_back(local->get());
      backends.emplace(b.name, std::move(*local));
      continue;
    }
    if (!b.replicas.empty()) {
      auto pool = std::make_unique<adapters::ReplicaPool>(b);
      for (auto* h : pool->http_backends()) http_backends.push_back(h);
      replica_pools.push_back(pool.get());
      backends.emplace(b.name, std::move(pool));
      continue;
    }
    auto http = std::make_unique<adapters::HttpBackend>(b);
    http_backends.push_back(http.get());
    backends.emplace(b.name, std::move(http));
  }
  std::map<std::string, adapters::Backend*> by_name;
  for (const auto& [name, b] : backends) by_name.emplace(name, b.get());
  auto g = Gateway::create(cfg, by_name);
  if (!g) throw std::runtime_error(g.error().message);
  gateway = std::move(*g);
  endpoints = std::make_unique<Endpoints>(auth, metrics, *gateway, draining);
  // The API keys kept in the ledger's database (ledger/keys.h), re-read every kKeyPollMs.
  if (gateway->ledger() != nullptr) {
    if (Status st = auth.watch_store(gateway->ledger()->config().path); !st) {
      throw std::runtime_error("reading the stored API keys: " + st.error().message);
    }
  }
  if (auto* store = gateway->policy_store()) {
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
    append_family_head(out, MetricSeries::kBackendConnections);
    for (const auto* b : http_backends) {
      const auto& st = b->stats();
      append_sample(out, MetricSeries::kBackendConnections, {b->name(), "opened"},
                    st.connections_opened.load());
      append_sample(out, MetricSeries::kBackendConnections, {b->name(), "reused"},
                    st.connections_reused.load());
    }
    append_replica_metrics(out, replica_pools);
    append_family_head(out, MetricSeries::kAccessLogDropped);
    append_sample(out, MetricSeries::kAccessLogDropped, {}, access_log.dropped());
    gateway->render_metrics(out);
    if (!local_backends.empty()) {
      std::vector<std::string_view> names;
      std::vector<engine::LoadSnapshot> loads;
      for (const auto* b : local_backends) {
        names.push_back(b->name());
        loads.push_back(b->load());
      }
      append_local_backend_metrics(out, names, loads);
    }
  });
}

ServerState::~ServerState() = default;

void ServerState::finish_record(const RequestRecord& rec) {
  int64_t latency = micros_between(rec.started, Clock::now());
  if (rec.path.starts_with("/v1/")) {
    metrics.observe_request(rec.model, rec.backend, rec.status, latency,
                            rec.stream ? rec.ttft_us : -1);
    if (!rec.api.empty()) {
      metrics.observe_api(rec.api, rec.status, rec.usage.prompt_tokens, rec.usage.completion_tokens,
                          rec.status >= 400 || !rec.error.empty());
    }
  }
  if (access_log.enabled()) access_log.write(access_log_line(rec, latency).close());
}

// ---- the listener, the loops, shutdown ------------------------------------------------------

struct Server::Impl {
  // One event loop per I/O thread: a connection lives on one loop for its whole life, so its
  // handlers never need a strand or another thread's wake-up. ioc is the first loop (signals,
  // accepting, shutdown); more_iocs are the others. Declared first: destroyed last.
  asio::io_context ioc{1};
  std::vector<std::unique_ptr<asio::io_context>> more_iocs;
  size_t next_ioc = 0;
  std::optional<tcp::acceptor> acceptor;
  asio::signal_set signals{ioc, SIGTERM, SIGINT};
  asio::signal_set hup{ioc, SIGHUP};
  ServerState state;

  explicit Impl(config::Config c) : state(std::move(c)) {
    for (int i = 1; i < state.cfg.server.io_threads; ++i) {
      more_iocs.push_back(std::make_unique<asio::io_context>(1));
    }
  }

  ~Impl() {
    state.workers.join();
    // A row or stored response still being written (a request cut off by the shutdown grace)
    // wakes a coroutine of a loop when it is done: its callback runs now, while the loops
    // (stopped) still exist, not from the destructor of the ledger after they are gone.
    if (auto* ledger = state.gateway->ledger()) ledger->stop_writing();
    if (auto* responses = state.gateway->responses()) responses->stop_writing();
    // Pooled upstream sockets belong to the loops: close them while the loops exist, then let
    // each loop destroy what it still holds while everything its handlers use is alive.
    for (auto* b : state.http_backends) b->close_idle();
    more_iocs.clear();
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
      if (state.metrics.connections.load() >= state.cfg.limits.max_connections) {
        state.metrics.rejected.inc({"connection_limit"});
        asio::co_spawn(ex, refuse_connection(state, std::move(socket)), asio::detached);
        continue;
      }
      asio::co_spawn(ex, run_session(state, std::move(socket)), asio::detached);
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

  // Waits (polling) until `done()` or `deadline`.
  asio::awaitable<void> wait_until(const std::function<bool()>& done, Clock::time_point deadline) {
    asio::steady_timer tick(ioc);
    while (!done() && Clock::now() < deadline) {
      tick.expires_after(std::chrono::milliseconds(20));
      co_await tick.async_wait(kAwait);
    }
  }

  // In-flight requests and shadow copies finish within the grace; the copies still running
  // then are cancelled, and get a moment to record their outcome.
  asio::awaitable<void> drain_then_stop() {
    auto deadline = Clock::now() + std::chrono::milliseconds(state.cfg.server.shutdown_grace_ms);
    std::function<bool()> idle = [this] {
      return state.metrics.in_flight.load() == 0 && state.shadows.in_flight() == 0;
    };
    co_await wait_until(idle, deadline);
    state.shadows.cancel_all();
    std::function<bool()> no_shadows = [this] { return state.shadows.in_flight() == 0; };
    auto cancel_deadline = Clock::now() + kShadowCancelWait;
    co_await wait_until(no_shadows, cancel_deadline);
    for (auto* b : state.http_backends) b->close_idle();
    state.access_log.flush();
    state.stopped = true;
    stop_loops();
  }

  // SIGHUP re-reads the policy file on the worker thread (the old policy serves meanwhile).
  void arm_hup() {
    hup.async_wait([this](const beast::error_code& ec, int) {
      if (ec) return;
      if (auto* store = state.gateway->policy_store()) {
        asio::post(state.workers, [store] {
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
    if (state.draining.exchange(true)) return;
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
  return std::string(im.state.tls ? "https://" : "http://") + host_text + ":" +
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
  im.state.access_log.flush();
}

void Server::request_shutdown() {
  asio::post(impl_->ioc, [this] { impl_->begin_shutdown(); });
}

}  // namespace ferry::gateway
