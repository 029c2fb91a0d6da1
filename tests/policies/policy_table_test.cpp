// Whole policies, table-driven: a request's facts in, the rule and route out.
#include <gtest/gtest.h>

#include <functional>

#include "tests/policies/test_util.h"

namespace ferry::policies {
namespace {

const char* kPolicy = R"(timezone: "+01:00"
targets:
  small: qwen-0.5b
  large: llama-70b
models: [auto, chat, chat-large]
rules:
  - id: too-long-for-anyone
    when: { prompt_tokens: { gt: 120000 } }
    reject: { status: 400, message: "prompt longer than any model's context" }
  - id: nearly-out-of-budget
    when: { budget_left_pct: { lt: 5 } }
    route: [small]
  - id: large-on-request
    when: { model: chat-large }
    route: [large, small]
  - id: research-team-gets-the-big-model
    when: { team: research }
    set: { max_tokens: { at_most: 4096 } }
    route: [large, small]
  - id: short-and-simple-stays-local
    when: { prompt_tokens: { lte: 1500 }, max_tokens: { lte: 512 }, tools: absent, fits: small }
    route: [small, large]
  - id: night-batch
    when: { hour: { lt: 6 }, task_id: present }
    route: [small]
    tag: night
  - id: busy-gpu
    when: { state: { large: { queue_depth: { gt: 32 } } }, not: { tags: premium } }
    route: [small, large]
default: { route: [large, small] }
)";

struct Case {
  const char* name;
  std::function<void(Facts&)> setup;
  const char* rule;
  std::vector<std::string> route;  // empty: rejected
};

Facts base() {
  Facts f;
  f.model = "auto";
  f.prompt_tokens = 800;
  f.max_tokens = 256;
  f.role = "app";
  f.unix_seconds = 1764428400;  // 2025-11-29 15:00 UTC = 16:00 at +01:00
  f.targets.push_back({.ref = "qwen-0.5b", .prompt_tokens = 820, .context_length = 32768});
  f.targets.push_back({.ref = "llama-70b", .prompt_tokens = 790, .context_length = 131072});
  return f;
}

class PolicyTable : public ::testing::TestWithParam<Case> {};

TEST_P(PolicyTable, Decides) {
  static auto policy = testing::must_load(kPolicy);
  ASSERT_TRUE(policy);
  const Case& c = GetParam();
  Facts f = base();
  c.setup(f);
  Decision d = policy->decide(f);
  EXPECT_EQ(d.rule_id, c.rule);
  std::vector<std::string> route;
  for (const auto& h : d.route) route.push_back(h.target);
  EXPECT_EQ(route, c.route);
  EXPECT_EQ(d.reject.has_value(), c.route.empty());
  Explanation ex = policy->explain(f);  // explain always agrees with decide
  EXPECT_EQ(ex.decision.rule_id, d.rule_id);
}

const Case kCases[] = {
    {"short_request_stays_local",
     [](Facts&) {},
     "short-and-simple-stays-local",
     {"small", "large"}},
    {"tools_go_large", [](Facts& f) { f.tools = true; }, "default", {"large", "small"}},
    {"long_output_goes_large",
     [](Facts& f) { f.max_tokens = 2000; },
     "default",
     {"large", "small"}},
    {"no_max_tokens_goes_large",
     [](Facts& f) { f.max_tokens.reset(); },
     "default",
     {"large", "small"}},
    {"too_long_is_rejected", [](Facts& f) { f.prompt_tokens = 130000; }, "too-long-for-anyone", {}},
    {"budget_nearly_gone",
     [](Facts& f) { f.budget_left_pct = 2; },
     "nearly-out-of-budget",
     {"small"}},
    {"budget_fine",
     [](Facts& f) { f.budget_left_pct = 50; },
     "short-and-simple-stays-local",
     {"small", "large"}},
    {"alias_chat_large",
     [](Facts& f) { f.model = "chat-large"; },
     "large-on-request",
     {"large", "small"}},
    {"research_team",
     [](Facts& f) { f.team = "research"; },
     "research-team-gets-the-big-model",
     {"large", "small"}},
    {"small_does_not_fit",
     [](Facts& f) {
       f.targets[0].context_length = 1024;  // 820 + 256 > 1024
     },
     "default",
     {"large"}},
    {"large_down_falls_back",
     [](Facts& f) {
       f.tools = true;
       f.targets[1].healthy = false;
     },
     "default",
     {"small", "large"}},
    {"night_batch_local_time",
     [](Facts& f) {
       f.unix_seconds = 1764378000;  // 01:00 UTC = 02:00 at +01:00
       f.task_id = true;
       f.prompt_tokens = 5000;
     },
     "night-batch",
     {"small"}},
    {"night_without_task",
     [](Facts& f) {
       f.unix_seconds = 1764378000;
       f.prompt_tokens = 5000;
     },
     "default",
     {"large", "small"}},
    {"busy_gpu_sheds_to_small",
     [](Facts& f) {
       f.prompt_tokens = 5000;
       f.targets[1].queue_depth = 40;
     },
     "busy-gpu",
     {"small", "large"}},
    {"premium_waits_for_gpu",
     [](Facts& f) {
       f.prompt_tokens = 5000;
       f.targets[1].queue_depth = 40;
       f.tags = {"premium"};
     },
     "default",
     {"large", "small"}},
    {"claimed_premium_is_not_trusted",
     [](Facts& f) {
       f.prompt_tokens = 5000;
       f.targets[1].queue_depth = 40;
       f.claimed_tags = {"premium"};
     },
     "busy-gpu",
     {"small", "large"}},
};

INSTANTIATE_TEST_SUITE_P(Whole, PolicyTable, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ferry::policies
