#include "policies/loader.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

#include <re2/re2.h>

#include "common/saturating.h"
#include "common/sha256.h"
#include "common/tags.h"
#include "common/yaml_util.h"
#include "policies/yaml_tree.h"

namespace ferry::policies {

std::string Diagnostic::to_string() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

namespace {
std::string join_diagnostics(const std::vector<Diagnostic>& list) {
  std::string out;
  for (const auto& d : list) out += d.to_string() + "\n";
  return out;
}
}  // namespace

std::string LoadResult::errors_text() const {
  return join_diagnostics(errors);
}
std::string LoadResult::warnings_text() const {
  return join_diagnostics(warnings);
}

std::optional<int> parse_utc_offset(const std::string& text) {
  std::string_view s = text;
  if (s == "UTC" || s == "Z" || s == "utc") return 0;
  if (s.starts_with("UTC")) s.remove_prefix(3);
  if (s.size() != 6 || (s[0] != '+' && s[0] != '-') || s[3] != ':') return std::nullopt;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (!digit(s[1]) || !digit(s[2]) || !digit(s[4]) || !digit(s[5])) return std::nullopt;
  int hours = (s[1] - '0') * 10 + (s[2] - '0');
  int minutes = (s[4] - '0') * 10 + (s[5] - '0');
  if (hours > 14 || minutes > 59) return std::nullopt;
  int total = hours * 60 + minutes;
  return s[0] == '-' ? -total : total;
}

// Builds a Policy from a parsed document. Member of the namespace (not anonymous) because
// Policy befriends it.
class PolicyBuilder {
 public:
  PolicyBuilder(std::string file, const LoadOptions& options, LoadResult& out)
      : file_(std::move(file)), options_(options), out_(out) {}

  void build(const ytree::Node& root, const std::string& text);

 private:
  using Node = ytree::Node;

  using Kind = FactType;

  // A fact as one place reads it: under `when`, or under `state` (where the per-target facts
  // fits and healthy are plain booleans). Built from kFactTable (policies/fact_table.h).
  struct FactInfo {
    const char* name;
    Fact fact;
    Kind kind;
    bool optional;  // may be absent (present/absent tests allowed)
  };

  static const std::vector<FactInfo>& facts();
  static const std::vector<FactInfo>& state_facts();
  static std::string fact_list(const std::vector<FactInfo>& list);

  [[noreturn]] void fail(const Node& node, const std::string& message) const {
    throw yaml::YamlError(file_, node.Mark(), message);
  }
  void error(const YAML::Mark& mark, const std::string& message) {
    out_.errors.push_back({file_, mark.line + 1, mark.column + 1, message});
  }
  void warn(int line, int column, const std::string& message) {
    out_.warnings.push_back({file_, line, column, message});
  }
  // Runs `fn`, turning a thrown YamlError into a collected diagnostic.
  template <typename Fn>
  bool guarded(Fn&& fn) {
    try {
      fn();
      return true;
    } catch (const yaml::YamlError& e) {
      out_.errors.push_back({file_, e.line(), e.column(), strip_location(e)});
      return false;
    } catch (const YAML::Exception& e) {
      error(e.mark, std::string("invalid YAML: ") + e.msg);
      return false;
    }
  }
  std::string strip_location(const yaml::YamlError& e) const {
    std::string what = e.what();
    std::string prefix =
        file_ + ":" + std::to_string(e.line()) + ":" + std::to_string(e.column()) + ": ";
    return what.starts_with(prefix) ? what.substr(prefix.size()) : what;
  }

  void check_keys(const Node& map, const std::string& what,
                  std::initializer_list<const char*> allowed) const;
  std::string scalar(const Node& node, const std::string& what) const;
  int64_t integer(const Node& node, const std::string& what) const;
  double number(const Node& node, const std::string& what) const;
  int target_ref(const Node& node, const std::string& what) const;

  void parse_targets(const Node& node);
  void parse_aliases(const Node& node);
  void parse_rules(const Node& node);
  Rule parse_rule(const Node& node);
  Action parse_action(const Node& map, const std::string& what, bool is_default);
  void parse_route(const Node& node, Action& action);
  ParamRule parse_param(const Node& node, const std::string& name, double min, double max,
                        bool integral);
  void parse_set(const Node& node, Action& action);
  TrimRule parse_trim(const Node& node);
  CacheRule parse_cache(const Node& node);
  ReasoningRule parse_reasoning(const Node& node);
  int64_t parse_duration_ms(const Node& node, const std::string& what) const;

  Condition parse_mapping(const Node& node, int depth, bool top);
  void parse_clause(const Node& key, const Node& value, int depth, std::vector<Condition>& out);
  void parse_fact(const FactInfo& info, int target, const std::string& target_name,
                  const Node& value, std::vector<Condition>& out);
  Condition make_test(const FactInfo& info, int target, const std::string& target_name, Op op,
                      const Node& operand);
  void set_operand(const FactInfo& info, Condition& c, const Node& operand, std::string& shown);

  void analyse();

