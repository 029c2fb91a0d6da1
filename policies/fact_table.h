// The policy fact vocabulary, declared once: the facts a rule may test (their YAML names, types
// and where they may stand), and the members of Facts that are recorded (explain's JSON, the
// ledger's facts column, replay). The loader, the evaluator, explain and the facts' JSON all
// derive from these tables. Constants only; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ferry::policies {

// ---------------------------------------------------------------------------------------
// The facts a rule's `when` may test. X(Id, "yaml name", type, optional, scope):
//   type      how the loader reads an operand and which operators apply (FactType)
//   optional  the fact may be absent, so `present` / `absent` tests are allowed
//   scope     kRequest: `when: {FACT: ...}`; kTarget: only under `state: {TARGET: {FACT: ...}}`;
//             kBoth: `when: {FACT: TARGET}` (type kTargetBool) and `state` (as kBool)
// The order is the enum's, the ledger does not store it; the evaluator's switch over Fact
// (policy.cpp) is checked by the compiler to cover every entry.
#define FERRY_POLICY_FACTS(X)                                      \
  X(PromptTokens, "prompt_tokens", kInt, false, kRequest)          \
  X(MaxTokens, "max_tokens", kInt, true, kRequest)                 \
  X(TotalTokens, "total_tokens", kInt, false, kRequest)            \
  X(Model, "model", kString, false, kRequest)                      \
  X(Api, "api", kString, false, kRequest)                          \
  X(Stream, "stream", kBool, false, kRequest)                      \
  X(Tools, "tools", kPresence, false, kRequest)                    \
  X(ResponseFormat, "response_format", kPresence, false, kRequest) \
  X(TaskId, "task_id", kPresence, false, kRequest)                 \
  X(Key, "key", kString, true, kRequest)                           \
  X(Team, "team", kString, true, kRequest)                         \
  X(Project, "project", kString, true, kRequest)                   \
  X(Role, "role", kString, false, kRequest)                        \
  X(Tags, "tags", kList, true, kRequest)                           \
  X(ClaimedTags, "claimed_tags", kList, true, kRequest)            \
  X(Hour, "hour", kInt, false, kRequest)                           \
  X(Time, "time", kTime, false, kRequest)                          \
  X(Weekday, "weekday", kString, false, kRequest)                  \
  X(BudgetLeftPct, "budget_left_pct", kNumber, true, kRequest)     \
  X(Fits, "fits", kTargetBool, false, kBoth)                       \
  X(Healthy, "healthy", kTargetBool, false, kBoth)                 \
  X(QueueDepth, "queue_depth", kInt, true, kTarget)                \
  X(EstWaitMs, "est_wait_ms", kInt, true, kTarget)                 \
  X(P90TtftMs, "p90_ttft_ms", kInt, true, kTarget)                 \
  X(ErrorRate, "error_rate", kNumber, true, kTarget)

enum class Fact : uint8_t {
#define FERRY_FACT_ID(id, name, type, optional, scope) k##id,
  FERRY_POLICY_FACTS(FERRY_FACT_ID)
#undef FERRY_FACT_ID
};

// kInt, kNumber and kTime are ordered (lt, lte, gt, gte); kString and kList are textual
// (matches); kBool and kPresence are true/false (no `in`); kTargetBool names targets.
enum class FactType : uint8_t {
  kInt,
  kNumber,
  kTime,
  kBool,
  kPresence,
  kString,
  kList,
  kTargetBool
};
enum class FactScope : uint8_t { kRequest, kTarget, kBoth };

struct FactSpec {
  Fact fact;
  std::string_view name;
  FactType type;
  bool optional;
  FactScope scope;
};

inline constexpr FactSpec kFactTable[] = {
#define FERRY_FACT_SPEC(id, name, type, optional, scope) \
  {Fact::k##id, name, FactType::type, optional, FactScope::scope},
    FERRY_POLICY_FACTS(FERRY_FACT_SPEC)
#undef FERRY_FACT_SPEC
};

constexpr const FactSpec& fact_spec(Fact fact) {
  return kFactTable[static_cast<size_t>(fact)];
}
constexpr std::string_view fact_name(Fact fact) {
  return fact_spec(fact).name;
}

// ---------------------------------------------------------------------------------------
// The recorded members of Facts and of TargetFacts (policies/facts.h), in the order they are
// read back; each one's JSON key is its member name. facts_to_json, facts_to_compact_json and
// facts_from_json visit these lists, so the ledger's facts column, explain's JSON and the replay
// reader cannot disagree on a key. `targets` (the list of TargetFacts) follows the request's.
// clang-format off (one member a line; clang-format 14 does not settle on a layout here)
#define FERRY_RECORDED_FACTS(X) \
  X(model)                      \
  X(api)                        \
  X(prompt_tokens)              \
  X(max_tokens)                 \
  X(temperature)                \
  X(top_p)                      \
  X(stream)                     \
  X(tools)                      \
  X(response_format)            \
  X(task_id)                    \
  X(key)                        \
  X(team)                       \
  X(project)                    \
  X(role)                       \
  X(tags)                       \
  X(claimed_tags)               \
  X(unix_seconds)               \
  X(budget_left_pct)            \
  X(split)
#define FERRY_RECORDED_TARGET_FACTS(X) \
  X(ref)                               \
  X(prompt_tokens)                     \
  X(context_length)                    \
  X(healthy)                           \
  X(queue_depth)                       \
  X(est_wait_ms)                       \
  X(p90_ttft_ms)                       \
  X(error_rate)
// clang-format on

}  // namespace ferry::policies
