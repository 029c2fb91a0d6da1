// The BPE core shared by every vocabulary: token bytes <-> ids, pair merges by rank, and the
// merge loop (quadratic scan for short pieces, heap + linked list for long ones).
// Built once at load time, then immutable: encode/lookups are const and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::tokenizer {

using TokenId = std::uint32_t;
inline constexpr TokenId kNoToken = 0xFFFFFFFFu;

// Open-addressing map from byte strings to ids; keys live in an arena owned by the caller.
// Each slot keeps 32 bits of the key's hash beside the id, so a probe touches the key bytes
// only when the hashes agree.
class BytesIndex {
 public:
  void build(const std::vector<std::string_view>& keys);  // keys[id]; empty keys skipped
  static std::uint64_t hash(std::string_view key) {
    const char* p = key.data();
    std::size_t n = key.size();
    std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      h = (h ^ v) * 0x9FB21C651E98DF25ull;
      h ^= h >> 29;
      p += 8;
      n -= 8;
    }
    if (n) {
      std::uint64_t v = 0;
      std::memcpy(&v, p, n);
      h = (h ^ v) * 0x9FB21C651E98DF25ull;
    }
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
  }
  // kNoToken if absent.
  TokenId find(std::string_view key) const {
    if (slots_.empty()) return kNoToken;
    const std::uint64_t h = hash(key);
    const std::uint64_t prefix = prefix_of(key);
    const std::uint32_t tag = tag_of(h, key.size());
    std::uint64_t slot = h & mask_;
    while (true) {
      const Slot& s = slots_[slot];
      if (s.id == kNoToken) return kNoToken;
      if (s.prefix == prefix && s.tag == tag) {
        if (key.size() <= 8) return s.id;  // the prefix and the length in the tag say it all
        const std::string_view k = keys_[s.id];
        if (k.size() == key.size() && std::memcmp(k.data() + 8, key.data() + 8, key.size() - 8) == 0) return s.id;
      }
      slot = (slot + 1) & mask_;
    }
  }

 private:
  // The first 8 bytes of the key (zero-padded), 24 bits of hash and the length (capped at 255)
  // sit in the slot, so a short key is found without touching the arena.
  struct Slot {
    std::uint64_t prefix;
    TokenId id;
    std::uint32_t tag;
  };
  static std::uint64_t prefix_of(std::string_view key) {
    std::uint64_t v = 0;
    std::memcpy(&v, key.data(), key.size() < 8 ? key.size() : 8);
    return v;
  }
  static std::uint32_t tag_of(std::uint64_t h, std::size_t len) {
    return static_cast<std::uint32_t>((h >> 32) & 0xFFFFFF00u) | static_cast<std::uint32_t>(len < 255 ? len : 255);
  }

  std::vector<Slot> slots_;
  std::vector<std::string_view> keys_;
  std::uint64_t mask_ = 0;
};

class BpeModel {
 public:
  // Token table. Ids need not be dense; missing ids decode to nothing.
  void set_token(TokenId id, std::string_view bytes);
  // A merge of adjacent tokens (a, b) with priority `rank` (lower first) into `merged`.
  void add_merge(TokenId a, TokenId b, std::uint32_t rank, TokenId merged);
  // Derives the merges of a tiktoken rank table: (a, b) -> a+b, ranked by a+b's rank.
  void derive_merges_from_ranks();
  // Call after the tokens and merges are set.
  void finish();

  TokenId find(std::string_view bytes) const { return index_.find(bytes); }
  std::string_view token_bytes(TokenId id) const {
    return id < offsets_.size() - 1 ? std::string_view(arena_).substr(offsets_[id], offsets_[id + 1] - offsets_[id])
                                    : std::string_view();
  }
  std::size_t id_space() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  std::size_t merge_count() const { return pair_count_; }

  // Merges `ids` (initial symbols of one piece) in place and appends the result to `out`.
  void merge(std::vector<TokenId>& ids, std::vector<TokenId>& out) const;
  // tiktoken's merge: adjacent parts of `piece` merge when their concatenation is a token,
  // lowest rank (= id) first, leftmost on ties. Needs every single byte to be a token; uses
  // no pair table (derive_merges_from_ranks is not needed).
  void merge_by_rank(std::string_view piece, std::vector<TokenId>& out) const;

 private:
  struct PairSlot {
    std::uint64_t key;  // a << 32 | b; kEmpty when unused
    std::uint32_t rank;
    TokenId merged;
  };
  static constexpr std::uint64_t kEmpty = ~0ull;

  void build_tokens();
  void build_pairs();
  const PairSlot* find_pair(TokenId a, TokenId b) const;
  void insert_pair(TokenId a, TokenId b, std::uint32_t rank, TokenId merged);
  void merge_small(std::vector<TokenId>& ids, std::vector<TokenId>& out) const;
  void merge_large(std::vector<TokenId>& ids, std::vector<TokenId>& out) const;
  void merge_by_rank_large(std::string_view piece, std::vector<TokenId>& out) const;

  std::vector<std::pair<TokenId, std::string>> pending_;
  std::string arena_;
  std::vector<std::uint32_t> offsets_;  // id -> [offsets_[id], offsets_[id+1])
  BytesIndex index_;
  std::vector<PairSlot> pairs_;
  std::uint64_t pair_mask_ = 0;
  std::size_t pair_count_ = 0;
  std::vector<std::tuple<TokenId, TokenId, std::uint32_t, TokenId>> pending_merges_;
};

}  // namespace ferry::tokenizer