  std::string file_;
  const LoadOptions& options_;
  LoadResult& out_;
  Policy policy_;
  bool aliases_declared_ = false;
};

namespace {

constexpr int kMaxDepth = 16;

// RE2's syntax (Perl-like, without backreferences or lookaround), so every match runs in
// time linear in the value; the memory cap bounds the compiled program (e.g. nested counted
// repetitions) and the matcher's cache.
std::shared_ptr<const re2::RE2> compile_regex(const std::string& pattern, std::string& error) {
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(kMaxPatternMemory);
  auto re = std::make_shared<const re2::RE2>(pattern, options);
  if (!re->ok()) {
    error = re->error_code() == RE2::ErrorPatternTooLarge
                ? "it compiles to more than " + std::to_string(kMaxPatternMemory >> 10) +
                      " KiB; simplify it (fewer or smaller counted repetitions)"
                : re->error() +
                      " (RE2 syntax: no backreferences or lookaround, so matching stays linear)";
    return nullptr;
  }
  return re;
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.' || c == ':' || c == '/';
    if (!ok) return false;
  }
  return true;
}

const char* type_name(const ytree::Node& n) {
  switch (n.type()) {
    case ytree::Type::kNull:
      return "null";
    case ytree::Type::kScalar:
      return "a scalar";
    case ytree::Type::kSequence:
      return "a list";
    case ytree::Type::kMap:
      return "a mapping";
    case ytree::Type::kUndefined:
      break;
  }
  return "nothing";
}

std::string op_symbol(Op op) {
  switch (op) {
    case Op::kLt:
      return "<";
    case Op::kLte:
      return "<=";
    case Op::kGt:
      return ">";
    case Op::kGte:
      return ">=";
    case Op::kEq:
      return "==";
    case Op::kNe:
      return "!=";
    case Op::kIn:
      return "in";
    case Op::kMatches:
      return "matches";
    case Op::kPresent:
      return "present";
    case Op::kAbsent:
      return "absent";
  }
  return "?";
}

std::optional<Op> parse_op(const std::string& s) {
  if (s == "lt") return Op::kLt;
  if (s == "lte") return Op::kLte;
  if (s == "gt") return Op::kGt;
  if (s == "gte") return Op::kGte;
  if (s == "eq") return Op::kEq;
  if (s == "ne") return Op::kNe;
  if (s == "in") return Op::kIn;
  if (s == "matches") return Op::kMatches;
  return std::nullopt;
}

constexpr const char* kWeekdayNames[7][2] = {
    {"mon", "monday"}, {"tue", "tuesday"},  {"wed", "wednesday"}, {"thu", "thursday"},
    {"fri", "friday"}, {"sat", "saturday"}, {"sun", "sunday"}};

std::optional<std::string> weekday(const std::string& s) {
  std::string lower;
  for (char c : s) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (const auto& names : kWeekdayNames) {
    if (lower == names[0] || lower == names[1]) return std::string(names[0]);
  }
  return std::nullopt;
}

std::string quote_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + "]";
}

// Canonical text of a condition, for comparing rules.
std::string canon(const Condition& c) {
  switch (c.kind) {
    case Condition::Kind::kTest:
      return c.label;
    case Condition::Kind::kNot:
      return "not(" + canon(c.children.front()) + ")";
    case Condition::Kind::kAll:
    case Condition::Kind::kAny: {
      std::vector<std::string> parts;
      for (const auto& ch : c.children) parts.push_back(canon(ch));
      std::sort(parts.begin(), parts.end());
      std::string out = c.kind == Condition::Kind::kAll ? "all(" : "any(";
      for (size_t i = 0; i < parts.size(); ++i) out += (i ? "," : "") + parts[i];
      return out + ")";
    }
  }
  return "";
}

bool always_false(const Condition& c);
bool always_true(const Condition& c) {
  switch (c.kind) {
    case Condition::Kind::kTest:
      return false;
    case Condition::Kind::kNot:
      return always_false(c.children.front());
    case Condition::Kind::kAll:
      return std::all_of(c.children.begin(), c.children.end(), always_true);
    case Condition::Kind::kAny:
      return std::any_of(c.children.begin(), c.children.end(), always_true);
  }
  return false;
}
bool always_false(const Condition& c) {
  switch (c.kind) {
    case Condition::Kind::kTest:
      return false;
    case Condition::Kind::kNot:
      return always_true(c.children.front());
    case Condition::Kind::kAll:
      return std::any_of(c.children.begin(), c.children.end(), always_false);
    case Condition::Kind::kAny:
      return std::all_of(c.children.begin(), c.children.end(), always_false);
  }
  return false;
}

}  // namespace

const std::vector<PolicyBuilder::FactInfo>& PolicyBuilder::facts() {
  static const std::vector<FactInfo> list = [] {
    std::vector<FactInfo> out;
    for (const FactSpec& f : kFactTable) {
      if (f.scope == FactScope::kTarget) continue;
      out.push_back({f.name.data(), f.fact, f.type, f.optional});
    }
    return out;
  }();
  return list;
}

const std::vector<PolicyBuilder::FactInfo>& PolicyBuilder::state_facts() {
  static const std::vector<FactInfo> list = [] {
    std::vector<FactInfo> out;
    for (const FactSpec& f : kFactTable) {
      if (f.scope == FactScope::kRequest) continue;
      Kind kind = f.type == Kind::kTargetBool ? Kind::kBool : f.type;
      out.push_back({f.name.data(), f.fact, kind, f.optional});
    }
    return out;
  }();
  return list;
}

std::string PolicyBuilder::fact_list(const std::vector<FactInfo>& list) {
  std::string out;
  for (const auto& f : list) out += std::string(out.empty() ? "" : ", ") + f.name;
  return out;
}

void PolicyBuilder::check_keys(const Node& map, const std::string& what,
                               std::initializer_list<const char*> allowed) const {
  if (!map.IsMap()) fail(map, what + " must be a mapping, found " + type_name(map));
  uint64_t seen = 0;  // bit i: allowed[i] was seen (the lists are short)
  for (const auto& kv : map.entries()) {
    if (!kv.first.IsScalar()) scalar(kv.first, what + " key");  // fails, naming the type
    const std::string& key = kv.first.Scalar();
    size_t index = 0;
    for (const char* a : allowed) {
      if (key == a) break;
      ++index;
    }
    if (index == allowed.size()) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      fail(kv.first, "unknown key '" + key + "' in " + what + " (allowed: " + list + ")");
    }
    uint64_t bit = uint64_t{1} << (index % 64);
    if ((seen & bit) != 0) fail(kv.first, "duplicate key '" + key + "' in " + what);
    seen |= bit;
  }
}

