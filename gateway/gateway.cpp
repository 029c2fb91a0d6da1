#include "gateway/gateway.h"

#include <chrono>
#include <vector>

#include "common/clock.h"
#include "common/yaml_util.h"
#include "gateway/prompt_count.h"
#include "ledger/budgets.h"
#include "ledger/prices.h"
#include "policies/store.h"

namespace ferry::gateway {

Result<std::unique_ptr<Gateway>> Gateway::create(
    const config::Config& config, const std::map<std::string, adapters::Backend*>& backends) {
  std::unique_ptr<Gateway> g(new Gateway(config));
  if (auto st = g->load_targets(backends); !st) return st.error();
  if (auto st = g->open_policy(); !st) return st.error();
  if (auto st = g->open_ledger(); !st) return st.error();
  g->recorder_ = std::make_unique<Recorder>(g->ledger_.get(), g->counters_);
  g->planner_ = std::make_unique<Planner>(config, g->targets_, g->store_.get(), g->ledger_.get(),
                                          *g->recorder_, g->counters_, g->started_unix_us_);
  return g;
}

Gateway::Gateway(const config::Config& config)
    : config_(config), started_unix_us_(unix_micros_now()) {}

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
      lc.path = config_.resolve_path(lc.path);
      ledger::PriceCatalog prices;
      if (config_.prices.present())
        prices = ledger::PriceCatalog::from_yaml(config_.prices.node, config_.source);
      std::vector<ledger::BudgetDef> budgets;
      if (config_.budgets.present())
        budgets = ledger::parse_budgets(config_.budgets.node, config_.source);
      auto opened = ledger::Ledger::open(std::move(lc), std::move(prices), std::move(budgets));
      if (!opened) return opened.error();
      ledger_ = std::move(*opened);
    } catch (const yaml::YamlError& e) {
      return Error::make(ErrorCode::kInvalidRequest, e.what());
    } catch (const std::exception& e) {
      return Error::make(ErrorCode::kInvalidRequest, config_.source + ": " + e.what());
    }
  } else if (config_.prices.present() || config_.budgets.present()) {
    return Error::make(ErrorCode::kInvalidRequest,
                       config_.source + ": 'prices' and 'budgets' need a 'ledger' section");
  }
  return {};
}

// One list of series in the order /metrics shows them, each with its HELP and TYPE: long, and
// read top to bottom.
void Gateway::render_metrics(std::string& out) const {
  counters_.decisions.render(out);
  counters_.fallbacks.render(out);
  counters_.rejected.render(out);
  counters_.prompt_checked.render(out);
  counters_.prompt_mismatch.render(out);
  counters_.usage_rejected.render(out);
  counters_.soft_budget.render(out);
  counters_.shadows.render(out);
  bool any_breaker = false;
  for (const auto& [name, t] : targets_) {
    if (!t->breaker) continue;
    if (!any_breaker) {
      out +=
          "# HELP ferry_backend_healthy 1 when the target's circuit breaker lets requests "
          "through.\n# TYPE ferry_backend_healthy gauge\n";
      any_breaker = true;
    }
    out += "ferry_backend_healthy{target=\"" + name + "\"} " + (t->breaker->healthy() ? "1" : "0") +
           "\n";
  }
  if (any_breaker) {
    out +=
        "# HELP ferry_breaker_opened_total Times a target's circuit breaker opened.\n"
        "# TYPE ferry_breaker_opened_total counter\n";
    for (const auto& [name, t] : targets_) {
      if (!t->breaker) continue;
      out += "ferry_breaker_opened_total{target=\"" + name + "\"} " +
             std::to_string(t->breaker->snapshot().opened_total) + "\n";
    }
  }
  if (store_) {
    auto st = store_->status();
    out +=
        "# HELP ferry_policy_reloads_total Policy reload attempts by outcome.\n"
        "# TYPE ferry_policy_reloads_total counter\n";
    out += "ferry_policy_reloads_total{outcome=\"applied\"} " + std::to_string(st.reloads_applied) +
           "\n";
    out += "ferry_policy_reloads_total{outcome=\"rejected\"} " +
           std::to_string(st.reloads_rejected) + "\n";
    if (st.policy) {
      out +=
          "# HELP ferry_policy_info The active policy version.\n# TYPE ferry_policy_info gauge\n"
          "ferry_policy_info{version=\"" +
          st.policy->short_version() + "\"} 1\n";
    }
  }
  if (ledger_) {
    auto s = ledger_->stats();
    out +=
        "# HELP ferry_ledger_rows_committed_total Ledger rows made durable.\n"
        "# TYPE ferry_ledger_rows_committed_total counter\n"
        "ferry_ledger_rows_committed_total " +
        std::to_string(s.rows_committed) +
        "\n"
        "# HELP ferry_ledger_pending Rows admitted or queued, not yet durable.\n"
        "# TYPE ferry_ledger_pending gauge\nferry_ledger_pending " +
        std::to_string(s.pending) +
        "\n"
        "# HELP ferry_ledger_write_failures_total Group commits that failed (then retried).\n"
        "# TYPE ferry_ledger_write_failures_total counter\n"
        "ferry_ledger_write_failures_total " +
        std::to_string(s.write_failures) +
        "\n"
        "# HELP ferry_ledger_healthy 1 when the ledger can write.\n# TYPE ferry_ledger_healthy "
        "gauge\n"
        "ferry_ledger_healthy " +
        (s.healthy ? "1" : "0") +
        "\n"
        "# HELP ferry_budget_hard_refusals_total Requests refused by a hard budget.\n"
        "# TYPE ferry_budget_hard_refusals_total counter\n"
        "ferry_budget_hard_refusals_total " +
        std::to_string(s.hard_refusals) + "\n";
    auto budgets = ledger_->budgets();
    if (!budgets.empty()) {
      out +=
          "# HELP ferry_budget_spent_micros Settled cost in the budget's current period, "
          "micro-units.\n# TYPE ferry_budget_spent_micros gauge\n";
      for (const auto& b : budgets) {
        out += "ferry_budget_spent_micros{budget=\"" + b.def->name + "\"} " +
               std::to_string(b.spent.micros()) + "\n";
      }
    }
  }
}

}  // namespace ferry::gateway
