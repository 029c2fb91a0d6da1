// Validation: every refusal names file, line and column; warnings for unreachable rules.
#include <gtest/gtest.h>

#include "tests/policies/test_util.h"

namespace ferry::policies {
namespace {

using testing::errors_of;
using testing::must_load;

const char* kHead = "targets: { small: local-m, large: gpu-m }\n";  // line 1

TEST(Loader, MinimalPolicy) {
  auto p = must_load("targets: { small: m }\ndefault: { route: [small] }\n");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->rules().empty());
  EXPECT_EQ(p->targets().size(), 1u);
  EXPECT_TRUE(p->has_alias("small"));  // no `models`: the targets are the aliases
  EXPECT_EQ(p->version().size(), 64u);
  EXPECT_EQ(p->timezone(), "UTC");
}

TEST(Loader, AliasesAndTargetRefs) {
  auto p = must_load(std::string(kHead) +
                     "models: [auto, { name: chat, description: quick }]\n"
                     "default: { route: [small, large] }\n");
  ASSERT_TRUE(p);
  ASSERT_EQ(p->aliases().size(), 2u);
  EXPECT_EQ(p->aliases()[1].description, "quick");
  EXPECT_TRUE(p->has_alias("auto"));
  EXPECT_FALSE(p->has_alias("small"));
  EXPECT_EQ(p->target_refs(), (std::vector<std::string>{"local-m", "gpu-m"}));
}

TEST(Loader, VersionIsTheContentHash) {
  std::string a = "targets: { small: m }\ndefault: { route: [small] }\n";
  auto p1 = must_load(a);
  auto p2 = must_load(a);
  auto p3 = must_load(a + "# a comment changes the version\n");
  ASSERT_TRUE(p1 && p2 && p3);
  EXPECT_EQ(p1->version(), p2->version());
  EXPECT_NE(p1->version(), p3->version());
}

TEST(Loader, MissingDefaultIsRefused) {
  std::string e = errors_of(std::string(kHead) + "rules: []\n");
  EXPECT_NE(e.find("bad.yaml:1:1: missing required key 'default'"), std::string::npos) << e;
}

TEST(Loader, UnknownTopLevelKeyHasLineAndColumn) {
  std::string e = errors_of(std::string(kHead) + "rulez: []\ndefault: { route: [small] }\n");
  EXPECT_NE(e.find("bad.yaml:2:1: unknown key 'rulez'"), std::string::npos) << e;
}

// The ledger marks a shadow copy's row with the trusted tag "shadow": a rule may not put it on
// the requests it serves (reports would count them as shadow copies).
TEST(Loader, TheShadowTagIsReserved) {
  std::string e = errors_of(std::string(kHead) +
                            "rules:\n  - id: a\n    route: [small]\n    tag: [ok, shadow]\n"
                            "default: { route: [small] }\n");
  EXPECT_NE(e.find("the tag 'shadow' is reserved"), std::string::npos) << e;
  must_load(std::string(kHead) +
            "rules:\n  - id: a\n    route: [small]\n    tag: [shadowy, x-shadow]\n"
            "default: { route: [small] }\n");
}

TEST(Loader, UnknownRuleKey) {
  std::string e = errors_of(std::string(kHead) +
                            "rules:\n  - id: a\n    rout: [small]\n"
                            "default: { route: [small] }\n");
  EXPECT_NE(e.find("bad.yaml:4:5: unknown key 'rout' in a rule"), std::string::npos) << e;
}

TEST(Loader, UnknownFact) {
  std::string e = errors_of(std::string(kHead) +
                            "rules:\n  - id: a\n    when: { prompt_tokenz: 5 }\n"
                            "    route: [small]\ndefault: { route: [small] }\n");
  EXPECT_NE(e.find("bad.yaml:4:13: unknown fact 'prompt_tokenz'"), std::string::npos) << e;
}

TEST(Loader, UnknownOperator) {
  std::string e = errors_of(std::string(kHead) +
                            "rules:\n  - id: a\n    when: { prompt_tokens: { lessthan: 5 } }\n"
                            "    route: [small]\ndefault: { route: [small] }\n");
  EXPECT_NE(e.find("bad.yaml:4:30: unknown operator 'lessthan'"), std::string::npos) << e;
}

TEST(Loader, UnknownTargetInRouteShadowAndFacts) {
  std::string e = errors_of(std::string(kHead) +
                            "rules:\n"
                            "  - id: a\n    route: [small, huge]\n"              // line 4
                            "  - id: b\n    route: [small]\n    shadow: tiny\n"  // line 7
                            "  - id: c\n    when: { fits: medium }\n    route: [small]\n"
                            "default: { route: [nope] }\n");  // line 11
  EXPECT_NE(e.find("bad.yaml:4:20: unknown target 'huge'"), std::string::npos) << e;
  EXPECT_NE(e.find("bad.yaml:7:13: unknown target 'tiny'"), std::string::npos) << e;
  EXPECT_NE(e.find("bad.yaml:9:19: unknown target 'medium'"), std::string::npos) << e;
  EXPECT_NE(e.find("bad.yaml:11:20: unknown target 'nope'"), std::string::npos) << e;
}

TEST(Loader, EveryBadRuleIsReportedNotJustTheFirst) {
  std::string e = errors_of(std::string(kHead) +
                            "rules:\n  - id: a\n    route: [x]\n  - id: b\n    route: [y]\n"
                            "default: { route: [small] }\n");
  EXPECT_NE(e.find("'x'"), std::string::npos) << e;
  EXPECT_NE(e.find("'y'"), std::string::npos) << e;
}

TEST(Loader, TargetsAreCheckedAgainstTheConfigModels) {
  LoadOptions options;
  options.known_targets = std::vector<std::string>{"local-m"};
  std::string e = errors_of(std::string(kHead) + "default: { route: [small] }\n", options);
  EXPECT_NE(e.find("bad.yaml:1:35: target 'large' refers to 'gpu-m', which is not a model"),
            std::string::npos)
      << e;
  options.known_targets = std::vector<std::string>{"local-m", "gpu-m"};
  EXPECT_EQ(errors_of(std::string(kHead) + "default: { route: [small] }\n", options), "");
}

TEST(Loader, TypeMismatches) {
  auto rule = [](const std::string& when) {
    return errors_of(std::string(kHead) + "rules:\n  - id: a\n    when: " + when +
                     "\n    route: [small]\ndefault: { route: [small] }\n");
  };
  EXPECT_NE(rule("{ prompt_tokens: many }").find("must be an integer"), std::string::npos);
  EXPECT_NE(rule("{ prompt_tokens: 1.5 }").find("must be an integer"), std::string::npos);
  EXPECT_NE(rule("{ stream: maybe }").find("true or false"), std::string::npos);
  EXPECT_NE(rule("{ team: { lt: 5 } }").find("needs a number"), std::string::npos);
  EXPECT_NE(rule("{ prompt_tokens: { matches: '5' } }").find("needs a string fact"),
            std::string::npos);
  EXPECT_NE(rule("{ budget_left_pct: { lt: lots } }").find("must be a number"), std::string::npos);
  EXPECT_NE(rule("{ hour: 24 }").find("hour must be 0..23"), std::string::npos);
  EXPECT_NE(rule("{ time: { lt: '9am' } }").find("HH:MM"), std::string::npos);
  EXPECT_NE(rule("{ weekday: funday }").find("mon..sun"), std::string::npos);
  EXPECT_NE(rule("{ role: boss }").find("app, finance or admin"), std::string::npos);
  EXPECT_NE(rule("{ model: gpt-5 }").find("unknown model alias 'gpt-5'"), std::string::npos);
  EXPECT_NE(rule("{ prompt_tokens: present }").find("always present"), std::string::npos);
  EXPECT_NE(rule("{ team: { in: [] } }").find("non-empty list"), std::string::npos);
  EXPECT_NE(rule("{ team: {} }").find("needs a value"), std::string::npos);
  EXPECT_NE(rule("{ all: { team: a } }").find("must be a list"), std::string::npos);
  EXPECT_NE(rule("[ team ]").find("when must be a mapping"), std::string::npos);
  EXPECT_NE(rule("{ state: { large: { speed: 1 } } }").find("unknown state fact 'speed'"),
            std::string::npos);
}

TEST(Loader, InvalidRegularExpressionIsRefusedAtLoad) {
  std::string e = errors_of(std::string(kHead) +
                            "rules:\n  - id: a\n    when: { team: { matches: 'r[a-' } }\n"
                            "    route: [small]\ndefault: { route: [small] }\n");
  EXPECT_NE(e.find("bad.yaml:4:30: invalid regular expression 'r[a-'"), std::string::npos) << e;
}

TEST(Loader, ActionMistakes) {
  auto rule = [](const std::string& body) {
    return errors_of(std::string(kHead) + "rules:\n  - id: a\n" + body +
                     "default: { route: [small] }\n");
  };
  EXPECT_NE(rule("    when: { team: x }\n").find("exactly one of 'route' or 'reject'"),
            std::string::npos);
  EXPECT_NE(rule("    route: [small]\n    reject: { message: x }\n").find("exactly one"),
            std::string::npos);
  EXPECT_NE(rule("    route: []\n").find("at least one target"), std::string::npos);
  EXPECT_NE(rule("    route: [small, small]\n").find("twice"), std::string::npos);
  EXPECT_NE(rule("    route: [{ target: small, weight: 1 }, large]\n").find("every hop"),
            std::string::npos);
  EXPECT_NE(rule("    route: [{ target: small, weight: 0 }]\n").find("not all be 0"),
            std::string::npos);
  EXPECT_NE(rule("    reject: { status: 200, message: x }\n").find("400..599"), std::string::npos);
  EXPECT_NE(rule("    reject: { status: 400 }\n").find("needs a message"), std::string::npos);
  EXPECT_NE(rule("    reject: { message: x }\n    shadow: small\n").find("no effect"),
            std::string::npos);
  EXPECT_NE(rule("    route: [small]\n    set: { max_tokens: 0 }\n").find("between 1"),
            std::string::npos);
  EXPECT_NE(rule("    route: [small]\n    set: { temperature: { at_most: 3 } }\n")
                .find("between 0 and 2"),
            std::string::npos);
  EXPECT_NE(rule("    route: [small]\n    set: { top_p: { at_least: 0.9, at_most: 0.5 } }\n")
                .find("at_least is greater"),
            std::string::npos);
  EXPECT_NE(rule("    route: [small]\n    set: { seed: 1 }\n").find("unknown key 'seed'"),
            std::string::npos);
}

TEST(Loader, RuleIds) {
  std::string e = errors_of(std::string(kHead) +
                            "rules:\n  - id: a\n    route: [small]\n"
                            "  - id: a\n    route: [small]\n"
                            "  - route: [small]\n"
                            "  - id: default\n    route: [small]\n"
                            "  - id: 'has space'\n    route: [small]\n"
                            "default: { route: [small] }\n");
  EXPECT_NE(e.find("bad.yaml:5:9: duplicate rule id 'a' (first at line 3)"), std::string::npos)
      << e;
  EXPECT_NE(e.find("bad.yaml:7:5: a rule needs an id"), std::string::npos) << e;
  EXPECT_NE(e.find("reserved"), std::string::npos) << e;
  EXPECT_NE(e.find("may use only"), std::string::npos) << e;
}

TEST(Loader, DuplicateKeysAreRefused) {
  std::string e = errors_of(std::string(kHead) +
                            "rules:\n  - id: a\n    id: b\n    route: [small]\n"
                            "default: { route: [small] }\n");
  EXPECT_NE(e.find("duplicate key 'id'"), std::string::npos) << e;
}

TEST(Loader, TimezoneMustBeAFixedOffset) {
  EXPECT_NE(errors_of("timezone: Europe/Paris\ntargets: { s: m }\ndefault: { route: [s] }\n")
                .find("bad.yaml:1:11: timezone must be UTC or a fixed offset"),
            std::string::npos);
  EXPECT_EQ(parse_utc_offset("+05:30"), 330);
  EXPECT_EQ(parse_utc_offset("UTC-08:00"), -480);
  EXPECT_EQ(parse_utc_offset("Z"), 0);
  EXPECT_FALSE(parse_utc_offset("+5:30"));
  EXPECT_FALSE(parse_utc_offset("+15:00"));
}

TEST(Loader, InvalidYamlAndWrongShapes) {
  EXPECT_NE(errors_of("targets: [\n").find("bad.yaml:"), std::string::npos);
  EXPECT_NE(errors_of("").find("must be a mapping"), std::string::npos);
  EXPECT_NE(errors_of("- a\n- b\n").find("must be a mapping"), std::string::npos);
  EXPECT_NE(errors_of("default: { route: [s] }\n").find("missing required key 'targets'"),
            std::string::npos);
  EXPECT_NE(errors_of("targets: {}\ndefault: { route: [s] }\n").find("non-empty mapping"),
            std::string::npos);
  EXPECT_NE(errors_of("targets: { s: m }\nrules: 5\ndefault: { route: [s] }\n")
                .find("rules must be a list"),
            std::string::npos);
}

TEST(Loader, FileThatCannotBeRead) {
  LoadResult r = load_policy_file("/nonexistent/policies.yaml");
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("cannot read"), std::string::npos);
}