std::string PolicyBuilder::scalar(const Node& node, const std::string& what) const {
  if (!node.IsScalar()) fail(node, what + " must be a string, found " + type_name(node));
  return node.Scalar();
}

int64_t PolicyBuilder::integer(const Node& node, const std::string& what) const {
  if (!node.IsScalar()) fail(node, what + " must be an integer, found " + type_name(node));
  const std::string& s = node.Scalar();
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used, 10);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != s.size()) {
    fail(node, what + " must be an integer, found '" + s + "'");
  }
  return v;
}

double PolicyBuilder::number(const Node& node, const std::string& what) const {
  std::string s = scalar(node, what);
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v)) {
    fail(node, what + " must be a number, found '" + s + "'");
  }
  return v;
}

int PolicyBuilder::target_ref(const Node& node, const std::string& what) const {
  std::string name = scalar(node, what);
  int index = policy_.find_target(name);
  if (index < 0) {
    std::vector<std::string> names;
    for (const auto& t : policy_.targets_) names.push_back(t.name);
    fail(node,
         "unknown target '" + name + "' in " + what + " (targets: " + quote_list(names) + ")");
  }
  return index;
}

void PolicyBuilder::build(const Node& root, const std::string& text) {
  policy_.source_ = file_;
  policy_.version_ = sha256_hex(text);
  policy_.short_version_ = policy_.version_.substr(0, 12);
  if (!root.IsMap()) {
    error(root.Mark(), std::string("a policy must be a mapping with targets, rules and "
                                   "default, found ") +
                           type_name(root));
    return;
  }
  if (!guarded([&] {
        check_keys(root, "the policy",
                   {"description", "timezone", "targets", "models", "rules", "default"});
      })) {
    return;
  }
  guarded([&] {
    if (!root["timezone"]) return;
    std::string tz = scalar(root["timezone"], "timezone");
    auto offset = parse_utc_offset(tz);
    if (!offset) {
      fail(root["timezone"],
           "timezone must be UTC or a fixed offset such as +02:00 or "
           "-05:00 (IANA zone names are not supported), found '" +
               tz + "'");
    }
    policy_.timezone_ = tz;
    policy_.utc_offset_minutes_ = *offset;
  });
  if (!root["targets"]) {
    error(root.Mark(), "missing required key 'targets'");
    return;
  }
  if (!guarded([&] { parse_targets(root["targets"]); })) return;
  if (!guarded([&] { parse_aliases(root["models"]); })) return;
  if (root["rules"] && !root["rules"].IsNull()) parse_rules(root["rules"]);
  if (!root["default"]) {
    error(root.Mark(), "missing required key 'default' (the action when no rule matches)");
  } else {
    guarded([&] {
      const Node& d = root["default"];
      check_keys(d, "default", {"route", "reject", "set", "shadow", "tag", "trim", "cache"});
      policy_.default_ = parse_action(d, "default", true);
    });
  }
  if (!out_.errors.empty()) return;
  analyse();
  out_.policy = std::make_shared<const Policy>(std::move(policy_));
}

void PolicyBuilder::parse_targets(const Node& node) {
  if (!node.IsMap() || node.size() == 0) {
    fail(node, "targets must be a non-empty mapping of NAME: CONFIG_MODEL");
  }
  std::set<std::string> seen;
  for (const auto& kv : node.entries()) {
    std::string name = scalar(kv.first, "target name");
    if (!valid_name(name)) {
      fail(kv.first, "target name '" + name + "' may use only letters, digits and _ - . : /");
    }
    if (!seen.insert(name).second) fail(kv.first, "duplicate target '" + name + "'");
    std::string ref = scalar(kv.second, "target '" + name + "'");
    if (ref.empty()) fail(kv.second, "target '" + name + "' needs a config model name");
    if (options_.known_targets) {
      const auto& known = *options_.known_targets;
      if (std::find(known.begin(), known.end(), ref) == known.end()) {
        fail(kv.second, "target '" + name + "' refers to '" + ref +
                            "', which is not a model of the server config (models: " +
                            quote_list(known) + ")");
      }
    }
    policy_.targets_.push_back({name, ref});
  }
}

void PolicyBuilder::parse_aliases(const Node& node) {
  if (!node || node.IsNull()) {
    for (const auto& t : policy_.targets_) policy_.aliases_.push_back({t.name, ""});
    return;
  }
  aliases_declared_ = true;
  if (!node.IsSequence() || node.size() == 0) {
    fail(node, "models must be a non-empty list of aliases (NAME or {name, description})");
  }
  std::set<std::string> seen;
  for (const auto& item : node.items()) {
    Alias alias;
    if (item.IsMap()) {
      check_keys(item, "a model alias", {"name", "description"});
      if (!item["name"]) fail(item, "a model alias needs a name");
      alias.name = scalar(item["name"], "model alias name");
      if (item["description"]) alias.description = scalar(item["description"], "description");
    } else {
      alias.name = scalar(item, "model alias");
    }
    if (!valid_name(alias.name)) {
      fail(item, "model alias '" + alias.name + "' may use only letters, digits and _ - . : /");
    }
    if (!seen.insert(alias.name).second) fail(item, "duplicate model alias '" + alias.name + "'");
    policy_.aliases_.push_back(std::move(alias));
  }
}

