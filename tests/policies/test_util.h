// Helpers shared by the policy tests: load a policy from text or fail the test.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "policies/loader.h"

namespace ferry::policies::testing {

// Loads `text`, asserting that it is valid.
inline std::shared_ptr<const Policy> must_load(const std::string& text,
                                               const LoadOptions& options = {}) {
  LoadResult r = load_policy_text(text, "test.yaml", options);
  EXPECT_TRUE(r.ok()) << r.errors_text();
  return r.policy;
}

// A policy with targets small/large, the given rules and a default to `large`.
inline std::string with_rules(const std::string& rules) {
  return "targets: { small: local-m, large: gpu-m }\n"
         "models: [auto, chat, chat-large]\n"
         "rules:\n" +
         rules + "default: { route: [large] }\n";
}

// Loads a single rule `when: WHEN` routing to small; returns whether it matches `facts`.
inline bool matches(const std::string& when, const Facts& facts) {
  auto policy = must_load(with_rules("  - id: r\n    when: " + when + "\n    route: [small]\n"));
  if (!policy) return false;
  return policy->decide(facts).rule_id == "r";
}

// Loads and returns the errors text (empty when valid).
inline std::string errors_of(const std::string& text, const LoadOptions& options = {}) {
  return load_policy_text(text, "bad.yaml", options).errors_text();
}

}  // namespace ferry::policies::testing
