#include "common/yaml_util.h"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace ferry::yaml {

YamlError::YamlError(const std::string& file, const YAML::Mark& mark, const std::string& message)
    : std::runtime_error(file + ":" + std::to_string(mark.line + 1) + ":" +
                         std::to_string(mark.column + 1) + ": " + message),
      line_(mark.line + 1),
      column_(mark.column + 1) {}

namespace {

// Counts a document's nodes and depth from its parse events, an alias as the size and height
// of the node it names (recorded when that node ends), so the count is what a walk of the
// loaded tree would meet, in time and memory linear in the text.
class LimitCounter : public YAML::EventHandler {
 public:
  explicit LimitCounter(const Limits& limits) : limits_(limits) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { leaf(mark, anchor); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    leaf(mark, anchor);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end() || it->second.nodes < 0) {
      throw YAML::ParserException(mark, "an alias refers to a node that contains it");
    }
    add(mark, it->second.nodes, depth() + it->second.height);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Open {
    YAML::anchor_t anchor;
    int64_t first;  // count_ before this node
    int depth;      // this node's
    int deepest;    // the deepest node in it so far
  };
  struct Anchored {
    int64_t nodes = -1;  // -1 while the node is still open
    int height = 0;
  };

  int depth() const { return static_cast<int>(stack_.size()); }

  // `nodes` more nodes, the deepest of them at depth `deepest`.
  void add(const YAML::Mark& mark, int64_t nodes, int deepest) {
    if (nodes > limits_.max_nodes - count_) {
      throw YAML::ParserException(mark, "the document has more than " +
                                            std::to_string(limits_.max_nodes) +
                                            " nodes (each alias counts as the nodes it repeats)");
    }
    count_ += nodes;
    if (deepest > limits_.max_depth) {
      throw YAML::ParserException(mark, "the document nests more than " +
                                            std::to_string(limits_.max_depth) +
                                            " levels deep (aliases included)");
    }
    if (!stack_.empty()) stack_.back().deepest = std::max(stack_.back().deepest, deepest);
  }
  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor) {
    add(mark, 1, depth());
    if (anchor != YAML::NullAnchor) anchors_[anchor] = Anchored{1, 0};
  }
  void open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    add(mark, 1, depth());
    stack_.push_back(Open{anchor, count_ - 1, depth(), depth()});
    if (anchor != YAML::NullAnchor) anchors_[anchor] = Anchored{};
  }
  void close() {
    Open node = stack_.back();
    stack_.pop_back();
    if (node.anchor != YAML::NullAnchor) {
      anchors_[node.anchor] = Anchored{count_ - node.first, node.deepest - node.depth};
    }
    if (!stack_.empty()) stack_.back().deepest = std::max(stack_.back().deepest, node.deepest);
  }

  const Limits& limits_;
  int64_t count_ = 0;
  std::vector<Open> stack_;
  std::unordered_map<YAML::anchor_t, Anchored> anchors_;
};

}  // namespace

void check_limits(const std::string& text, const Limits& limits) {
  if (text.size() > limits.max_bytes) {
    YAML::Mark start;  // line 1, column 1
    throw YAML::ParserException(start, "the document has " + std::to_string(text.size()) +
                                           " bytes, more than " + std::to_string(limits.max_bytes));
  }
  std::istringstream in(text);
  YAML::Parser parser(in);
  LimitCounter counter(limits);
  parser.HandleNextDocument(counter);
}

YAML::Node load(const std::string& text, const Limits& limits) {
  check_limits(text, limits);
  return YAML::Load(text);
}

YAML::Node parse(const std::string& text, const std::string& file) {
  try {
    return load(text);
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
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return "a scalar";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing";
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

bool Map::has(const char* key) const {
  return static_cast<bool>(node_[key]);
}

YAML::Node Map::raw(const char* key) const {
  return node_[key];
}

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
