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

bool is_other(std::uint16_t props) {
  return !(props & (kWhiteSpace | kL | kN));
}
bool is_newline(std::uint32_t cp) {
  return cp == '\r' || cp == '\n';
}

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

// The character set of llama.cpp's default first regex, [\p{P}\$\+<=>\^~\|].
bool default_punct(const Cp& c) {
  if (c.props & kP) return true;
  return c.cp == '$' || c.cp == '+' || c.cp == '<' || c.cp == '=' || c.cp == '>' || c.cp == '^' ||
         c.cp == '~' || c.cp == '|';
}

std::size_t piece_llama_default(const Text& t, std::size_t pos) {
  // 1. [\p{P}\$\+<=>\^~\|]+: runs of those characters, and the text between them, are the
  // pieces the next regexes split further. A run holds only "other" characters, so GPT-2's
  // regex keeps it whole, and \p{N}+ and [0-9]{3} find nothing in it.
  const Cp c = t.at(pos);
  if (default_punct(c)) {
    std::size_t end = pos + c.len;
    while (end < t.size()) {
      const Cp d = t.at(end);
      if (!default_punct(d)) break;
      end += d.len;
    }
    return end;
  }
  // 2. GPT-2's regex over the text up to the next run. Run over the whole text it differs only
  // where it read a run's character: an "other" run that went into it stops before it, and a
  // white-space run that ends right before it is taken whole (\s+(?!\S) at the end of text).
  std::size_t end = piece_gpt2(t, pos);
  for (std::size_t q = pos; q < end;) {
    const Cp d = t.at(q);
    if (default_punct(d)) {
      end = q;
      break;
    }
    q += d.len;
  }
  if (end < t.size() && (c.props & kWhiteSpace)) {
    const Cp last = t.at(end);
    bool spaces_only = true;
    for (std::size_t q = pos; q < end && spaces_only; q += t.at(q).len)
      spaces_only = t.at(q).props & kWhiteSpace;
    if (spaces_only && (last.props & kWhiteSpace)) {  // \s+(?!\S) left the run's last character
      const std::size_t after = end + last.len;
      if (after < t.size() && default_punct(t.at(after))) end = after;
    }
  }
  // 3. \p{N}+: runs of numbers and the text between them.
  const bool number = c.props & kN;
  std::size_t run = pos;
  while (run < end) {
    const Cp d = t.at(run);
    if (static_cast<bool>(d.props & kN) != number) break;
    run += d.len;
  }
  // 4. [0-9][0-9][0-9]: the leftmost three ASCII digits, and the text before them.
  const auto three_digits = [&](std::size_t q) {
    return q + 3 <= run && t.byte(q) >= '0' && t.byte(q) <= '9' && t.byte(q + 1) >= '0' &&
           t.byte(q + 1) <= '9' && t.byte(q + 2) >= '0' && t.byte(q + 2) <= '9';
  };
  if (three_digits(pos)) return pos + 3;
  for (std::size_t q = pos + 1; q + 3 <= run; ++q) {
    if (three_digits(q)) return q;
  }
  return run;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)? after a letter run.
std::size_t with_suffix(const Text& t, std::size_t end) {
  return end + contraction(t, end, true);
}

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
    while (end < t.size() && (t.byte(end) == '\r' || t.byte(end) == '\n' || t.byte(end) == '/'))
      ++end;
    return end;
  }
  return whitespace_piece(t, pos, true);
}

// ---- ASCII fast paths ---------------------------------------------------------------------
// The same matchers over bytes for text that is ASCII where the piece is decided. Each returns
// the piece's end, or kUndecided when a byte >= 0x80 could change the answer (the code-point
// matcher then decides).

using ascii::class_of;

constexpr std::size_t kUndecided = std::string_view::npos;

// End of the run of bytes whose class intersects `mask`, from p; kUndecided if a byte >= 0x80
// ends it.
std::size_t ascii_run(std::string_view s, std::size_t p, std::uint8_t mask) {
  while (p < s.size()) {
    const std::uint8_t k = class_of(s[p]);
    if (!(k & mask)) return (k & ascii::kHigh) ? kUndecided : p;
    ++p;
  }
  return p;
}

// whitespace_piece() over ASCII white space.
std::size_t ascii_whitespace(std::string_view s, std::size_t pos, bool newline_rule) {
  std::size_t end = pos;
  std::size_t after_newline = 0;
  while (end < s.size()) {
    const std::uint8_t k = class_of(s[end]);
    if (!(k & ascii::kSpace)) {
      if (k & ascii::kHigh) return kUndecided;  // U+0085, U+00A0, ... may continue the run
      break;
    }
    ++end;
    if (k & ascii::kNewline) after_newline = end;
  }
  if (newline_rule && after_newline != 0) return after_newline;
  if (end == s.size()) return end;
  return end - pos >= 2 ? end - 1 : end;
}

// Up to max_digits ASCII digits from pos (s[pos] is one).
std::size_t ascii_digits(std::string_view s, std::size_t pos, std::size_t max_digits) {
  std::size_t end = pos + 1;
  for (std::size_t k = 1; k < max_digits && end < s.size(); ++k) {
    const std::uint8_t c = class_of(s[end]);
    if (c & ascii::kHigh) return kUndecided;
    if (!(c & ascii::kDigit)) break;
    ++end;
  }
  return end;
}

