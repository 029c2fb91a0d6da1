// The request path between parsing and the backend call, and after it: exact prompt counts
// per target (tokenizer + chat template), routing facts, the policy decision, budget
// admission, the planned hops with their upstream bodies; then per-attempt outcomes feeding
// circuit breakers and recent stats, and the ledger row. No Beast, no sockets: server.cpp
// runs the plan; everything here is testable without a network.
//
// Thread-safe: plan() and finish() are called from any I/O thread at once. They never block
// on SQLite or files (the ledger queues; the policy store swaps a pointer); the control-plane
// calls at the bottom (reload, reports) block and belong on a worker thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/backend.h"
#include "adapters/health.h"
#include "common/error.h"
#include "config/config.h"
#include "gateway/auth.h"
#include "gateway/openai_request.h"
#include "ledger/ledger.h"
#include "policies/facts.h"
#include "policies/policy.h"

namespace ferry::tokenizer {
class Tokenizer;
class ChatFormatter;
}  // namespace ferry::tokenizer

namespace ferry::policies {
class PolicyStore;
}

namespace ferry::gateway {

// Recent outcomes of one target: p90 time to first token and error rate over the last
// outcomes (a fixed ring). Thread-safe.
class RecentStats {
 public:
  void add(bool ok, int64_t ttft_ms);
  std::optional<int64_t> p90_ttft_ms() const;
  std::optional<double> error_rate() const;

 private:
  static constexpr size_t kWindow = 128;
  mutable std::mutex mu_;
  bool failed_[kWindow] = {};
  size_t n_ = 0;     // outcomes in the ring (at most kWindow)
  size_t next_ = 0;  // ring position
  int64_t ttft_ring_[kWindow] = {};
  size_t n_ttft_ = 0;
  size_t next_ttft_ = 0;
};

// One config model the gateway can send to.
struct Target {
  const config::ModelConfig* model = nullptr;
  const config::BackendConfig* backend_config = nullptr;
  adapters::Backend* backend = nullptr;                   // owned by the server
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;  // null: counts are estimates
  std::shared_ptr<const tokenizer::ChatFormatter> chat;   // null: chats are estimated
  std::unique_ptr<adapters::CircuitBreaker> breaker;      // HTTP backends only
  RecentStats recent;
  int64_t context_length() const;
};

// Who asks and the headers routing reads.
struct RequestContext {
  std::string request_id;
  Principal principal;
  std::string task_header;  // x-ferry-task
  std::string tags_header;  // x-ferry-tags (claimed, untrusted)
  int64_t started_us = 0;   // unix micros
};

struct PlannedHop {
  std::string name;  // the policy's name for the target, or the model name without a policy
  Target* target = nullptr;
  adapters::BackendRequest request;
};

// The token counts for one target, as routing computed them.
struct PromptCount {
  int64_t tokens = 0;
  ledger::TokenSource source = ledger::TokenSource::kEstimate;
  std::shared_ptr<const adapters::PromptTokens> ids;  // the local engine's, for its hops
};

struct Plan {
  std::shared_ptr<const policies::Policy> policy;  // the version the request keeps
  std::string rule_id;
  std::string policy_version;
  std::vector<PlannedHop> hops;      // fallback order
  std::vector<std::string> skipped;  // hops routing dropped, with the reason
  std::optional<PlannedHop> shadow;
  std::vector<std::string> tags;  // added by the rule
  ledger::Admission admission;
  std::map<const Target*, PromptCount> prompt_counts;
  std::string requested_model;
  std::string task_id;
  std::vector<std::string> claimed_tags;
  bool stream = false;
  // What the answer can be at most, for checking a backend's usage: the max_tokens sent
  // (after a rule's `set`; -1 when none), the choices asked for and the body's size.
  int64_t max_tokens = -1;
  int64_t n = 1;
  int64_t body_bytes = 0;
  std::string facts_json;  // the routing facts, for replay
  int64_t routing_us = 0;
  // Headers every response to this request carries (x-ferry-rule, x-ferry-policy, budget).
  std::vector<std::pair<std::string, std::string>> headers;
  // Set when routing itself answers: a policy `reject`, no target fits, a budget or the
  // ledger refuses. The row is already recorded; answer with this error and the headers.
  std::optional<Error> refusal;
};

// What one try on one hop came to.
struct AttemptOutcome {
  const PlannedHop* hop = nullptr;
  bool ok = false;
  std::optional<Error> error;   // set when !ok
  bool client_gone = false;     // the client hung up during it
  bool sent_to_client = false;  // bytes of this attempt reached the client
  adapters::Usage usage;        // as the backend reported it
  std::string finish_reason;
  std::string generated_text;  // the answer's text (for counting when usage is missing)
  std::string reasoning_text;
  int http_status = 0;  // the status the client got (or would have)
  int64_t started_us = 0;
  int64_t ended_us = 0;
  int64_t ttft_us = -1;
};

// Whether routing may try the next hop after this failure (nothing was sent to the client).
bool retryable(const Error& error);

// Why the attempt's usage cannot be billed as reported, or "" when it can or is absent: a
// member that is not an integer, a negative count, cached > prompt or reasoning > completion,
// a prompt far from ferry's own count (under a quarter of its exact count less
// kPromptTokensLowSlack; over twice it, or the body's bytes, plus kPromptTokensSlack), or
// completion tokens beyond max_tokens (or the context) times n, plus one per choice. The
// router then bills ferry's own counts and records the discrepancy.
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

class Router {
 public:
  // Loads every target's tokenizer and chat template, the policy (when configured) and the
  // ledger (when configured). `backends` maps backend names to the server's instances.
  static Result<std::unique_ptr<Router>> create(
      const config::Config& config, const std::map<std::string, adapters::Backend*>& backends);
  ~Router();

