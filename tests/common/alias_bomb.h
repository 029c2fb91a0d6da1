// A YAML alias bomb for the tests of the YAML limits (common/yaml_util.h) in the policy, config
// and integration tests: keys a..i, each a list of 9 aliases of the one before, so 9^9 (387
// million) strings once expanded, from about 700 bytes. Header-only; any thread.
#pragma once

#include <string>

namespace ferry::testing {

// Every line is prefixed with `indent` (to nest the bomb under a key).
inline std::string alias_bomb(const std::string& indent = "") {
  std::string text = indent + "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n";
  for (char level = 'b'; level <= 'i'; ++level) {
    std::string prev(1, static_cast<char>(level - 1));
    text += indent + std::string(1, level) + ": &" + level + " [";
    for (int i = 0; i < 9; ++i) text += (i == 0 ? "*" : ",*") + prev;
    text += "]\n";
  }
  return text;
}

}  // namespace ferry::testing
