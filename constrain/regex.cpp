#include "constrain/regex.h"

#include <bitset>
#include <memory>
#include <vector>

namespace ferry::constrain {
namespace {

using ByteSet = std::bitset<256>;

// What a JSON string may hold unescaped, of the characters `.` and classes stand for.
ByteSet json_safe_ascii() {
  ByteSet s;
  for (int c = 0x20; c < 0x7F; ++c) s.set(static_cast<std::size_t>(c));
  s.reset('"');
  s.reset('\\');
  return s;
}

struct Node {
  enum Kind { kChars, kSeq, kAlt, kRepeat } kind = kSeq;
  ByteSet chars;  // kChars: one byte from the set
  std::vector<Node> kids;
  std::uint32_t min = 1;
  std::uint32_t max = 1;
};

// ---- parser ------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::string_view p, const RegexLimits& limits) : p_(p), limits_(limits) {}

  Result<Node> parse() {
    if (!p_.empty() && p_.front() == '^') ++pos_;
    std::size_t end = p_.size();
    if (end > pos_ && p_[end - 1] == '$' && (end < 2 || p_[end - 2] != '\\')) --end;
    p_ = p_.substr(0, end);
    Node n = alternation();
    if (!error_.empty()) return fail();
    if (pos_ != p_.size()) {
      error_ = "unbalanced ')' at offset " + std::to_string(pos_);
      return fail();
    }
    return n;
  }