// " ?[^\s\p{L}\p{N}]+" from p (s[p] is "other"), then any of \r \n (and / with `slash`).
std::size_t ascii_other(std::string_view s, std::size_t p, bool slash) {
  std::size_t end = ascii_run(s, p + 1, ascii::kOther);
  if (end == kUndecided) return kUndecided;
  while (end < s.size() && (s[end] == '\r' || s[end] == '\n' || (slash && s[end] == '/'))) ++end;
  return end;
}

std::size_t fast_cl100k(std::string_view s, std::size_t pos, std::size_t max_digits) {
  const char ch = s[pos];
  const std::uint8_t k = class_of(ch);
  if ((k & ascii::kHigh) || ch == '\'') return kUndecided;
  if (k & ascii::kLetter) return ascii_run(s, pos + 1, ascii::kLetter);
  if (k & ascii::kDigit) return ascii_digits(s, pos, max_digits);
  const std::size_t next = pos + 1;
  const std::uint8_t kn = next < s.size() ? class_of(s[next]) : 0;
  if (kn & ascii::kHigh) return kUndecided;
  if (!(k & ascii::kNewline) && (kn & ascii::kLetter))
    return ascii_run(s, next + 1, ascii::kLetter);
  if (ch == ' ' && (kn & ascii::kOther)) return ascii_other(s, next, false);
  if (k & ascii::kOther) return ascii_other(s, pos, false);
  return ascii_whitespace(s, pos, true);
}

// o200k's letter alternatives from s[from] (an ASCII letter), the optional prefix already
// taken: [A-Z]*[a-z]+ or [A-Z]+, then a contraction suffix.
std::size_t fast_o200k_letters(std::string_view s, const Text& t, std::size_t from) {
  const std::size_t upper_end = ascii_run(s, from, ascii::kUpper);
  if (upper_end == kUndecided) return kUndecided;
  std::size_t end = upper_end;
  if (upper_end < s.size() && (class_of(s[upper_end]) & ascii::kLower)) {
    end = ascii_run(s, upper_end, ascii::kLower);
    if (end == kUndecided) return kUndecided;
  }
  return with_suffix(t, end);
}

std::size_t fast_o200k(std::string_view s, std::size_t pos) {
  const char ch = s[pos];
  const std::uint8_t k = class_of(ch);
  if (k & ascii::kHigh) return kUndecided;
  const Text t(s);
  if (k & ascii::kLetter) return fast_o200k_letters(s, t, pos);
  if (k & ascii::kDigit) return ascii_digits(s, pos, 3);
  const std::size_t next = pos + 1;
  const std::uint8_t kn = next < s.size() ? class_of(s[next]) : 0;
  if (kn & ascii::kHigh) return kUndecided;
  if (!(k & ascii::kNewline) && (kn & ascii::kLetter)) return fast_o200k_letters(s, t, next);
  if (ch == ' ' && (kn & ascii::kOther)) return ascii_other(s, next, true);
  if (k & ascii::kOther) return ascii_other(s, pos, true);
  return ascii_whitespace(s, pos, true);
}

std::size_t fast_gpt2(std::string_view s, std::size_t pos) {
  const char ch = s[pos];
  std::uint8_t k = class_of(ch);
  if ((k & ascii::kHigh) || ch == '\'') return kUndecided;
  std::size_t p = pos;
  if (ch == ' ' && pos + 1 < s.size()) {
    const std::uint8_t kn = class_of(s[pos + 1]);
    if (kn & ascii::kHigh) return kUndecided;
    if (!(kn & ascii::kSpace)) {
      p = pos + 1;
      k = kn;
    }
  }
  if (k & ascii::kLetter) return ascii_run(s, p + 1, ascii::kLetter);
  if (k & ascii::kDigit) return ascii_run(s, p + 1, ascii::kDigit);
  if (k & ascii::kOther) return ascii_run(s, p + 1, ascii::kOther);
  return ascii_whitespace(s, pos, false);
}

}  // namespace

std::size_t next_piece(SplitPattern pattern, std::string_view text, std::size_t pos) {
  std::size_t end = kUndecided;
  switch (pattern) {
    case SplitPattern::kGpt2:
      end = fast_gpt2(text, pos);
      break;
    case SplitPattern::kCl100k:
      end = fast_cl100k(text, pos, 3);
      break;
    case SplitPattern::kQwen2:
      end = fast_cl100k(text, pos, 1);
      break;
    case SplitPattern::kO200k:
      end = fast_o200k(text, pos);
      break;
    case SplitPattern::kLlamaDefault:
      break;
  }
  return end != kUndecided ? end : next_piece_by_code_points(pattern, text, pos);
}

std::size_t next_piece_by_code_points(SplitPattern pattern, std::string_view text,
                                      std::size_t pos) {
  const Text t(text);
  switch (pattern) {
    case SplitPattern::kGpt2:
      return piece_gpt2(t, pos);
    case SplitPattern::kCl100k:
      return piece_cl100k(t, pos, 3);
    case SplitPattern::kQwen2:
      return piece_cl100k(t, pos, 1);
    case SplitPattern::kO200k:
      return piece_o200k(t, pos);
    case SplitPattern::kLlamaDefault:
      return piece_llama_default(t, pos);
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
    case SplitPattern::kGpt2:
      return "gpt2";
    case SplitPattern::kCl100k:
      return "cl100k";
    case SplitPattern::kQwen2:
      return "qwen2";
    case SplitPattern::kO200k:
      return "o200k";
    case SplitPattern::kLlamaDefault:
      return "llama.cpp default";
  }
  return "?";
}

}  // namespace ferry::tokenizer
