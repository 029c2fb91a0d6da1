// The Prometheus counters of routing (decisions, refusals, soft budgets) and of settling
// (fallbacks, prompt-count checks, rejected usage, shadows), shared by the planner and the
// recorder and rendered by Gateway::render_metrics. Thread-safe (CounterFamily).
#pragma once

#include "gateway/metrics.h"

namespace ferry::gateway {

struct RouteCounters {
  CounterFamily decisions{MetricSeries::kRouteDecisions};
  CounterFamily fallbacks{MetricSeries::kRouteFallbacks};
  CounterFamily rejected{MetricSeries::kRouteRejected};
  CounterFamily prompt_mismatch{MetricSeries::kPromptTokensMismatch};
  CounterFamily prompt_checked{MetricSeries::kPromptTokensChecked};
  CounterFamily usage_rejected{MetricSeries::kUsageRejected};
  CounterFamily soft_budget{MetricSeries::kBudgetSoftExceeded};
  CounterFamily shadows{MetricSeries::kShadowRequests};
};

}  // namespace ferry::gateway
