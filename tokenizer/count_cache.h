// Exact prompt token counts with the text between special tokens counted once and kept: a
// tokenizer encodes each run between two special tokens on its own (encode with
// Specials::kParse splits there first), so the count of a chat prompt is the sum of its runs'
// counts and one a special token, and a repeated system prompt or earlier turn (a run of its
// own wherever a chat template separates messages with special tokens) costs a hash lookup.
// Never inexact: an entry holds the run's text and is found by comparing it. Bounded by bytes
// (least recently used out). Thread-safety: every method may be called from any thread
// (sharded mutexes, each held for one lookup or insert).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {

// The default bound of one cache (runs' text, counts and bookkeeping).
constexpr std::size_t kDefaultCountCacheBytes = std::size_t{8} << 20;

// The tokens of a prompt that start at `offset` of its text (a special token, or a run).
struct PieceCount {
  std::size_t offset = 0;
  std::size_t tokens = 0;
  std::size_t length = 0;  // bytes of text
  bool special = false;    // a special token
};

class CountCache {
 public:
  explicit CountCache(const Tokenizer& tokenizer, std::size_t max_bytes = kDefaultCountCacheBytes);
  CountCache(const CountCache&) = delete;
  CountCache& operator=(const CountCache&) = delete;

  // count_prompt(tokenizer, text) exactly (specials parsed, BOS as the engine adds it). With
  // `pieces`, also each special token's and each non-empty run's tokens by offset (a BOS the
  // count adds is in none of them).
  std::size_t count_prompt(std::string_view text, std::vector<PieceCount>* pieces = nullptr);
  // tokenizer.count(text) (special-token text as ordinary text) exactly.
  std::size_t count_text(std::string_view text);

  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t entries = 0;
    int64_t bytes = 0;
    int64_t evictions = 0;
  };
  Stats stats() const;

 private:
  struct Run {
    std::size_t tokens = 0;
    std::optional<TokenId> first_id;  // the run's first token (for the BOS rule)
  };
  struct Entry {
    std::string text;
    bool first = false;  // encoded as the first run of its input
    Run run;
    std::size_t bytes = 0;
    std::size_t hash = 0;  // its Key's
  };
  // A run's text and its hash, computed once (it picks the shard, and the map takes it as is).
  struct Key {
    std::string_view text;
    bool first = false;
    std::size_t hash = 0;
    bool operator==(const Key& o) const { return first == o.first && text == o.text; }
  };
  // Runs are long (a system prompt, a whole turn) and hashed on every lookup: four 8-byte lanes
  // a step, then murmur3's finalizer (std::hash reads a byte in about three times the
  // instructions). Any hash is exact here: a key is found by comparing its text.
  static std::size_t hash_of(std::string_view text, bool first);
  struct KeyHash {
    std::size_t operator()(const Key& k) const { return k.hash; }
  };
  using List = std::list<Entry>;  // most recently used first
  struct Shard {
    std::mutex mutex;
    List lru;
    std::unordered_map<Key, List::iterator, KeyHash> index;  // views into Entry::text
    std::size_t bytes = 0;
    Stats stats;
  };
  static constexpr std::size_t kShards = 8;

  Run run(std::string_view text, bool first);

  const Tokenizer& tokenizer_;
  const std::size_t shard_bytes_;
  mutable std::array<Shard, kShards> shards_;  // stats() locks them
};

}  // namespace ferry::tokenizer
