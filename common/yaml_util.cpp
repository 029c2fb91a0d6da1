#include "common/yaml_util.h"

#include <fstream>
#include <sstream>

namespace ferry::yaml {

YamlError::YamlError(const std::string& file, const YAML::Mark& mark, const std::string& message)
    : std::runtime_error(file + ":" + std::to_string(mark.line + 1) + ":" +
                         std::to_string(mark.column + 1) + ": " + message),
      line_(mark.line + 1),
      column_(mark.column + 1) {}

YAML::Node parse(const std::string& text, const std::string& file) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw YamlError(file, e.mark, "invalid YAML: " + e.msg);
  }
}

YAML::Node parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw YamlError(path, YAML::Mark::null_mark(), "cannot read file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

namespace {
const char* type_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    default: return "nothing";
  }
}
}  // namespace

Map::Map(const YAML::Node& node, std::string file, const std::string& what)
    : node_(node), file_(std::move(file)) {
  if (!node_.IsMap()) {
    throw YamlError(file_, node_.Mark(), what + " must be a mapping, found " + type_name(node_));
  }
}

void Map::allow_only(std::initializer_list<const char*> allowed) const {
  for (const auto& kv : node_) {
    std::string key = kv.first.Scalar();
    bool ok = false;
    for (const char* a : allowed) ok = ok || key == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      throw YamlError(file_, kv.first.Mark(), "unknown key '" + key + "' (allowed: " + list + ")");
    }
  }
}

bool Map::has(const char* key) const { return static_cast<bool>(node_[key]); }

YAML::Node Map::raw(const char* key) const { return node_[key]; }

void Map::fail(const char* key, const std::string& message) const {
  YAML::Node n = node_[key];
  throw YamlError(file_, n ? n.Mark() : node_.Mark(), std::string(key) + ": " + message);
}

void Map::fail_here(const std::string& message) const {
  throw YamlError(file_, node_.Mark(), message);
}

std::string scalar_str(const YAML::Node& node, const std::string& file, const std::string& what) {
  if (!node.IsScalar()) {
    throw YamlError(file, node.Mark(), what + " must be a string, found " + type_name(node));
  }
  return node.Scalar();
}

int64_t scalar_int(const YAML::Node& node, const std::string& file, const std::string& what) {
  if (!node.IsScalar()) {
    throw YamlError(file, node.Mark(), what + " must be an integer, found " + type_name(node));
  }
  const std::string& s = node.Scalar();
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used, 10);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != s.size()) {
    throw YamlError(file, node.Mark(), what + " must be an integer, found '" + s + "'");
  }
  return v;
}

std::string Map::str(const char* key) const {
  YAML::Node n = node_[key];
  if (!n) fail_here(std::string("missing required key '") + key + "'");
  return scalar_str(n, file_, key);
}

std::optional<std::string> Map::opt_str(const char* key) const {
  YAML::Node n = node_[key];
  if (!n || n.IsNull()) return std::nullopt;
  return scalar_str(n, file_, key);
}

int64_t Map::integer(const char* key, int64_t min, int64_t max) const {
  YAML::Node n = node_[key];
  if (!n) fail_here(std::string("missing required key '") + key + "'");
  int64_t v = scalar_int(n, file_, key);
  if (v < min || v > max) {
    fail(key, "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                  ", found " + std::to_string(v));
  }
  return v;
}

int64_t Map::integer_or(const char* key, int64_t fallback, int64_t min, int64_t max) const {
  if (!node_[key]) return fallback;
  return integer(key, min, max);
}

bool Map::boolean_or(const char* key, bool fallback) const {
  YAML::Node n = node_[key];
  if (!n) return fallback;
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  fail(key, "must be true or false");
}

std::vector<std::string> Map::str_list_or_empty(const char* key) const {
  std::vector<std::string> out;
  YAML::Node n = node_[key];
  if (!n || n.IsNull()) return out;
  if (!n.IsSequence()) fail(key, std::string("must be a list, found ") + type_name(n));
  for (const auto& item : n) out.push_back(scalar_str(item, file_, std::string(key) + " item"));
  return out;
}

Map Map::map(const char* key) const {
  YAML::Node n = node_[key];
  if (!n) fail_here(std::string("missing required key '") + key + "'");
  return Map(n, file_, key);
}

std::optional<Map> Map::opt_map(const char* key) const {
  YAML::Node n = node_[key];
  if (!n || n.IsNull()) return std::nullopt;
  return Map(n, file_, key);
}

std::vector<YAML::Node> Map::seq_or_empty(const char* key) const {
  std::vector<YAML::Node> out;
  YAML::Node n = node_[key];
  if (!n || n.IsNull()) return out;
  if (!n.IsSequence()) fail(key, std::string("must be a list, found ") + type_name(n));
  for (const auto& item : n) out.push_back(item);
  return out;
}

}  // namespace ferry::yaml
