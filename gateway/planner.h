// The planner decides where a parsed request goes, before any backend is called: the exact
// prompt count per candidate target (tokenizer + chat template), the routing facts, the
// policy decision, budget admission (the worst case reserved), and the planned hops with
// their upstream bodies. It also answers what only the policy knows: /v1/models and
// `POST /admin/route/explain`. No sockets: testable without a network.
// Thread-safety: plan() and the rest are called from any I/O thread at once. They never block
// on SQLite or files (the policy store swaps a pointer; admission is in memory).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "config/config.h"
#include "gateway/openai_request.h"
#include "gateway/plan.h"
#include "gateway/recorder.h"
#include "gateway/route_counters.h"
#include "gateway/targets.h"
#include "policies/facts.h"

namespace ferry::policies {
class PolicyStore;
}

namespace ferry::gateway {

class ResponseCache;

class Planner {
 public:
  // `store` and `ledger` may be null (no policy, no ledger configured).
  // `started_unix_us`: when the server began serving (the `created` of configured models).
  Planner(const config::Config& config, const TargetMap& targets, policies::PolicyStore* store,
          ledger::Ledger* ledger, Recorder& recorder, RouteCounters& counters,
          int64_t started_unix_us, ResponseCache* cache = nullptr);

  // Everything between a parsed request and the first backend call. An Error is the answer
  // before any policy ran (404 unknown model); refusals after it are in Plan::refusal (their
  // rows recorded).
  Result<Plan> plan(const RequestContext& ctx, const ParsedRequest& request);
  // The same, into `p` (a default Plan; on an Error, its state is unspecified): the request path
  // plans into its Job's Plan, which is 1.2 KB, instead of moving one there.
  Status plan_into(const RequestContext& ctx, const ParsedRequest& request, Plan& p);

  // POST /v1/messages/count_tokens: the prompt count of the target that would answer (routed as
  // plan() routes, without admission, a backend call or a ledger row).
  struct TokenCount {
    int64_t tokens = 0;
    bool exact = false;  // counted with the target's tokenizer and template (else an estimate)
    std::string target;
  };
  Result<TokenCount> count_tokens(const RequestContext& ctx, const ParsedRequest& request);

  // What a shadow copy needs of the plan (no admission: its cost is not the caller's).
  static Plan copy_for_shadow(const Plan& plan);

  // POST /admin/route/explain: facts, every clause, the decision. No backend is called.
  Result<std::string> explain(const RequestContext& ctx, const ParsedRequest& request);

  // GET /v1/models: the policy's aliases, or the configured models without a policy.
  std::string models_json() const;
  Result<std::string> model_json(std::string_view id) const;

 private:
  Target* find(std::string_view model_name) const { return find_target(targets_, model_name); }
  // The targets the request may go to: the policy's, or the model's own without a policy.
  // 404 when the model (or alias) is unknown.
  Status candidates(const ParsedRequest& request, const policies::Policy* policy,
                    std::vector<Target*>& out) const;
  // `shares`: keep the messages' shares with each chat count (the policy trims).
  void count_prompts(const ParsedRequest& request, std::span<Target* const> targets,
                     std::map<const Target*, PromptCount>& counts, bool shares = false) const;
  // One target's count of the request (`input`: the template input, made once when needed).
  PromptCount count_for(const ParsedRequest& request, const Target* t,
                        std::optional<nlohmann::ordered_json>& input, bool shares = false) const;
  // The rule's `trim`: the request with its oldest turns dropped to fit (into `trimmed`, the
  // counts of the route's targets recounted), the x-ferry-trimmed-tokens header. False when
  // it cannot fit (refused, its row recorded).
  bool trim(const RequestContext& ctx, const ParsedRequest& request, const policies::Decision& d,
            Plan& p, int64_t max_tokens, std::optional<ParsedRequest>& trimmed);
  Result<policies::Facts> build_facts(const RequestContext& ctx, const ParsedRequest& request,
                                      const policies::Policy* policy,
                                      std::map<const Target*, PromptCount>& counts,
                                      std::string& task_id, std::vector<std::string>& claimed_tags);
  // The policy's decision into `p` (hops, shadow, tags, overrides, max_tokens). False when it
  // refused the request (p.refusal set, its row recorded).
  Result<bool> decide(const RequestContext& ctx, const ParsedRequest& request,
                      const policies::Policy& policy, Plan& p, int64_t& max_tokens);
  // The rule's reasoning budget on each hop: the local engine's template switch, an HTTP
  // backend's reasoning_effort / chat_template_kwargs, or dropped (PlannedHop::reasoning says).
  void apply_reasoning(const policies::ReasoningRule& rule, Plan& p) const;
  // The response cache's key of the first hop (or why the request is not cacheable).
  void plan_cache(const RequestContext& ctx, const ParsedRequest& request,
                  const policies::CacheRule& rule, const BodyOverrides& overrides, Plan& p) const;
  // Without a policy: the model's own target, unless the prompt cannot fit its context.
  bool route_direct(const RequestContext& ctx, const ParsedRequest& request, Target* target,
                    Plan& p, int64_t max_tokens);
  // Budget and rate admission of the worst case over the route. False when refused.
  bool admit(const RequestContext& ctx, const ParsedRequest& request, Plan& p, int64_t max_tokens);
  // Refuses the request with `error` (counted by `reason`); `record`: its row too.
  void refuse(const RequestContext& ctx, Plan& p, Error error, const char* reason, bool record);
  int64_t models_created_s() const;  // /v1/models' `created`

  const config::Config& config_;
  const TargetMap& targets_;
  policies::PolicyStore* store_;
  ledger::Ledger* ledger_;
  Recorder& recorder_;
  RouteCounters& counters_;
  int64_t started_unix_us_ = 0;
  ResponseCache* cache_;  // null: no lookups at planning (a hit is then never planned)
};

}  // namespace ferry::gateway
