// A compiled routing policy (immutable once built by the loader) and its evaluation:
// decide(Facts) -> Decision, explain(Facts) -> Explanation. Pure: no I/O, no clocks, no
// shared mutable state, so one Policy may be evaluated from any number of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policies/facts.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace ferry::policies {

// ---------------------------------------------------------------------------------------
// Decision: what the gateway executes.

struct Hop {
  std::string target;  // the policy's name for it ("small")
  std::string ref;     // the config model it stands for ("qwen2.5-0.5b-instruct")
};

struct SkippedHop {
  Hop hop;
  std::string reason;  // "does not fit: 9000 tokens needed, context 8192", "unhealthy"
};

struct Reject {
  int status = 400;
  std::string message;
};

// Final request parameters after the rule's `set`; absent = leave the request's value
// (which was absent too). `*_changed` says whether the rule changed the requested value.
struct Params {
  std::optional<int64_t> max_tokens;
  std::optional<double> temperature;
  std::optional<double> top_p;
  bool max_tokens_changed = false;
  bool temperature_changed = false;
  bool top_p_changed = false;
};

// The cost levers a rule may pull (README "Cost levers"): context trimming, the response
// cache, a reasoning budget.

// `trim`: drop the oldest turns until the prompt, counted with the target's tokenizer and
// template, fits `to_fit`'s context (less the output reserved) or max_prompt_tokens.
struct TrimRule {
  int to_fit = -1;                 // target index, or -1 with max_prompt_tokens
  int64_t max_prompt_tokens = -1;  // -1 with to_fit
  bool keep_system = true;         // system and developer messages are never dropped
  int64_t keep_last_turns = 1;     // the last K turns (a user message and what follows it)
};
struct TrimDecision {
  std::optional<Hop> to_fit;  // unset: max_prompt_tokens, counted for the first hop
  int64_t max_prompt_tokens = -1;
  bool keep_system = true;
  int64_t keep_last_turns = 1;
};

// `cache`: answers reused for identical requests within ttl, namespaced by scope.
enum class CacheScope : uint8_t { kKey, kTeam, kGlobal };
std::string_view cache_scope_name(CacheScope scope);
constexpr int64_t kMinCacheTtlMs = 1000;                    // 1 s
constexpr int64_t kMaxCacheTtlMs = 7LL * 24 * 3600 * 1000;  // 7 days
struct CacheRule {
  int64_t ttl_ms = 0;
  CacheScope scope = CacheScope::kKey;
  bool nondeterministic = false;  // also cache answers sampled with temperature > 0, no seed
  // `rate_limits: count | exempt`: whether a hit takes from the key's rate limits (requests and
  // tokens, as a miss would) or not. Budgets never: a hit costs nothing and reserves nothing.
  bool hits_count_rate_limits = true;
};

// `set: { reasoning: off | low | medium | high | { max_tokens: N } }`.
enum class ReasoningMode : uint8_t { kUnset, kOff, kLow, kMedium, kHigh, kBudget };
struct ReasoningRule {
  ReasoningMode mode = ReasoningMode::kUnset;
  int64_t max_tokens = 0;  // kBudget
  bool set() const { return mode != ReasoningMode::kUnset; }
};
// "off", "low", "medium", "high", "max_tokens:N"; "" when unset (the ledger's reasoning_budget).
std::string reasoning_name(const ReasoningRule& rule);

struct Decision {
  std::string rule_id;         // the matching rule's id, or "default"
  std::string policy_version;  // the policy's content hash (short form)
  // Fallback order. Hops that cannot fit the request (known context length) are dropped;
  // unhealthy hops are moved after the healthy ones. Empty only when `reject` is set.
  std::vector<Hop> route;
  std::vector<SkippedHop> skipped;  // dropped or demoted hops, with the reason
  std::optional<Reject> reject;     // when set, answer with it and call no backend
  std::optional<Hop> shadow;        // also send a copy here; discard the answer
  std::vector<std::string> tags;    // add to the ledger row
  Params params;
  std::optional<TrimDecision> trim;
  std::optional<CacheRule> cache;
  ReasoningRule reasoning;
};

// ---------------------------------------------------------------------------------------
// Compiled form. Built only by the loader (policies/loader.h); read-only afterwards.

// Fact (what a condition tests) is declared with its name and type in policies/fact_table.h.
enum class Op : uint8_t { kLt, kLte, kGt, kGte, kEq, kNe, kIn, kMatches, kPresent, kAbsent };
std::string_view op_name(Op op);

