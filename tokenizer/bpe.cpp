#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <tuple>

namespace ferry::tokenizer {
namespace {

constexpr std::uint32_t kNoRank = 0xFFFFFFFFu;
constexpr std::size_t kSmallPiece = 48;

std::uint64_t mix(std::uint64_t h) {
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

std::size_t table_size_for(std::size_t n) {
  std::size_t size = 16;
  while (size < n * 2) size <<= 1;
  return size;
}

}  // namespace

void BytesIndex::build(const std::vector<std::string_view>& keys) {
  keys_ = keys;
  const std::size_t size = table_size_for(keys.size());
  slots_.assign(size, Slot{0, kNoToken, 0});
  mask_ = size - 1;
  for (TokenId id = 0; id < keys.size(); ++id) {
    if (keys[id].empty()) continue;
    const std::uint64_t h = hash(keys[id]);
    std::uint64_t slot = h & mask_;
    bool duplicate = false;
    while (slots_[slot].id != kNoToken) {
      if (keys_[slots_[slot].id] == keys[id]) {
        duplicate = true;  // the same bytes twice: the lowest id wins
        break;
      }
      slot = (slot + 1) & mask_;
    }
    if (!duplicate) slots_[slot] = Slot{prefix_of(keys[id]), id, tag_of(h, keys[id].size())};
  }
}

void BpeModel::set_token(TokenId id, std::string_view bytes) { pending_.emplace_back(id, std::string(bytes)); }

void BpeModel::add_merge(TokenId a, TokenId b, std::uint32_t rank, TokenId merged) {
  pending_merges_.emplace_back(a, b, rank, merged);
}

void BpeModel::finish() {
  if (!pending_.empty()) build_tokens();
  build_pairs();
}

void BpeModel::build_tokens() {
  TokenId max_id = 0;
  for (const auto& [id, bytes] : pending_) max_id = std::max(max_id, id);
  std::vector<const std::string*> by_id(pending_.empty() ? 0 : max_id + 1, nullptr);
  for (const auto& [id, bytes] : pending_) by_id[id] = &bytes;
  arena_.clear();
  offsets_.assign(by_id.size() + 1, 0);
  for (std::size_t id = 0; id < by_id.size(); ++id) {
    offsets_[id] = static_cast<std::uint32_t>(arena_.size());
    if (by_id[id]) arena_ += *by_id[id];
  }
  offsets_[by_id.size()] = static_cast<std::uint32_t>(arena_.size());
  pending_.clear();
  pending_.shrink_to_fit();
  std::vector<std::string_view> keys(id_space());
  for (TokenId id = 0; id < keys.size(); ++id) keys[id] = token_bytes(id);
  index_.build(keys);
}

void BpeModel::build_pairs() {
  const std::size_t size = table_size_for(pending_merges_.size() + pair_count_);
  std::vector<PairSlot> old;
  old.swap(pairs_);
  pairs_.assign(size, PairSlot{kEmpty, 0, 0});
  pair_mask_ = size - 1;
  pair_count_ = 0;
  for (const auto& s : old) {
    if (s.key != kEmpty) insert_pair(static_cast<TokenId>(s.key >> 32), static_cast<TokenId>(s.key), s.rank, s.merged);
  }
  for (const auto& [a, b, rank, merged] : pending_merges_) insert_pair(a, b, rank, merged);
  pending_merges_.clear();
  pending_merges_.shrink_to_fit();
}

void BpeModel::derive_merges_from_ranks() {
  // For a tiktoken table, two adjacent parts merge exactly when their concatenation is a
  // token, with that token's rank. Enumerate every split of every token into two tokens.
  for (TokenId id = 0; id < id_space(); ++id) {
    const std::string_view bytes = token_bytes(id);
    for (std::size_t cut = 1; cut < bytes.size(); ++cut) {
      const TokenId a = find(bytes.substr(0, cut));
      if (a == kNoToken) continue;
      const TokenId b = find(bytes.substr(cut));
      if (b == kNoToken) continue;
      pending_merges_.emplace_back(a, b, id, id);
    }
  }
}

void BpeModel::insert_pair(TokenId a, TokenId b, std::uint32_t rank, TokenId merged) {
  const std::uint64_t key = (static_cast<std::uint64_t>(a) << 32) | b;
  std::uint64_t slot = mix(key * 0x9E3779B97F4A7C15ull) & pair_mask_;
  while (pairs_[slot].key != kEmpty) {
    if (pairs_[slot].key == key) {
      if (rank < pairs_[slot].rank) pairs_[slot] = PairSlot{key, rank, merged};  // first merge wins
      return;
    }
    slot = (slot + 1) & pair_mask_;
  }
  pairs_[slot] = PairSlot{key, rank, merged};
  ++pair_count_;
}

const BpeModel::PairSlot* BpeModel::find_pair(TokenId a, TokenId b) const {
  if (pairs_.empty()) return nullptr;
  const std::uint64_t key = (static_cast<std::uint64_t>(a) << 32) | b;
  std::uint64_t slot = mix(key * 0x9E3779B97F4A7C15ull) & pair_mask_;
  while (true) {
    const PairSlot& s = pairs_[slot];
    if (s.key == key) return &s;
    if (s.key == kEmpty) return nullptr;
    slot = (slot + 1) & pair_mask_;
  }
}

void BpeModel::merge(std::vector<TokenId>& ids, std::vector<TokenId>& out) const {
  if (ids.size() <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
  } else if (ids.size() <= kSmallPiece) {
    merge_small(ids, out);
  } else {
    merge_large(ids, out);
  }
}

void BpeModel::merge_small(std::vector<TokenId>& ids, std::vector<TokenId>& out) const {
  std::uint32_t ranks[kSmallPiece];
  TokenId merged[kSmallPiece];
  std::size_t n = ids.size();
  TokenId* sym = ids.data();
  auto score = [&](std::size_t i) {
    const PairSlot* p = find_pair(sym[i], sym[i + 1]);
    ranks[i] = p ? p->rank : kNoRank;
    merged[i] = p ? p->merged : kNoToken;
  };
  for (std::size_t i = 0; i + 1 < n; ++i) score(i);
  while (n > 1) {
    std::size_t best = 0;
    std::uint32_t best_rank = ranks[0];
    for (std::size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == kNoRank) break;
    sym[best] = merged[best];
    for (std::size_t i = best + 1; i + 1 < n; ++i) {
      sym[i] = sym[i + 1];
      if (i + 1 < n - 1) {
        ranks[i] = ranks[i + 1];
        merged[i] = merged[i + 1];
      }
    }
    --n;
    if (best + 1 < n) score(best);
    if (best > 0) score(best - 1);
  }
  out.insert(out.end(), sym, sym + n);
}

void BpeModel::merge_large(std::vector<TokenId>& ids, std::vector<TokenId>& out) const {
  // Symbols as a doubly linked list over the initial positions; candidate merges in a min-heap
  // ordered by (rank, position), validated lazily when popped.
  struct Candidate {
    std::uint32_t rank;
    std::uint32_t left;
    TokenId left_id;
    TokenId right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  const std::size_t n = ids.size();
  constexpr std::uint32_t kEnd = 0xFFFFFFFFu;
  thread_local std::vector<std::uint32_t> prev, next;
  thread_local std::vector<Candidate> heap;
  thread_local std::vector<char> dead;
  prev.resize(n);
  next.resize(n);
  dead.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? kEnd : static_cast<std::uint32_t>(i - 1);
    next[i] = i + 1 == n ? kEnd : static_cast<std::uint32_t>(i + 1);
  }
  heap.clear();
  const auto cmp = std::greater<>{};
  auto push = [&](std::uint32_t left) {
    const std::uint32_t right = next[left];
    if (right == kEnd) return;
    if (const PairSlot* p = find_pair(ids[left], ids[right])) {
      heap.push_back({p->rank, left, ids[left], ids[right]});
      std::push_heap(heap.begin(), heap.end(), cmp);
    }
  };
  for (std::uint32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const Candidate c = heap.back();
    heap.pop_back();
    // Stale when either side changed since the candidate was pushed. A node's id only ever
    // grows into a longer token, so an unchanged id means an unchanged node.
    if (dead[c.left] || ids[c.left] != c.left_id) continue;
    const std::uint32_t right = next[c.left];
    if (right == kEnd || ids[right] != c.right_id) continue;
    ids[c.left] = find_pair(c.left_id, c.right_id)->merged;
    dead[right] = 1;
    next[c.left] = next[right];
    if (next[right] != kEnd) prev[next[right]] = c.left;
    if (prev[c.left] != kEnd) push(prev[c.left]);
    push(c.left);
  }
  for (std::uint32_t i = 0; i != kEnd; i = next[i]) out.push_back(ids[i]);
}

void BpeModel::merge_by_rank(std::string_view piece, std::vector<TokenId>& out) const {
  const std::size_t n = piece.size();
  if (n > kSmallPiece) {
    merge_by_rank_large(piece, out);
    return;
  }
  // starts[i]: where part i begins; part i is [starts[i], starts[i + 1]).
  std::uint32_t starts[kSmallPiece + 1];
  std::uint32_t ranks[kSmallPiece];
  std::size_t parts = n;
  for (std::size_t i = 0; i <= n; ++i) starts[i] = static_cast<std::uint32_t>(i);
  auto rank_of = [&](std::size_t i) -> std::uint32_t {
    if (i + 2 > parts) return kNoRank;
    const TokenId id = find(piece.substr(starts[i], starts[i + 2] - starts[i]));
    return id == kNoToken ? kNoRank : id;
  };
  for (std::size_t i = 0; i + 1 < parts; ++i) ranks[i] = rank_of(i);
  while (parts > 1) {
    std::size_t best = 0;
    std::uint32_t best_rank = kNoRank;
    for (std::size_t i = 0; i + 1 < parts; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == kNoRank) break;
    // Remove the boundary between parts best and best + 1.
    for (std::size_t i = best + 1; i < parts; ++i) starts[i] = starts[i + 1];
    for (std::size_t i = best + 1; i + 2 < parts; ++i) ranks[i] = ranks[i + 1];
    --parts;
    if (best + 1 < parts) ranks[best] = rank_of(best);
    if (best > 0) ranks[best - 1] = rank_of(best - 1);
  }
  for (std::size_t i = 0; i < parts; ++i) out.push_back(find(piece.substr(starts[i], starts[i + 1] - starts[i])));
}

void BpeModel::merge_by_rank_large(std::string_view piece, std::vector<TokenId>& out) const {
  // Parts as a linked list over byte positions; candidates (rank, left start, right end) in a
  // min-heap, stale ones skipped when popped: a candidate holds while its left part is alive
  // and the part after it still ends where it did.
  struct Candidate {
    std::uint32_t rank;
    std::uint32_t left;
    std::uint32_t end;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  const std::uint32_t n = static_cast<std::uint32_t>(piece.size());
  thread_local std::vector<std::uint32_t> next, prev;
  thread_local std::vector<char> alive;
  thread_local std::vector<Candidate> heap;
  next.resize(n + 1);
  prev.resize(n + 1);
  alive.assign(n + 1, 1);
  for (std::uint32_t i = 0; i <= n; ++i) {
    next[i] = i + 1;
    prev[i] = i == 0 ? 0 : i - 1;
  }
  heap.clear();
  const auto cmp = std::greater<>{};
  auto push = [&](std::uint32_t left) {
    const std::uint32_t right = next[left];
    if (right >= n) return;
    const std::uint32_t end = next[right];
    const TokenId id = find(piece.substr(left, end - left));
    if (id == kNoToken) return;
    heap.push_back({id, left, end});
    std::push_heap(heap.begin(), heap.end(), cmp);
  };
  for (std::uint32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const Candidate c = heap.back();
    heap.pop_back();
    if (!alive[c.left]) continue;
    const std::uint32_t right = next[c.left];
    if (right >= n || next[right] != c.end) continue;
    alive[right] = 0;
    next[c.left] = c.end;
    prev[c.end] = c.left;
    if (c.left > 0) push(prev[c.left]);
    push(c.left);
  }
  for (std::uint32_t i = 0; i < n; i = next[i]) out.push_back(find(piece.substr(i, next[i] - i)));
}

}  // namespace ferry::tokenizer