void PolicyBuilder::parse_rules(const Node& node) {
  if (!node.IsSequence()) {
    error(node.Mark(), std::string("rules must be a list, found ") + type_name(node));
    return;
  }
  std::unordered_map<std::string, int> ids;
  for (const auto& item : node.items()) {
    guarded([&] {
      Rule rule = parse_rule(item);
      auto [it, inserted] = ids.emplace(rule.id, rule.line);
      if (!inserted) {
        fail(item["id"], "duplicate rule id '" + rule.id + "' (first at line " +
                             std::to_string(it->second) + ")");
      }
      policy_.rules_.push_back(std::move(rule));
    });
  }
}

Rule PolicyBuilder::parse_rule(const Node& node) {
  check_keys(
      node, "a rule",
      {"id", "description", "when", "route", "reject", "set", "shadow", "tag", "trim", "cache"});
  Rule rule;
  rule.line = node.Mark().line + 1;
  rule.column = node.Mark().column + 1;
  if (!node["id"]) fail(node, "a rule needs an id");
  rule.id = scalar(node["id"], "id");
  if (!valid_name(rule.id)) {
    fail(node["id"], "rule id '" + rule.id + "' may use only letters, digits and _ - . : /");
  }
  if (rule.id == "default") fail(node["id"], "rule id 'default' is reserved");
  if (node["description"]) rule.description = scalar(node["description"], "description");
  if (node["when"] && !node["when"].IsNull()) {
    const Node& when = node["when"];
    if (!when.IsMap()) fail(when, std::string("when must be a mapping, found ") + type_name(when));
    rule.when = parse_mapping(when, 0, true);
  }
  rule.action = parse_action(node, "rule '" + rule.id + "'", false);
  return rule;
}

Action PolicyBuilder::parse_action(const Node& map, const std::string& what, bool is_default) {
  (void)is_default;
  Action action;
  bool has_route = map["route"] && !map["route"].IsNull();
  bool has_reject = map["reject"] && !map["reject"].IsNull();
  if (has_route == has_reject) {
    fail(map, what + " needs exactly one of 'route' or 'reject'");
  }
  if (has_route) parse_route(map["route"], action);
  if (has_reject) {
    const Node& r = map["reject"];
    check_keys(r, "reject", {"status", "message"});
    Reject reject;
    if (r["status"]) {
      int64_t status = integer(r["status"], "reject status");
      if (status < 400 || status > 599) fail(r["status"], "reject status must be 400..599");
      reject.status = static_cast<int>(status);
    }
    if (!r["message"]) fail(r, "reject needs a message");
    reject.message = scalar(r["message"], "reject message");
    action.reject = std::move(reject);
    for (const char* key : {"shadow", "set", "trim", "cache"}) {
      if (map[key]) fail(map[key], std::string(key) + " has no effect with reject");
    }
  }
  if (map["shadow"] && !map["shadow"].IsNull()) {
    action.shadow = target_ref(map["shadow"], "shadow");
  }
  if (map["set"] && !map["set"].IsNull()) parse_set(map["set"], action);
  if (map["trim"]) action.trim = parse_trim(map["trim"]);
  if (map["cache"]) action.cache = parse_cache(map["cache"]);
  if (map["tag"] && !map["tag"].IsNull()) {
    const Node& t = map["tag"];
    if (t.IsSequence()) {
      for (const auto& item : t.items()) action.tags.push_back(scalar(item, "tag"));
    } else {
      action.tags.push_back(scalar(t, "tag"));
    }
    for (const auto& tag : action.tags) {
      if (tag.empty()) fail(t, "a tag must not be empty");
      // The ledger marks a shadow copy's row with this trusted tag: on a served request it would
      // make reports count the request as a shadow copy.
      if (tag == kShadowTag) fail(t, "the tag 'shadow' is reserved for the rows of shadow copies");
    }
  }
  return action;
}

void PolicyBuilder::parse_route(const Node& node, Action& action) {
  std::vector<Node> items;
  if (node.IsScalar()) {
    items.push_back(node);
  } else if (node.IsSequence()) {
    for (const auto& item : node.items()) items.push_back(item);
  } else {
    fail(node, std::string("route must be a list of targets, found ") + type_name(node));
  }
  if (items.empty()) fail(node, "route must name at least one target");
  int weighted = 0;
  int64_t total = 0;
  for (const auto& item : items) {
    RouteHop hop;
    if (item.IsMap()) {
      check_keys(item, "a route hop", {"target", "weight"});
      if (!item["target"]) fail(item, "a route hop needs a target");
      hop.target = target_ref(item["target"], "route");
      if (item["weight"]) {
        hop.weight = integer(item["weight"], "weight");
        if (hop.weight < 0 || hop.weight > 1000000) {
          fail(item["weight"], "weight must be between 0 and 1000000");
        }
        ++weighted;
        total += hop.weight;
      }
    } else {
      hop.target = target_ref(item, "route");
    }
    for (const auto& prev : action.route) {
      if (prev.target == hop.target) fail(item, "target appears twice in the route");
    }
    action.route.push_back(hop);
  }
  if (weighted > 0) {
    if (weighted != static_cast<int>(items.size())) {
      fail(node, "either every hop of a route has a weight or none does");
    }
    if (total <= 0) fail(node, "the weights of a route must not all be 0");
    action.weighted = true;
  }
}