// `matches` runs RE2 (time linear in the value, no backtracking) on the whole value. The
// loader refuses a pattern longer than kMaxPatternBytes, one RE2 rejects (backreferences,
// lookaround) and one whose compiled form needs more than kMaxPatternMemory; a value longer
// than kMaxMatchedBytes never matches (no fact ferry sets is that long but the model name a
// client sends).
constexpr size_t kMaxPatternBytes = 512;
constexpr int64_t kMaxPatternMemory = 1 << 20;
constexpr size_t kMaxMatchedBytes = 4096;

struct Condition {
  enum class Kind : uint8_t { kAll, kAny, kNot, kTest };
  Kind kind = Kind::kAll;
  std::vector<Condition> children;  // kAll / kAny: any number; kNot: exactly one

  // kTest only.
  Fact fact = Fact::kPromptTokens;
  Op op = Op::kEq;
  int target = -1;                        // index into Policy::targets() for per-target facts
  double number = 0;                      // numeric operand (ints are exact up to 2^53)
  bool flag = false;                      // boolean operand
  std::string text;                       // string operand
  std::vector<std::string> texts;         // `in` operand
  std::vector<double> numbers;            // `in` operand for numeric facts
  std::shared_ptr<const re2::RE2> regex;  // `matches`, compiled at load time (linear time)

  std::string label;  // canonical text, e.g. "prompt_tokens <= 1500"
  int line = 0;       // 1-based position in the policy file
  int column = 0;
};

struct ParamRule {  // one parameter's `set`
  std::optional<double> default_value;
  std::optional<double> at_most;
  std::optional<double> at_least;
  bool any() const { return default_value || at_most || at_least; }
};

struct RouteHop {
  int target = -1;      // index into Policy::targets()
  int64_t weight = -1;  // -1 = unweighted route
};

struct Action {
  std::vector<RouteHop> route;
  bool weighted = false;
  std::optional<Reject> reject;
  int shadow = -1;  // target index or -1
  std::vector<std::string> tags;
  ParamRule max_tokens;
  ParamRule temperature;
  ParamRule top_p;
  std::optional<TrimRule> trim;
  std::optional<CacheRule> cache;
  ReasoningRule reasoning;
};

struct Rule {
  std::string id;
  std::string description;
  std::optional<Condition> when;  // absent: always matches
  Action action;
  int line = 0;
  int column = 0;
};

struct Target {
  std::string name;  // the policy's name
  std::string ref;   // config model name
};

struct Alias {
  std::string name;
  std::string description;
};

// ---------------------------------------------------------------------------------------
// Explain: the facts as the rules saw them, every clause's value, and the decision.

struct ClauseTrace {
  std::string label;  // "prompt_tokens <= 1500", "any", "not"
  bool value = false;
  int depth = 0;  // nesting, for indentation
  int line = 0;
};

struct RuleTrace {
  std::string id;
  int line = 0;
  bool matched = false;
  bool chosen = false;
  std::vector<ClauseTrace> clauses;  // empty when the rule has no `when`
};

struct Explanation {
  Facts facts;
  std::vector<std::pair<std::string, std::string>> derived;  // computed facts: name, value
  std::vector<RuleTrace> rules;                              // every rule in order, then "default"
  Decision decision;
};

class Policy {
 public:
  Policy() = default;

  Decision decide(const Facts& facts) const;
  Explanation explain(const Facts& facts) const;

  const std::string& version() const { return version_; }  // full SHA-256 hex of the text
  const std::string& short_version() const { return short_version_; }  // first 12 hex digits
  const std::string& source() const { return source_; }
  const std::vector<Target>& targets() const { return targets_; }
  const std::vector<Alias>& aliases() const { return aliases_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const Action& default_action() const { return default_; }
  int utc_offset_minutes() const { return utc_offset_minutes_; }
  const std::string& timezone() const { return timezone_; }

  bool has_alias(std::string_view name) const;
  int find_target(std::string_view name) const;  // index or -1
  // The config models this policy may send to (each once), for the gateway to fill
  // TargetFacts and check at start-up.
  std::vector<std::string> target_refs() const;

 private:
  friend class PolicyBuilder;
  std::string version_;
  std::string short_version_;
  std::string source_;
  std::string timezone_ = "UTC";
  int utc_offset_minutes_ = 0;
  std::vector<Target> targets_;
  std::vector<Alias> aliases_;
  std::vector<Rule> rules_;
  Action default_;
};

// Text and JSON forms of an explanation (the JSON is what POST /admin/route/explain returns).
std::string explanation_to_text(const Explanation& explanation);
nlohmann::json explanation_to_json(const Explanation& explanation);
nlohmann::json decision_to_json(const Decision& decision);

}  // namespace ferry::policies
