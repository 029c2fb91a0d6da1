#include "constrain/vocabulary.h"

#include <algorithm>
#include <atomic>

namespace ferry::constrain {

StringStep string_step(std::uint32_t state, std::uint8_t b) {
  const auto to = [](std::uint32_t next, bool new_char = false) {
    return StringStep{next, true, new_char, false};
  };
  const bool cont = b >= 0x80 && b <= 0xBF;
  const bool hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
  switch (state) {
    case kStrOpen:
      return b == '"' ? to(kStrBody) : StringStep{};
    case kStrBody:
      if (b == '"') return StringStep{kStrBody, true, false, true};
      if (b == '\\') return to(kStrEscape, true);
      if (b < 0x20) return StringStep{};
      if (b < 0x80) return to(kStrBody, true);
      if (b >= 0xC2 && b <= 0xDF) return to(kStrCont1, true);
      if (b == 0xE0) return to(kStrE0, true);
      if (b == 0xED) return to(kStrED, true);
      if (b >= 0xE1 && b <= 0xEF) return to(kStrCont2, true);
      if (b == 0xF0) return StringStep{kStrF0, true, true, false, true};
      if (b >= 0xF1 && b <= 0xF3) return StringStep{kStrCont3, true, true, false, true};
      if (b == 0xF4) return StringStep{kStrF4, true, true, false, true};
      return StringStep{};
    case kStrEscape:
      if (b == 'u') return to(kStrHex1);
      if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' ||
          b == 't')
        return to(kStrBody);
      return StringStep{};
    case kStrHex1:
      if (b == 'd' || b == 'D') return to(kStrHex2LowD);
      return hex ? to(kStrHex2) : StringStep{};
    case kStrHex2LowD:
      return b >= '0' && b <= '7' ? to(kStrHex3) : StringStep{};
    case kStrHex2:
      return hex ? to(kStrHex3) : StringStep{};
    case kStrHex3:
      return hex ? to(kStrHex4) : StringStep{};
    case kStrHex4:
      return hex ? to(kStrBody) : StringStep{};
    case kStrCont1:
      return cont ? to(kStrBody) : StringStep{};
    case kStrCont2:
      return cont ? to(kStrCont1) : StringStep{};
    case kStrCont3:
      return cont ? to(kStrCont2) : StringStep{};
    case kStrE0:
      return b >= 0xA0 && b <= 0xBF ? to(kStrCont1) : StringStep{};
    case kStrED:
      return b >= 0x80 && b <= 0x9F ? to(kStrCont1) : StringStep{};
    case kStrF0:
      return b >= 0x90 && b <= 0xBF ? to(kStrCont2) : StringStep{};
    case kStrF4:
      return b >= 0x80 && b <= 0x8F ? to(kStrCont2) : StringStep{};
    default:
      return StringStep{};
  }
}

std::shared_ptr<const Vocabulary> Vocabulary::build(const tokenizer::Tokenizer& tokenizer,
                                                    std::vector<TokenId> eos_ids) {
  static std::atomic<std::uint64_t> next_serial{1};
  auto v = std::make_shared<Vocabulary>();
  v->serial_ = next_serial++;
  v->size_ = tokenizer.vocab_size();
  std::sort(eos_ids.begin(), eos_ids.end());
  eos_ids.erase(std::unique(eos_ids.begin(), eos_ids.end()), eos_ids.end());
  v->eos_ = std::move(eos_ids);
  std::vector<TokenId> ids;
  v->offsets_.push_back(0);
  v->special_.assign(v->size_, false);
  for (TokenId id = 0; id < v->size_; ++id) {
    const bool text = !tokenizer.is_special(id) && !v->is_eos(id);
    if (tokenizer.is_special(id) && !v->is_eos(id)) {
      v->special_[id] = true;
      v->specials_.emplace(tokenizer.token_bytes(id), id);  // the first id of a text
    }
    const std::string bytes = text ? tokenizer.token_bytes(id) : std::string();
    v->arena_ += bytes;
    v->offsets_.push_back(static_cast<std::uint32_t>(v->arena_.size()));
    if (!bytes.empty() && bytes.size() < 0xFFFF) ids.push_back(id);
  }
  v->build_trie(ids);
  for (std::uint32_t state = kStrOpen; state < kStrStates; ++state)
    v->build_string_tables(ids, state);
  return v;
}

std::optional<TokenId> Vocabulary::special_token(std::string_view text) const {
  const auto it = specials_.find(text);
  if (it == specials_.end() || text.empty()) return std::nullopt;
  return it->second;
}

bool Vocabulary::is_eos(TokenId id) const {
  return std::binary_search(eos_.begin(), eos_.end(), id);
}

