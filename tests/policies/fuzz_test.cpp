// Fuzzing the loader with random and mutated YAML: errors, never crashes. Seeded and bounded
// so that the unit tier stays fast and reproducible.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "policies/loader.h"

namespace ferry::policies {
namespace {

const char* kSeedPolicy = R"(timezone: "+01:00"
targets: { small: local-m, large: gpu-m }
models: [auto, { name: chat, description: quick }]
rules:
  - id: a
    when: { prompt_tokens: { lte: 1500 }, tools: absent, fits: small }
    route: [small, large]
  - id: b
    when: { any: [ { team: research }, { tags: { matches: 'x.*' } } ], not: { stream: true } }
    set: { max_tokens: { at_most: 4096, default: 10 }, temperature: 0.5 }
    route: [{ target: large, weight: 9 }, { target: small, weight: 1 }]
    shadow: small
    tag: [t1]
  - id: c
    when: { state: { large: { queue_depth: { gt: 3 }, healthy: false } }, weekday: [mon] }
    reject: { status: 503, message: busy }
default: { route: [large, small] }
)";

const char* kTokens[] = {
    "{",          "}",         "[",
    "]",          ":",         ",",
    "-",          " ",         "\n",
    "  ",         "'",         "\"",
    "&a",         "*a",        "!!str",
    "?",          "|",         ">",
    "#",          "targets",   "rules",
    "default",    "route",     "when",
    "id",         "all",       "any",
    "not",        "matches",   "'(a|b)*c'",
    "'[z-a]'",    "lt",        "in",
    "small",      "large",     "1e309",
    "-1",         "0x10",      "~",
    "null",       "true",      "prompt_tokens",
    "state",      "fits",      "set",
    "max_tokens", "at_most",   "reject",
    "status",     "weight",    "999999999999999999999",
    "\t",         "%YAML 1.2", "---",
    "...",
};

void exercise(const std::string& text) {
  LoadResult r = load_policy_text(text, "fuzz.yaml");
  if (r.ok()) {
    ASSERT_TRUE(r.errors.empty());
    Facts f;
    f.prompt_tokens = 100;
    f.split = 7;
    Decision d = r.policy->decide(f);
    EXPECT_FALSE(d.rule_id.empty());
    (void)r.policy->explain(f);
  } else {
    ASSERT_FALSE(r.errors.empty());
    for (const auto& e : r.errors) EXPECT_FALSE(e.message.empty());
  }
}

TEST(LoaderFuzz, MutatedPolicies) {
  std::mt19937_64 rng(20261129);
  std::string seed = kSeedPolicy;
  int valid = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    std::string text = seed;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      size_t pos = rng() % text.size();
      switch (rng() % 5) {
        case 0:
          text.erase(pos, 1 + rng() % 8);
          break;
        case 1:
          text.insert(pos, kTokens[rng() % std::size(kTokens)]);
          break;
        case 2:
          text[pos] = static_cast<char>(rng() % 256);
          break;
        case 3: {  // duplicate a slice
          size_t len = 1 + rng() % 40;
          text.insert(pos, text.substr(rng() % text.size(), len));
          break;
        }
        default:
          std::swap(text[pos], text[rng() % text.size()]);
          break;
      }
    }
    exercise(text);
    if (HasFatalFailure()) FAIL() << "input:\n" << text;
    valid += load_policy_text(text, "fuzz.yaml").ok();
  }
  EXPECT_GT(valid, 0);  // some mutations stay valid, so evaluation is exercised too
}

TEST(LoaderFuzz, RandomTokenSoup) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 1500; ++iter) {
    std::string text;
    int n = static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) text += kTokens[rng() % std::size(kTokens)];
    exercise(text);
    if (HasFatalFailure()) FAIL() << "input:\n" << text;
  }
}

TEST(LoaderFuzz, RandomBytes) {
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 500; ++iter) {
    std::string text(rng() % 200, '\0');
    for (auto& c : text) c = static_cast<char>(rng() % 256);
    exercise(text);
  }
}

}  // namespace
}  // namespace ferry::policies
