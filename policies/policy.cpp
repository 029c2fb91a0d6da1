#include "policies/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <re2/re2.h>
#include <nlohmann/json.hpp>

#include "common/saturating.h"

namespace ferry::policies {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kLt:
      return "lt";
    case Op::kLte:
      return "lte";
    case Op::kGt:
      return "gt";
    case Op::kGte:
      return "gte";
    case Op::kEq:
      return "eq";
    case Op::kNe:
      return "ne";
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

namespace {

constexpr std::string_view kWeekdays[7] = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"};

struct LocalTime {
  int64_t hour = 0;
  int64_t minute_of_day = 0;
  int weekday = 0;  // 0 = Monday
};

LocalTime local_time(int64_t unix_seconds, int offset_minutes) {
  int64_t t = unix_seconds + int64_t{offset_minutes} * 60;
  int64_t days = t >= 0 ? t / 86400 : (t - 86399) / 86400;
  int64_t secs = t - days * 86400;
  LocalTime lt;
  lt.hour = secs / 3600;
  lt.minute_of_day = secs / 60;
  // 1970-01-01 was a Thursday (index 3 from Monday).
  lt.weekday = static_cast<int>(((days % 7) + 7 + 3) % 7);
  return lt;
}

// One evaluation: the facts, the policy, and an optional trace for explain.
class Evaluator {
 public:
  Evaluator(const Policy& policy, const Facts& facts) : policy_(policy), facts_(facts) {}

  bool eval(const Condition& c, std::vector<ClauseTrace>* trace, int depth) const {
    switch (c.kind) {
      case Condition::Kind::kTest: {
        bool v = test(c);
        if (trace) trace->push_back({c.label, v, depth, c.line});
        return v;
      }
      case Condition::Kind::kNot: {
        size_t at = push_group(c, trace, depth);
        bool v = !eval(c.children.front(), trace, next_depth(c, depth));
        set_group(trace, at, v);
        return v;
      }
      case Condition::Kind::kAll: {
        size_t at = push_group(c, trace, depth);
        bool v = true;
        for (const auto& child : c.children) {
          bool cv = eval(child, trace, next_depth(c, depth));
          v = v && cv;
          if (!v && !trace) return false;
        }
        set_group(trace, at, v);
        return v;
      }
      case Condition::Kind::kAny: {
        size_t at = push_group(c, trace, depth);
        bool v = false;
        for (const auto& child : c.children) {
          bool cv = eval(child, trace, next_depth(c, depth));
          v = v || cv;
          if (v && !trace) return true;
        }
        set_group(trace, at, v);
        return v;
      }
    }
    return false;
  }

  const TargetFacts* target_facts(int target) const {
    if (target < 0) return nullptr;
    return facts_.find_target(policy_.targets()[static_cast<size_t>(target)].ref);
  }

  LocalTime now() const { return local_time(facts_.unix_seconds, policy_.utc_offset_minutes()); }

 private:
  static int next_depth(const Condition& c, int depth) {
    return c.label.empty() ? depth : depth + 1;
  }
  static size_t push_group(const Condition& c, std::vector<ClauseTrace>* trace, int depth) {
    if (!trace || c.label.empty()) return SIZE_MAX;
    trace->push_back({c.label, false, depth, c.line});
    return trace->size() - 1;
  }
  static void set_group(std::vector<ClauseTrace>* trace, size_t at, bool v) {
    if (trace && at != SIZE_MAX) (*trace)[at].value = v;
  }

  static bool compare(double lhs, const Condition& c) {
    switch (c.op) {
      case Op::kLt:
        return lhs < c.number;
      case Op::kLte:
        return lhs <= c.number;
      case Op::kGt:
        return lhs > c.number;
      case Op::kGte:
        return lhs >= c.number;
      case Op::kEq:
        return lhs == c.number;
      case Op::kNe:
        return lhs != c.number;
      case Op::kIn:
        return std::find(c.numbers.begin(), c.numbers.end(), lhs) != c.numbers.end();
      case Op::kPresent:
        return true;
      case Op::kAbsent:
        return false;
      case Op::kMatches:
        return false;
    }
    return false;
  }