void PolicyBuilder::parse_set(const Node& s, Action& action) {
  check_keys(s, "set", {"max_tokens", "temperature", "top_p", "reasoning"});
  if (s["max_tokens"]) {
    action.max_tokens = parse_param(s["max_tokens"], "max_tokens", 1, 1e9, true);
  }
  if (s["temperature"]) {
    action.temperature = parse_param(s["temperature"], "temperature", 0, 2, false);
  }
  if (s["top_p"]) action.top_p = parse_param(s["top_p"], "top_p", 0, 1, false);
  if (s["reasoning"]) {
    action.reasoning = parse_reasoning(s["reasoning"]);
    // A thinking budget the output limit cannot hold leaves no room for the answer.
    if (action.reasoning.mode == ReasoningMode::kBudget && action.max_tokens.at_most &&
        static_cast<double>(action.reasoning.max_tokens) >= *action.max_tokens.at_most) {
      fail(s["reasoning"], "set reasoning max_tokens (" +
                               std::to_string(action.reasoning.max_tokens) +
                               ") conflicts with set max_tokens at most " +
                               std::to_string(static_cast<int64_t>(*action.max_tokens.at_most)) +
                               ": the budget must leave room for the answer");
    }
  }
}

ReasoningRule PolicyBuilder::parse_reasoning(const Node& node) {
  ReasoningRule rule;
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    if (s == "off") {
      rule.mode = ReasoningMode::kOff;
    } else if (s == "low") {
      rule.mode = ReasoningMode::kLow;
    } else if (s == "medium") {
      rule.mode = ReasoningMode::kMedium;
    } else if (s == "high") {
      rule.mode = ReasoningMode::kHigh;
    } else {
      fail(node,
           "set reasoning must be off, low, medium, high or { max_tokens: N }, found '" + s + "'");
    }
    return rule;
  }
  check_keys(node, "set reasoning", {"max_tokens"});
  if (!node["max_tokens"]) fail(node, "set reasoning needs max_tokens");
  rule.max_tokens = integer(node["max_tokens"], "reasoning max_tokens");
  if (rule.max_tokens < 1 || rule.max_tokens > 1000000) {
    fail(node["max_tokens"], "reasoning max_tokens must be between 1 and 1000000");
  }
  rule.mode = ReasoningMode::kBudget;
  return rule;
}

TrimRule PolicyBuilder::parse_trim(const Node& node) {
  check_keys(node, "trim", {"to_fit", "max_prompt_tokens", "keep_system", "keep_last_turns"});
  TrimRule rule;
  const bool fit = node["to_fit"] && !node["to_fit"].IsNull();
  const bool most = node["max_prompt_tokens"] && !node["max_prompt_tokens"].IsNull();
  if (fit == most) fail(node, "trim needs exactly one of to_fit: TARGET or max_prompt_tokens: N");
  if (fit) rule.to_fit = target_ref(node["to_fit"], "trim to_fit");
  if (most) {
    rule.max_prompt_tokens = integer(node["max_prompt_tokens"], "trim max_prompt_tokens");
    if (rule.max_prompt_tokens < 1 || rule.max_prompt_tokens > 100000000) {
      fail(node["max_prompt_tokens"], "trim max_prompt_tokens must be between 1 and 100000000");
    }
  }
  if (node["keep_system"]) {
    std::string v = scalar(node["keep_system"], "trim keep_system");
    if (v != "true" && v != "false") {
      fail(node["keep_system"], "trim keep_system must be true or false, found '" + v + "'");
    }
    rule.keep_system = v == "true";
  }
  if (node["keep_last_turns"]) {
    rule.keep_last_turns = integer(node["keep_last_turns"], "trim keep_last_turns");
    if (rule.keep_last_turns < 1 || rule.keep_last_turns > 10000) {
      fail(node["keep_last_turns"],
           "trim keep_last_turns must be between 1 and 10000 (the last user turn is always kept)");
    }
  }
  return rule;
}

int64_t PolicyBuilder::parse_duration_ms(const Node& node, const std::string& what) const {
  std::string s = scalar(node, what);
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  std::string unit = s.substr(digits);
  int64_t scale = unit == "ms"  ? 1
                  : unit == "s" ? 1000
                  : unit == "m" ? 60000
                  : unit == "h" ? 3600000
                  : unit == "d" ? 86400000
                                : 0;
  if (digits == 0 || digits > 12 || scale == 0) {
    fail(node, what + " must be a duration such as 30s, 10m, 2h or 1d, found '" + s + "'");
  }
  return saturating_mul(std::stoll(s.substr(0, digits)), scale);
}

CacheRule PolicyBuilder::parse_cache(const Node& node) {
  check_keys(node, "cache", {"ttl", "scope", "nondeterministic", "rate_limits"});
  CacheRule rule;
  if (!node["ttl"]) fail(node, "cache needs a ttl (e.g. ttl: 10m)");
  rule.ttl_ms = parse_duration_ms(node["ttl"], "cache ttl");
  if (rule.ttl_ms < kMinCacheTtlMs || rule.ttl_ms > kMaxCacheTtlMs) {
    fail(node["ttl"], "cache ttl must be between 1s and 7d, found '" + node["ttl"].Scalar() + "'");
  }
  if (node["scope"]) {
    std::string v = scalar(node["scope"], "cache scope");
    if (v == "key") {
      rule.scope = CacheScope::kKey;
    } else if (v == "team") {
      rule.scope = CacheScope::kTeam;
    } else if (v == "global") {
      rule.scope = CacheScope::kGlobal;
    } else {
      fail(node["scope"], "cache scope must be key, team or global, found '" + v + "'");
    }
  }
  if (node["nondeterministic"]) {
    std::string v = scalar(node["nondeterministic"], "cache nondeterministic");
    if (v != "true" && v != "false") {
      fail(node["nondeterministic"],
           "cache nondeterministic must be true or false, found '" + v + "'");
    }
    rule.nondeterministic = v == "true";
  }
  if (node["rate_limits"]) {
    std::string v = scalar(node["rate_limits"], "cache rate_limits");
    if (v != "count" && v != "exempt") {
      fail(node["rate_limits"], "cache rate_limits must be count or exempt, found '" + v + "'");
    }
    rule.hits_count_rate_limits = v == "count";
  }
  return rule;
}

