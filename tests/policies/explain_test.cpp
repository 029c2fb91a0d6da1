// Explain: facts, every clause's value, the chosen rule, route and parameter changes.
#include <gtest/gtest.h>

#include <bit>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "tests/policies/test_util.h"

namespace ferry::policies {
namespace {

const char* kPolicy = R"(targets: { small: local-m, large: gpu-m }
models: [auto]
rules:
  - id: short
    when: { prompt_tokens: { lte: 1500 }, tools: absent }
    route: [small, large]
  - id: research
    when:
      team: research
      any: [ { stream: true }, { not: { tags: premium } } ]
    set: { max_tokens: { at_most: 4096 } }
    route: [large, small]
    shadow: small
default: { route: [large] }
)";

Facts research_facts() {
  Facts f;
  f.model = "auto";
  f.prompt_tokens = 2000;
  f.max_tokens = 9000;
  f.team = "research";
  f.role = "app";
  f.targets.push_back({.ref = "local-m", .prompt_tokens = 2100, .context_length = 8192});
  return f;
}

TEST(Explain, TracesEveryClauseOfEveryRule) {
  auto p = testing::must_load(kPolicy);
  ASSERT_TRUE(p);
  Explanation ex = p->explain(research_facts());
  ASSERT_EQ(ex.rules.size(), 3u);  // two rules and the default
  const RuleTrace& shortr = ex.rules[0];
  EXPECT_FALSE(shortr.matched);
  ASSERT_EQ(shortr.clauses.size(), 2u);  // no short-circuit in explain
  EXPECT_EQ(shortr.clauses[0].label, "prompt_tokens <= 1500");
  EXPECT_FALSE(shortr.clauses[0].value);
  EXPECT_EQ(shortr.clauses[1].label, "tools absent");
  EXPECT_TRUE(shortr.clauses[1].value);

  const RuleTrace& research = ex.rules[1];
  EXPECT_TRUE(research.matched);
  EXPECT_TRUE(research.chosen);
  ASSERT_EQ(research.clauses.size(), 5u);
  EXPECT_EQ(research.clauses[0].label, "team == research");
  EXPECT_EQ(research.clauses[1].label, "any");
  EXPECT_TRUE(research.clauses[1].value);
  EXPECT_EQ(research.clauses[2].label, "stream == true");
  EXPECT_EQ(research.clauses[2].depth, 1);
  EXPECT_EQ(research.clauses[3].label, "not");
  EXPECT_EQ(research.clauses[4].label, "tags contains premium");
  EXPECT_EQ(research.clauses[4].depth, 2);
  EXPECT_FALSE(research.clauses[4].value);

  EXPECT_FALSE(ex.rules[2].chosen);
  EXPECT_EQ(ex.decision.rule_id, "research");
  EXPECT_EQ(ex.decision.params.max_tokens, 4096);
  // explain and decide agree
  Decision d = p->decide(research_facts());
  EXPECT_EQ(d.rule_id, ex.decision.rule_id);
  EXPECT_EQ(d.route.size(), ex.decision.route.size());
}

TEST(Explain, StreamLabelMatchesOperand) {
  auto p = testing::must_load(kPolicy);
  ASSERT_TRUE(p);
  // the YAML says `stream: true`; the label shows the operand, the value the outcome
  Explanation ex = p->explain(research_facts());
  EXPECT_NE(ex.rules[1].clauses[2].label.find("true"), std::string::npos)
      << ex.rules[1].clauses[2].label;
}

TEST(Explain, TextNamesTheChosenRuleRouteAndChanges) {
  auto p = testing::must_load(kPolicy);
  ASSERT_TRUE(p);
  std::string text = explanation_to_text(p->explain(research_facts()));
  EXPECT_NE(text.find("=> research (line 7): matches"), std::string::npos) << text;
  EXPECT_NE(text.find("false  prompt_tokens <= 1500"), std::string::npos) << text;
  EXPECT_NE(text.find("route: large (gpu-m) -> small (local-m)"), std::string::npos) << text;
  EXPECT_NE(text.find("set max_tokens: 9000 -> 4096"), std::string::npos) << text;
  EXPECT_NE(text.find("shadow: small (local-m)"), std::string::npos) << text;
  EXPECT_NE(text.find("fits small = no: 11100 of 8192"), std::string::npos) << text;
  EXPECT_NE(text.find("policy " + p->short_version()), std::string::npos) << text;
}

TEST(Explain, JsonCarriesFactsRulesAndDecision) {
  auto p = testing::must_load(kPolicy);
  ASSERT_TRUE(p);
  nlohmann::json j = explanation_to_json(p->explain(research_facts()));
  EXPECT_EQ(j["policy_version"], p->short_version());
  EXPECT_EQ(j["facts"]["team"], "research");
  EXPECT_EQ(j["rules"].size(), 3u);
  EXPECT_EQ(j["rules"][1]["chosen"], true);
  EXPECT_EQ(j["rules"][0]["clauses"][0]["clause"], "prompt_tokens <= 1500");
  EXPECT_EQ(j["rules"][0]["clauses"][0]["value"], false);
  EXPECT_EQ(j["decision"]["rule"], "research");
  EXPECT_EQ(j["decision"]["route"][0]["target"], "large");
  EXPECT_EQ(j["decision"]["params"]["max_tokens"], 4096);
  EXPECT_EQ(j["decision"]["params_changed"][0], "max_tokens");
  EXPECT_EQ(j["decision"]["shadow"]["ref"], "local-m");
  EXPECT_TRUE(j["decision"]["reject"].is_null());
}

TEST(Explain, DefaultIsChosenWhenNothingMatches) {
  auto p = testing::must_load(kPolicy);
  ASSERT_TRUE(p);
  Facts f = research_facts();
  f.team = "ops";
  Explanation ex = p->explain(f);
  EXPECT_TRUE(ex.rules.back().chosen);
  EXPECT_EQ(ex.decision.rule_id, "default");
}

TEST(FactsJson, RoundTrip) {
  Facts f = research_facts();
  f.temperature = 0.5;
  f.stream = true;
  f.tags = {"a"};
  f.claimed_tags = {"b", "c"};
  f.unix_seconds = 1764446400;
  f.budget_left_pct = 12.5;
  f.split = 0xFFFFFFFFFFFFFFFFull;
  f.targets.push_back({.ref = "gpu-m",
                       .healthy = false,
                       .queue_depth = 3,
                       .est_wait_ms = 4,
                       .p90_ttft_ms = 5,
                       .error_rate = 0.5});
  auto back = facts_from_json(facts_to_json(f));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(facts_to_json(*back), facts_to_json(f));
  EXPECT_EQ(back->split, f.split);
  EXPECT_EQ(back->targets[1].queue_depth, 3);
  EXPECT_FALSE(back->targets[0].queue_depth);
}

TEST(FactsJson, RefusesUnknownKeysAndWrongTypes) {
  using nlohmann::json;
  EXPECT_TRUE(facts_from_json(json::object()));
  auto e1 = facts_from_json(json{{"prompt_tokenz", 1}});
  ASSERT_FALSE(e1);
  EXPECT_EQ(e1.error().param, "prompt_tokenz");
  auto e2 = facts_from_json(json{{"prompt_tokens", "many"}});
  ASSERT_FALSE(e2);
  EXPECT_NE(e2.error().message.find("integer"), std::string::npos);
  auto e3 = facts_from_json(json{{"targets", json::array({json{{"ref", "x"}, {"healthy", 1}}})}});
  ASSERT_FALSE(e3);
  EXPECT_EQ(e3.error().param, "targets[0].healthy");
  EXPECT_FALSE(facts_from_json(json::array()));
  EXPECT_FALSE(facts_from_json(json{{"targets", json::array({json{{"healthy", true}}})}}));
}

// The ledger keeps facts_to_compact_json's text for replay: its bytes must not move when the
// fact tables change shape (this is the text ferry wrote before the tables existed).
TEST(FactsJson, CompactBytesAreTheLedgersFormat) {
  Facts f;
  f.model = "m";
  f.prompt_tokens = 12;
  f.max_tokens = 5;
  f.temperature = 0.5;
  f.top_p = 1;
  f.stream = f.tools = f.response_format = f.task_id = true;
  f.key = "k";
  f.team = "t";
  f.project = "p";
  f.role = "app";
  f.tags = {"x", "y"};
  f.claimed_tags = {"c"};
  f.unix_seconds = 1764446400;
  f.budget_left_pct = 12.5;
  f.split = 0xFFFFFFFFFFFFFFFFull;
  TargetFacts plain;
  plain.ref = "a";
  TargetFacts busy;
  busy.ref = "b";
  busy.prompt_tokens = 3;
  busy.context_length = 9;
  busy.healthy = false;
  busy.queue_depth = 1;
  busy.est_wait_ms = 2;
  busy.p90_ttft_ms = 3;
  busy.error_rate = 0.25;
  f.targets = {plain, busy};
  EXPECT_EQ(facts_to_compact_json(f).dump(),
            R"({"budget_left_pct":12.5,"claimed_tags":["c"],"key":"k","max_tokens":5,"model":"m",)"
            R"("project":"p","prompt_tokens":12,"response_format":true,"role":"app",)"
            R"("split":18446744073709551615,"stream":true,"tags":["x","y"],"targets":[{"ref":"a"},)"
            R"({"context_length":9,"error_rate":0.25,"est_wait_ms":2,"healthy":false,)"
            R"("p90_ttft_ms":3,"prompt_tokens":3,"queue_depth":1,"ref":"b"}],"task_id":true,)"
            R"("team":"t","temperature":0.5,"tools":true,"top_p":1.0,"unix_seconds":1764446400})");
  EXPECT_EQ(facts_to_compact_json(Facts{}).dump(), "{}");
  Facts zero;
  zero.max_tokens = 0;  // present at zero is not absent
  EXPECT_EQ(facts_to_compact_json(zero).dump(), R"({"max_tokens":0})");
  auto back = facts_from_json(facts_to_compact_json(f));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(facts_to_json(*back), facts_to_json(f));
  // The text the gateway writes on every request is those bytes.
  EXPECT_EQ(facts_to_compact_text(f), facts_to_compact_json(f).dump());
  EXPECT_EQ(facts_to_compact_text(Facts{}), "{}");
  EXPECT_EQ(facts_to_compact_text(zero), R"({"max_tokens":0})");
}

// facts_to_compact_text is facts_to_compact_json(f).dump() for any facts: random ones, each
// member at its default or not, with strings that need escaping and doubles of every kind.
TEST(FactsJson, CompactTextIsTheTreesDump) {
  std::mt19937_64 rng(17);
  auto coin = [&] { return (rng() & 1) != 0; };
  const std::vector<std::string> strings = {"",
                                            "a",
                                            "team-x",
                                            "q\"uote",
                                            "back\\slash",
                                            "ctl\x01\t\n",
                                            "\xc3\xa9t\xc3\xa9",
                                            "\xf0\x9f\x98\x80"};
  std::vector<double> doubles = {0.0,  -0.0,  0.1,       0.5, 1.0,  1e-7, 12.345678901234567,
                                 1e21, -2.75, 100.0 / 3, 2.0, 7e300};
  // Integral values, written without a json below 1e15 (and with an exponent from there on).
  for (double v : {100.0, -3.0, 1e14, 999999999999999.0, 1e15, -1e15, 1e16, 9007199254740993.0}) {
    doubles.push_back(v);
  }
  // Not finite (null), the extremes, and any bit pattern (nlohmann's shortest form, written
  // without a json).
  for (double v :
       {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
        -std::numeric_limits<double>::infinity(), 5e-324, 1.7976931348623157e308}) {
    doubles.push_back(v);
  }
  for (int i = 0; i < 64; ++i) doubles.push_back(std::bit_cast<double>(rng()));
  auto str = [&] { return strings[rng() % strings.size()]; };
  auto dbl = [&] { return doubles[rng() % doubles.size()]; };
  auto list = [&] {
    std::vector<std::string> v(rng() % 3);
    for (auto& s : v) s = str();
    return v;
  };
  for (int round = 0; round < 2000; ++round) {
    Facts f;
    if (coin()) f.model = str();
    if (coin()) f.api = str();
    if (coin()) f.prompt_tokens = static_cast<int64_t>(rng() % 100000) - 5;
    if (coin()) f.max_tokens = static_cast<int64_t>(rng() % 3000) - 1;
    if (coin()) f.temperature = dbl();
    if (coin()) f.top_p = dbl();
    f.stream = coin();
    f.tools = coin();
    f.response_format = coin();
    f.task_id = coin();
    if (coin()) f.key = str();
    if (coin()) f.team = str();
    if (coin()) f.project = str();
    if (coin()) f.role = str();
    if (coin()) f.tags = list();
    if (coin()) f.claimed_tags = list();
    if (coin()) f.unix_seconds = static_cast<int64_t>(rng() >> 30);
    if (coin()) f.budget_left_pct = dbl();
    if (coin()) f.split = rng();
    for (uint64_t t = rng() % 4; t > 0; --t) {
      TargetFacts target;
      target.ref = str();
      if (coin()) target.prompt_tokens = static_cast<int64_t>(rng() % 5000);
      if (coin()) target.context_length = static_cast<int64_t>(rng() % 200000);
      target.healthy = coin();
      if (coin()) target.queue_depth = static_cast<int64_t>(rng() % 40);
      if (coin()) target.est_wait_ms = static_cast<int64_t>(rng() % 9000);
      if (coin()) target.p90_ttft_ms = static_cast<int64_t>(rng() % 9000);
      if (coin()) target.error_rate = dbl();
      f.targets.push_back(target);
    }
    ASSERT_EQ(facts_to_compact_text(f), facts_to_compact_json(f).dump()) << "round " << round;
  }
  // Bytes that are not UTF-8 (a header's claimed tag): U+FFFD, where dump() would throw.
  Facts bad;
  bad.claimed_tags = {"x\xffy"};
  EXPECT_EQ(facts_to_compact_text(bad), "{\"claimed_tags\":[\"x\xef\xbf\xbdy\"]}");
}

// The fact table (policies/fact_table.h) is what the loader offers: every request fact in the
// `when` list, every per-target fact in the `state` list, and nothing else.
TEST(FactTable, LoaderListsExactlyTheTablesFacts) {
  std::string when_list;
  std::string state_list;
  for (size_t i = 0; i < std::size(kFactTable); ++i) {
    const FactSpec& f = kFactTable[i];
    EXPECT_EQ(static_cast<size_t>(f.fact), i);
    EXPECT_EQ(fact_name(f.fact), f.name);
    std::string& list = f.scope == FactScope::kTarget ? state_list : when_list;
    list += (list.empty() ? "" : ", ") + std::string(f.name);
    if (f.scope == FactScope::kBoth)
      state_list += (state_list.empty() ? "" : ", ") + std::string(f.name);
  }
  const std::string head = "targets: { small: m }\nrules:\n  - id: a\n    when: ";
  const std::string tail = "\n    route: [small]\ndefault: { route: [small] }\n";
  std::string e = testing::errors_of(head + "{ nope: 1 }" + tail);
  EXPECT_NE(e.find("(facts: " + when_list + ", state;"), std::string::npos) << e;
  e = testing::errors_of(head + "{ state: { small: { nope: 1 } } }" + tail);
  EXPECT_NE(e.find("(state facts: " + state_list + ")"), std::string::npos) << e;
}

}  // namespace
}  // namespace ferry::policies
