// Hostile policies and facts: `matches` patterns that make a backtracking matcher take
// exponential time, patterns RE2 cannot run in linear time (refused at load, with a
// position), and YAML alias bombs, cycles and deep nests (refused before anything walks them).
#include <gtest/gtest.h>

#include <string>

#include "common/yaml_util.h"
#include "policies/loader.h"
#include "policies/yaml_tree.h"
#include "test_util.h"
#include "tests/common/alias_bomb.h"

namespace ferry::policies {
namespace {

using testing::errors_of;
using testing::matches;
using testing::with_rules;

Facts with_claimed_tag(const std::string& tag) {
  Facts f;
  f.model = "auto";
  f.claimed_tags = {tag};
  return f;
}

// std::regex took time exponential in the number of a's for these (60 a's hung the server);
// RE2's time is linear in the value, so each decide() below ends, which the test's timeout
// checks. No clock is read.
TEST(PolicyRegex, HostileInputsStayLinear) {
  const std::string sixty(60, 'a');
  EXPECT_FALSE(matches("{ claimed_tags: { matches: '(a|aa)+b' } }", with_claimed_tag(sixty)));
  EXPECT_TRUE(matches("{ claimed_tags: { matches: '(a|aa)+b' } }", with_claimed_tag(sixty + "b")));
  const char* evil[] = {"(a+)+b",       "(a|a)*b",       "(a*)*b",      "(.*a){12}b",
                        "(a|aa|aaa)*c", "((a+)|(a+))+b", "(\\w+\\s?)*b"};
  Facts f;
  f.model = std::string(4000, 'a');  // a client's model name: the longest fact a rule sees
  for (const char* pattern : evil) {
    std::string when = std::string("{ model: { matches: '") + pattern + "' } }";
    EXPECT_FALSE(matches(when, f)) << pattern;
    Facts hit = f;
    hit.model += "b";
    if (std::string(pattern).find('c') == std::string::npos) {
      EXPECT_TRUE(matches(when, hit)) << pattern;
    }
  }
}

TEST(PolicyRegex, WholeValueMatchAndLongValuesNeverMatch) {
  Facts f;
  f.model = "auto";
  EXPECT_TRUE(matches("{ model: { matches: 'au.*' } }", f));
  EXPECT_FALSE(matches("{ model: { matches: 'au' } }", f));  // whole value, as before
  EXPECT_FALSE(matches("{ model: { matches: 'ut' } }", f));
  EXPECT_TRUE(matches("{ model: { matches: '\\w{4}' } }", f));
  f.model = std::string(kMaxMatchedBytes, 'x');
  EXPECT_TRUE(matches("{ model: { matches: 'x+' } }", f));
  f.model += "x";
  EXPECT_FALSE(matches("{ model: { matches: 'x+' } }", f));
  EXPECT_TRUE(matches("{ not: { model: { matches: 'x+' } } }", f));
}

TEST(PolicyRegex, PatternsRe2CannotRunSafelyAreRefusedAtLoad) {
  struct Case {
    const char* pattern;
    const char* message;
  };
  const Case cases[] = {
      {"(a)\\\\1", "invalid escape sequence"},            // a backreference
      {"(?=a)b", "invalid perl operator"},                // lookahead
      {"(?<!a)b", "invalid perl operator"},               // lookbehind
      {"(a{100}){100}", "invalid repetition size"},       // 10,000 copies
      {"\\\\pL{300}", "compiles to more than 1024 KiB"},  // a huge program
      {"r[a-", "missing ]"},
  };
  for (const Case& c : cases) {
    std::string text = with_rules(std::string("  - id: r\n    when: { team: { matches: \"") +
                                  c.pattern + "\" } }\n    route: [small]\n");
    std::string e = errors_of(text);
    // The operand's position: line 5 (after targets, models, rules:, - id:), column 30.
    EXPECT_NE(e.find("bad.yaml:5:30: invalid regular expression"), std::string::npos)
        << c.pattern << ": " << e;
    EXPECT_NE(e.find(c.message), std::string::npos) << c.pattern << ": " << e;
  }
  std::string too_long(kMaxPatternBytes + 1, 'a');
  std::string e = errors_of(with_rules("  - id: r\n    when: { team: { matches: " + too_long +
                                       " } }\n    route: [small]\n"));
  EXPECT_NE(e.find("bad.yaml:5:30: regular expression is too long"), std::string::npos) << e;
}

TEST(PolicyYaml, AliasBombIsRefusedWithAPosition) {
  LoadResult r = load_policy_text(ferry::testing::alias_bomb(), "bomb.yaml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].file, "bomb.yaml");
  EXPECT_GT(r.errors[0].line, 1);  // at the alias that crosses the budget
  EXPECT_GT(r.errors[0].column, 1);
  EXPECT_NE(r.errors[0].message.find("more than 200000 nodes"), std::string::npos)
      << r.errors_text();
  // Expanded into a tree, the same document would be 9^9 nodes: a tree is never built.
  EXPECT_THROW(ytree::Document::parse(ferry::testing::alias_bomb()), YAML::Exception);
  EXPECT_THROW(yaml::parse(ferry::testing::alias_bomb(), "bomb.yaml"), yaml::YamlError);
}

TEST(PolicyYaml, LimitsCountExpandedNodesAndDepth) {
  yaml::Limits small;
  small.max_nodes = 20;
  small.max_depth = 4;
  // The map, 2 keys and 2 sequences of 3 (the alias expanded): 11 nodes.
  const std::string twice = "a: &x [1, 2, 3]\nb: *x\n";
  EXPECT_NO_THROW(yaml::check_limits(twice, small));
  const std::string more = twice + "c: *x\nd: *x\n";  // 21 nodes
  EXPECT_THROW(yaml::check_limits(more, small), YAML::ParserException);
  // Depth: an alias of a 3-deep node placed at depth 2 reaches depth 5.
  const std::string deep = "a: &x [[[1]]]\nb: { c: *x }\n";
  try {
    yaml::check_limits(deep, small);
    ADD_FAILURE() << "a 5-deep document passed a depth limit of 4";
  } catch (const YAML::ParserException& e) {
    EXPECT_NE(e.msg.find("more than 4 levels"), std::string::npos) << e.msg;
    EXPECT_EQ(e.mark.line, 1);  // the alias, on the second line
  }
  std::string nest(150, '[');
  nest += std::string(150, ']');
  EXPECT_NE(errors_of(nest).find("more than 100 levels"), std::string::npos);
  std::string big(yaml::Limits{}.max_bytes + 1, '#');
  EXPECT_NE(errors_of(big).find("bytes, more than"), std::string::npos);
}

// Without aliases the fast path builds the tree itself; past the node budget it leaves the
// document to the yaml-cpp path, which refuses it with a position.
TEST(PolicyYaml, TheFastPathKeepsTheNodeBudget) {
  std::string list = "a: [1";
  for (int i = 0; i < 200'000; ++i) list += ",1";
  list += "]\n";  // 1 map, 1 key, 1 list and 200,001 items
  EXPECT_EQ(ytree::Document::parse_fast(list), nullptr);
  auto unbounded = ytree::Document::parse_fast(list, int64_t{1} << 40);
  ASSERT_NE(unbounded, nullptr);
  EXPECT_EQ(unbounded->node_count(), 200'004u);
  try {
    ytree::Document::parse(list);
    ADD_FAILURE() << "a document of 200,004 nodes passed a budget of 200,000";
  } catch (const YAML::Exception& e) {
    EXPECT_NE(e.msg.find("more than 200000 nodes"), std::string::npos) << e.msg;
    EXPECT_EQ(e.mark.line, 0);
  }
  std::string fits = "a: [1";
  for (int i = 0; i < 1000; ++i) fits += ",1";
  fits += "]\n";
  auto doc = ytree::Document::parse(fits);
  ASSERT_NE(doc, nullptr);
  EXPECT_TRUE(doc->parsed_fast());
}

TEST(PolicyYaml, AliasCyclesAreRefused) {
  EXPECT_NE(errors_of("a: &x [1, *x]\n").find("an alias refers to a node that contains it"),
            std::string::npos);
  EXPECT_NE(errors_of("a: &x { b: *x }\n").find("contains it"), std::string::npos);
  EXPECT_THROW(yaml::parse("a: &x [1, *x]\n", "c.yaml"), yaml::YamlError);
}

TEST(PolicyYaml, AliasesWithinTheLimitsStillLoad) {
  auto policy = testing::must_load(
      "targets: { small: local-m, large: gpu-m }\n"
      "rules:\n"
      "  - id: a\n    when: { team: a }\n    route: &both [small, large]\n"
      "  - id: b\n    when: { team: b }\n    route: *both\n"
      "default: { route: [large] }\n");
  ASSERT_TRUE(policy);
  Facts f;
  f.model = "auto";
  f.team = "b";
  Decision d = policy->decide(f);
  EXPECT_EQ(d.rule_id, "b");
  ASSERT_EQ(d.route.size(), 2u);
  EXPECT_EQ(d.route[0].target, "small");
}

}  // namespace
}  // namespace ferry::policies
