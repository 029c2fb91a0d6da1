#include "tokenizer/count_cache.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace ferry::tokenizer {

namespace {
constexpr std::size_t kEntryOverheadBytes = 96;  // the list node, the map slot, the fields

uint64_t load64(const char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// One lane's step: the word folded in, multiplied, and the product's high bits (which depend on
// every bit of the lane) rotated down.
uint64_t mix_lane(uint64_t lane, uint64_t word) {
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ULL;
  return std::rotl((lane ^ word) * kMul, 31);
}
}  // namespace

std::size_t CountCache::hash_of(std::string_view text, bool first) {
  const char* p = text.data();
  std::size_t n = text.size();
  uint64_t a = n, b = 0x243f6a8885a308d3ULL, c = 0x13198a2e03707344ULL, d = 0xa4093822299f31d0ULL;
  for (; n >= 32; p += 32, n -= 32) {
    a = mix_lane(a, load64(p));
    b = mix_lane(b, load64(p + 8));
    c = mix_lane(c, load64(p + 16));
    d = mix_lane(d, load64(p + 24));
  }
  for (; n >= 8; p += 8, n -= 8) a = mix_lane(a, load64(p));
  uint64_t tail = 0;
  std::memcpy(&tail, p, n);
  b = mix_lane(b, tail ^ (static_cast<uint64_t>(n) << 56));
  uint64_t h = a ^ std::rotl(b, 17) ^ std::rotl(c, 31) ^ std::rotl(d, 47) ^ (first ? 1 : 0);
  // murmur3's fmix64: every bit of h reaches every bit of the result.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb93c185a87ebULL;
  h ^= h >> 33;
  return static_cast<std::size_t>(h);
}

CountCache::CountCache(const Tokenizer& tokenizer, std::size_t max_bytes)
    : tokenizer_(tokenizer), shard_bytes_(std::max<std::size_t>(max_bytes / kShards, 1)) {}

CountCache::Run CountCache::run(std::string_view text, bool first) {
  if (text.empty()) return {};
  const std::size_t h = hash_of(text, first);
  const Key key{text, first, h};
  Shard& shard = shards_[(h >> 7) % kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (auto it = shard.index.find(key); it != shard.index.end()) {
      ++shard.stats.hits;
      shard.lru.splice(shard.lru.begin(), shard.lru, it->second);
      return it->second->run;
    }
  }
  // Counted outside the lock: two threads may count the same run; the second insert is dropped.
  thread_local std::vector<TokenId> ids;
  ids.clear();
  tokenizer_.encode_run(text, first, ids);
  Run r{ids.size(), ids.empty() ? std::nullopt : std::optional<TokenId>(ids.front())};
  if (ids.capacity() > (std::size_t{1} << 22)) std::vector<TokenId>().swap(ids);
  const std::size_t bytes = text.size() + kEntryOverheadBytes;
  std::lock_guard<std::mutex> lock(shard.mutex);
  ++shard.stats.misses;
  if (bytes > shard_bytes_) return r;  // larger than the bound: counted, not kept
  if (shard.index.count(key) != 0) return r;
  shard.lru.push_front(Entry{std::string(text), first, r, bytes, h});
  shard.index.emplace(Key{shard.lru.front().text, first, h}, shard.lru.begin());
  shard.bytes += bytes;
  while (shard.bytes > shard_bytes_) {
    const Entry& old = shard.lru.back();
    shard.bytes -= old.bytes;
    shard.index.erase(Key{old.text, old.first, old.hash});
    shard.lru.pop_back();
    ++shard.stats.evictions;
  }
  return r;
}

std::size_t CountCache::count_prompt(std::string_view text, std::vector<PieceCount>* pieces) {
  thread_local std::vector<Tokenizer::Piece> split;
  split.clear();
  tokenizer_.split_specials(text, split);
  // encode_prompt's rule: BOS in front when the model adds one and the first token is not BOS.
  const auto bos = tokenizer_.bos_id();
  const bool add_bos = tokenizer_.add_bos() && bos.has_value();
  bool seen_first_token = false;
  bool bos_needed = add_bos;
  std::size_t total = 0;
  for (const Tokenizer::Piece& p : split) {
    std::size_t n = 1;
    if (p.special) {
      if (!seen_first_token && *p.special == *bos) bos_needed = false;
      seen_first_token = true;
    } else {
      const Run r = run(text.substr(p.offset, p.length), p.first);
      n = r.tokens;
      if (!seen_first_token && r.first_id) {
        if (add_bos && *r.first_id == *bos) bos_needed = false;
        seen_first_token = true;
      }
    }
    total += n;
    if (pieces != nullptr && n > 0)
      pieces->push_back({p.offset, n, p.length, p.special.has_value()});
  }
  if (bos_needed) ++total;  // in no piece
  if (split.capacity() > 4096) std::vector<Tokenizer::Piece>().swap(split);
  return total;
}

std::size_t CountCache::count_text(std::string_view text) {
  return run(text, true).tokens;
}

CountCache::Stats CountCache::stats() const {
  Stats out;
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mutex);
    out.hits += s.stats.hits;
    out.misses += s.stats.misses;
    out.evictions += s.stats.evictions;
    out.entries += static_cast<int64_t>(s.lru.size());
    out.bytes += static_cast<int64_t>(s.bytes);
  }
  return out;
}

}  // namespace ferry::tokenizer