  static bool number_test(const std::optional<double>& v, const Condition& c) {
    if (!v) return c.op == Op::kAbsent;
    return compare(*v, c);
  }

  static bool string_match(const std::string& s, const Condition& c) {
    switch (c.op) {
      case Op::kEq:
        return s == c.text;
      case Op::kNe:
        return s != c.text;
      case Op::kIn:
        return std::find(c.texts.begin(), c.texts.end(), s) != c.texts.end();
      case Op::kMatches:
        return s.size() <= kMaxMatchedBytes && RE2::FullMatch(s, *c.regex);
      default:
        return false;
    }
  }

  static bool string_test(const std::string& s, const Condition& c) {
    if (c.op == Op::kPresent) return !s.empty();
    if (c.op == Op::kAbsent) return s.empty();
    return string_match(s, c);
  }

  static bool list_test(const std::vector<std::string>& list, const Condition& c) {
    switch (c.op) {
      case Op::kPresent:
        return !list.empty();
      case Op::kAbsent:
        return list.empty();
      case Op::kNe:
        return std::find(list.begin(), list.end(), c.text) == list.end();
      default:
        for (const auto& item : list) {
          if (string_match(item, c)) return true;
        }
        return false;
    }
  }

  static bool bool_test(bool v, const Condition& c) {
    return c.op == Op::kNe ? v != c.flag : v == c.flag;
  }

  bool fits(int target) const {
    const TargetFacts* tf = target_facts(target);
    if (!tf || tf->context_length <= 0) return true;
    int64_t prompt = tf->prompt_tokens.value_or(facts_.prompt_tokens);
    return saturating_add(prompt, facts_.max_tokens.value_or(1)) <= tf->context_length;
  }

  static std::optional<double> opt_num(const std::optional<int64_t>& v) {
    if (!v) return std::nullopt;
    return static_cast<double>(*v);
  }

  bool test(const Condition& c) const {
    const Facts& f = facts_;
    switch (c.fact) {
      case Fact::kPromptTokens:
        return compare(static_cast<double>(f.prompt_tokens), c);
      case Fact::kMaxTokens:
        return number_test(opt_num(f.max_tokens), c);
      case Fact::kTotalTokens:
        return compare(static_cast<double>(f.total_tokens()), c);
      case Fact::kModel:
        return string_test(f.model, c);
      case Fact::kApi:
        return string_test(f.api, c);
      case Fact::kStream:
        return bool_test(f.stream, c);
      case Fact::kTools:
        return bool_test(f.tools, c);
      case Fact::kResponseFormat:
        return bool_test(f.response_format, c);
      case Fact::kTaskId:
        return bool_test(f.task_id, c);
      case Fact::kKey:
        return string_test(f.key, c);
      case Fact::kTeam:
        return string_test(f.team, c);
      case Fact::kProject:
        return string_test(f.project, c);
      case Fact::kRole:
        return string_test(f.role, c);
      case Fact::kTags:
        return list_test(f.tags, c);
      case Fact::kClaimedTags:
        return list_test(f.claimed_tags, c);
      case Fact::kHour:
        return compare(static_cast<double>(now().hour), c);
      case Fact::kTime:
        return compare(static_cast<double>(now().minute_of_day), c);
      case Fact::kWeekday:
        return string_test(std::string(kWeekdays[now().weekday]), c);
      case Fact::kBudgetLeftPct:
        return number_test(f.budget_left_pct, c);
      case Fact::kFits:
        return bool_test(fits(c.target), c);
      case Fact::kHealthy: {
        const TargetFacts* tf = target_facts(c.target);
        return bool_test(tf ? tf->healthy : true, c);
      }
      case Fact::kQueueDepth: {
        const TargetFacts* tf = target_facts(c.target);
        return number_test(tf ? opt_num(tf->queue_depth) : std::nullopt, c);
      }
      case Fact::kEstWaitMs: {
        const TargetFacts* tf = target_facts(c.target);
        return number_test(tf ? opt_num(tf->est_wait_ms) : std::nullopt, c);
      }
      case Fact::kP90TtftMs: {
        const TargetFacts* tf = target_facts(c.target);
        return number_test(tf ? opt_num(tf->p90_ttft_ms) : std::nullopt, c);
      }
      case Fact::kErrorRate: {
        const TargetFacts* tf = target_facts(c.target);
        return number_test(tf ? tf->error_rate : std::nullopt, c);
      }
    }
    return false;
  }

