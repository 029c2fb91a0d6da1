// Unicode NFC (canonical decomposition, canonical ordering, canonical composition), for the
// HF normalizers that ask for it (Qwen2). Tables from nfc_tables.cpp; thread-safe.
#include <algorithm>
#include <unordered_map>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ferry::tokenizer {
namespace nfc_detail {
extern const std::uint32_t kCccCount;
extern const std::uint32_t kCcc[][2];
extern const std::uint32_t kDecompCount;
extern const std::uint32_t kDecomp[][3];
extern const std::uint32_t kComposeCount;
extern const std::uint32_t kCompose[][3];
extern const std::uint32_t kMaybeCount;
extern const std::uint32_t kMaybe[];
}  // namespace nfc_detail

namespace {

constexpr std::uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr std::uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                        kSCount = kLCount * kNCount;

struct Tables {
  std::unordered_map<std::uint32_t, std::uint8_t> ccc;
  std::unordered_map<std::uint32_t, std::pair<std::uint32_t, std::uint32_t>> decomp;
  std::unordered_map<std::uint64_t, std::uint32_t> compose;
  Tables() {
    for (std::uint32_t i = 0; i < nfc_detail::kCccCount; ++i) {
      ccc.emplace(nfc_detail::kCcc[i][0], static_cast<std::uint8_t>(nfc_detail::kCcc[i][1]));
    }
    for (std::uint32_t i = 0; i < nfc_detail::kDecompCount; ++i) {
      decomp.emplace(nfc_detail::kDecomp[i][0],
                     std::make_pair(nfc_detail::kDecomp[i][1], nfc_detail::kDecomp[i][2]));
    }
    for (std::uint32_t i = 0; i < nfc_detail::kComposeCount; ++i) {
      compose.emplace((static_cast<std::uint64_t>(nfc_detail::kCompose[i][0]) << 32) |
                          nfc_detail::kCompose[i][1],
                      nfc_detail::kCompose[i][2]);
    }
  }
  std::uint8_t class_of(std::uint32_t cp) const {
    const auto it = ccc.find(cp);
    return it == ccc.end() ? 0 : it->second;
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

bool maybe_changes(std::uint32_t cp) {
  if (cp < 0x300) return false;
  if (cp >= kSBase && cp < kSBase + kSCount) return false;
  return std::binary_search(nfc_detail::kMaybe, nfc_detail::kMaybe + nfc_detail::kMaybeCount, cp);
}

void decompose(std::uint32_t cp, std::vector<std::uint32_t>& out, const Tables& t) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const std::uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto it = t.decomp.find(cp);
  if (it == t.decomp.end()) {
    out.push_back(cp);
    return;
  }
  decompose(it->second.first, out, t);
  if (it->second.second) decompose(it->second.second, out, t);
}

// The canonical combining class; 0 for an invalid byte's marker (0x80000000 | byte).
std::uint8_t combining_class(std::uint32_t cp, const Tables& t) {
  return (cp & 0x80000000u) ? 0 : t.class_of(cp);
}

// Canonical ordering: stable sort of each run of non-starters by class.
void canonical_order(std::vector<std::uint32_t>& cps, const Tables& t) {
  auto cls = [&](std::uint32_t cp) { return combining_class(cp, t); };
  for (std::size_t i = 0; i < cps.size();) {
    if (cls(cps[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && cls(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i),
                     cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [&](std::uint32_t a, std::uint32_t b) { return cls(a) < cls(b); });
    i = j;
  }
}

// The primary composite of starter `s` and `cp` (Hangul by arithmetic, the rest by table);
// 0 when there is none.
std::uint32_t compose_pair(std::uint32_t s, std::uint32_t cp, const Tables& t) {
  if (s >= kLBase && s < kLBase + kLCount && cp >= kVBase && cp < kVBase + kVCount) {
    return kSBase + ((s - kLBase) * kVCount + (cp - kVBase)) * kTCount;
  }
  if (s >= kSBase && s < kSBase + kSCount && (s - kSBase) % kTCount == 0 && cp > kTBase &&
      cp < kTBase + kTCount) {
    return s + (cp - kTBase);
  }
  const auto it = t.compose.find((static_cast<std::uint64_t>(s) << 32) | cp);
  return it != t.compose.end() ? it->second : 0;
}

}  // namespace

std::string nfc_normalize(std::string_view text) {
  // Fast path: nothing in the text can change.
  bool any = false;
  for (std::size_t pos = 0; pos < text.size() && !any;) {
    const Decoded d = decode_utf8(text, pos);
    any = d.cp != kInvalidCodePoint && maybe_changes(d.cp);
    pos += d.len;
  }
  if (!any) return std::string(text);

  const Tables& t = tables();
  // Decompose; invalid bytes pass through as themselves (kept as negative markers).
  std::vector<std::uint32_t> cps;
  std::vector<std::uint32_t> raw;  // invalid byte values, by position in cps (0x80000000 | byte)
  for (std::size_t pos = 0; pos < text.size();) {
    const Decoded d = decode_utf8(text, pos);
    if (d.cp == kInvalidCodePoint) {
      cps.push_back(0x80000000u | static_cast<unsigned char>(text[pos]));
    } else {
      decompose(d.cp, cps, t);
    }
    pos += d.len;
  }
  auto cls = [&](std::uint32_t cp) { return combining_class(cp, t); };
  canonical_order(cps, t);
  // Canonical composition.
  std::vector<std::uint32_t> out;
  out.reserve(cps.size());
  std::ptrdiff_t starter = -1;
  std::int32_t last_class = -1;
  for (const std::uint32_t cp : cps) {
    const std::uint8_t c = cls(cp);
    if (starter >= 0 && !(cp & 0x80000000u)) {
      const std::uint32_t s = out[static_cast<std::size_t>(starter)];
      const bool blocked = last_class != -1 && (last_class >= c || last_class == 0);
      if (!blocked || (last_class == -1)) {
        const std::uint32_t composed = compose_pair(s, cp, t);
        if (composed && (last_class == -1 || last_class < c)) {
          out[static_cast<std::size_t>(starter)] = composed;
          continue;
        }
      }
    }
    if (c == 0) {
      starter = static_cast<std::ptrdiff_t>(out.size());
      last_class = -1;
    } else {
      last_class = c;
    }
    out.push_back(cp);
  }
  std::string result;
  result.reserve(text.size());
  for (const std::uint32_t cp : out) {
    if (cp & 0x80000000u) {
      result.push_back(static_cast<char>(cp & 0xFF));
    } else {
      append_utf8(result, cp);
    }
  }
  return result;
}

}  // namespace ferry::tokenizer
