#include "gateway/gateway.h"

#include <chrono>
#include <vector>

#include "common/clock.h"
#include "common/yaml_util.h"
#include "gateway/prompt_count.h"
#include "ledger/budgets.h"
#include "ledger/pg_store.h"
#include "ledger/prices.h"
#include "policies/store.h"

namespace ferry::gateway {

Result<std::unique_ptr<Gateway>> Gateway::create(
    const config::Config& config, const std::map<std::string, adapters::Backend*>& backends) {
  std::unique_ptr<Gateway> g(new Gateway(config));
  if (auto st = g->load_targets(backends); !st) return st.error();
  if (auto st = g->open_policy(); !st) return st.error();
  if (auto st = g->open_ledger(); !st) return st.error();
  if (auto st = g->open_persistent_cache(); !st) return st.error();
  g->recorder_ = std::make_unique<Recorder>(g->ledger_.get(), g->counters_);
  g->planner_ = std::make_unique<Planner>(config, g->targets_, g->store_.get(), g->ledger_.get(),
                                          *g->recorder_, g->counters_, g->started_unix_us_,
                                          &g->response_cache_);
  return g;
}

Gateway::Gateway(const config::Config& config)
    : config_(config),
      response_cache_(config.cache.max_bytes),
      started_unix_us_(unix_micros_now()) {}

Gateway::~Gateway() {
  if (store_) store_->stop_watching();
}

Status Gateway::load_targets(const std::map<std::string, adapters::Backend*>& backends) {
  const config::Config& config = config_;
  auto counters = load_prompt_counters(config);
  if (!counters) return std::move(counters).error();
  for (const auto& m : config.models) {
    auto t = std::make_unique<Target>();
    t->model = &m;
    t->backend_config = config.find_backend(m.backend);
    auto it = backends.find(m.backend);
    if (it == backends.end() || it->second == nullptr) {
      return Error::make(ErrorCode::kInternal,
                         "model '" + m.name + "': backend '" + m.backend + "' was not started");
    }
    t->backend = it->second;
    if (!t->backend_config->local) t->breaker = std::make_unique<adapters::CircuitBreaker>();
    const PromptCounter& counter = counters->at(m.name);
    t->tokenizer = counter.tokenizer;
    t->chat = counter.chat;
    targets_.emplace(m.name, std::move(t));
  }

  return {};
}

Status Gateway::open_persistent_cache() {
  if (config_.cache.persist_path.empty()) return {};
  auto tier = PersistentCache::open(config_.cache.persist_path, config_.cache.persist_max_bytes);
  if (!tier) return tier.error();
  auto loaded = (*tier)->load_into(response_cache_, response_cache_now_ms());
  if (!loaded) {
    return Error::make(ErrorCode::kUnavailable, "cache.persist: " + config_.cache.persist_path +
                                                    ": " + loaded.error().message);
  }
  persistent_cache_ = std::move(tier).value();
  return {};
}

Status Gateway::open_policy() {
  if (config_.policy) {
    policies::LoadOptions options;
    std::vector<std::string> names;
    for (const auto& m : config_.models) names.push_back(m.name);
    options.known_targets = names;
    auto store = policies::PolicyStore::open(config_.policy->file, options);
    if (!store) return store.error();
    store_ = std::move(*store);
    if (config_.policy->watch) {
      auto st = store_->watch(std::chrono::milliseconds(config_.policy->debounce_ms));
      if (!st) return st.error();
    }
  }

  return {};
}

Status Gateway::open_ledger() {
  if (config_.ledger.present()) {
    try {
      auto lc = ledger::parse_ledger_config(config_.ledger.node, config_.source);
      // A file path is relative to the config file; a PostgreSQL URL is taken as it is.
      const bool on_postgres = lc.postgres.has_value();
      if (!on_postgres) lc.path = config_.resolve_path(lc.path);
      ledger::PriceCatalog prices;
      if (config_.prices.present())
        prices = ledger::PriceCatalog::from_yaml(config_.prices.node, config_.source);
      std::vector<ledger::BudgetDef> budgets;
      if (config_.budgets.present())
        budgets = ledger::parse_budgets(config_.budgets.node, config_.source);
      std::vector<ledger::RateLimitDef> rate_limits;
      if (config_.rate_limits.present())
        rate_limits = ledger::parse_rate_limits(config_.rate_limits.node, config_.source);
      const std::string path = lc.path;
      const ledger::ResponseStoreConfig kept{lc.responses_keep_days};
      auto opened = ledger::Ledger::open(std::move(lc), std::move(prices), std::move(budgets),
                                         std::move(rate_limits));
      if (!opened) return opened.error();
      ledger_ = std::move(*opened);
      // Stored Responses share the ledger's database, a file or PostgreSQL (there: every
      // instance continues every conversation; ledger/response_store.h).
      auto responses = ledger::ResponseStore::open(path, kept);
      if (!responses) return responses.error();
      responses_ = std::move(*responses);
    } catch (const yaml::YamlError& e) {
      return Error::make(ErrorCode::kInvalidRequest, e.what());
    } catch (const std::exception& e) {
      return Error::make(ErrorCode::kInvalidRequest, config_.source + ": " + e.what());
    }
  } else if (config_.prices.present() || config_.budgets.present() ||
             config_.rate_limits.present()) {
    return Error::make(
        ErrorCode::kInvalidRequest,
        config_.source + ": 'prices', 'budgets' and 'rate_limits' need a 'ledger' section");
  }
  return {};
}

// The series in the order /metrics shows them (names, help and types from gateway/metrics.h).
void Gateway::render_metrics(std::string& out) const {
  counters_.decisions.render(out);
  counters_.fallbacks.render(out);
  counters_.rejected.render(out);
  counters_.prompt_checked.render(out);
  counters_.prompt_mismatch.render(out);
  counters_.usage_rejected.render(out);
  counters_.soft_budget.render(out);
  counters_.shadows.render(out);
  render_breaker_metrics(out);
  if (store_) {
    auto st = store_->status();
    append_family_head(out, MetricSeries::kPolicyReloads);
    append_sample(out, MetricSeries::kPolicyReloads, {"applied"},
                  static_cast<int64_t>(st.reloads_applied));
    append_sample(out, MetricSeries::kPolicyReloads, {"rejected"},
                  static_cast<int64_t>(st.reloads_rejected));
    if (st.policy) {
      append_family_head(out, MetricSeries::kPolicyInfo);
      append_sample(out, MetricSeries::kPolicyInfo, {st.policy->short_version()}, int64_t{1});
    }
  }
  if (ledger_) render_ledger_metrics(out);
}

void Gateway::render_breaker_metrics(std::string& out) const {
  bool any_breaker = false;
  for (const auto& [name, t] : targets_) {
    if (!t->breaker) continue;
    if (!any_breaker) append_family_head(out, MetricSeries::kBackendHealthy);
    any_breaker = true;
    append_sample(out, MetricSeries::kBackendHealthy, {name}, t->breaker->healthy() ? 1 : 0);
  }
  if (!any_breaker) return;
  append_family_head(out, MetricSeries::kBreakerOpened);
  for (const auto& [name, t] : targets_) {
    if (!t->breaker) continue;
    append_sample(out, MetricSeries::kBreakerOpened, {name},
                  static_cast<int64_t>(t->breaker->snapshot().opened_total));
  }
}

void Gateway::render_ledger_metrics(std::string& out) const {
  auto s = ledger_->stats();
  auto counter = [&out](MetricSeries id, int64_t value) {
    append_family_head(out, id);
    append_sample(out, id, {}, value);
  };
  counter(MetricSeries::kLedgerRowsCommitted, s.rows_committed);
  counter(MetricSeries::kLedgerBatches, s.batches);
  counter(MetricSeries::kLedgerPending, s.pending);
  counter(MetricSeries::kLedgerWriteFailures, s.write_failures);
  counter(MetricSeries::kLedgerHealthy, s.healthy ? 1 : 0);
  counter(MetricSeries::kLedgerStoreDown, s.store_down ? 1 : 0);
  counter(MetricSeries::kLedgerJournalRows, s.journal_pending);
  counter(MetricSeries::kLedgerLogRows, s.log_rows);
  counter(MetricSeries::kBudgetHardRefusals, s.hard_refusals);
  counter(MetricSeries::kRateLimitRefusals, s.rate_refusals);
  auto budgets = ledger_->budgets();
  if (budgets.empty()) return;
  append_family_head(out, MetricSeries::kBudgetSpentMicros);
  for (const auto& b : budgets) {
    append_sample(out, MetricSeries::kBudgetSpentMicros, {b.def->name}, b.spent.micros());
  }
}

}  // namespace ferry::gateway
