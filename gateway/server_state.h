// What every connection of the server shares: the config, TLS context, auth, metrics, the
// access log, the backends, the gateway (planner, recorder, ledger), the endpoint table, the worker
// pool, the shadows in flight and the draining flag. Built once by Server (server.cpp) and alive
// until it ends. Thread-safety: read from every I/O thread at once; each member is immutable after
// start-up or thread-safe itself (atomics, Metrics, AccessLog, Gateway, ShadowTracker, the pool).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "gateway/access_log.h"
#include "gateway/auth.h"
#include "gateway/endpoints.h"
#include "gateway/gateway.h"
#include "gateway/metrics.h"
#include "gateway/net.h"
#include "gateway/request_record.h"
#include "gateway/shadows.h"

namespace ferry::adapters {
class Backend;
class HttpBackend;
class LocalBackend;
class ReplicaPool;
}  // namespace ferry::adapters

namespace ferry::gateway {

struct ServerState {
  // Loads TLS files, opens the backends and the gateway (planner, recorder, ledger). Throws
  // std::runtime_error on start-up errors.
  explicit ServerState(config::Config config);
  ~ServerState();

  // The request's metrics and its access-log line.
  void finish_record(const RequestRecord& record);

  config::Config cfg;
  std::optional<ssl::context> tls;
  Authenticator auth;
  Metrics metrics;
  AccessLog access_log;
  std::map<std::string, std::unique_ptr<adapters::Backend>, std::less<>> backends;
  std::vector<adapters::HttpBackend*> http_backends;  // a replica pool's too, one per replica
  std::vector<const adapters::ReplicaPool*> replica_pools;
  std::vector<const adapters::LocalBackend*> local_backends;
  std::unique_ptr<Gateway> gateway;
  std::unique_ptr<Endpoints> endpoints;
  // Blocking control-plane work (policy reloads, admin calls, ledger reports and exports):
  // never on an I/O thread.
  asio::thread_pool workers{1};
  ShadowTracker shadows;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
};

}  // namespace ferry::gateway