TEST(Loader, DeepNestingIsRefusedNotACrash) {
  std::string when;
  for (int i = 0; i < 40; ++i) when += "{ not: ";
  when += "{ team: a }";
  for (int i = 0; i < 40; ++i) when += " }";
  std::string e = errors_of(std::string(kHead) + "rules:\n  - id: a\n    when: " + when +
                            "\n    route: [small]\ndefault: { route: [small] }\n");
  EXPECT_NE(e.find("nested too deeply"), std::string::npos) << e;
}

std::vector<std::string> warnings_of(const std::string& text) {
  LoadResult r = load_policy_text(text, "w.yaml");
  EXPECT_TRUE(r.ok()) << r.errors_text();
  std::vector<std::string> out;
  for (const auto& w : r.warnings) out.push_back(w.to_string());
  return out;
}

TEST(Loader, WarnsAboutRulesAfterOneThatAlwaysMatches) {
  auto w = warnings_of(std::string(kHead) +
                       "rules:\n"
                       "  - id: catch-all\n    route: [small]\n"                    // line 3
                       "  - id: late\n    when: { team: x }\n    route: [large]\n"  // line 5
                       "default: { route: [small] }\n");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0],
            "w.yaml:5:5: rule 'late' can never match: rule 'catch-all' (line 3) before "
            "it always matches");
  EXPECT_NE(w[1].find("default is never used"), std::string::npos);
}

