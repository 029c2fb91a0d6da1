// Unicode code point properties and UTF-8 decoding for the pre-tokenizers.
// Immutable tables and pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::tokenizer {

// Property bits, in the order tools/tokenizer/gen_unicode_tables.js writes them.
namespace uprop {
inline constexpr std::uint16_t kL = 1u << 0;  // \p{L}
inline constexpr std::uint16_t kN = 1u << 1;  // \p{N}
inline constexpr std::uint16_t kLu = 1u << 2;
inline constexpr std::uint16_t kLl = 1u << 3;
inline constexpr std::uint16_t kLt = 1u << 4;
inline constexpr std::uint16_t kLm = 1u << 5;
inline constexpr std::uint16_t kLo = 1u << 6;
inline constexpr std::uint16_t kM = 1u << 7;           // \p{M}
inline constexpr std::uint16_t kWhiteSpace = 1u << 8;  // \s: Unicode White_Space
inline constexpr std::uint16_t kP = 1u << 9;           // \p{P}
}  // namespace uprop

// Classes of a byte for the pre-tokenizers' ASCII fast paths; kHigh for every byte >= 0x80
// (the start or middle of a multi-byte character, or an invalid byte). Agrees with
// code_point_props() on ASCII (tested).
namespace ascii {
inline constexpr std::uint8_t kLetter = 1;
inline constexpr std::uint8_t kDigit = 2;
inline constexpr std::uint8_t kSpace = 4;    // \t \n \v \f \r and ' ' (White_Space)
inline constexpr std::uint8_t kNewline = 8;  // \r \n
inline constexpr std::uint8_t kUpper = 16;
inline constexpr std::uint8_t kLower = 32;
inline constexpr std::uint8_t kOther = 64;  // none of letter, digit, white space
inline constexpr std::uint8_t kHigh = 128;
struct ClassTable {
  std::uint8_t c[256];
};
constexpr ClassTable make_class_table() {
  ClassTable t{};
  for (int b = 0; b < 256; ++b) {
    std::uint8_t k = kOther;
    if (b >= 0x80) {
      k = kHigh;
    } else if (b >= 'A' && b <= 'Z') {
      k = kLetter | kUpper;
    } else if (b >= 'a' && b <= 'z') {
      k = kLetter | kLower;
    } else if (b >= '0' && b <= '9') {
      k = kDigit;
    } else if (b == '\r' || b == '\n') {
      k = kSpace | kNewline;
    } else if ((b >= 0x09 && b <= 0x0D) || b == ' ') {
      k = kSpace;
    }
    t.c[b] = k;
  }
  return t;
}
inline constexpr ClassTable kClasses = make_class_table();
inline std::uint8_t class_of(char c) {
  return kClasses.c[static_cast<unsigned char>(c)];
}
}  // namespace ascii

namespace unicode_detail {
extern const std::uint16_t kBlockIndex[0x110000 / 256];
extern const std::uint16_t kBlocks[][256];
}  // namespace unicode_detail

// Properties of a code point; 0 for anything above U+10FFFF.
inline std::uint16_t code_point_props(std::uint32_t cp) {
  if (cp >= 0x110000) return 0;
  return unicode_detail::kBlocks[unicode_detail::kBlockIndex[cp >> 8]][cp & 0xff];
}

// A code point decoded from UTF-8. Invalid or truncated sequences decode one byte at a time as
// kInvalidCodePoint (no properties), so any byte string splits into pieces and round-trips.
inline constexpr std::uint32_t kInvalidCodePoint = 0xFFFFFFFFu;

struct Decoded {
  std::uint32_t cp;
  std::uint32_t len;  // bytes consumed, 1..4
};

// Decodes the code point at text[pos] (pos < text.size()).
inline Decoded decode_utf8(std::string_view text, std::size_t pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  const unsigned c0 = s[pos];
  if (c0 < 0x80) return {c0, 1};
  auto cont = [&](std::size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    if (cont(pos + 1)) return {((c0 & 0x1Fu) << 6) | (s[pos + 1] & 0x3Fu), 2};
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    if (cont(pos + 1) && cont(pos + 2)) {
      const std::uint32_t cp =
          ((c0 & 0x0Fu) << 12) | ((s[pos + 1] & 0x3Fu) << 6) | (s[pos + 2] & 0x3Fu);
      if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3};
    }
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    if (cont(pos + 1) && cont(pos + 2) && cont(pos + 3)) {
      const std::uint32_t cp = ((c0 & 0x07u) << 18) | ((s[pos + 1] & 0x3Fu) << 12) |
                               ((s[pos + 2] & 0x3Fu) << 6) | (s[pos + 3] & 0x3Fu);
      if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4};
    }
  }
  return {kInvalidCodePoint, 1};
}

// Appends the UTF-8 encoding of a valid code point.
inline void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Length of the longest prefix of `bytes` that ends on a complete UTF-8 character, treating
// invalid bytes as complete (used by streaming decoders to hold back a split character).
std::size_t complete_utf8_prefix(std::string_view bytes);

}  // namespace ferry::tokenizer
