// The recorder settles what the planner decided: each try's outcome feeds the target's
// circuit breaker and recent stats (note_attempt), and the request's ledger row is built
// from its attempts (tokens by kind, as the backend reported them when plausible, else
// counted by ferry; cost; rule; policy version) and queued (settle). Refusals and shadow
// copies get their rows here too. No sockets: testable without a network.
// Thread-safety: every method is called from any I/O thread at once; none blocks (the ledger
// queues, the breakers and stats lock briefly).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "gateway/plan.h"
#include "gateway/response_cache.h"
#include "gateway/route_counters.h"
#include "ledger/ledger.h"

namespace ferry::gateway {

// Whether routing may try the next hop after this failure (nothing was sent to the client).
bool retryable(const Error& error);
// The next hop is tried after this error: retryable, or a request this target cannot serve
// that another may (code "unsupported_by_target": the local engine's tools on a template
// without them, a schema keyword it cannot enforce, ...).
bool falls_through(const Error& error);

// Why the attempt's usage cannot be billed as reported, or "" when it can or is absent: a
// member that is not an integer, a negative count, cached > prompt or reasoning > completion,
// a prompt far from ferry's own count (under a quarter of its exact count less
// kPromptTokensLowSlack; over twice it, or the body's bytes, plus kPromptTokensSlack), or
// completion tokens beyond max_tokens (or the context) times n, plus one per choice. The
// recorder then bills ferry's own counts and records the discrepancy.
constexpr int64_t kPromptTokensSlack = 16384;  // images and tool schemas the count cannot see
constexpr int64_t kPromptTokensLowSlack = 16;  // template differences on short prompts
std::string usage_problem(const Plan& plan, const AttemptOutcome& o);
// The backend's usage is present and plausible: bill it (else ferry counts the answer's text).
inline bool usage_billable(const Plan& plan, const AttemptOutcome& o) {
  return o.usage.reported() && usage_problem(plan, o).empty();
}

// Appends the answer's text (content) and reasoning text found in a non-streamed JSON body or
// in SSE bytes (`data: {...}` events), for counting when the backend reported no usage.
void extract_answer_text(std::string_view bytes, bool sse, std::string& text,
                         std::string& reasoning);

class Recorder {
 public:
  // `ledger` may be null (no ledger configured: nothing is recorded, counters still count).
  Recorder(ledger::Ledger* ledger, RouteCounters& counters)
      : ledger_(ledger), counters_(counters) {}

  // Called after each try: feeds the target's breaker and recent stats.
  void note_attempt(const AttemptOutcome& outcome);

  // Builds the ledger row from the attempts and queues it; `on_durable` runs once it is
  // committed (on the ledger's writer thread). Without a ledger, on_durable runs at once.
  // Returns the row id ("" without a ledger).
  std::string settle(const RequestContext& ctx, Plan& plan,
                     const std::vector<AttemptOutcome>& attempts,
                     ledger::DurableCallback on_durable);

  // An answer served from the response cache: its own row (no tokens, no cost; the tokens and
  // cost the answer had when it was made, as the avoided cost), queued as settle() does.
  std::string settle_cache_hit(const RequestContext& ctx, Plan& plan, const CachedAnswer& hit,
                               ledger::DurableCallback on_durable);

  // A request refused while planning (policy reject, budget, context) still gets its row.
  void record_refusal(const RequestContext& ctx, const Plan& plan, const Error& error);

  // A shadow copy's outcome, recorded as its own row tagged "shadow".
  void settle_shadow(const RequestContext& ctx, const Plan& plan, const AttemptOutcome& outcome);
  // A shadow copy that was not sent (too many in flight, or shutting down): counted only.
  void skip_shadow(const PlannedHop& shadow);

 private:
  // A served request's row (rule tags, routing and total time), or nullopt without a ledger
  // (then `on_durable` has run).
  std::optional<ledger::RequestRecord> served_record(const RequestContext& ctx, const Plan& plan,
                                                     ledger::DurableCallback& on_durable) const;
  // The prompt-count checks and fallbacks of a finished request, for /metrics.
  void count_checks(const Plan& plan, const std::vector<AttemptOutcome>& attempts);
  // One attempt's ledger record (its tokens billed as reported or as ferry counts them).
  ledger::AttemptRecord attempt_record(Plan& plan, const AttemptOutcome& a, size_t index,
                                       std::string& usage_check);

  ledger::Ledger* ledger_;
  RouteCounters& counters_;
};

}  // namespace ferry::gateway