  const Policy& policy_;
  const Facts& facts_;
};

template <typename T>
void apply_param(const ParamRule& rule, const std::optional<T>& requested, std::optional<T>& out,
                 bool& changed) {
  out = requested;
  if (!out && rule.default_value) out = static_cast<T>(*rule.default_value);
  if (out && rule.at_most && static_cast<double>(*out) > *rule.at_most) {
    out = static_cast<T>(*rule.at_most);
  }
  if (out && rule.at_least && static_cast<double>(*out) < *rule.at_least) {
    out = static_cast<T>(*rule.at_least);
  }
  changed = out != requested;
}

Decision build_decision(const Policy& policy, const Facts& facts, const Action& action,
                        const std::string& rule_id) {
  Decision d;
  d.rule_id = rule_id;
  d.policy_version = policy.short_version();
  d.tags = action.tags;
  apply_param(action.max_tokens, facts.max_tokens, d.params.max_tokens,
              d.params.max_tokens_changed);
  apply_param(action.temperature, facts.temperature, d.params.temperature,
              d.params.temperature_changed);
  apply_param(action.top_p, facts.top_p, d.params.top_p, d.params.top_p_changed);
  if (action.reject) {
    d.reject = action.reject;
    return d;
  }
  const auto& targets = policy.targets();
  auto hop_of = [&](int index) {
    const Target& t = targets[static_cast<size_t>(index)];
    return Hop{t.name, t.ref};
  };
  d.cache = action.cache;
  d.reasoning = action.reasoning;
  if (action.trim) {
    const TrimRule& t = *action.trim;
    d.trim = TrimDecision{t.to_fit >= 0 ? std::optional<Hop>(hop_of(t.to_fit)) : std::nullopt,
                          t.max_prompt_tokens, t.keep_system, t.keep_last_turns};
  }

  // Order: a weighted route puts one hop, drawn by weight, first; the rest keep their order.
  size_t first = 0;
  if (action.weighted) {
    uint64_t total = 0;
    for (const auto& h : action.route)
      total += static_cast<uint64_t>(std::max<int64_t>(h.weight, 0));
    if (total > 0) {
      uint64_t r = facts.split % total;
      for (size_t i = 0; i < action.route.size(); ++i) {
        uint64_t w = static_cast<uint64_t>(std::max<int64_t>(action.route[i].weight, 0));
        if (r < w) {
          first = i;
          break;
        }
        r -= w;
      }
    }
  }
  std::vector<int> order;
  order.reserve(action.route.size());
  order.push_back(action.route[first].target);
  for (size_t i = 0; i < action.route.size(); ++i) {
    if (i != first) order.push_back(action.route[i].target);
  }

  std::vector<Hop> demoted;
  int64_t generate = d.params.max_tokens.value_or(1);
  for (int index : order) {
    Hop hop = hop_of(index);
    const TargetFacts* tf = facts.find_target(hop.ref);
    // With `trim` the planner fits the prompt to the hop (or refuses): no hop is dropped here.
    if (tf && tf->context_length > 0 && !action.trim) {
      int64_t needed = saturating_add(tf->prompt_tokens.value_or(facts.prompt_tokens), generate);
      if (needed > tf->context_length) {
        d.skipped.push_back({hop, "does not fit: " + std::to_string(needed) +
                                      " tokens needed, context " +
                                      std::to_string(tf->context_length)});
        continue;
      }
    }
    if (tf && !tf->healthy) {
      d.skipped.push_back({hop, "unhealthy: moved to the end"});
      demoted.push_back(std::move(hop));
      continue;
    }
    d.route.push_back(std::move(hop));
  }
  for (auto& hop : demoted) d.route.push_back(std::move(hop));
  if (d.route.empty()) {
    std::string why;
    for (const auto& s : d.skipped)
      why += (why.empty() ? "" : "; ") + s.hop.target + ": " + s.reason;
    d.reject = Reject{400, "the request (" + std::to_string(facts.prompt_tokens) +
                               " prompt tokens) does not fit the context of any target of "
                               "rule '" +
                               rule_id + "' (" + why + ")"};
  }
  if (action.shadow >= 0) d.shadow = hop_of(action.shadow);
  return d;
}

}  // namespace

std::string_view cache_scope_name(CacheScope scope) {
  switch (scope) {
    case CacheScope::kKey:
      return "key";
    case CacheScope::kTeam:
      return "team";
    case CacheScope::kGlobal:
      return "global";
  }
  return "key";
}

std::string reasoning_name(const ReasoningRule& rule) {
  switch (rule.mode) {
    case ReasoningMode::kUnset:
      return "";
    case ReasoningMode::kOff:
      return "off";
    case ReasoningMode::kLow:
      return "low";
    case ReasoningMode::kMedium:
      return "medium";
    case ReasoningMode::kHigh:
      return "high";
    case ReasoningMode::kBudget:
      return "max_tokens:" + std::to_string(rule.max_tokens);
  }
  return "";
}

namespace {

std::string format_number(double v) {
  if (std::floor(v) == v && std::fabs(v) < 9e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string format_opt(const std::optional<double>& v) {
  return v ? format_number(*v) : "(none)";
}

std::string format_offset(int minutes) {
  char buf[16];
  int a = std::abs(minutes);
  std::snprintf(buf, sizeof(buf), "%c%02d:%02d", minutes < 0 ? '-' : '+', a / 60, a % 60);
  return buf;
}

}  // namespace

bool Policy::has_alias(std::string_view name) const {
  for (const auto& a : aliases_) {
    if (a.name == name) return true;
  }
  return false;
}

int Policy::find_target(std::string_view name) const {
  for (size_t i = 0; i < targets_.size(); ++i) {
    if (targets_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::vector<std::string> Policy::target_refs() const {
  std::vector<std::string> out;
  for (const auto& t : targets_) {
    if (std::find(out.begin(), out.end(), t.ref) == out.end()) out.push_back(t.ref);
  }
  return out;
}

Decision Policy::decide(const Facts& facts) const {
  Evaluator ev(*this, facts);
  for (const auto& rule : rules_) {
    if (!rule.when || ev.eval(*rule.when, nullptr, 0)) {
      return build_decision(*this, facts, rule.action, rule.id);
    }
  }
  return build_decision(*this, facts, default_, "default");
}

Explanation Policy::explain(const Facts& facts) const {
  Explanation ex;
  ex.facts = facts;
  Evaluator ev(*this, facts);
  LocalTime lt = ev.now();
  std::string tz = timezone_ + " (UTC" + format_offset(utc_offset_minutes_) + ")";
  auto name = [](Fact fact) { return std::string(fact_name(fact)); };
  ex.derived.emplace_back(name(Fact::kTotalTokens), std::to_string(facts.total_tokens()));
  ex.derived.emplace_back(name(Fact::kHour), std::to_string(lt.hour) + " " + tz);
  char hhmm[8];
  std::snprintf(hhmm, sizeof(hhmm), "%02d:%02d", static_cast<int>(lt.minute_of_day / 60),
                static_cast<int>(lt.minute_of_day % 60));
  ex.derived.emplace_back(name(Fact::kTime), hhmm);
  ex.derived.emplace_back(name(Fact::kWeekday), std::string(kWeekdays[lt.weekday]));
  for (const auto& t : targets_) {
    const TargetFacts* tf = facts.find_target(t.ref);
    std::string fit = "yes (context unknown)";
    if (tf && tf->context_length > 0) {
      int64_t needed = saturating_add(tf->prompt_tokens.value_or(facts.prompt_tokens),
                                      facts.max_tokens.value_or(1));
      fit = (needed <= tf->context_length ? "yes: " : "no: ") + std::to_string(needed) + " of " +
            std::to_string(tf->context_length);
    }
    ex.derived.emplace_back(name(Fact::kFits) + " " + t.name, fit);
    ex.derived.emplace_back(name(Fact::kHealthy) + " " + t.name,
                            (!tf || tf->healthy) ? "true" : "false");
  }

  bool chosen = false;
  for (const auto& rule : rules_) {
    RuleTrace rt;
    rt.id = rule.id;
    rt.line = rule.line;
    rt.matched = !rule.when || ev.eval(*rule.when, &rt.clauses, 0);
    if (rt.matched && !chosen) {
      rt.chosen = true;
      chosen = true;
      ex.decision = build_decision(*this, facts, rule.action, rule.id);
    }
    ex.rules.push_back(std::move(rt));
  }
  RuleTrace def;
  def.id = "default";
  def.matched = true;
  def.chosen = !chosen;
  ex.rules.push_back(std::move(def));
  if (!chosen) ex.decision = build_decision(*this, facts, default_, "default");
  return ex;
}

nlohmann::json decision_to_json(const Decision& d) {
  using nlohmann::json;
  json j;
  j["rule"] = d.rule_id;
  j["policy_version"] = d.policy_version;
  json route = json::array();
  for (const auto& h : d.route) route.push_back({{"target", h.target}, {"ref", h.ref}});
  j["route"] = route;
  json skipped = json::array();
  for (const auto& s : d.skipped) {
    skipped.push_back({{"target", s.hop.target}, {"ref", s.hop.ref}, {"reason", s.reason}});
  }
  j["skipped"] = skipped;
  j["reject"] =
      d.reject ? json{{"status", d.reject->status}, {"message", d.reject->message}} : json(nullptr);
  j["shadow"] =
      d.shadow ? json{{"target", d.shadow->target}, {"ref", d.shadow->ref}} : json(nullptr);
  j["tags"] = d.tags;
  json params = json::object();
  if (d.params.max_tokens) params["max_tokens"] = *d.params.max_tokens;
  if (d.params.temperature) params["temperature"] = *d.params.temperature;
  if (d.params.top_p) params["top_p"] = *d.params.top_p;
  j["params"] = params;
  json changed = json::array();
  if (d.params.max_tokens_changed) changed.push_back("max_tokens");
  if (d.params.temperature_changed) changed.push_back("temperature");
  if (d.params.top_p_changed) changed.push_back("top_p");
  j["params_changed"] = changed;
  if (d.trim) {
    json trim = {{"keep_system", d.trim->keep_system},
                 {"keep_last_turns", d.trim->keep_last_turns}};
    if (d.trim->to_fit) trim["to_fit"] = d.trim->to_fit->target;
    if (d.trim->max_prompt_tokens >= 0) trim["max_prompt_tokens"] = d.trim->max_prompt_tokens;
    j["trim"] = trim;
  }
  if (d.cache) {
    j["cache"] = {{"ttl_ms", d.cache->ttl_ms},
                  {"scope", cache_scope_name(d.cache->scope)},
                  {"nondeterministic", d.cache->nondeterministic},
                  {"rate_limits", d.cache->hits_count_rate_limits ? "count" : "exempt"}};
  }
  if (d.reasoning.set()) j["reasoning"] = reasoning_name(d.reasoning);
  return j;
}

nlohmann::json explanation_to_json(const Explanation& ex) {
  using nlohmann::json;
  json j;
  j["policy_version"] = ex.decision.policy_version;
  j["facts"] = facts_to_json(ex.facts);
  json derived = json::object();
  for (const auto& [k, v] : ex.derived) derived[k] = v;
  j["derived"] = derived;
  json rules = json::array();
  for (const auto& r : ex.rules) {
    json clauses = json::array();
    for (const auto& c : r.clauses) {
      clauses.push_back(
          {{"clause", c.label}, {"value", c.value}, {"depth", c.depth}, {"line", c.line}});
    }
    rules.push_back({{"id", r.id},
                     {"line", r.line},
                     {"matched", r.matched},
                     {"chosen", r.chosen},
                     {"clauses", clauses}});
  }
  j["rules"] = rules;
  j["decision"] = decision_to_json(ex.decision);
  return j;
}

std::string explanation_to_text(const Explanation& ex) {
  std::ostringstream os;
  const Decision& d = ex.decision;
  os << "policy " << d.policy_version << "\n";
  os << "facts:\n";
  nlohmann::json facts = facts_to_json(ex.facts);
  for (const auto& [k, v] : facts.items()) {
    if (k == "targets") continue;
    os << "  " << k << " = " << v.dump() << "\n";
  }
  for (const auto& t : ex.facts.targets) {
    os << "  target " << t.ref << ": healthy=" << (t.healthy ? "true" : "false")
       << " context=" << t.context_length;
    if (t.prompt_tokens) os << " prompt_tokens=" << *t.prompt_tokens;
    if (t.queue_depth) os << " queue_depth=" << *t.queue_depth;
    if (t.est_wait_ms) os << " est_wait_ms=" << *t.est_wait_ms;
    if (t.p90_ttft_ms) os << " p90_ttft_ms=" << *t.p90_ttft_ms;
    if (t.error_rate) os << " error_rate=" << format_number(*t.error_rate);
    os << "\n";
  }
  os << "derived:\n";
  for (const auto& [k, v] : ex.derived) os << "  " << k << " = " << v << "\n";
  os << "rules:\n";
  for (const auto& r : ex.rules) {
    os << "  " << (r.chosen ? "=> " : "   ") << r.id;
    if (r.line > 0) os << " (line " << r.line << ")";
    os << ": " << (r.matched ? "matches" : "no match");
    if (r.id != "default" && r.clauses.empty()) os << " (no `when`: always)";
    os << "\n";
    for (const auto& c : r.clauses) {
      os << "       " << std::string(static_cast<size_t>(c.depth) * 2, ' ')
         << (c.value ? "true   " : "false  ") << c.label << "\n";
    }
  }
  os << "decision: rule " << d.rule_id << "\n";
  if (d.reject) {
    os << "  reject: " << d.reject->status << " " << d.reject->message << "\n";
  } else {
    os << "  route:";
    for (size_t i = 0; i < d.route.size(); ++i) {
      os << (i ? " -> " : " ") << d.route[i].target << " (" << d.route[i].ref << ")";
    }
    os << "\n";
  }
  for (const auto& s : d.skipped) {
    os << "  skipped: " << s.hop.target << " (" << s.hop.ref << "): " << s.reason << "\n";
  }
  auto param = [&](const char* name, const std::optional<double>& before,
                   const std::optional<double>& after, bool changed) {
    if (changed)
      os << "  set " << name << ": " << format_opt(before) << " -> " << format_opt(after) << "\n";
  };
  std::optional<double> mt_before, mt_after;
  if (ex.facts.max_tokens) mt_before = static_cast<double>(*ex.facts.max_tokens);
  if (d.params.max_tokens) mt_after = static_cast<double>(*d.params.max_tokens);
  param("max_tokens", mt_before, mt_after, d.params.max_tokens_changed);
  param("temperature", ex.facts.temperature, d.params.temperature, d.params.temperature_changed);
  param("top_p", ex.facts.top_p, d.params.top_p, d.params.top_p_changed);
  if (d.shadow) os << "  shadow: " << d.shadow->target << " (" << d.shadow->ref << ")\n";
  if (!d.tags.empty()) {
    os << "  tags:";
    for (const auto& t : d.tags) os << " " << t;
    os << "\n";
  }
  return os.str();
}

}  // namespace ferry::policies
