// Fuzzes the policy loader (policies/loader: load_policy_text) over both of its YAML paths:
// ferry's own reader (policies/yaml_tree.cpp, parse_fast) and yaml-cpp's, converted. The loader
// never throws; when the fast reader accepts a document, yaml-cpp must read the same tree
// (types, scalars and marks), as yaml_tree.h promises.
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/yaml_util.h"
#include "policies/loader.h"
#include "policies/yaml_tree.h"

using namespace ferry::policies;

namespace {

bool same_mark(const YAML::Mark& a, const YAML::Mark& b) {
  return a.line == b.line && a.column == b.column;
}

bool same_tree(const ytree::Node& a, const ytree::Node& b) {
  if (a.type() != b.type() || !same_mark(a.Mark(), b.Mark())) return false;
  switch (a.type()) {
    case ytree::Type::kScalar:
      return a.Scalar() == b.Scalar();
    case ytree::Type::kSequence: {
      if (a.size() != b.size()) return false;
      auto bi = b.items().begin();
      for (ytree::Node item : a.items()) {
        if (!same_tree(item, *bi)) return false;
        ++bi;
      }
      return true;
    }
    case ytree::Type::kMap: {
      if (a.size() != b.size()) return false;
      auto bi = b.entries().begin();
      for (auto [key, value] : a.entries()) {
        auto [bkey, bvalue] = *bi;
        if (!same_tree(key, bkey) || !same_tree(value, bvalue)) return false;
        ++bi;
      }
      return true;
    }
    default:
      return true;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Alias bombs are bounded by the loader itself (common/yaml_util.h Limits): no guard here.
  LoadResult loaded = load_policy_text(text, "fuzz.yaml");
  (void)loaded.errors_text();
  (void)loaded.warnings_text();

  std::unique_ptr<ytree::Document> fast = ytree::Document::parse_fast(text);
  if (fast == nullptr) return 0;
  try {
    ferry::yaml::check_limits(text);  // the fast reader counts nodes only, not depth or bytes
  } catch (const YAML::Exception&) {
    return 0;
  }
  std::unique_ptr<ytree::Document> slow;
  try {
    slow = ytree::Document::from_yaml_cpp(YAML::Load(text));
  } catch (const YAML::Exception&) {
    __builtin_trap();  // the fast reader accepted what yaml-cpp calls invalid
  }
  if (!same_tree(fast->root(), slow->root())) __builtin_trap();  // the two trees differ
  return 0;
}