ParamRule PolicyBuilder::parse_param(const Node& node, const std::string& name, double min,
                                     double max, bool integral) {
  auto value = [&](const Node& n) {
    double v = integral ? static_cast<double>(integer(n, name)) : number(n, name);
    if (v < min || v > max) {
      std::ostringstream os;
      os << name << " must be between " << min << " and " << max;
      fail(n, os.str());
    }
    return v;
  };
  ParamRule rule;
  if (node.IsScalar()) {  // a fixed value
    double v = value(node);
    rule.default_value = v;
    rule.at_most = v;
    rule.at_least = v;
    return rule;
  }
  check_keys(node, "set " + name, {"default", "at_most", "at_least"});
  if (node["default"]) rule.default_value = value(node["default"]);
  if (node["at_most"]) rule.at_most = value(node["at_most"]);
  if (node["at_least"]) rule.at_least = value(node["at_least"]);
  if (!rule.any()) fail(node, "set " + name + " needs default, at_most or at_least");
  if (rule.at_most && rule.at_least && *rule.at_least > *rule.at_most) {
    fail(node, "set " + name + ": at_least is greater than at_most");
  }
  return rule;
}

Condition PolicyBuilder::parse_mapping(const Node& node, int depth, bool top) {
  if (depth > kMaxDepth) fail(node, "conditions are nested too deeply");
  if (!node.IsMap())
    fail(node, std::string("a condition must be a mapping, found ") + type_name(node));
  Condition all;
  all.kind = Condition::Kind::kAll;
  all.line = node.Mark().line + 1;
  all.column = node.Mark().column + 1;
  std::set<std::string> seen;
  for (const auto& kv : node.entries()) {
    std::string key = scalar(kv.first, "a condition key");
    if (!seen.insert(key).second) fail(kv.first, "duplicate key '" + key + "' in a condition");
    parse_clause(kv.first, kv.second, depth, all.children);
  }
  if (!top && all.children.size() == 1) return std::move(all.children.front());
  if (!top) all.label = "all";
  return all;
}

// One `when:` clause. Long for a reason: one short branch per clause form (all/any, not, state,
// a target fact, a request fact), in the order the policy reference documents them.
void PolicyBuilder::parse_clause(const Node& key_node, const Node& value, int depth,
                                 std::vector<Condition>& out) {
  const std::string& key = key_node.Scalar();
  if (key == "all" || key == "any") {
    if (!value.IsSequence()) fail(value, key + " must be a list of conditions");
    Condition group;
    group.kind = key == "all" ? Condition::Kind::kAll : Condition::Kind::kAny;
    group.label = key;
    group.line = key_node.Mark().line + 1;
    group.column = key_node.Mark().column + 1;
    for (const auto& item : value.items()) {
      group.children.push_back(parse_mapping(item, depth + 1, false));
    }
    out.push_back(std::move(group));
    return;
  }
  if (key == "not") {
    Condition neg;
    neg.kind = Condition::Kind::kNot;
    neg.label = "not";
    neg.line = key_node.Mark().line + 1;
    neg.column = key_node.Mark().column + 1;
    neg.children.push_back(parse_mapping(value, depth + 1, false));
    out.push_back(std::move(neg));
    return;
  }
  if (key == "state") {
    if (!value.IsMap()) fail(value, "state must be a mapping of TARGET: {FACT: CONDITION}");
    for (const auto& kv : value.entries()) {
      int target = target_ref(kv.first, "state");
      std::string target_name = kv.first.Scalar();
      if (!kv.second.IsMap()) {
        fail(kv.second, "state of '" + target_name + "' must be a mapping of " +
                            fact_list(state_facts()) + " to conditions");
      }
      for (const auto& fk : kv.second.entries()) {
        std::string fname = scalar(fk.first, "a state fact");
        const FactInfo* info = nullptr;
        for (const auto& f : state_facts()) {
          if (fname == f.name) info = &f;
        }
        if (!info) {
          fail(fk.first, "unknown state fact '" + fname +
                             "' (state facts: " + fact_list(state_facts()) + ")");
        }
        parse_fact(*info, target, target_name, fk.second, out);
      }
    }
    return;
  }
  for (const auto& info : facts()) {
    if (key != info.name) continue;
    if (info.kind == Kind::kTargetBool) {  // fits: small / healthy: [small, large]
      std::vector<Node> names;
      if (value.IsSequence()) {
        for (const auto& item : value.items()) names.push_back(item);
      } else {
        names.push_back(value);
      }
      if (names.empty()) fail(value, key + " needs a target name");
      for (const auto& n : names) {
        int target = target_ref(n, key);
        Condition c;
        c.kind = Condition::Kind::kTest;
        c.fact = info.fact;
        c.op = Op::kEq;
        c.flag = true;
        c.target = target;
        c.label = key + " " + n.Scalar();
        c.line = n.Mark().line + 1;
        c.column = n.Mark().column + 1;
        out.push_back(std::move(c));
      }
      return;
    }
    parse_fact(info, -1, "", value, out);
    return;
  }
  fail(key_node, "unknown fact '" + key + "' (facts: " + fact_list(facts()) +
                     ", state; combinators: all, any, not)");
}

