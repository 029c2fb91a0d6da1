// A pool of replicas of one OpenAI-compatible server (`replicas:` of a backend): each request
// goes to the healthy replica with the fewest outstanding requests (ties: not one that failed in
// the last 2 s, then the lower latency EWMA), or, with affinity, to the replica its task id or
// prompt prefix hashes to (rendezvous hashing, so a dead replica moves only its own keys). Each
// replica has its own circuit breaker; a replica that refuses or fails before anything reached the
// client is retried on the next one. Thread-safe: one instance serves every I/O thread (counters
// are atomics, each breaker locks itself).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adapters/backend.h"
#include "adapters/health.h"
#include "adapters/http_backend.h"
#include "config/config.h"

namespace ferry::adapters {

// One replica's figures for /metrics.
struct ReplicaSnapshot {
  std::string url;
  int64_t outstanding = 0;
  int64_t requests = 0;  // sent to it
  int64_t failures = 0;  // of those, failed (connection, 5xx, timeout)
  int64_t latency_ewma_us = 0;
  bool healthy = true;  // its breaker lets requests through
};

class ReplicaPool final : public Backend {
 public:
  // `config.replicas` has at least two entries. Throws as HttpBackend does (start-up only).
  explicit ReplicaPool(config::BackendConfig config, BreakerOptions breaker = {});
  ~ReplicaPool() override;

  const std::string& name() const override { return name_; }
  boost::asio::awaitable<Result<BackendReply>> send(const BackendRequest& request, StreamSink* sink,
                                                    CancelSignal& cancel) override;

  // The replica `request` would go to first (affinity, then least outstanding), skipping those
  // in `tried` and those whose breaker is open; -1 when none is left. Tests and send().
  int pick(const BackendRequest& request, const std::vector<bool>& tried) const;
  std::vector<ReplicaSnapshot> snapshot() const;
  // Every replica's HTTP backend (their connection pools: shutdown, connection metrics).
  std::vector<HttpBackend*> http_backends() const;

 private:
  struct Replica;
  std::string name_;
  config::Affinity affinity_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

// The affinity key of a request: its task id (`task`), or a hash of its first messages' roles
// and text, up to 4 KiB (`prefix`, so requests sharing a system prompt and opening turns share
// a replica). 0: no key (least outstanding decides).
uint64_t affinity_key(const BackendRequest& request, config::Affinity affinity);

}  // namespace ferry::adapters