 private:
  Error fail() const {
    return Error::make(ErrorCode::kInvalidRequest, "pattern not supported: " + error_);
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char peek() const { return p_[pos_]; }

  Node alternation() {
    Node alt;
    alt.kind = Node::kAlt;
    alt.kids.push_back(sequence());
    while (error_.empty() && !at_end() && peek() == '|') {
      ++pos_;
      alt.kids.push_back(sequence());
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  Node sequence() {
    Node seq;
    seq.kind = Node::kSeq;
    while (error_.empty() && !at_end() && peek() != '|' && peek() != ')') {
      Node a = atom();
      if (!error_.empty()) break;
      quantifier(a);
      seq.kids.push_back(std::move(a));
    }
    return seq;
  }

  static Node chars(ByteSet s) {
    Node n;
    n.kind = Node::kChars;
    n.chars = s;
    return n;
  }

  Node atom() {
    const char c = p_[pos_++];
    switch (c) {
      case '(':
        return group();
      case '[':
        return char_class();
      case '.':
        return chars(json_safe_ascii());
      case '\\':
        return escape(false).value_or_node;
      case '^':
      case '$':
        error_ = "anchors are supported only at the start and the end";
        return {};
      case '*':
      case '+':
      case '?':
      case '{':
        error_ = std::string("nothing to repeat before '") + c + "'";
        return {};
      default:
        if (static_cast<unsigned char>(c) >= 0xC0) return utf8_char(c);
        return literal(static_cast<unsigned char>(c));
    }
  }

  // A multi-byte character of the pattern: its bytes in sequence, quantified as one.
  Node utf8_char(char lead) {
    Node seq;
    seq.kind = Node::kSeq;
    ByteSet s;
    s.set(static_cast<unsigned char>(lead));
    seq.kids.push_back(chars(s));
    while (!at_end() && (static_cast<unsigned char>(peek()) & 0xC0) == 0x80) {
      ByteSet c;
      c.set(static_cast<unsigned char>(p_[pos_++]));
      seq.kids.push_back(chars(c));
    }
    return seq;
  }

  Node literal(unsigned char c) {
    if (c < 0x20 || c == 0x7F) error_ = "control characters are not supported";
    if (c == '"' || c == '\\') error_ = "the characters '\"' and '\\' are not supported";
    ByteSet s;
    s.set(c);
    return chars(s);
  }

  Node group() {
    if (!at_end() && peek() == '?') {
      ++pos_;
      if (!at_end() && peek() == ':') {
        ++pos_;
      } else if (!at_end() && peek() == '<' && pos_ + 1 < p_.size() && p_[pos_ + 1] != '=' &&
                 p_[pos_ + 1] != '!') {
        const std::size_t close = p_.find('>', pos_);
        if (close == std::string_view::npos) {
          error_ = "unterminated group name";
          return {};
        }
        pos_ = close + 1;
      } else {
        error_ = "lookaround and group flags are not supported";
        return {};
      }
    }
    if (++depth_ > kMaxGroupDepth) {
      error_ = "groups nested deeper than " + std::to_string(kMaxGroupDepth);
      return {};
    }
    Node n = alternation();
    --depth_;
    if (!error_.empty()) return {};
    if (at_end() || peek() != ')') {
      error_ = "missing ')'";
      return {};
    }
    ++pos_;
    return n;
  }

  struct Escaped {
    Node value_or_node;
    ByteSet set;
    bool is_set = false;
  };

  // After a backslash. In a class (in_class) a set or a single byte is returned in `set`.
  Escaped escape(bool in_class) {
    Escaped out;
    if (at_end()) {
      error_ = "trailing backslash";
      return out;
    }
    const char c = p_[pos_++];
    ByteSet s;
    switch (c) {
      case 'd':
      case 'D':
        for (int d = '0'; d <= '9'; ++d) s.set(static_cast<std::size_t>(d));
        break;
      case 'w':
      case 'W':
        for (int d = '0'; d <= '9'; ++d) s.set(static_cast<std::size_t>(d));
        for (int d = 'a'; d <= 'z'; ++d) s.set(static_cast<std::size_t>(d));
        for (int d = 'A'; d <= 'Z'; ++d) s.set(static_cast<std::size_t>(d));
        s.set('_');
        break;
      case 's':
      case 'S':
        s.set(' ');  // of the white space, only the space needs no JSON escape
        break;
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          error_ = std::string("the escape \\") + c + " is not supported";
          return out;
        }
        if (c == '"' || c == '\\') {
          error_ = "the characters '\"' and '\\' are not supported";
          return out;
        }
        // An escaped control byte would be a raw one in the JSON string (invalid JSON), an
        // escaped non-ASCII character a lone byte of its UTF-8 (invalid UTF-8): the same rules
        // as for the unescaped ones.
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
          error_ = "control characters are not supported";
          return out;
        }
        if (static_cast<unsigned char>(c) >= 0x80) {
          if (in_class) {
            error_ = "non-ASCII characters in a class are not supported";
            return out;
          }
          if (static_cast<unsigned char>(c) < 0xC0) {
            error_ = "invalid UTF-8 after a backslash";
            return out;
          }
          out.value_or_node = utf8_char(c);
          return out;
        }
        s.set(static_cast<unsigned char>(c));
        out.set = s;
        out.is_set = true;
        out.value_or_node = chars(s);
        return out;
    }
    if (c == 'D' || c == 'W' || c == 'S') s = json_safe_ascii() & ~s;
    s &= json_safe_ascii();
    out.set = s;
    out.is_set = true;
    out.value_or_node = chars(s);
    return out;
  }

  Node char_class() {
    bool negate = false;
    if (!at_end() && peek() == '^') {
      negate = true;
      ++pos_;
    }
    ByteSet s;
    bool first = true;
    while (!at_end() && (peek() != ']' || first)) {
      first = false;
      int lo = 0;
      if (!class_atom(s, lo)) return {};
      if (lo >= 0 && pos_ + 1 < p_.size() && peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        int hi = 0;
        ByteSet ignored;
        if (!class_atom(ignored, hi)) return {};
        if (hi < 0 || hi < lo) {
          error_ = "bad class range";
          return {};
        }
        for (int b = lo; b <= hi; ++b) s.set(static_cast<std::size_t>(b));
      }
    }
    if (at_end()) {
      error_ = "missing ']'";
      return {};
    }
    ++pos_;
    if (negate) s = ~s;
    s &= json_safe_ascii();
    if (s.none()) error_ = "a character class leaves nothing to generate";
    return chars(s);
  }

  // One member of a class: adds a set (then single = -1) or returns a single byte in `single`.
  bool class_atom(ByteSet& s, int& single) {
    const auto c = static_cast<unsigned char>(p_[pos_++]);
    single = -1;
    if (c >= 0x80) {
      error_ = "non-ASCII characters in a class are not supported";
      return false;
    }
    if (c == '\\') {
      if (!at_end() && (peek() == 'd' || peek() == 'w' || peek() == 's' || peek() == 'D' ||
                        peek() == 'W' || peek() == 'S')) {
        s |= escape(true).set;
        return error_.empty();
      }
      Escaped e = escape(true);
      if (!error_.empty()) return false;
      for (int b = 0; b < 256; ++b) {
        if (e.set.test(static_cast<std::size_t>(b))) single = b;
      }
      s |= e.set;
      return true;
    }
    single = c;
    s.set(c);
    return true;
  }

  void quantifier(Node& a) {
    if (at_end()) return;
    std::uint32_t min = 1;
    std::uint32_t max = 1;
    bool unbounded = false;
    const char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      min = c == '+' ? 1 : 0;
      max = 1;
      unbounded = c != '?';
    } else if (c == '{') {
      const std::size_t close = p_.find('}', pos_);
      if (close == std::string_view::npos) return;  // a literal '{' in JS without u: refuse
      const std::string body(p_.substr(pos_ + 1, close - pos_ - 1));
      const std::size_t comma = body.find(',');
      try {
        min = static_cast<std::uint32_t>(std::stoul(body.substr(0, comma)));
        if (comma == std::string::npos) {
          max = min;
        } else if (comma + 1 == body.size()) {
          unbounded = true;
        } else {
          max = static_cast<std::uint32_t>(std::stoul(body.substr(comma + 1)));
        }
      } catch (...) {
        error_ = "bad quantifier {" + body + "}";
        return;
      }
      if (min > 1000 || (!unbounded && (max < min || max > 1000))) {
        error_ = "quantifier {" + body + "} is out of range (at most 1000)";
        return;
      }
      pos_ = close + 1;
    } else {
      return;
    }
    if (!at_end() && peek() == '?') ++pos_;  // lazy: the same language
    if (unbounded) max = min + limits_.max_repeat;
    Node r;
    r.kind = Node::kRepeat;
    r.min = min;
    r.max = max;
    r.kids.push_back(std::move(a));
    a = std::move(r);
  }