void Vocabulary::build_trie(const std::vector<TokenId>& ids) {
  std::vector<TokenId> sorted = ids;
  std::sort(sorted.begin(), sorted.end(), [&](TokenId a, TokenId b) {
    const auto x = bytes(a);
    const auto y = bytes(b);
    return x != y ? x < y : a < b;
  });
  std::vector<std::uint32_t> path;  // node indices from depth 1 down
  std::string_view prev;
  for (const TokenId id : sorted) {
    const std::string_view s = bytes(id);
    std::size_t lcp = 0;
    while (lcp < s.size() && lcp < prev.size() && lcp < path.size() && s[lcp] == prev[lcp]) ++lcp;
    while (path.size() > lcp) {
      trie_[path.back()].skip = static_cast<std::uint32_t>(trie_.size());
      path.pop_back();
    }
    for (std::size_t i = lcp; i < s.size(); ++i) {
      TrieNode n;
      n.byte = static_cast<std::uint8_t>(s[i]);
      n.depth = static_cast<std::uint16_t>(i + 1);
      n.tokens = n.tokens_end = static_cast<std::uint32_t>(trie_tokens_.size());
      path.push_back(static_cast<std::uint32_t>(trie_.size()));
      trie_.push_back(n);
      max_depth_ = std::max<std::uint16_t>(max_depth_, n.depth);
    }
    TrieNode& last = trie_[path.back()];
    if (last.tokens_end != trie_tokens_.size())
      last.tokens = static_cast<std::uint32_t>(trie_tokens_.size());
    trie_tokens_.push_back(id);
    last.tokens_end = static_cast<std::uint32_t>(trie_tokens_.size());
    prev = s;
  }
  while (!path.empty()) {
    trie_[path.back()].skip = static_cast<std::uint32_t>(trie_.size());
    path.pop_back();
  }
}

void Vocabulary::build_string_tables(const std::vector<TokenId>& ids, std::uint32_t from) {
  const std::size_t words = mask_words();
  StringTables& t = tables_[from];
  std::vector<std::uint32_t> inside_chars(size_, 0xFFFFFFFFu);
  for (const TokenId id : ids) {
    const std::string_view s = bytes(id);
    std::uint32_t state = from;
    std::uint32_t chars = 0;   // UTF-16 units
    std::uint32_t points = 0;  // code points
    bool ok = true;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const StringStep st = string_step(state, static_cast<std::uint8_t>(s[i]));
      if (!st.ok) {
        ok = false;
        break;
      }
      if (st.close) {
        const std::uint32_t bucket = i + 1 < s.size() ? static_cast<std::uint8_t>(s[i + 1]) : 256u;
        t.exits[bucket].push_back(StringExit{id, chars, points, static_cast<std::uint32_t>(i + 1)});
        ok = false;
        break;
      }
      chars += st.new_char ? (st.astral ? 2 : 1) : 0;
      points += st.new_char ? 1 : 0;
      state = st.next;
    }
    if (!ok) continue;
    if (chars > kMaxInsideChars) {
      t.long_inside.emplace_back(id, chars);
    } else {
      inside_chars[id] = chars;
    }
  }
  // Each bucket (but the last: nothing after the quote) by the bytes after its first one (the
  // matcher checks them as a sorted list).
  for (std::size_t first = 0; first < 256; ++first) {
    auto& bucket = t.exits[first];
    std::stable_sort(bucket.begin(), bucket.end(), [&](const StringExit& a, const StringExit& b) {
      return bytes(a.id).substr(a.suffix + 1) < bytes(b.id).substr(b.suffix + 1);
    });
  }
  t.inside_le.assign((kMaxInsideChars + 1) * words, 0);
  for (TokenId id = 0; id < size_; ++id) {
    if (inside_chars[id] == 0xFFFFFFFFu) continue;
    for (std::uint32_t k = inside_chars[id]; k <= kMaxInsideChars; ++k)
      t.inside_le[k * words + id / 64] |= std::uint64_t{1} << (id % 64);
  }
}

std::shared_ptr<const Vocabulary::RunTable> Vocabulary::run_table(
    const std::bitset<256>& bytes) const {
  const std::string key = bytes.to_string();
  std::lock_guard<std::mutex> lock(run_mu_);
  if (const auto it = runs_.find(key); it != runs_.end()) return it->second;
  if (runs_.size() >= kMaxRunTables) return nullptr;
  auto t = std::make_shared<RunTable>();
  for (const TokenId id : trie_tokens_) {
    const std::string_view s = this->bytes(id);
    std::uint32_t run = 0;
    while (run < s.size() && bytes.test(static_cast<std::uint8_t>(s[run]))) ++run;
    if (run == 0) continue;
    if (run == s.size()) {
      t->inside.emplace_back(id, run);
    } else {
      t->exits[static_cast<std::uint8_t>(s[run])].push_back(RunExit{id, run});
    }
  }
  for (auto& bucket : t->exits) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](const RunExit& a, const RunExit& b) {
      return this->bytes(a.id).substr(a.run + 1) < this->bytes(b.id).substr(b.run + 1);
    });
  }
  std::stable_sort(t->inside.begin(), t->inside.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  if (t->inside.size() >= kDenseRun) {
    const std::size_t words = mask_words();
    t->dense = true;
    t->inside_le.assign((kMaxInsideChars + 1) * words, 0);
    std::size_t kept = 0;
    for (const auto& [id, run] : t->inside) {
      if (run > kMaxInsideChars) {
        t->inside[kept++] = {id, run};
        continue;
      }
      for (std::uint32_t k = run; k <= kMaxInsideChars; ++k)
        t->inside_le[k * words + id / 64] |= std::uint64_t{1} << (id % 64);
    }
    t->inside.resize(kept);
  }
  runs_.emplace(key, t);
  return t;
}

}  // namespace ferry::constrain