void PolicyBuilder::parse_fact(const FactInfo& info, int target, const std::string& target_name,
                               const Node& value, std::vector<Condition>& out) {
  if (value.IsScalar()) {
    const std::string& s = value.Scalar();
    if (info.kind == Kind::kBool || info.kind == Kind::kPresence) {
      Condition c = make_test(info, target, target_name, Op::kEq, value);
      out.push_back(std::move(c));
      return;
    }
    if (s == "present" || s == "absent") {
      if (!info.optional) {
        fail(value, std::string(info.name) + " is always present; compare it instead");
      }
      Condition c;
      c.kind = Condition::Kind::kTest;
      c.fact = info.fact;
      c.op = s == "present" ? Op::kPresent : Op::kAbsent;
      c.target = target;
      c.label = (target_name.empty() ? "" : target_name + ".") + info.name + " " + s;
      c.line = value.Mark().line + 1;
      c.column = value.Mark().column + 1;
      out.push_back(std::move(c));
      return;
    }
    out.push_back(make_test(info, target, target_name, Op::kEq, value));
    return;
  }
  if (value.IsSequence()) {
    if (info.kind == Kind::kBool || info.kind == Kind::kPresence) {
      fail(value, std::string(info.name) + " is true or false, not a list");
    }
    out.push_back(make_test(info, target, target_name, Op::kIn, value));
    return;
  }
  if (!value.IsMap() || value.size() == 0) {
    fail(value, std::string(info.name) +
                    " needs a value or a mapping of operators (lt, lte, "
                    "gt, gte, eq, ne, in, matches)");
  }
  std::set<std::string> seen;
  for (const auto& kv : value.entries()) {
    std::string op_text = scalar(kv.first, "an operator");
    auto op = parse_op(op_text);
    if (!op) {
      fail(kv.first,
           "unknown operator '" + op_text + "' (operators: lt, lte, gt, gte, eq, ne, in, matches)");
    }
    if (!seen.insert(op_text).second) fail(kv.first, "duplicate operator '" + op_text + "'");
    out.push_back(make_test(info, target, target_name, *op, kv.second));
  }
}

Condition PolicyBuilder::make_test(const FactInfo& info, int target, const std::string& target_name,
                                   Op op, const Node& operand) {
  Condition c;
  c.kind = Condition::Kind::kTest;
  c.fact = info.fact;
  c.op = op;
  c.target = target;
  c.line = operand.Mark().line + 1;
  c.column = operand.Mark().column + 1;
  std::string name = (target_name.empty() ? "" : target_name + ".") + info.name;

  bool ordered = info.kind == Kind::kInt || info.kind == Kind::kNumber || info.kind == Kind::kTime;
  bool textual = info.kind == Kind::kString || info.kind == Kind::kList;
  if ((op == Op::kLt || op == Op::kLte || op == Op::kGt || op == Op::kGte) && !ordered) {
    fail(operand, std::string("operator ") + std::string(op_name(op)) + " needs a number; " +
                      info.name + " is not one");
  }
  if (op == Op::kMatches && !textual) {
    fail(operand, std::string("matches needs a string fact; ") + info.name + " is not one");
  }
  if (op == Op::kIn && (info.kind == Kind::kBool || info.kind == Kind::kPresence)) {
    fail(operand, std::string("in does not apply to ") + info.name + " (true or false)");
  }

  std::string shown;
  if (op == Op::kIn) {
    if (!operand.IsSequence() || operand.size() == 0) {
      fail(operand, "in needs a non-empty list");
    }
    std::vector<std::string> parts;
    for (const auto& item : operand.items()) {
      Condition one;
      std::string item_shown;
      set_operand(info, one, item, item_shown);
      if (ordered) {
        c.numbers.push_back(one.number);
      } else {
        c.texts.push_back(one.text);
      }
      parts.push_back(item_shown);
    }
    shown = quote_list(parts);
  } else if (op == Op::kMatches) {
    std::string pattern = scalar(operand, "a regular expression");
    if (pattern.size() > kMaxPatternBytes) {
      fail(operand, "regular expression is too long (at most " + std::to_string(kMaxPatternBytes) +
                        " bytes)");
    }
    std::string why;
    c.regex = compile_regex(pattern, why);
    if (!c.regex) fail(operand, "invalid regular expression '" + pattern + "': " + why);
    c.text = pattern;
    shown = "/" + pattern + "/";
  } else {
    set_operand(info, c, operand, shown);
  }

  if (info.kind == Kind::kPresence) {
    c.label = name + (c.flag == (op == Op::kEq) ? " present" : " absent");
  } else if (info.kind == Kind::kList) {
    switch (op) {
      case Op::kEq:
        c.label = name + " contains " + shown;
        break;
      case Op::kNe:
        c.label = name + " does not contain " + shown;
        break;
      case Op::kIn:
        c.label = name + " contains any of " + shown;
        break;
      default:
        c.label = name + " has one matching " + shown;
        break;
    }
  } else {
    c.label = name + " " + op_symbol(op) + " " + shown;
  }
  return c;
}

