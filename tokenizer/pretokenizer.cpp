#include "tokenizer/pretokenizer.h"

#include <string>

#include "tokenizer/unicode.h"

namespace ferry::tokenizer {
namespace {

using namespace uprop;

constexpr std::uint16_t kUpperish = kLu | kLt | kLm | kLo | kM;  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
constexpr std::uint16_t kLowerish = kLl | kLm | kLo | kM;        // [\p{Ll}\p{Lm}\p{Lo}\p{M}]

// A code point with its properties and byte extent.
struct Cp {
  std::uint32_t cp;
  std::uint32_t len;
  std::uint16_t props;
};

class Text {
 public:
  explicit Text(std::string_view s) : s_(s) {}
  std::size_t size() const { return s_.size(); }
  Cp at(std::size_t pos) const {
    const auto c = static_cast<unsigned char>(s_[pos]);
    if (c < 0x80) return {c, 1, code_point_props(c)};
    const Decoded d = decode_utf8(s_, pos);
    return {d.cp, d.len, code_point_props(d.cp)};
  }
  // End of the run of code points whose properties intersect `mask`, from pos.
  std::size_t scan(std::size_t pos, std::uint16_t mask) const {
    while (pos < s_.size()) {
      const Cp c = at(pos);
      if (!(c.props & mask)) break;
      pos += c.len;
    }
    return pos;
  }
  // End of the run of code points that are neither white space, letters nor numbers.
  std::size_t scan_other(std::size_t pos) const {
    while (pos < s_.size()) {
      const Cp c = at(pos);
      if (c.props & (kWhiteSpace | kL | kN)) break;
      pos += c.len;
    }
    return pos;
  }
  char byte(std::size_t pos) const { return s_[pos]; }

