// ferry::constrain::Grammar: the byte-level grammar a constraint compiles to. Rules are acyclic
// NFAs over byte ranges, epsilon moves and calls of other rules (recursion goes through calls,
// bounded by the matcher's stack depth), plus one built-in rule kind for JSON strings with a
// character counter. GrammarBuilder makes one; a finished Grammar is immutable and thread-safe
// (its mask cache synchronises itself).
#pragma once

#include <bitset>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry::constrain {

struct ByteEdge {
  std::uint8_t lo = 0;
  std::uint8_t hi = 0;
  std::uint32_t to = 0;
};

// A marker written as one of the vocabulary's own (special) tokens, e.g. Qwen's <tool_call>:
// Grammar::markers[marker] is its text; the matcher allows the token of that text here.
struct MarkerEdge {
  std::uint32_t marker = 0;
  std::uint32_t to = 0;
};

struct CallEdge {
  std::uint32_t rule = 0;  // pushed at its start state
  std::uint32_t to = 0;    // where the caller continues when it returns
};

// No way to finish from here (a distance).
inline constexpr std::uint32_t kNoPath = 0xFFFFFFFFu;

struct NfaState {
  std::vector<ByteEdge> bytes;
  std::vector<CallEdge> calls;
  std::vector<std::uint32_t> eps;
  std::vector<MarkerEdge> markers;
  bool accept = false;           // the rule may return here
  std::uint32_t dist = kNoPath;  // fewest bytes from here to a return (set by finish())
};

enum class RuleKind {
  kNfa,
  // A JSON string value, quotes included: valid UTF-8, escapes (no lone surrogates), no raw
  // control characters, between min_chars and max_chars characters (an escape counts as one).
  // A character above U+FFFF counts 2 toward max_chars and 1 toward min_chars, so that a string
  // fits both JSON Schema's lengths (code points) and zod's / JavaScript's (UTF-16 units). The
  // frame's count is in UTF-16 units; its state holds the sub-state and, above kStrSubBits,
  // how many of those characters it read (count minus them: code points).
  kString,
  // A run of min_chars to max_chars bytes of one ASCII class (`run_bytes`), e.g. a pattern's
  // `[a-z0-9]{1,32}` or `\d{4}`: one frame with a byte counter instead of a state per byte, so
  // that its masks come from per-vocabulary tables (Vocabulary::run_table).
  kRun,
};

struct Rule {
  RuleKind kind = RuleKind::kNfa;
  std::string name;  // for diagnostics
  std::vector<NfaState> states;
  std::uint32_t start = 0;
  std::uint32_t min_chars = 0;      // kString, kRun (bytes)
  std::uint32_t max_chars = 0;      // kString, kRun (bytes)
  std::bitset<256> run_bytes;       // kRun
  std::uint32_t min_len = kNoPath;  // fewest bytes of a whole match (set by finish())
};

// Sub-states of a kString frame.
enum StringState : std::uint32_t {
  kStrOpen = 0,  // before the opening quote
  kStrBody,      // at a character boundary inside the string
  kStrEscape,    // after a backslash
  kStrHex1,      // \u: first hex digit
  kStrHex2,      // second
  kStrHex2LowD,  // second after d/D: 0-7 only (no surrogates)
  kStrHex3,
  kStrHex4,
  kStrCont1,  // one UTF-8 continuation byte left
  kStrCont2,  // two
  kStrCont3,  // three
  kStrE0,     // after E0: A0-BF, then one more
  kStrED,     // after ED: 80-9F, then one more
  kStrF0,     // after F0: 90-BF, then two more
  kStrF4,     // after F4: 80-8F, then two more
  kStrStates,
};

inline constexpr std::uint32_t kStrSubBits = 5;
inline constexpr std::uint32_t str_sub(std::uint32_t state) {
  return state & ((1u << kStrSubBits) - 1);
}
inline constexpr std::uint32_t str_astral(std::uint32_t state) {
  return state >> kStrSubBits;
}

class StateMasks;

// Bytes a kString frame in state `state` (sub-state and astral count) with `count` UTF-16 units
// needs to close.
std::uint32_t string_close_bytes(const Rule& rule, std::uint32_t state, std::uint32_t count);

struct Grammar {
  std::vector<Rule> rules;
  std::uint32_t root = 0;
  std::vector<std::string> markers;  // the texts of the marker tokens (MarkerEdge)
  // The most frames a parse stack can hold: the longest chain of calls from the root, plus one
  // (set by finish()); kNoPath when a rule can call itself (recursion, bounded by the matcher).
  std::uint32_t max_frames = kNoPath;
  // Masks of expensive rule states, filled by the matchers that use this grammar (its own
  // synchronisation; see state_masks.h).
  std::shared_ptr<StateMasks> masks;
};

// Fragments are built state by state: every helper takes the state to start from and returns
// a fresh end state nothing else leaves from, so helpers compose by sequence.
class GrammarBuilder {
 public:
  std::uint32_t add_rule(std::string name);  // an NFA rule with its start state
  // The string rule for these bounds (one per distinct pair).
  std::uint32_t string_rule(std::uint32_t min_chars, std::uint32_t max_chars);
  // The run rule of these bytes (ASCII only) and bounds (one per distinct triple).
  std::uint32_t run_rule(const std::bitset<256>& bytes, std::uint32_t min, std::uint32_t max);
  std::uint32_t add_state(std::uint32_t rule);
  void byte_edge(std::uint32_t rule, std::uint32_t from, std::uint8_t lo, std::uint8_t hi,
                 std::uint32_t to);
  void eps(std::uint32_t rule, std::uint32_t from, std::uint32_t to);
  void accept(std::uint32_t rule, std::uint32_t state);
  std::uint32_t start(std::uint32_t rule) const { return grammar_.rules[rule].start; }

  // Fragments (return the end state).
  std::uint32_t call(std::uint32_t rule, std::uint32_t from, std::uint32_t callee);
  std::uint32_t literal(std::uint32_t rule, std::uint32_t from, std::string_view bytes);
  // The special token of this text (one token, never its bytes spelled out).
  std::uint32_t marker(std::uint32_t rule, std::uint32_t from, const std::string& text);
  void marker_edge(std::uint32_t rule, std::uint32_t from, const std::string& text,
                   std::uint32_t to);
  // Zero to max_whitespace of space, newline, tab.
  std::uint32_t ws(std::uint32_t rule, std::uint32_t from);
  // One of several literals (e.g. enum values).
  std::uint32_t one_of(std::uint32_t rule, std::uint32_t from,
                       const std::vector<std::string>& literals);

  void set_max_whitespace(std::uint32_t n) { max_whitespace_ = n; }
  std::size_t state_count() const { return states_; }
  // The finished grammar, with every state's distance to its rule's return and every rule's
  // shortest match (what the matcher's token budget is measured against).
  Grammar finish(std::uint32_t root);

 private:
  Grammar grammar_;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint32_t> string_rules_;
  std::map<std::string, std::uint32_t> run_rules_;  // by bytes and bounds
  std::uint32_t max_whitespace_ = 2;
  std::size_t states_ = 0;
};

}  // namespace ferry::constrain
