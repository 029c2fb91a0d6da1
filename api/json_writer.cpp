#include "api/json_writer.h"

#include <charconv>
#include <cstdint>
#include <cstring>

namespace ferry::api {
namespace {

// The length of the well-formed UTF-8 sequence at `in` (RFC 3629: no overlongs, no surrogates,
// nothing above U+10FFFF), or 0 when it is not one.
size_t utf8_sequence_length(const unsigned char* in, const unsigned char* end) {
  unsigned char c = in[0];
  size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  if (len == 0 || c > 0xf4 || len > static_cast<size_t>(end - in)) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((in[k] & 0xc0) != 0x80) return 0;
  }
  if (len >= 3) {
    unsigned char c1 = in[1];
    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) || (c == 0xf0 && c1 < 0x90) ||
        (c == 0xf4 && c1 >= 0x90)) {
      return 0;
    }
  }
  return len;
}

// True for the bytes that cannot be copied as they are: controls, '"', '\\', and non-ASCII
// (validated one sequence at a time).
constexpr bool needs_care(unsigned char c) {
  return c < 0x20 || c == '"' || c == '\\' || c >= 0x80;
}

// True when one of the 8 bytes of `x` needs care (exact for "any", the classic SWAR tests:
// a byte below 0x20, equal to '"' or '\\', or with its high bit set).
constexpr uint64_t kOnes = 0x0101010101010101ULL;
constexpr uint64_t kHighs = 0x8080808080808080ULL;
inline bool word_needs_care(uint64_t x) {
  auto has_zero = [](uint64_t v) { return (v - kOnes) & ~v & kHighs; };
  uint64_t below_space = (x - kOnes * 0x20) & ~x & kHighs;
  return ((x & kHighs) | below_space | has_zero(x ^ (kOnes * '"')) |
          has_zero(x ^ (kOnes * '\\'))) != 0;
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + s.size() + 2);
  out.push_back('"');
  const auto* in = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = in + s.size();
  while (in != end) {
    const unsigned char* run = in;
    // Plain bytes 8 at a time, then one by one up to the first that needs care.
    while (end - run >= 8) {
      uint64_t x;
      std::memcpy(&x, run, 8);
      if (word_needs_care(x)) break;
      run += 8;
    }
    while (run != end && !needs_care(*run)) ++run;
    out.append(reinterpret_cast<const char*>(in), static_cast<size_t>(run - in));
    in = run;
    if (in == end) break;
    unsigned char c = *in;
    if (c >= 0x80) {
      size_t len = utf8_sequence_length(in, end);
      if (len == 0) {
        out.append("\xef\xbf\xbd");
        ++in;
      } else {
        out.append(reinterpret_cast<const char*>(in), len);
        in += len;
      }
      continue;
    }
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default: {
        char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
        out.append(esc, sizeof esc);
      }
    }
    ++in;
  }
  out.push_back('"');
}

void append_json_int(std::string& out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;  // 24 bytes hold any int64
  out.append(buf, static_cast<size_t>(end - buf));
}

}  // namespace ferry::api