TEST(Loader, WarnsWhenAnEarlierRuleCoversALaterOne) {
  auto w = warnings_of(std::string(kHead) +
                       "rules:\n"
                       "  - id: research\n    when: { team: research }\n    route: [large]\n"
                       "  - id: research-streams\n    when: { stream: true, team: research }\n"
                       "    route: [small]\n"
                       "  - id: streams\n    when: { stream: true }\n    route: [small]\n"
                       "  - id: empty-all\n    when: { all: [] }\n    route: [small]\n"
                       "default: { route: [small] }\n");
  ASSERT_GE(w.size(), 1u);
  EXPECT_NE(w[0].find("rule 'research-streams' can never match: rule 'research'"),
            std::string::npos)
      << w[0];
  bool empty_all = false;
  for (const auto& s : w) empty_all = empty_all || s.find("'empty-all' always") != s.npos;
  EXPECT_TRUE(empty_all);
}

TEST(Loader, WarnsAboutAlwaysFalseConditions) {
  auto w = warnings_of(std::string(kHead) +
                       "rules:\n  - id: never\n    when: { any: [] }\n    route: [large]\n"
                       "default: { route: [small] }\n");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("condition is always false"), std::string::npos);
}

TEST(Loader, NoWarningsForAnOrdinaryPolicy) {
  EXPECT_TRUE(warnings_of(std::string(kHead) +
                          "rules:\n  - id: a\n    when: { team: x }\n    route: [large]\n"
                          "  - id: b\n    when: { team: y }\n    route: [small]\n"
                          "default: { route: [small] }\n")
                  .empty());
}

