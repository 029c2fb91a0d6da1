// Every fact and every operator, one small policy at a time.
#include <gtest/gtest.h>

#include "tests/policies/test_util.h"

namespace ferry::policies {
namespace {

using testing::matches;

Facts base() {
  Facts f;
  f.model = "auto";
  f.prompt_tokens = 1000;
  f.role = "app";
  f.unix_seconds = 1764446400;  // 2025-11-29 20:00:00 UTC, a Saturday
  return f;
}

TEST(Conditions, PromptTokensComparisons) {
  Facts f = base();
  EXPECT_TRUE(matches("{ prompt_tokens: { lte: 1000 } }", f));
  EXPECT_FALSE(matches("{ prompt_tokens: { lt: 1000 } }", f));
  EXPECT_TRUE(matches("{ prompt_tokens: { gte: 1000 } }", f));
  EXPECT_FALSE(matches("{ prompt_tokens: { gt: 1000 } }", f));
  EXPECT_TRUE(matches("{ prompt_tokens: 1000 }", f));
  EXPECT_TRUE(matches("{ prompt_tokens: { eq: 1000 } }", f));
  EXPECT_FALSE(matches("{ prompt_tokens: { ne: 1000 } }", f));
  EXPECT_TRUE(matches("{ prompt_tokens: [5, 1000] }", f));
  EXPECT_FALSE(matches("{ prompt_tokens: { in: [5, 6] } }", f));
  EXPECT_TRUE(matches("{ prompt_tokens: { gt: 500, lt: 1500 } }", f));
  EXPECT_FALSE(matches("{ prompt_tokens: { gt: 500, lt: 900 } }", f));
}

TEST(Conditions, MaxTokensMayBeAbsent) {
  Facts f = base();
  EXPECT_FALSE(matches("{ max_tokens: { lte: 512 } }", f));  // absent: comparisons are false
  EXPECT_FALSE(matches("{ max_tokens: { gt: 512 } }", f));
  EXPECT_TRUE(matches("{ max_tokens: absent }", f));
  EXPECT_FALSE(matches("{ max_tokens: present }", f));
  f.max_tokens = 256;
  EXPECT_TRUE(matches("{ max_tokens: { lte: 512 } }", f));
  EXPECT_TRUE(matches("{ max_tokens: present }", f));
}

TEST(Conditions, TotalTokens) {
  Facts f = base();
  EXPECT_TRUE(matches("{ total_tokens: 1000 }", f));
  f.max_tokens = 500;
  EXPECT_TRUE(matches("{ total_tokens: { gte: 1500 } }", f));
  EXPECT_FALSE(matches("{ total_tokens: { gt: 1500 } }", f));
}

TEST(Conditions, ModelAlias) {
  Facts f = base();
  EXPECT_TRUE(matches("{ model: auto }", f));
  EXPECT_FALSE(matches("{ model: chat }", f));
  EXPECT_TRUE(matches("{ model: [chat, auto] }", f));
  EXPECT_TRUE(matches("{ model: { ne: chat } }", f));
  EXPECT_TRUE(matches("{ model: { matches: 'au.*' } }", f));
  EXPECT_FALSE(matches("{ model: { matches: 'au' } }", f));  // whole value
}

TEST(Conditions, BooleansAndPresence) {
  Facts f = base();
  EXPECT_TRUE(matches("{ stream: false }", f));
  EXPECT_TRUE(matches("{ tools: absent }", f));
  EXPECT_TRUE(matches("{ response_format: absent }", f));
  EXPECT_TRUE(matches("{ task_id: absent }", f));
  f.stream = true;
  f.tools = true;
  f.response_format = true;
  f.task_id = true;
  EXPECT_TRUE(matches("{ stream: true }", f));
  EXPECT_TRUE(matches("{ stream: { ne: false } }", f));
  EXPECT_TRUE(matches("{ tools: present }", f));
  EXPECT_TRUE(matches("{ tools: true }", f));
  EXPECT_FALSE(matches("{ tools: absent }", f));
  EXPECT_TRUE(matches("{ response_format: present }", f));
  EXPECT_TRUE(matches("{ task_id: present }", f));
}

TEST(Conditions, CallerIdentity) {
  Facts f = base();
  f.key = "key-7";
  f.team = "research";
  f.project = "canary-1";
  f.role = "admin";
  EXPECT_TRUE(matches("{ key: key-7 }", f));
  EXPECT_TRUE(matches("{ team: research }", f));
  EXPECT_TRUE(matches("{ team: [ops, research] }", f));
  EXPECT_TRUE(matches("{ project: { matches: 'canary-[0-9]+' } }", f));
  EXPECT_FALSE(matches("{ project: { matches: 'canary-[a-z]+' } }", f));
  EXPECT_TRUE(matches("{ role: admin }", f));
  EXPECT_FALSE(matches("{ role: app }", f));
  EXPECT_TRUE(matches("{ team: present }", f));
  f.team.clear();
  EXPECT_TRUE(matches("{ team: absent }", f));
  EXPECT_FALSE(matches("{ team: research }", f));
}

TEST(Conditions, TrustedAndClaimedTagsAreApart) {
  Facts f = base();
  f.tags = {"premium", "eu"};
  f.claimed_tags = {"urgent"};
  EXPECT_TRUE(matches("{ tags: premium }", f));
  EXPECT_FALSE(matches("{ tags: urgent }", f));  // claimed, not trusted
  EXPECT_TRUE(matches("{ claimed_tags: urgent }", f));
  EXPECT_FALSE(matches("{ claimed_tags: premium }", f));
  EXPECT_TRUE(matches("{ tags: [us, eu] }", f));
  EXPECT_TRUE(matches("{ tags: { ne: us } }", f));
  EXPECT_FALSE(matches("{ tags: { ne: eu } }", f));
  EXPECT_TRUE(matches("{ tags: { matches: 'pre.*' } }", f));
  EXPECT_TRUE(matches("{ tags: present }", f));
  f.tags.clear();
  EXPECT_TRUE(matches("{ tags: absent }", f));
}

TEST(Conditions, TimeOfDayAndWeekdayInTheTimezone) {
  Facts f = base();  // Saturday 20:00 UTC
  EXPECT_TRUE(matches("{ hour: 20 }", f));
  EXPECT_TRUE(matches("{ weekday: sat }", f));
  EXPECT_TRUE(matches("{ weekday: [saturday, sun] }", f));
  EXPECT_TRUE(matches("{ time: { gte: '19:59', lt: '20:01' } }", f));
  EXPECT_FALSE(matches("{ time: { lt: '20:00' } }", f));

  std::string tz = "timezone: '+05:30'\n" + testing::with_rules(
                                                "  - id: r\n    when: { weekday: sun, hour: 1, "
                                                "time: '01:30' }\n    route: [small]\n");
  auto policy = testing::must_load(tz);
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->decide(f).rule_id, "r");  // 20:00 UTC = 01:30 Sunday at +05:30

