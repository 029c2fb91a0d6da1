// The request path's shared parts, built once at start-up from the config: the targets, the
// policy store, the ledger, the planner (decides where a request goes) and the recorder
// (settles what it came to), with their counters. The server owns one; so do the tests.
// Thread-safety: immutable after create() apart from its parts, each thread-safe; the
// control-plane calls of the store and the ledger block and belong on a worker thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "adapters/backend.h"
#include "common/error.h"
#include "config/config.h"
#include "gateway/planner.h"
#include "gateway/recorder.h"
#include "gateway/response_cache.h"
#include "gateway/response_cache_store.h"
#include "gateway/route_counters.h"
#include "gateway/targets.h"
#include "ledger/ledger.h"
#include "ledger/response_store.h"

namespace ferry::policies {
class PolicyStore;
}

namespace ferry::gateway {

class Gateway {
 public:
  // Loads every target's tokenizer and chat template, the policy (when configured) and the
  // ledger (when configured). `backends` maps backend names to the server's instances.
  static Result<std::unique_ptr<Gateway>> create(
      const config::Config& config, const std::map<std::string, adapters::Backend*>& backends);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  Planner& planner() { return *planner_; }
  Recorder& recorder() { return *recorder_; }
  ledger::Ledger* ledger() { return ledger_.get(); }
  // Stored OpenAI Responses, in the ledger's file; null without a ledger.
  ledger::ResponseStore* responses() { return responses_.get(); }
  policies::PolicyStore* policy_store() { return store_.get(); }
  // The response cache (policy `cache`): kept across policy reloads.
  ResponseCache& response_cache() { return response_cache_; }
  // Its persistent tier (config cache.persist); null when off. A kept answer goes to both.
  PersistentCache* persistent_cache() { return persistent_cache_.get(); }
  const config::Config& config() const { return config_; }
  Target* find_target(std::string_view model_name) {
    return gateway::find_target(targets_, model_name);
  }

  // Prometheus text for routing, breakers, the policy, budgets and the ledger.
  void render_metrics(std::string& out) const;

 private:
  explicit Gateway(const config::Config& config);
  void render_breaker_metrics(std::string& out) const;  // ferry_backend_healthy, _opened_total
  void render_ledger_metrics(std::string& out) const;   // the ledger's and budgets' series
  Status load_targets(const std::map<std::string, adapters::Backend*>& backends);
  Status open_policy();
  Status open_ledger();
  Status open_persistent_cache();  // cache.persist: the file opened, its entries loaded

  const config::Config& config_;
  TargetMap targets_;
  std::unique_ptr<policies::PolicyStore> store_;
  std::unique_ptr<ledger::Ledger> ledger_;
  std::unique_ptr<ledger::ResponseStore> responses_;
  RouteCounters counters_;
  ResponseCache response_cache_;
  std::unique_ptr<PersistentCache> persistent_cache_;
  int64_t started_unix_us_ = 0;
  std::unique_ptr<Recorder> recorder_;
  std::unique_ptr<Planner> planner_;
};

}  // namespace ferry::gateway
