// WordPiece as llama.cpp runs it for GGUF "bert" vocabularies (its WPM tokenizer): the text
// split into words at white space and around punctuation, ASCII symbols and CJK ideographs
// (control characters dropped; lowercased and accents stripped as the vocabulary says), then
// each word, with "▁" in front, cut greedily into the longest vocabulary strings; a word with a
// piece no string matches is [UNK]. Immutable tables; thread-safe.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ferry::tokenizer {

namespace wpm_detail {
extern const std::uint32_t kClassRangesCount;
extern const std::uint32_t kClassRanges[][2];
extern const std::uint32_t kLowerCount;
extern const std::uint32_t kLower[][2];
extern const std::uint32_t kNfdFirstCount;
extern const std::uint32_t kNfdFirst[][2];
}  // namespace wpm_detail

namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";

enum WpmClass : std::uint32_t { kOther, kSpace, kControl, kPunct, kSymbol, kMark };

WpmClass wpm_class(std::uint32_t cp) {
  using namespace wpm_detail;
  if (cp >= 0x110000) return kOther;
  const auto* end = kClassRanges + kClassRangesCount;
  const auto* it =
      std::upper_bound(kClassRanges, end, cp,
                       [](std::uint32_t c, const std::uint32_t(&row)[2]) { return c < row[0]; });
  return static_cast<WpmClass>((it - 1)[0][1]);
}

// The second column of a sorted {key, value} table for `cp`, or `cp` when it has no row.
std::uint32_t lookup(const std::uint32_t (*table)[2], std::uint32_t count, std::uint32_t cp) {
  const auto* end = table + count;
  const auto* it = std::lower_bound(
      table, end, cp, [](const std::uint32_t(&row)[2], std::uint32_t c) { return row[0] < c; });
  return it != end && (*it)[0] == cp ? (*it)[1] : cp;
}

std::uint32_t nfd_first(std::uint32_t cp) {
  if (cp >= 0xAC00 && cp <= 0xD7A3) return 0x1100 + (cp - 0xAC00) / 588;  // Hangul: its L jamo
  return lookup(wpm_detail::kNfdFirst, wpm_detail::kNfdFirstCount, cp);
}

// llama.cpp's lenient UTF-8 decoding: the lead byte says the length (overlong forms and
// surrogates accepted); a byte that starts no whole sequence is U+FFFD and is skipped over.
std::uint32_t decode_lenient(std::string_view s, std::size_t& pos) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](std::size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  const unsigned c0 = b(pos);
  std::size_t len = 0;
  std::uint32_t cp = 0;
  if (c0 < 0x80) {
    len = 1, cp = c0;
  } else if ((c0 & 0xE0) == 0xC0 && cont(pos + 1)) {
    len = 2, cp = ((c0 & 0x1Fu) << 6) | (b(pos + 1) & 0x3Fu);
  } else if ((c0 & 0xF0) == 0xE0 && cont(pos + 1) && cont(pos + 2)) {
    len = 3, cp = ((c0 & 0x0Fu) << 12) | ((b(pos + 1) & 0x3Fu) << 6) | (b(pos + 2) & 0x3Fu);
  } else if ((c0 & 0xF8) == 0xF0 && cont(pos + 1) && cont(pos + 2) && cont(pos + 3)) {
    len = 4, cp = ((c0 & 0x07u) << 18) | ((b(pos + 1) & 0x3Fu) << 12) |
                  ((b(pos + 2) & 0x3Fu) << 6) | (b(pos + 3) & 0x3Fu);
  } else {
    len = 1, cp = 0xFFFD;
  }
  pos += len;
  return cp;
}

bool is_cjk_ideograph(std::uint32_t cp) {
  // The blocks BERT's BasicTokenizer splits around (llama.cpp's list, its 0x2B920 included).
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace

void TokenizerImpl::wpm_words(std::string_view text, std::vector<std::string>& words) const {
  words.assign(1, std::string());
  const auto end_word = [&] {
    if (!words.back().empty()) words.emplace_back();
  };
  for (std::size_t pos = 0; pos < text.size();) {
    std::uint32_t cp = decode_lenient(text, pos);
    if (wpm_strip_accents) cp = nfd_first(cp);
    const WpmClass k = wpm_class(cp);
    if (k == kSpace) {
      end_word();
      continue;
    }
    if (cp == 0 || cp == 0xFFFD || k == kControl || cp >= 0x110000) continue;
    if (wpm_strip_accents && k == kMark) continue;
    const std::uint32_t out =
        wpm_lowercase ? lookup(wpm_detail::kLower, wpm_detail::kLowerCount, cp) : cp;
    if (k == kPunct || (cp < 0x7F && k == kSymbol) || is_cjk_ideograph(cp)) {
      end_word();
      append_utf8(words.back(), out);
      words.emplace_back();
    } else {
      append_utf8(words.back(), out);
    }
  }
  if (words.back().empty()) words.pop_back();
}

void TokenizerImpl::encode_wpm(std::string_view text, std::vector<TokenId>& out) const {
  thread_local std::vector<std::string> words;
  thread_local std::string word;
  wpm_words(text, words);
  for (const std::string& w : words) {
    word.assign(kMetaspace);
    word.append(w);
    const std::size_t start = out.size();
    const std::size_t n = word.size();
    for (std::size_t i = 0; i < n;) {
      TokenId id = kNoToken;
      std::size_t j = std::min(n, i + wpm_max_token_len);
      for (; j > i; --j) {
        id = bpe.find(std::string_view(word).substr(i, j - i));
        if (id != kNoToken) break;
      }
      if (id == kNoToken) {  // a piece no vocabulary string starts: the whole word is unknown
        out.resize(start);
        break;
      }
      out.push_back(id);
      i = j;
    }
    if (out.size() == start && unk_id != kNoToken) out.push_back(unk_id);
  }
}

}  // namespace ferry::tokenizer
