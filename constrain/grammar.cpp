#include "constrain/grammar.h"

#include <algorithm>

#include "constrain/state_masks.h"

namespace ferry::constrain {

std::uint32_t GrammarBuilder::add_rule(std::string name) {
  Rule r;
  r.name = std::move(name);
  r.states.emplace_back();
  ++states_;
  grammar_.rules.push_back(std::move(r));
  return static_cast<std::uint32_t>(grammar_.rules.size() - 1);
}

std::uint32_t GrammarBuilder::string_rule(std::uint32_t min_chars, std::uint32_t max_chars) {
  const auto key = std::make_pair(min_chars, max_chars);
  if (const auto it = string_rules_.find(key); it != string_rules_.end()) return it->second;
  Rule r;
  r.kind = RuleKind::kString;
  r.name = "string{" + std::to_string(min_chars) + "," + std::to_string(max_chars) + "}";
  r.min_chars = min_chars;
  r.max_chars = max_chars;
  grammar_.rules.push_back(std::move(r));
  const auto id = static_cast<std::uint32_t>(grammar_.rules.size() - 1);
  string_rules_.emplace(key, id);
  return id;
}

std::uint32_t GrammarBuilder::run_rule(const std::bitset<256>& bytes, std::uint32_t min,
                                       std::uint32_t max) {
  const std::string key = bytes.to_string() + "," + std::to_string(min) + "," + std::to_string(max);
  if (const auto it = run_rules_.find(key); it != run_rules_.end()) return it->second;
  Rule r;
  r.kind = RuleKind::kRun;
  r.name = "run{" + std::to_string(min) + "," + std::to_string(max) + "}";
  r.min_chars = min;
  r.max_chars = max;
  r.run_bytes = bytes;
  grammar_.rules.push_back(std::move(r));
  const auto id = static_cast<std::uint32_t>(grammar_.rules.size() - 1);
  run_rules_.emplace(key, id);
  ++states_;
  return id;
}

std::uint32_t GrammarBuilder::add_state(std::uint32_t rule) {
  auto& states = grammar_.rules[rule].states;
  states.emplace_back();
  ++states_;
  return static_cast<std::uint32_t>(states.size() - 1);
}

void GrammarBuilder::byte_edge(std::uint32_t rule, std::uint32_t from, std::uint8_t lo,
                               std::uint8_t hi, std::uint32_t to) {
  grammar_.rules[rule].states[from].bytes.push_back(ByteEdge{lo, hi, to});
}

void GrammarBuilder::eps(std::uint32_t rule, std::uint32_t from, std::uint32_t to) {
  grammar_.rules[rule].states[from].eps.push_back(to);
}

void GrammarBuilder::accept(std::uint32_t rule, std::uint32_t state) {
  grammar_.rules[rule].states[state].accept = true;
}

std::uint32_t GrammarBuilder::call(std::uint32_t rule, std::uint32_t from, std::uint32_t callee) {
  const std::uint32_t to = add_state(rule);
  grammar_.rules[rule].states[from].calls.push_back(CallEdge{callee, to});
  return to;
}

std::uint32_t GrammarBuilder::literal(std::uint32_t rule, std::uint32_t from,
                                      std::string_view bytes) {
  std::uint32_t cur = from;
  for (const char c : bytes) {
    const std::uint32_t next = add_state(rule);
    const auto b = static_cast<std::uint8_t>(c);
    byte_edge(rule, cur, b, b, next);
    cur = next;
  }
  if (cur != from) return cur;
  const std::uint32_t end = add_state(rule);  // an empty literal: still a fresh end state
  eps(rule, from, end);
  return end;
}

void GrammarBuilder::marker_edge(std::uint32_t rule, std::uint32_t from, const std::string& text,
                                 std::uint32_t to) {
  auto& names = grammar_.markers;
  const auto it = std::find(names.begin(), names.end(), text);
  const auto index = static_cast<std::uint32_t>(it - names.begin());
  if (it == names.end()) names.push_back(text);
  grammar_.rules[rule].states[from].markers.push_back(MarkerEdge{index, to});
}

std::uint32_t GrammarBuilder::marker(std::uint32_t rule, std::uint32_t from,
                                     const std::string& text) {
  const std::uint32_t to = add_state(rule);
  marker_edge(rule, from, text, to);
  return to;
}

std::uint32_t GrammarBuilder::ws(std::uint32_t rule, std::uint32_t from) {
  const std::uint32_t end = add_state(rule);
  std::uint32_t cur = from;
  for (std::uint32_t i = 0; i < max_whitespace_; ++i) {
    eps(rule, cur, end);
    const std::uint32_t next = add_state(rule);
    byte_edge(rule, cur, ' ', ' ', next);
    byte_edge(rule, cur, '\n', '\n', next);
    byte_edge(rule, cur, '\t', '\t', next);
    cur = next;
  }
  eps(rule, cur, end);
  return end;
}

std::uint32_t GrammarBuilder::one_of(std::uint32_t rule, std::uint32_t from,
                                     const std::vector<std::string>& literals) {
  const std::uint32_t end = add_state(rule);
  for (const std::string& lit : literals) eps(rule, literal(rule, from, lit), end);
  return end;
}

std::uint32_t string_close_bytes(const Rule& rule, std::uint32_t state, std::uint32_t count) {
  // The current character's bytes still to come (it was counted at its first byte).
  static constexpr std::uint32_t kRest[kStrStates] = {
      0,              // kStrOpen: handled below
      0,              // kStrBody
      1,              // kStrEscape
      4, 3, 3, 2, 1,  // kStrHex1, kStrHex2, kStrHex2LowD, kStrHex3, kStrHex4
      1, 2, 3,        // kStrCont1..3
      2, 2, 3, 3,     // kStrE0, kStrED, kStrF0, kStrF4
  };
  const std::uint32_t sub = str_sub(state);
  if (sub == kStrOpen) return rule.min_chars + 2;
  const std::uint32_t rest = sub < kStrStates ? kRest[sub] : 0;
  const std::uint32_t points = count - std::min(count, str_astral(state));
  return rest + (points < rule.min_chars ? rule.min_chars - points : 0) + 1;
}

namespace {

std::uint32_t add_dist(std::uint32_t a, std::uint32_t b) {
  return a == kNoPath || b == kNoPath || a > kNoPath - 1 - b ? kNoPath : a + b;
}

// One relaxation pass over a rule's states, last to first (fragments mostly point forward, so
// one pass settles most rules); true when a distance got shorter.
bool relax(Rule& rule, const std::vector<Rule>& rules) {
  bool changed = false;
  for (std::size_t i = rule.states.size(); i-- > 0;) {
    NfaState& st = rule.states[i];
    std::uint32_t d = st.accept ? 0 : st.dist;
    for (const ByteEdge& e : st.bytes) d = std::min(d, add_dist(1, rule.states[e.to].dist));
    for (const MarkerEdge& e : st.markers) d = std::min(d, add_dist(1, rule.states[e.to].dist));
    for (const std::uint32_t e : st.eps) d = std::min(d, rule.states[e].dist);
    for (const CallEdge& c : st.calls)
      d = std::min(d, add_dist(rules[c.rule].min_len, rule.states[c.to].dist));
    if (d < st.dist) {
      st.dist = d;
      changed = true;
    }
  }
  return changed;
}

// Shortest matches by fixpoint (recursion goes through calls; distances only shrink).
void compute_distances(std::vector<Rule>& rules) {
  for (Rule& r : rules) {
    if (r.kind == RuleKind::kString) r.min_len = r.min_chars + 2;
    if (r.kind == RuleKind::kRun) r.min_len = r.min_chars;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (Rule& r : rules) {
      if (r.kind != RuleKind::kNfa) continue;
      while (relax(r, rules)) {
      }
      const std::uint32_t len = r.states[r.start].dist;
      if (len < r.min_len) {
        r.min_len = len;
        changed = true;
      }
    }
  }
}

// Frames a stack holds at most from rule r down (1 + its deepest callee), by a depth-first
// walk of the call graph; kNoPath when r reaches a rule still on the walk (recursion).
std::uint32_t frames_below(const std::vector<Rule>& rules, std::uint32_t r,
                           std::vector<std::uint32_t>& memo, std::vector<char>& on_path) {
  if (memo[r] != 0) return memo[r];
  if (on_path[r]) return kNoPath;
  on_path[r] = 1;
  std::uint32_t most = 1;
  for (const NfaState& st : rules[r].states) {
    for (const CallEdge& c : st.calls) {
      const std::uint32_t below = frames_below(rules, c.rule, memo, on_path);
      most = below == kNoPath ? kNoPath : std::max(most, below + 1);
      if (most == kNoPath) break;
    }
    if (most == kNoPath) break;
  }
  on_path[r] = 0;
  memo[r] = most;
  return most;
}

}  // namespace

Grammar GrammarBuilder::finish(std::uint32_t root) {
  compute_distances(grammar_.rules);
  std::vector<std::uint32_t> memo(grammar_.rules.size(), 0);
  std::vector<char> on_path(grammar_.rules.size(), 0);
  grammar_.max_frames = frames_below(grammar_.rules, root, memo, on_path);
  grammar_.root = root;
  grammar_.masks = std::make_shared<StateMasks>();
  Grammar out = std::move(grammar_);
  grammar_ = Grammar{};
  string_rules_.clear();
  run_rules_.clear();
  states_ = 0;
  return out;
}

}  // namespace ferry::constrain