void PolicyBuilder::set_operand(const FactInfo& info, Condition& c, const Node& operand,
                                std::string& shown) {
  switch (info.kind) {
    case Kind::kInt: {
      int64_t v = integer(operand, info.name);
      if (info.fact == Fact::kHour && (v < 0 || v > 23)) fail(operand, "hour must be 0..23");
      c.number = static_cast<double>(v);
      shown = std::to_string(v);
      return;
    }
    case Kind::kNumber: {
      c.number = number(operand, info.name);
      shown = operand.Scalar();
      return;
    }
    case Kind::kTime: {
      std::string s = scalar(operand, "time");
      auto digit = [](char ch) { return ch >= '0' && ch <= '9'; };
      if (s.size() != 5 || s[2] != ':' || !digit(s[0]) || !digit(s[1]) || !digit(s[3]) ||
          !digit(s[4])) {
        fail(operand, "time must be HH:MM, found '" + s + "'");
      }
      int h = (s[0] - '0') * 10 + (s[1] - '0');
      int m = (s[3] - '0') * 10 + (s[4] - '0');
      if (h > 23 || m > 59) fail(operand, "time must be between 00:00 and 23:59");
      c.number = h * 60 + m;
      shown = s;
      return;
    }
    case Kind::kBool:
    case Kind::kPresence:
    case Kind::kTargetBool: {
      std::string s = scalar(operand, info.name);
      if (s == "true" || (info.kind == Kind::kPresence && s == "present")) {
        c.flag = true;
      } else if (s == "false" || (info.kind == Kind::kPresence && s == "absent")) {
        c.flag = false;
      } else {
        fail(operand, std::string(info.name) + " must be " +
                          (info.kind == Kind::kPresence ? "present, absent, true or false"
                                                        : "true or false") +
                          ", found '" + s + "'");
      }
      shown = c.flag ? "true" : "false";
      return;
    }
    case Kind::kString:
    case Kind::kList: {
      std::string s = scalar(operand, info.name);
      if (info.fact == Fact::kWeekday) {
        auto day = weekday(s);
        if (!day) fail(operand, "weekday must be mon..sun, found '" + s + "'");
        s = *day;
      } else if (info.fact == Fact::kRole) {
        if (s != "app" && s != "finance" && s != "admin") {
          fail(operand, "role must be app, finance or admin, found '" + s + "'");
        }
      } else if (info.fact == Fact::kModel) {
        if (!policy_.has_alias(s)) {
          std::vector<std::string> names;
          for (const auto& a : policy_.aliases_) names.push_back(a.name);
          fail(operand, "unknown model alias '" + s + "' (" +
                            (aliases_declared_ ? "models" : "targets") + ": " + quote_list(names) +
                            ")");
        }
      }
      c.text = s;
      shown = s;
      return;
    }
  }
}

void PolicyBuilder::analyse() {
  const auto& rules = policy_.rules_;
  size_t n = rules.size();
  std::vector<std::vector<size_t>> conj(n);
  std::vector<bool> always(n, false);
  std::vector<bool> flagged(n, false);
  std::unordered_map<size_t, std::vector<size_t>> rules_with;
  std::hash<std::string> hasher;
  for (size_t i = 0; i < n; ++i) {
    const Rule& r = rules[i];
    if (!r.when || always_true(*r.when)) {
      always[i] = true;
      continue;
    }
    if (always_false(*r.when)) {
      flagged[i] = true;
      warn(r.line, r.column, "rule '" + r.id + "' can never match: its condition is always false");
      continue;
    }
    for (const auto& child : r.when->children) conj[i].push_back(hasher(canon(child)));
    std::sort(conj[i].begin(), conj[i].end());
    conj[i].erase(std::unique(conj[i].begin(), conj[i].end()), conj[i].end());
    for (size_t h : conj[i]) rules_with[h].push_back(i);
  }
  for (size_t i = 0; i < n; ++i) {
    const Rule& earlier = rules[i];
    if (always[i]) {
      for (size_t j = i + 1; j < n; ++j) {
        if (flagged[j]) continue;
        flagged[j] = true;
        warn(rules[j].line, rules[j].column,
             "rule '" + rules[j].id + "' can never match: rule '" + earlier.id + "' (line " +
                 std::to_string(earlier.line) + ") before it always matches");
      }
      warn(earlier.line, earlier.column,
           "rule '" + earlier.id + "' always matches, so the default is never used");
      return;
    }
    if (flagged[i] || conj[i].empty()) continue;
    // Candidates: rules sharing this rule's rarest clause.
    const std::vector<size_t>* rarest = nullptr;
    for (size_t h : conj[i]) {
      const auto& list = rules_with[h];
      if (!rarest || list.size() < rarest->size()) rarest = &list;
    }
    for (size_t j : *rarest) {
      if (j <= i || flagged[j]) continue;
      if (std::includes(conj[j].begin(), conj[j].end(), conj[i].begin(), conj[i].end())) {
        flagged[j] = true;
        warn(rules[j].line, rules[j].column,
             "rule '" + rules[j].id + "' can never match: rule '" + earlier.id + "' (line " +
                 std::to_string(earlier.line) + ") matches whenever it does");
      }
    }
  }
}

LoadResult load_policy_text(const std::string& text, const std::string& source,
                            const LoadOptions& options) {
  LoadResult out;
  std::unique_ptr<ytree::Document> doc;
  try {
    doc = ytree::Document::parse(text);
  } catch (const YAML::Exception& e) {
    out.errors.push_back({source, e.mark.line + 1, e.mark.column + 1, "invalid YAML: " + e.msg});
    return out;
  } catch (const std::exception& e) {
    out.errors.push_back({source, 0, 0, std::string("invalid YAML: ") + e.what()});
    return out;
  }
  PolicyBuilder builder(source, options, out);
  try {
    builder.build(doc->root(), text);
  } catch (const yaml::YamlError& e) {
    out.policy.reset();
    out.errors.push_back({source, e.line(), e.column(), e.what()});
  } catch (const std::exception& e) {
    out.policy.reset();
    out.errors.push_back({source, 0, 0, std::string("cannot load the policy: ") + e.what()});
  }
  return out;
}

LoadResult load_policy_file(const std::string& path, const LoadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    LoadResult out;
    out.errors.push_back({path, 0, 0, "cannot read the policy file"});
    return out;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return load_policy_text(ss.str(), path, options);
}

}  // namespace ferry::policies