  std::string west =
      "timezone: '-08:00'\n" + testing::with_rules(
                                   "  - id: r\n    when: { weekday: sat, hour: 12 }\n"
                                   "    route: [small]\n");
  policy = testing::must_load(west);
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->decide(f).rule_id, "r");
}

TEST(Conditions, TimeBeforeTheEpochIsStillAWeekday) {
  Facts f = base();
  f.unix_seconds = -1;  // 1969-12-31 23:59:59, a Wednesday
  EXPECT_TRUE(matches("{ weekday: wed, hour: 23, time: '23:59' }", f));
}

TEST(Conditions, BudgetLeftIsAbsentUntilKnown) {
  Facts f = base();
  EXPECT_FALSE(matches("{ budget_left_pct: { lt: 5 } }", f));
  EXPECT_TRUE(matches("{ budget_left_pct: absent }", f));
  f.budget_left_pct = 4.5;
  EXPECT_TRUE(matches("{ budget_left_pct: { lt: 5 } }", f));
  EXPECT_FALSE(matches("{ budget_left_pct: { lt: 4.5 } }", f));
}

TEST(Conditions, FitsUsesEachTargetsOwnCountAndContext) {
  Facts f = base();
  f.max_tokens = 100;
  EXPECT_TRUE(matches("{ fits: small }", f));  // nothing known: fits
  f.targets.push_back({.ref = "local-m", .prompt_tokens = 1200, .context_length = 1300});
  EXPECT_TRUE(matches("{ fits: small }", f));  // 1200 + 100 <= 1300
  f.max_tokens = 101;
  EXPECT_FALSE(matches("{ fits: small }", f));
  EXPECT_TRUE(matches("{ fits: large }", f));
  EXPECT_FALSE(matches("{ fits: [small, large] }", f));
  f.targets[0].prompt_tokens.reset();  // falls back to the request's prompt_tokens (1000)
  EXPECT_TRUE(matches("{ fits: small }", f));
  EXPECT_TRUE(matches("{ state: { small: { fits: true } } }", f));
}

TEST(Conditions, TargetLiveState) {
  Facts f = base();
  EXPECT_TRUE(matches("{ healthy: large }", f));  // unknown target: healthy
  EXPECT_FALSE(matches("{ state: { large: { queue_depth: { gt: 1 } } } }", f));
  EXPECT_TRUE(matches("{ state: { large: { queue_depth: absent } } }", f));
  f.targets.push_back({.ref = "gpu-m",
                       .healthy = false,
                       .queue_depth = 40,
                       .est_wait_ms = 1500,
                       .p90_ttft_ms = 900,
                       .error_rate = 0.25});
  EXPECT_FALSE(matches("{ healthy: large }", f));
  EXPECT_TRUE(matches("{ not: { healthy: large } }", f));
  EXPECT_TRUE(matches("{ state: { large: { healthy: false } } }", f));
  EXPECT_TRUE(matches("{ state: { large: { queue_depth: { gt: 32 } } } }", f));
  EXPECT_TRUE(matches("{ state: { large: { est_wait_ms: { gte: 1500 } } } }", f));
  EXPECT_TRUE(matches("{ state: { large: { p90_ttft_ms: { lt: 1000 } } } }", f));
  EXPECT_TRUE(matches("{ state: { large: { error_rate: { gt: 0.2 } } } }", f));
  EXPECT_FALSE(matches("{ state: { large: { error_rate: { gt: 0.2 }, queue_depth: 1 } } }", f));
}

TEST(Conditions, Combinators) {
  Facts f = base();
  f.team = "ops";
  EXPECT_TRUE(matches("{ any: [ { team: research }, { team: ops } ] }", f));
  EXPECT_FALSE(matches("{ any: [ { team: research }, { team: eng } ] }", f));
  EXPECT_TRUE(matches("{ all: [ { team: ops }, { prompt_tokens: 1000 } ] }", f));
  EXPECT_FALSE(matches("{ all: [ { team: ops }, { prompt_tokens: 1 } ] }", f));
  EXPECT_TRUE(matches("{ not: { team: research } }", f));
  EXPECT_FALSE(matches("{ not: { team: ops, prompt_tokens: 1000 } }", f));
  EXPECT_TRUE(
      matches("{ not: { any: [ { team: a }, { all: [ { team: ops }, { stream: true } ] "
              "} ] } }",
              f));
  EXPECT_TRUE(matches("{ all: [] }", f));
  EXPECT_FALSE(matches("{ any: [] }", f));
}

}  // namespace
}  // namespace ferry::policies
