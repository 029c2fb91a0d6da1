#include "common/json_text.h"

#include <simdjson.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>

namespace ferry {

bool is_valid_utf8(std::string_view text) {
  return simdjson::validate_utf8(text.data(), text.size());
}

namespace {

// SWAR over 8 bytes (little-endian): a mask with the high bit set in the lowest byte that needs
// more than a copy ('"', '\\', a control character, or a byte >= 0x80), and possibly in bytes
// above it; zero when all 8 bytes are plain. (x - 1) & ~x & 0x80 flags a zero byte exactly
// unless a borrow comes from a lower flagged byte, so the lowest flag is always right.
constexpr uint64_t kOnes = 0x0101010101010101ULL;
constexpr uint64_t kHighBits = 0x8080808080808080ULL;

uint64_t special_bytes(uint64_t x) {
  uint64_t control = (x - kOnes * 0x20) & ~x;
  uint64_t quote = x ^ (kOnes * '"');
  uint64_t backslash = x ^ (kOnes * '\\');
  quote = (quote - kOnes) & ~quote;
  backslash = (backslash - kOnes) & ~backslash;
  return (control | quote | backslash | x) & kHighBits;
}

// The short escape nlohmann::json::dump() writes for a control character, or 0 for \u00XX.
char short_escape(unsigned char c) {
  switch (c) {
    case '\b':
      return 'b';
    case '\f':
      return 'f';
    case '\n':
      return 'n';
    case '\r':
      return 'r';
    case '\t':
      return 't';
    default:
      return 0;
  }
}

// Escapes one byte, or one UTF-8 sequence, at `in`; returns the input after it. Writes at most
// 6 bytes per input byte consumed.
template <JsonControls kControls>
const char* escape_one(const char* in, const char* end, char*& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  auto c = static_cast<unsigned char>(*in);
  if (c < 0x80) {
    char short_form = kControls == JsonControls::kShort ? short_escape(c) : 0;
    if (c == '"' || c == '\\') {
      out[0] = '\\';
      out[1] = static_cast<char>(c);
      out += 2;
    } else if (short_form != 0) {
      out[0] = '\\';
      out[1] = short_form;
      out += 2;
    } else if (c < 0x20) {
      std::memcpy(out, "\\u00", 4);
      out[4] = kHex[c >> 4];
      out[5] = kHex[c & 0xf];
      out += 6;
    } else {
      *out++ = static_cast<char>(c);
    }
    return in + 1;
  }
  // A multi-byte sequence: copy it when it is well-formed UTF-8, else write U+FFFD.
  size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  bool ok = len != 0 && c <= 0xf4 && len <= static_cast<size_t>(end - in);
  for (size_t k = 1; ok && k < len; ++k) {
    ok = (static_cast<unsigned char>(in[k]) & 0xc0) == 0x80;
  }
  if (ok && len >= 3) {
    auto c1 = static_cast<unsigned char>(in[1]);
    ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0) && !(c == 0xf0 && c1 < 0x90) &&
         !(c == 0xf4 && c1 >= 0x90);
  }
  if (!ok) {
    std::memcpy(out, "\xef\xbf\xbd", 3);
    out += 3;
    return in + 1;
  }
  std::memcpy(out, in, len);
  out += len;
  return in + len;
}

// Loads the last `n` (1 to 7) bytes before `end` as one word, the bytes above them plain;
// `have` bytes before `end` are readable. Whole-word loads, no byte loop.
uint64_t load_tail(const char* end, size_t n, size_t have) {
  uint64_t x;
  if (have >= 8) {
    std::memcpy(&x, end - 8, 8);
    x >>= 8 * (8 - n);
  } else if (n >= 4) {
    uint32_t lo;
    uint32_t hi;
    std::memcpy(&lo, end - n, 4);
    std::memcpy(&hi, end - 4, 4);
    x = lo | (uint64_t{hi} << (8 * (n - 4)));  // the overlap holds the same bytes twice
  } else {
    const char* in = end - n;
    x = static_cast<unsigned char>(in[0]) |
        (uint64_t{static_cast<unsigned char>(in[n / 2])} << (8 * (n / 2))) |
        (uint64_t{static_cast<unsigned char>(in[n - 1])} << (8 * (n - 1)));
  }
  return x | ((kOnes * 'a') << (8 * n));
}

template <JsonControls kControls>
char* escape(char* out, std::string_view s) {
  const char* in = s.data();
  const char* end = in + s.size();
#if defined(__SSE2__)
  // Plain bytes go 16 at a time (SSE2, every x86-64 CPU): the bytes special_bytes flags, found
  // by compares (a signed compare with 0x20 flags control characters and bytes >= 0x80 alike).
  // The 16-byte store fits: `out` has room for six bytes per input byte left, plus the slack.
  while (end - in >= 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), x);
    const __m128i flagged = _mm_or_si128(_mm_cmplt_epi8(x, _mm_set1_epi8(0x20)),
                                         _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                                                      _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))));
    const auto mask = static_cast<unsigned>(_mm_movemask_epi8(flagged));
    if (mask == 0) {
      in += 16;
      out += 16;
      continue;
    }
    auto plain = static_cast<size_t>(std::countr_zero(mask));
    out += plain;
    in = escape_one<kControls>(in + plain, end, out);
  }
