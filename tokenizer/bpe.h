// The BPE core shared by every vocabulary: token bytes <-> ids, pair merges by rank, and the
// merge loops (quadratic scan for short pieces; for long ones a heap (pair merges) or a bucket
// queue over ranks (tiktoken merges), both over a linked list of parts).
// Built once at load time, then immutable: encode/lookups are const and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace ferry::tokenizer {

using TokenId = std::uint32_t;
inline constexpr TokenId kNoToken = 0xFFFFFFFFu;

// Memory for big read-mostly tables: blocks of 2 MB and more go in transparent huge pages where
// the system has them (lookups spread over megabytes miss the TLB on 4 KB pages). free()
// releases it; null when out of memory.
void* allocate_bytes(std::size_t bytes);

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  explicit HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(std::size_t n) {
    void* p = allocate_bytes(n * sizeof(T));
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) { std::free(p); }
  bool operator==(const HugePageAllocator&) const { return true; }
};

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
    if (n) h = (h ^ load_short(p, n)) * 0x9FB21C651E98DF25ull;
    return finalize(h);
  }
  // The n (1..8) bytes at p as a word, zero-padded, reading only those bytes. (A memcpy of a
  // variable length into a word stalls on store forwarding; overlapping loads do not.)
  static std::uint64_t load_short(const char* p, std::size_t n) {
    if (n >= 4) {
      std::uint32_t lo;
      std::uint32_t hi;
      std::memcpy(&lo, p, 4);
      std::memcpy(&hi, p + n - 4, 4);
      return std::uint64_t{lo} | (std::uint64_t{hi} << (8 * (n - 4)));
    }
    const auto* u = reinterpret_cast<const unsigned char*>(p);
    return std::uint64_t{u[0]} | (std::uint64_t{u[n / 2]} << (8 * (n / 2))) |
           (std::uint64_t{u[n - 1]} << (8 * (n - 1)));
  }
  // hash() of a key of 1..8 bytes given as a word: its bytes in memory order, zero-padded.
  static std::uint64_t hash_short(std::uint64_t v, std::size_t n) {
    std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    h = (h ^ v) * 0x9FB21C651E98DF25ull;
    if (n == 8) h ^= h >> 29;
    return finalize(h);
  }
  // kNoToken if absent.
  TokenId find(std::string_view key) const {
    if (slots_.empty() || key.empty()) return kNoToken;
    if (key.size() <= 8) {
      const std::uint64_t v = load_short(key.data(), key.size());
      return find_short(v, key.size(), hash_short(v, key.size()));
    }
    return find_hashed(key, hash(key));
  }
  // find() with the key's hash() already computed.
  TokenId find_hashed(std::string_view key, std::uint64_t h) const {
    const std::uint64_t prefix = prefix_of(key);
    const std::uint32_t tag = tag_of(h, key.size());
    std::uint64_t slot = h & mask_;
    while (true) {
      const Slot& s = slots_[slot];
      if (s.id == kNoToken) return kNoToken;
      if (s.prefix == prefix && s.tag == tag) {
        if (key.size() <= 8) return s.id;  // the prefix and the length in the tag say it all
        const std::string_view k = keys_[s.id];
        if (k.size() == key.size() &&
            std::memcmp(k.data() + 8, key.data() + 8, key.size() - 8) == 0)
          return s.id;
      }
      slot = (slot + 1) & mask_;
    }
  }
  // find() in two steps, so that a caller can start the memory accesses of several lookups
  // before it needs their answers: probe() hashes (and for a short key loads) the key,
  // prefetch() starts the load of its first slot, find(key, probe) finishes.
  struct Probe {
    std::uint64_t word;  // a key of at most 8 bytes, as hash_short() takes it
    std::uint64_t hash;
  };
  static Probe probe(std::string_view key) {
    if (key.size() - 1 < 8) {  // 1..8 bytes
      const std::uint64_t v = load_short(key.data(), key.size());
      return Probe{v, hash_short(v, key.size())};
    }
    return Probe{0, hash(key)};
  }
  void prefetch(const Probe& p) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[p.hash & mask_]);
  }
  TokenId find(std::string_view key, const Probe& p) const {
    if (slots_.empty() || key.empty()) return kNoToken;
    return key.size() <= 8 ? find_short(p.word, key.size(), p.hash) : find_hashed(key, p.hash);
  }
  // find() of a key of 1..8 bytes given as hash_short() takes it, with its hash_short().
  TokenId find_short(std::uint64_t v, std::size_t n, std::uint64_t h) const {
    const std::uint32_t tag = tag_of(h, n);
    std::uint64_t slot = h & mask_;
    while (true) {
      const Slot& s = slots_[slot];
      if (s.id == kNoToken) return kNoToken;
      if (s.prefix == v && s.tag == tag) return s.id;
      slot = (slot + 1) & mask_;
    }
  }

 private:
  static std::uint64_t finalize(std::uint64_t h) {
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
  }
  // The first 8 bytes of the key (zero-padded), 24 bits of hash and the length (capped at 255)
  // sit in the slot, so a short key is found without touching the arena.
  struct Slot {
    std::uint64_t prefix;
    TokenId id;
    std::uint32_t tag;
  };
  static std::uint64_t prefix_of(std::string_view key) {
    return key.empty() ? 0 : load_short(key.data(), key.size() < 8 ? key.size() : 8);
  }
  static std::uint32_t tag_of(std::uint64_t h, std::size_t len) {
    return static_cast<std::uint32_t>((h >> 32) & 0xFFFFFF00u) |
           static_cast<std::uint32_t>(len < 255 ? len : 255);
  }

  std::vector<Slot, HugePageAllocator<Slot>> slots_;
  std::vector<std::string_view, HugePageAllocator<std::string_view>> keys_;
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
  const BytesIndex& index() const { return index_; }
  std::string_view token_bytes(TokenId id) const {
    return id < offsets_.size() - 1
               ? std::string_view(arena_).substr(offsets_[id], offsets_[id + 1] - offsets_[id])
               : std::string_view();
  }
  std::size_t id_space() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  std::size_t merge_count() const { return pair_count_; }

  // Merges `ids` (initial symbols of one piece) in place and appends the result to `out`.
  void merge(std::vector<TokenId>& ids, std::vector<TokenId>& out) const;
  // tiktoken's merge: adjacent parts of `piece` merge when their concatenation is a token,
  // lowest rank (= id) first, leftmost on ties. Needs every single byte to be a token and
  // prepare_rank_merge() after finish(); uses no pair table (derive_merges_from_ranks is not
  // needed).
  void merge_by_rank(std::string_view piece, std::vector<TokenId>& out) const;
  // Builds what merge_by_rank reads: the ids of the 2-byte tokens in a dense table, and a Bloom
  // filter of the longer ones, so that most lookups of a concatenation that is not a token
  // (the common case while merging) stay in cache. False when a single byte has no token.
  bool prepare_rank_merge();

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
  bool filter_may_hold(std::uint64_t h) const {
    const std::uint64_t word = filter_[(h >> 40) & filter_mask_];
    const std::uint64_t bits =
        (std::uint64_t{1} << (h & 63)) | (std::uint64_t{1} << ((h >> 6) & 63));
    return (word & bits) == bits;
  }
  // The id (= rank) of the token whose bytes are [p, p + len), len > 8; kNoToken if none.
  TokenId long_rank_of(const char* p, std::size_t len) const {
    const std::string_view key(p, len);
    const std::uint64_t h = BytesIndex::hash(key);
    return filter_may_hold(h) ? index_.find_hashed(key, h) : kNoToken;
  }
  // The same for 3..8 bytes, given as a word (BytesIndex::hash_short).
  TokenId short_rank_of(std::uint64_t v, std::size_t len) const {
    const std::uint64_t h = BytesIndex::hash_short(v, len);
    return filter_may_hold(h) ? index_.find_short(v, len, h) : kNoToken;
  }

  std::vector<std::pair<TokenId, std::string>> pending_;
  std::string arena_;
  std::vector<std::uint32_t> offsets_;  // id -> [offsets_[id], offsets_[id+1])
  BytesIndex index_;
  std::vector<PairSlot> pairs_;
  std::uint64_t pair_mask_ = 0;
  std::size_t pair_count_ = 0;
  std::vector<std::tuple<TokenId, TokenId, std::uint32_t, TokenId>> pending_merges_;

  // merge_by_rank (prepare_rank_merge).
  std::vector<TokenId> pair2_;         // (b0 << 8 | b1) -> id of that 2-byte token, or kNoToken
  std::vector<std::uint64_t> filter_;  // Bloom filter (2 bits of one word) of tokens of 3+ bytes
  std::uint64_t filter_mask_ = 0;
  TokenId byte_token_[256] = {};
  std::uint64_t serial_ = 0;  // names this vocabulary in the per-thread lookup memos
};

}  // namespace ferry::tokenizer
