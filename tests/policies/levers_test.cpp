// The cost levers' actions: trim, cache and set reasoning, as decided and as refused at load
// (each error at its line and column).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/policies/test_util.h"

namespace ferry::policies {
namespace {

using testing::errors_of;
using testing::must_load;
using testing::with_rules;

TEST(Levers, TrimCacheAndReasoningReachTheDecision) {
  auto p =
      must_load(with_rules("  - id: r\n    route: [small, large]\n"
                           "    trim: { to_fit: small, keep_last_turns: 2 }\n"
                           "    cache: { ttl: 10m, scope: team }\n"
                           "    set: { reasoning: { max_tokens: 64 } }\n"));
  ASSERT_TRUE(p);
  Decision d = p->decide(Facts{});
  ASSERT_TRUE(d.trim);
  ASSERT_TRUE(d.trim->to_fit);
  EXPECT_EQ(d.trim->to_fit->target, "small");
  EXPECT_EQ(d.trim->to_fit->ref, "local-m");
  EXPECT_EQ(d.trim->keep_last_turns, 2);
  EXPECT_TRUE(d.trim->keep_system);
  ASSERT_TRUE(d.cache);
  EXPECT_EQ(d.cache->ttl_ms, 600000);
  EXPECT_EQ(d.cache->scope, CacheScope::kTeam);
  EXPECT_FALSE(d.cache->nondeterministic);
  EXPECT_TRUE(d.cache->hits_count_rate_limits);  // count, unless the rule says exempt
  EXPECT_EQ(reasoning_name(d.reasoning), "max_tokens:64");
  auto j = decision_to_json(d);
  EXPECT_EQ(j["trim"]["to_fit"], "small");
  EXPECT_EQ(j["cache"]["scope"], "team");
  EXPECT_EQ(j["cache"]["rate_limits"], "count");
  auto exempt = must_load(
      with_rules("  - id: r\n    route: [small]\n    cache: { ttl: 1m, rate_limits: exempt }\n"));
  ASSERT_TRUE(exempt);
  EXPECT_FALSE(exempt->decide(Facts{}).cache->hits_count_rate_limits);
  EXPECT_EQ(j["reasoning"], "max_tokens:64");
}

TEST(Levers, WithTrimAHopThatDoesNotFitIsKeptForThePlannerToTrim) {
  auto p = must_load(
      with_rules("  - id: r\n    route: [small]\n    trim: { max_prompt_tokens: 100 }\n"));
  ASSERT_TRUE(p);
  Facts f;
  f.prompt_tokens = 9000;
  TargetFacts small;
  small.ref = "local-m";
  small.context_length = 4096;
  small.prompt_tokens = 9000;
  f.targets.push_back(small);
  Decision d = p->decide(f);
  EXPECT_FALSE(d.reject);
  ASSERT_EQ(d.route.size(), 1u);
  EXPECT_EQ(d.trim->max_prompt_tokens, 100);
}

TEST(Levers, DurationsAndReasoningModes) {
  const std::pair<const char*, int64_t> ttls[] = {
      {"1s", 1000}, {"90s", 90000}, {"2h", 7200000}, {"7d", 604800000}};
  for (auto [text, ms] : ttls) {
    auto p = must_load(with_rules(
        "  - id: r\n    route: [small]\n    cache: { ttl: " + std::string(text) + " }\n"));
    ASSERT_TRUE(p) << text;
    EXPECT_EQ(p->decide(Facts{}).cache->ttl_ms, ms) << text;
  }
  for (const char* mode : {"off", "low", "medium", "high"}) {
    auto p = must_load(with_rules(
        "  - id: r\n    route: [small]\n    set: { reasoning: " + std::string(mode) + " }\n"));
    ASSERT_TRUE(p) << mode;
    EXPECT_EQ(reasoning_name(p->decide(Facts{}).reasoning), mode);
  }
}

struct Bad {
  const char* rule;  // the rule's lines after `route: [small]`
  const char* where;
  const char* message;
};

TEST(Levers, BadLeversAreRefusedAtLoadWithLineAndColumn) {
  const Bad cases[] = {
      {"    cache: { ttl: 500ms }\n", "bad.yaml:6:19:", "cache ttl must be between 1s and 7d"},
      {"    cache: { ttl: 8d }\n", "bad.yaml:6:19:", "cache ttl must be between 1s and 7d"},
      {"    cache: { ttl: soon }\n", "bad.yaml:6:19:", "must be a duration"},
      {"    cache: { ttl: 10m, scope: world }\n", "bad.yaml:6:31:", "cache scope must be key"},
      {"    cache: { ttl: 10m, size: 3 }\n", "bad.yaml:6:24:", "unknown key 'size' in cache"},
      {"    cache: { scope: key }\n", "bad.yaml:6:12:", "cache needs a ttl"},
      {"    cache: { ttl: 10m, rate_limits: never }\n",
       "bad.yaml:6:37:", "cache rate_limits must be count or exempt"},
      {"    trim: { keep_system: true }\n", "bad.yaml:6:11:", "exactly one of to_fit"},
      {"    trim: { to_fit: small, max_prompt_tokens: 10 }\n",
       "bad.yaml:6:11:", "exactly one of to_fit"},
      {"    trim: { to_fit: nowhere }\n", "bad.yaml:6:21:", "unknown target 'nowhere'"},
      {"    trim: { max_prompt_tokens: 10, keep_last_turns: 0 }\n",
       "bad.yaml:6:53:", "keep_last_turns must be between 1"},
      {"    trim: { max_prompt_tokens: 10, drop: all }\n",
       "bad.yaml:6:36:", "unknown key 'drop' in trim"},
      {"    set: { reasoning: lots }\n", "bad.yaml:6:23:", "set reasoning must be off"},
      {"    set: { reasoning: { max_tokens: 0 } }\n",
       "bad.yaml:6:37:", "reasoning max_tokens must be between 1"},
      {"    set: { max_tokens: { at_most: 100 }, reasoning: { max_tokens: 100 } }\n",
       "bad.yaml:6:53:", "conflicts with set max_tokens at most 100"},
  };
  for (const Bad& c : cases) {
    std::string text = with_rules(std::string("  - id: r\n    route: [small]\n") + c.rule);
    std::string errors = errors_of(text);
    EXPECT_NE(errors.find(c.where), std::string::npos) << c.rule << errors;
    EXPECT_NE(errors.find(c.message), std::string::npos) << c.rule << errors;
  }
  // A lever beside reject is a conflict.
  std::string errors =
      errors_of(with_rules("  - id: r\n    reject: { message: no }\n    cache: { ttl: 10m }\n"));
  EXPECT_NE(errors.find("bad.yaml:6:12: cache has no effect with reject"), std::string::npos)
      << errors;
}

}  // namespace
}  // namespace ferry::policies