TEST(Loader, ExampleFileIsValidAndChecksAgainstTheDefaultConfig) {
  LoadOptions options;
  options.known_targets = std::vector<std::string>{"default"};
  LoadResult r = load_policy_file(FERRY_POLICY_EXAMPLE, options);
  ASSERT_TRUE(r.ok()) << r.errors_text();
  EXPECT_TRUE(r.warnings.empty()) << r.warnings_text();
  EXPECT_GE(r.policy->rules().size(), 5u);
  EXPECT_TRUE(r.policy->has_alias("chat-large"));
}

// Issue 15: the example policy sends short tool and JSON requests to the local model first
// (the large one as the fallback hop), and long ones straight to the large model.
TEST(Loader, ExamplePolicySendsShortToolAndJsonRequestsToTheLocalModel) {
  LoadOptions options;
  options.known_targets = std::vector<std::string>{"default"};
  LoadResult r = load_policy_file(FERRY_POLICY_EXAMPLE, options);
  ASSERT_TRUE(r.ok()) << r.errors_text();
  for (const bool tools : {true, false}) {
    Facts f;
    f.model = "auto";
    f.prompt_tokens = 400;
    f.max_tokens = 256;
    f.tools = tools;
    f.response_format = !tools;
    f.unix_seconds = 1767225600;  // 2026-01-01, a Thursday, 01:00 at +01:00
    const Decision d = r.policy->decide(f);
    EXPECT_EQ(d.rule_id, "short-tools-and-json-go-local");
    ASSERT_EQ(d.route.size(), 2u);
    EXPECT_EQ(d.route[0].target, "small");
    EXPECT_EQ(d.route[1].target, "large");
    f.prompt_tokens = 5000;  // not short: not this rule
    EXPECT_NE(r.policy->decide(f).rule_id, "short-tools-and-json-go-local");
  }
}

}  // namespace
}  // namespace ferry::policies