  // Everything between a parsed request and the first backend call. An Error is the answer
  // before any policy ran (404 unknown model); refusals after it are in Plan::refusal.
  Result<Plan> plan(const RequestContext& context, const ParsedRequest& request);

  // Called after each try: feeds the target's breaker and recent stats.
  void note_attempt(const AttemptOutcome& outcome);

  // Builds the ledger row from the attempts and queues it; `on_durable` runs once it is
  // committed (on the ledger's writer thread). Without a ledger, on_durable runs at once.
  // Returns the row id ("" without a ledger).
  std::string finish(const RequestContext& context, Plan& plan,
                     const std::vector<AttemptOutcome>& attempts,
                     ledger::DurableCallback on_durable);
  // What a shadow copy needs of the plan (no admission: its cost is not the caller's).
  static Plan copy_for_shadow(const Plan& plan);
  // A shadow copy's outcome, recorded as its own row tagged "shadow".
  void finish_shadow(const RequestContext& context, const Plan& plan,
                     const AttemptOutcome& outcome);

  // GET /v1/models: the policy's aliases, or the configured models without a policy.
  std::string models_json() const;
  Result<std::string> model_json(std::string_view id) const;

  // Prometheus text for routing, breakers, budgets and the ledger.
  void render_metrics(std::string& out) const;

  ledger::Ledger* ledger() { return ledger_.get(); }
  policies::PolicyStore* policy_store() { return store_.get(); }
  const config::Config& config() const { return config_; }
  Target* find_target(std::string_view model_name);

  // POST /admin/route/explain: facts, every clause, the decision. No backend is called.
  Result<std::string> explain(const RequestContext& context, const ParsedRequest& request);

 private:
  Router(const config::Config& config);
  void count_prompts(const ParsedRequest& request, std::span<Target* const> targets,
                     std::map<const Target*, PromptCount>& counts) const;
  Result<policies::Facts> build_facts(const RequestContext& context, const ParsedRequest& request,
                                      const policies::Policy* policy,
                                      std::map<const Target*, PromptCount>& counts,
                                      std::string& task_id, std::vector<std::string>& claimed_tags);
  PromptCount count_output(const Target* target, const AttemptOutcome& outcome) const;
  // A request refused while planning (policy reject, budget, context) still gets its row.
  void record_refusal(const RequestContext& context, const Plan& plan, const Error& error);

  const config::Config& config_;
  std::map<std::string, std::unique_ptr<Target>, std::less<>> targets_;  // by model name
  std::unique_ptr<policies::PolicyStore> store_;
  std::unique_ptr<ledger::Ledger> ledger_;

  // Counters for /metrics.
  struct Counters;
  std::unique_ptr<Counters> counters_;
  int64_t started_unix_us_ = 0;
  int64_t models_created_s() const;  // /v1/models' `created`
};

}  // namespace ferry::gateway