#endif
  if constexpr (std::endian::native == std::endian::little) {
    // Plain bytes go 8 at a time: store the word, advance to the first byte that needs more.
    while (end - in >= 8) {
      uint64_t x;
      std::memcpy(&x, in, 8);
      std::memcpy(out, &x, 8);
      uint64_t special = special_bytes(x);
      if (special == 0) {
        in += 8;
        out += 8;
        continue;
      }
      auto plain = static_cast<size_t>(std::countr_zero(special) / 8);
      out += plain;
      in = escape_one<kControls>(in + plain, end, out);
    }
    // The last 1-7 bytes as one padded word; the store may run 8 bytes (kJsonEscapeSlack).
    if (in != end) {
      auto n = static_cast<size_t>(end - in);
      uint64_t x = load_tail(end, n, s.size());
      std::memcpy(out, &x, 8);
      uint64_t special = special_bytes(x);
      if (special == 0) return out + n;
      auto plain = static_cast<size_t>(std::countr_zero(special) / 8);
      in += plain;
      out += plain;
    }
  }
  while (in != end) in = escape_one<kControls>(in, end, out);
  return out;
}

}  // namespace

char* escape_json(char* out, std::string_view s, JsonControls controls) {
  return controls == JsonControls::kShort ? escape<JsonControls::kShort>(out, s)
                                          : escape<JsonControls::kUnicode>(out, s);
}

void append_json_string(std::string& out, std::string_view s, JsonControls controls) {
  // Escaping needs room for six bytes per byte, and growing `out` by that much zero-fills it
  // first (a 2 kB text would cost a 12 kB memset, a key a few hundred bytes). Short strings
  // (keys, ids, stream deltas) escape into a buffer on the stack, longer ones into a buffer of
  // this thread, never zeroed; either is then appended once. Beyond the thread's buffer's
  // limit, in place.
  constexpr size_t kStackBytes = 64;
  constexpr size_t kScratchMaxBytes = 64 << 10;  // the buffer stays below 400 kB
  const size_t room = s.size() * kJsonEscapedMaxPerByte + kJsonEscapeSlack + 2;
  if (s.size() <= kStackBytes) {
    char buf[kStackBytes * kJsonEscapedMaxPerByte + kJsonEscapeSlack + 2];
    buf[0] = '"';
    char* end = escape_json(buf + 1, s, controls);
    *end = '"';
    out.append(buf, static_cast<size_t>(end + 1 - buf));
    return;
  }
  if (s.size() > kScratchMaxBytes) {
    size_t at = out.size();
    out.resize(at + room);
    out[at] = '"';
    char* end = escape_json(out.data() + at + 1, s, controls);
    *end = '"';
    out.resize(static_cast<size_t>(end + 1 - out.data()));
    return;
  }
  thread_local std::unique_ptr<char[]> scratch;
  thread_local size_t scratch_size = 0;
  if (scratch_size < room) {
    scratch = std::make_unique_for_overwrite<char[]>(room);
    scratch_size = room;
  }
  char* begin = scratch.get();
  begin[0] = '"';
  char* end = escape_json(begin + 1, s, controls);
  *end = '"';
  out.append(begin, static_cast<size_t>(end + 1 - begin));
}

std::string json_string(std::string_view s, JsonControls controls) {
  std::string out;
  append_json_string(out, s, controls);
  return out;
}

size_t skip_json_ws(std::string_view text, size_t i) {
  while (i < text.size() &&
         (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
    ++i;
  return i;
}

size_t json_string_end(std::string_view text, size_t open_quote) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  const char* p = begin + open_quote;
  // Jump from quote to quote: memchr runs at memory speed over long string contents.
  for (;;) {
    const char* q =
        static_cast<const char*>(std::memchr(p + 1, '"', static_cast<size_t>(end - p - 1)));
    if (q == nullptr) return std::string_view::npos;
    size_t backslashes = 0;
    for (const char* b = q - 1; b > p && *b == '\\'; --b) ++backslashes;
    if (backslashes % 2 == 0) return static_cast<size_t>(q - begin) + 1;  // not escaped
    p = q;
  }
}

size_t json_value_end(std::string_view text, size_t open) {
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      size_t end = json_string_end(text, i);
      if (end == std::string_view::npos) return end;
      i = end - 1;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

size_t json_element_end(std::string_view text, size_t i) {
  if (i >= text.size()) return std::string_view::npos;
  if (text[i] == '{' || text[i] == '[') return json_value_end(text, i);
  if (text[i] == '"') return json_string_end(text, i);
  size_t j = i;
  while (j < text.size() &&
         ((text[j] >= 'a' && text[j] <= 'z') || (text[j] >= '0' && text[j] <= '9') ||
          text[j] == '-' || text[j] == '+' || text[j] == '.' || text[j] == 'E')) {
    ++j;
  }
  return j;
}

}  // namespace ferry