  static constexpr int kMaxGroupDepth = 32;  // the parser recurses per group
  std::string_view p_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  const RegexLimits& limits_;
  std::string error_;
};

// ---- emitter -----------------------------------------------------------------------------

struct Emitter {
  GrammarBuilder& b;
  std::uint32_t rule;
  std::size_t max_states;

  bool too_big() const { return b.state_count() > max_states; }

  std::uint32_t emit(const Node& n, std::uint32_t from) {
    if (too_big()) return from;
    switch (n.kind) {
      case Node::kChars: {
        const std::uint32_t to = b.add_state(rule);
        int c = 0;
        while (c < 256) {
          if (!n.chars.test(static_cast<std::size_t>(c))) {
            ++c;
            continue;
          }
          int end = c;
          while (end + 1 < 256 && n.chars.test(static_cast<std::size_t>(end) + 1)) ++end;
          b.byte_edge(rule, from, static_cast<std::uint8_t>(c), static_cast<std::uint8_t>(end), to);
          c = end + 1;
        }
        return to;
      }
      case Node::kSeq: {
        std::uint32_t cur = from;
        for (const Node& k : n.kids) cur = emit(k, cur);
        if (cur != from) return cur;
        const std::uint32_t to = b.add_state(rule);
        b.eps(rule, from, to);
        return to;
      }
      case Node::kAlt: {
        const std::uint32_t to = b.add_state(rule);
        for (const Node& k : n.kids) b.eps(rule, emit(k, from), to);
        return to;
      }
      case Node::kRepeat: {
        const Node& kid = n.kids[0];
        if (kid.kind == Node::kChars && n.max > 1 && (kid.chars >> 128).none()) {
          // One class repeated: a run frame (its masks come from per-vocabulary tables).
          return b.call(rule, from, b.run_rule(kid.chars, n.min, n.max));
        }
        std::uint32_t cur = from;
        for (std::uint32_t i = 0; i < n.min && !too_big(); ++i) cur = emit(n.kids[0], cur);
        const std::uint32_t to = b.add_state(rule);
        for (std::uint32_t i = n.min; i < n.max && !too_big(); ++i) {
          b.eps(rule, cur, to);
          cur = emit(n.kids[0], cur);
        }
        b.eps(rule, cur, to);
        return to;
      }
    }
    return from;
  }
};

}  // namespace

Result<std::uint32_t> add_pattern(GrammarBuilder& builder, std::uint32_t rule, std::uint32_t from,
                                  std::string_view pattern, const RegexLimits& limits) {
  Parser parser(pattern, limits);
  auto node = parser.parse();
  if (!node) return std::move(node).error();
  Emitter emitter{builder, rule, limits.max_states};
  const std::uint32_t end = emitter.emit(*node, from);
  if (emitter.too_big()) {
    return Error::make(ErrorCode::kInvalidRequest,
                       "pattern not supported: it expands to more than " +
                           std::to_string(limits.max_states) + " grammar states");
  }
  return end;
}

}  // namespace ferry::constrain
