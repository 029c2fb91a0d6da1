// The Prometheus counters of routing (decisions, refusals, soft budgets) and of settling
// (fallbacks, prompt-count checks, rejected usage, shadows), shared by the planner and the
// recorder and rendered by Gateway::render_metrics. Thread-safe (CounterFamily).
#pragma once

#include "gateway/metrics.h"

namespace ferry::gateway {

struct RouteCounters {
  CounterFamily decisions{"ferry_route_decisions_total",
                          "Requests routed, by the rule that matched and the first target.",
                          {"rule", "target"}};
  CounterFamily fallbacks{"ferry_route_fallbacks_total",
                          "Hops that failed before anything was sent, so the next one was tried.",
                          {"from", "to"}};
  CounterFamily rejected{"ferry_route_rejected_total",
                         "Requests answered by routing without a backend, by reason.",
                         {"reason"}};
  CounterFamily prompt_mismatch{
      "ferry_prompt_tokens_mismatch_total",
      "Requests whose backend-reported prompt_tokens differ from ferry's own count.",
      {"model"}};
  CounterFamily prompt_checked{"ferry_prompt_tokens_checked_total",
                               "Requests whose prompt count could be compared with the backend's.",
                               {"model"}};
  CounterFamily usage_rejected{
      "ferry_usage_rejected_total",
      "Attempts whose backend usage was implausible or malformed, so ferry billed its own count.",
      {"model"}};
  CounterFamily soft_budget{
      "ferry_budget_soft_exceeded_total", "Requests admitted past a soft budget.", {"budget"}};
  CounterFamily shadows{"ferry_shadow_requests_total",
                        "Shadow copies sent, by target and outcome.",
                        {"target", "outcome"}};
};

}  // namespace ferry::gateway