 private:
  std::string_view s_;
};

bool is_other(std::uint16_t props) { return !(props & (kWhiteSpace | kL | kN)); }
bool is_newline(std::uint32_t cp) { return cp == '\r' || cp == '\n'; }

// Simple case folding as the regex engine applies it under (?i): s also matches U+017F.
char fold(std::uint32_t cp) {
  if (cp == 0x17F) return 's';
  if (cp < 0x80) {
    const char ch = static_cast<char>(cp);
    return (ch >= 'A' && ch <= 'Z') ? static_cast<char>(ch - 'A' + 'a') : ch;
  }
  return 0;
}

// Length in bytes of 's|'t|'re|'ve|'m|'ll|'d at pos (0 when none).
std::size_t contraction(const Text& t, std::size_t pos, bool ignore_case) {
  if (pos >= t.size() || t.byte(pos) != '\'' || pos + 1 >= t.size()) return 0;
  const Cp c1 = t.at(pos + 1);
  const char a = ignore_case ? fold(c1.cp) : (c1.cp < 0x80 ? static_cast<char>(c1.cp) : 0);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1 + c1.len;
  if (a != 'r' && a != 'v' && a != 'l') return 0;
  const std::size_t p2 = pos + 1 + c1.len;
  if (p2 >= t.size()) return 0;
  const Cp c2 = t.at(p2);
  const char b = ignore_case ? fold(c2.cp) : (c2.cp < 0x80 ? static_cast<char>(c2.cp) : 0);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
    return 1 + c1.len + c2.len;
  }
  return 0;
}

// The white-space alternatives. With `newline_rule`: \s*[\r\n]+|\s+(?!\S)|\s+, else
// \s+(?!\S)|\s+. pos is at a white-space code point.
std::size_t whitespace_piece(const Text& t, std::size_t pos, bool newline_rule) {
  std::size_t end = pos;
  std::size_t last_start = pos;
  std::size_t after_newline = 0;
  std::size_t count = 0;
  while (end < t.size()) {
    const Cp c = t.at(end);
    if (!(c.props & kWhiteSpace)) break;
    last_start = end;
    end += c.len;
    ++count;
    if (is_newline(c.cp)) after_newline = end;
  }
  if (newline_rule && after_newline != 0) return after_newline;
  if (end == t.size()) return end;
  if (count >= 2) return last_start;
  return end;
}

std::size_t piece_cl100k(const Text& t, std::size_t pos, std::size_t max_digits) {
  const Cp c = t.at(pos);
  if (c.cp == '\'') {
    if (const std::size_t n = contraction(t, pos, true)) return pos + n;
  }
  if (c.props & kL) return t.scan(pos + c.len, kL);
  const std::size_t next = pos + c.len;
  if (!is_newline(c.cp) && !(c.props & kN) && next < t.size() && (t.at(next).props & kL)) {
    return t.scan(next, kL);
  }
  if (c.props & kN) {
    std::size_t end = next;
    for (std::size_t k = 1; k < max_digits && end < t.size(); ++k) {
      const Cp d = t.at(end);
      if (!(d.props & kN)) break;
      end += d.len;
    }
    return end;
  }
  std::size_t p = pos;
  if (c.cp == ' ' && next < t.size() && is_other(t.at(next).props)) p = next;
  if (p != pos || is_other(c.props)) {
    std::size_t end = t.scan_other(p);
    while (end < t.size() && (t.byte(end) == '\r' || t.byte(end) == '\n')) ++end;
    return end;
  }
  return whitespace_piece(t, pos, true);
}

std::size_t piece_gpt2(const Text& t, std::size_t pos) {
  const Cp c = t.at(pos);
  if (c.cp == '\'') {
    if (const std::size_t n = contraction(t, pos, false)) return pos + n;
  }
  std::size_t p = pos;
  Cp d = c;
  if (c.cp == ' ' && pos + 1 < t.size()) {
    const Cp n = t.at(pos + 1);
    if (!(n.props & kWhiteSpace)) {
      p = pos + 1;
      d = n;
    }
  }
  if (d.props & kL) return t.scan(p + d.len, kL);
  if (d.props & kN) return t.scan(p + d.len, kN);
  if (is_other(d.props)) return t.scan_other(p + d.len);
  return whitespace_piece(t, pos, false);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)? after a letter run.
std::size_t with_suffix(const Text& t, std::size_t end) { return end + contraction(t, end, true); }

// [\p{Lu}...]*[\p{Ll}...]+ from s, or 0 when it does not match.
std::size_t o200k_lower_run(const Text& t, std::size_t s) {
  std::size_t p = s;
  std::size_t last_lower = t.size() + 1;  // none
  while (p < t.size()) {
    const Cp c = t.at(p);
    if (!(c.props & kUpperish)) break;
    if (c.props & kLowerish) last_lower = p;
    p += c.len;
  }
  std::size_t start;
  if (p < t.size() && (t.at(p).props & kLowerish)) {
    start = p;
  } else if (last_lower <= t.size()) {
    start = last_lower;
  } else {
    return 0;
  }
  return t.scan(start, kLowerish);
}

// [\p{Lu}...]+[\p{Ll}...]* from s, or 0.
std::size_t o200k_upper_run(const Text& t, std::size_t s) {
  if (s >= t.size() || !(t.at(s).props & kUpperish)) return 0;
  return t.scan(t.scan(s, kUpperish), kLowerish);
}

std::size_t piece_o200k(const Text& t, std::size_t pos) {
  const Cp c = t.at(pos);
  const std::size_t next = pos + c.len;
  const bool prefix_ok = !is_newline(c.cp) && !(c.props & (kL | kN));
  if (prefix_ok && next < t.size()) {
    if (const std::size_t e = o200k_lower_run(t, next)) return with_suffix(t, e);
  }
  if (const std::size_t e = o200k_lower_run(t, pos)) return with_suffix(t, e);
  if (prefix_ok && next < t.size()) {
    if (const std::size_t e = o200k_upper_run(t, next)) return with_suffix(t, e);
  }
  if (const std::size_t e = o200k_upper_run(t, pos)) return with_suffix(t, e);
  if (c.props & kN) {
    std::size_t end = next;
    for (int k = 1; k < 3 && end < t.size(); ++k) {
      const Cp d = t.at(end);
      if (!(d.props & kN)) break;
      end += d.len;
    }
    return end;
  }
  std::size_t p = pos;
  if (c.cp == ' ' && next < t.size() && is_other(t.at(next).props)) p = next;
  if (p != pos || is_other(c.props)) {
    std::size_t end = t.scan_other(p);
    while (end < t.size() && (t.byte(end) == '\r' || t.byte(end) == '\n' || t.byte(end) == '/')) ++end;
    return end;
  }
  return whitespace_piece(t, pos, true);
}

}  // namespace

std::size_t next_piece(SplitPattern pattern, std::string_view text, std::size_t pos) {
  const Text t(text);
  switch (pattern) {
    case SplitPattern::kGpt2: return piece_gpt2(t, pos);
    case SplitPattern::kCl100k: return piece_cl100k(t, pos, 3);
    case SplitPattern::kQwen2: return piece_cl100k(t, pos, 1);
    case SplitPattern::kO200k: return piece_o200k(t, pos);
  }
  return text.size();
}

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  static const std::string kGpt2 =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  static const std::string kCl100k =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::string kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::string kO200k =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (regex == kGpt2) return SplitPattern::kGpt2;
  if (regex == kCl100k) return SplitPattern::kCl100k;
  if (regex == kQwen2) return SplitPattern::kQwen2;
  if (regex == kO200k) return SplitPattern::kO200k;
  return std::nullopt;
}

std::string_view split_pattern_name(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2: return "gpt2";
    case SplitPattern::kCl100k: return "cl100k";
    case SplitPattern::kQwen2: return "qwen2";
    case SplitPattern::kO200k: return "o200k";
  }
  return "?";
}

}  // namespace ferry::tokenizer
