// Actions: route (fallback order, weights, fit and health), set, reject, shadow, tag.
#include <gtest/gtest.h>

#include "tests/policies/test_util.h"

namespace ferry::policies {
namespace {

using testing::must_load;
using testing::with_rules;

std::vector<std::string> route_of(const Decision& d) {
  std::vector<std::string> out;
  for (const auto& h : d.route) out.push_back(h.target);
  return out;
}

TEST(Actions, RouteKeepsFallbackOrderAndNamesTheConfigModel) {
  auto p = must_load(with_rules("  - id: r\n    route: [small, large]\n"));
  ASSERT_TRUE(p);
  Decision d = p->decide(Facts{});
  EXPECT_EQ(d.rule_id, "r");
  EXPECT_EQ(route_of(d), (std::vector<std::string>{"small", "large"}));
  EXPECT_EQ(d.route[0].ref, "local-m");
  EXPECT_EQ(d.route[1].ref, "gpu-m");
  EXPECT_EQ(d.policy_version, p->short_version());
  EXPECT_EQ(d.policy_version.size(), 12u);
  EXPECT_FALSE(d.reject);
  EXPECT_FALSE(d.shadow);
}

TEST(Actions, SingleTargetRouteMayBeAScalar) {
  auto p = must_load(with_rules("  - id: r\n    route: small\n"));
  ASSERT_TRUE(p);
  EXPECT_EQ(route_of(p->decide(Facts{})), std::vector<std::string>{"small"});
}

TEST(Actions, DefaultDecidesWhenNoRuleMatches) {
  auto p = must_load(with_rules("  - id: r\n    when: { team: x }\n    route: [small]\n"));
  ASSERT_TRUE(p);
  Decision d = p->decide(Facts{});
  EXPECT_EQ(d.rule_id, "default");
  EXPECT_EQ(route_of(d), std::vector<std::string>{"large"});
}

TEST(Actions, FirstMatchingRuleWins) {
  auto p =
      must_load(with_rules("  - id: a\n    when: { team: x }\n    route: [small]\n"
                           "  - id: b\n    when: { team: x, stream: true }\n    route: [large]\n"
                           "  - id: c\n    when: { stream: true }\n    route: [large, small]\n"));
  ASSERT_TRUE(p);
  Facts f;
  f.team = "x";
  f.stream = true;
  EXPECT_EQ(p->decide(f).rule_id, "a");
  f.team = "y";
  EXPECT_EQ(p->decide(f).rule_id, "c");
}

TEST(Actions, WeightsSplitTrafficByTheSplitNumber) {
  auto p = must_load(with_rules(
      "  - id: w\n    route: [{ target: large, weight: 3 }, { target: small, weight: 1 }]\n"));
  ASSERT_TRUE(p);
  int small_first = 0;
  for (uint64_t split = 0; split < 400; ++split) {
    Facts f;
    f.split = split;
    Decision d = p->decide(f);
    ASSERT_EQ(d.route.size(), 2u);  // the other hop stays as fallback
    if (d.route[0].target == "small") ++small_first;
  }
  EXPECT_EQ(small_first, 100);  // exactly 1 in 4 of a uniform split
  Facts f;
  f.split = 3;  // 3 % 4 = 3 -> falls in small's share
  EXPECT_EQ(route_of(p->decide(f)), (std::vector<std::string>{"small", "large"}));
  f.split = 2;
  EXPECT_EQ(route_of(p->decide(f)), (std::vector<std::string>{"large", "small"}));
}

TEST(Actions, ZeroWeightHopIsFallbackOnly) {
  auto p = must_load(with_rules(
      "  - id: w\n    route: [{ target: large, weight: 0 }, { target: small, weight: 5 }]\n"));
  ASSERT_TRUE(p);
  for (uint64_t split = 0; split < 20; ++split) {
    Facts f;
    f.split = split;
    EXPECT_EQ(route_of(p->decide(f)), (std::vector<std::string>{"small", "large"}));
  }
}

TEST(Actions, HopsThatCannotFitAreSkipped) {
  auto p = must_load(with_rules("  - id: r\n    route: [small, large]\n"));
  ASSERT_TRUE(p);
  Facts f;
  f.prompt_tokens = 5000;
  f.max_tokens = 1000;
  f.targets.push_back({.ref = "local-m", .prompt_tokens = 5100, .context_length = 4096});
  f.targets.push_back({.ref = "gpu-m", .prompt_tokens = 4900, .context_length = 131072});
  Decision d = p->decide(f);
  EXPECT_EQ(route_of(d), std::vector<std::string>{"large"});
  ASSERT_EQ(d.skipped.size(), 1u);
  EXPECT_EQ(d.skipped[0].hop.target, "small");
  EXPECT_NE(d.skipped[0].reason.find("6100"), std::string::npos) << d.skipped[0].reason;
}

TEST(Actions, NoHopFitsIsARejectionNotAnEmptyRoute) {
  auto p = must_load(with_rules("  - id: r\n    route: [small]\n"));
  ASSERT_TRUE(p);
  Facts f;
  f.prompt_tokens = 5000;
  f.targets.push_back({.ref = "local-m", .context_length = 4096});
  Decision d = p->decide(f);
  ASSERT_TRUE(d.reject);
  EXPECT_EQ(d.reject->status, 400);
  EXPECT_TRUE(d.route.empty());
}

TEST(Actions, ClampedMaxTokensDecidesTheFit) {
  auto p = must_load(
      with_rules("  - id: r\n    set: { max_tokens: { at_most: 96 } }\n    route: [small]\n"));
  ASSERT_TRUE(p);
  Facts f;
  f.prompt_tokens = 4000;
  f.max_tokens = 2000;
  f.targets.push_back({.ref = "local-m", .context_length = 4096});
  Decision d = p->decide(f);
  EXPECT_FALSE(d.reject);
  EXPECT_EQ(route_of(d), std::vector<std::string>{"small"});
}

TEST(Actions, UnhealthyHopsAreTriedLast) {
  auto p = must_load(with_rules("  - id: r\n    route: [large, small]\n"));
  ASSERT_TRUE(p);
  Facts f;
  f.targets.push_back({.ref = "gpu-m", .healthy = false});
  Decision d = p->decide(f);
  EXPECT_EQ(route_of(d), (std::vector<std::string>{"small", "large"}));
  ASSERT_EQ(d.skipped.size(), 1u);
  EXPECT_EQ(d.skipped[0].hop.target, "large");
}

TEST(Actions, SetClampsAndDefaultsParameters) {
  auto p = must_load(with_rules(
      "  - id: r\n    set: { max_tokens: { at_most: 4096, default: 1024 }, "
      "temperature: { at_most: 1.0, at_least: 0.1 }, top_p: 0.9 }\n    route: [large]\n"));
  ASSERT_TRUE(p);
  Facts f;
  Decision d = p->decide(f);
  EXPECT_EQ(d.params.max_tokens, 1024);
  EXPECT_TRUE(d.params.max_tokens_changed);
  EXPECT_FALSE(d.params.temperature);  // no default: stays absent
  EXPECT_FALSE(d.params.temperature_changed);
  EXPECT_EQ(d.params.top_p, 0.9);  // a plain value forces it
  EXPECT_TRUE(d.params.top_p_changed);

  f.max_tokens = 10000;
  f.temperature = 1.7;
  f.top_p = 0.9;
  d = p->decide(f);
  EXPECT_EQ(d.params.max_tokens, 4096);
  EXPECT_EQ(d.params.temperature, 1.0);
  EXPECT_TRUE(d.params.temperature_changed);
  EXPECT_FALSE(d.params.top_p_changed);

  f.max_tokens = 100;
  f.temperature = 0.0;
  d = p->decide(f);
  EXPECT_EQ(d.params.max_tokens, 100);
  EXPECT_FALSE(d.params.max_tokens_changed);
  EXPECT_EQ(d.params.temperature, 0.1);
}

TEST(Actions, WithoutSetParametersPassThrough) {
  auto p = must_load(with_rules("  - id: r\n    route: [large]\n"));
  ASSERT_TRUE(p);
  Facts f;
  f.max_tokens = 77;
  f.temperature = 0.3;
  Decision d = p->decide(f);
  EXPECT_EQ(d.params.max_tokens, 77);
  EXPECT_EQ(d.params.temperature, 0.3);
  EXPECT_FALSE(d.params.top_p);
  EXPECT_FALSE(d.params.max_tokens_changed || d.params.temperature_changed ||
               d.params.top_p_changed);
}

TEST(Actions, RejectCarriesStatusAndMessage) {
  auto p = must_load(
      with_rules("  - id: no\n    when: { prompt_tokens: { gt: 10 } }\n"
                 "    reject: { status: 413, message: too long }\n    tag: rejected\n"
                 "  - id: plain\n    when: { team: x }\n    reject: { message: go away }\n"));
  ASSERT_TRUE(p);
  Facts f;
  f.prompt_tokens = 11;
  Decision d = p->decide(f);
  ASSERT_TRUE(d.reject);
  EXPECT_EQ(d.reject->status, 413);
  EXPECT_EQ(d.reject->message, "too long");
  EXPECT_TRUE(d.route.empty());
  EXPECT_EQ(d.tags, std::vector<std::string>{"rejected"});
  f.prompt_tokens = 1;
  f.team = "x";
  d = p->decide(f);
  ASSERT_TRUE(d.reject);
  EXPECT_EQ(d.reject->status, 400);  // the default status
}

TEST(Actions, ShadowAndTags) {
  auto p = must_load(
      with_rules("  - id: r\n    route: [large]\n    shadow: small\n    tag: [exp-1, eval]\n"));
  ASSERT_TRUE(p);
  Decision d = p->decide(Facts{});
  ASSERT_TRUE(d.shadow);
  EXPECT_EQ(d.shadow->target, "small");
  EXPECT_EQ(d.shadow->ref, "local-m");
  EXPECT_EQ(d.tags, (std::vector<std::string>{"exp-1", "eval"}));
}

TEST(Actions, DefaultMayRejectAndSet) {
  auto p = must_load(
      "targets: { small: m }\nrules: []\n"
      "default: { route: [small], set: { max_tokens: { at_most: 8 } }, tag: d }\n");
  ASSERT_TRUE(p);
  Facts f;
  f.max_tokens = 100;
  Decision d = p->decide(f);
  EXPECT_EQ(d.rule_id, "default");
  EXPECT_EQ(d.params.max_tokens, 8);
  EXPECT_EQ(d.tags, std::vector<std::string>{"d"});
  auto r = must_load(
      "targets: { small: m }\ndefault: { reject: { status: 503, message: "
      "closed } }\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->decide(f).reject->status, 503);
}

}  // namespace
}  // namespace ferry::policies
