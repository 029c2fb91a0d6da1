#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>

#if defined(__linux__)
#include <sys/mman.h>
#endif

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

// Per-thread memos for merge_by_rank, tied to one vocabulary by its serial: the lookups of
// 3..8-byte concatenations (hits and misses), and the merged ids of short pieces. Merging
// natural text asks for the same few thousand short strings, and meets the same words, over
// and over, while the vocabulary's index is megabytes; the memos keep those answers in L1/L2.
// Two a thread; a third vocabulary takes the older one over.
class RankMemo {
 public:
  static constexpr std::size_t kRanks = 4096;
  static constexpr std::size_t kPieces = 2048;
  static constexpr std::size_t kPieceBytes = 16;  // longer pieces are not kept
  static constexpr std::size_t kPieceIds = 6;     // nor pieces of more tokens

  static RankMemo& for_model(std::uint64_t serial) {
    thread_local std::unique_ptr<RankMemo[]> memos;
    thread_local std::uint64_t clock = 0;
    if (!memos) memos.reset(new RankMemo[2]);
    RankMemo* m = memos[0].owner_ == serial   ? &memos[0]
                  : memos[1].owner_ == serial ? &memos[1]
                                              : nullptr;
    if (!m) {
      m = memos[0].last_use_ <= memos[1].last_use_ ? &memos[0] : &memos[1];
      m->owner_ = serial;
      for (RankEntry& e : m->ranks_) e.len = 0;
      for (PieceEntry& e : m->pieces_) e.len = 0;
    }
    m->last_use_ = ++clock;
    return *m;
  }
  // The memoised lookup(key) of a 1..8-byte key given as a zero-padded word.
  template <typename Lookup>
  TokenId rank(std::uint64_t key, std::uint32_t len, Lookup&& lookup) {
    const std::uint64_t x = (key ^ (std::uint64_t{len} << 59)) * 0x9E3779B97F4A7C15ull;
    RankEntry& e = ranks_[x >> 52];
    if (e.key == key && e.len == len) return e.id;
    const TokenId id = lookup();
    e = RankEntry{key, len, id};
    return id;
  }
  // The ids of a piece of 1..16 bytes (lo, hi: its bytes as zero-padded words) if kept; else
  // null, with `slot` where put_piece keeps them.
  const TokenId* piece(std::uint64_t lo, std::uint64_t hi, std::uint32_t len, std::uint32_t& count,
                       std::size_t& slot) const {
    const std::uint64_t x = ((lo * 0x9E3779B97F4A7C15ull) ^ hi ^ len) * 0xff51afd7ed558ccdull;
    slot = x >> 53;
    const PieceEntry& e = pieces_[slot];
    if (e.lo != lo || e.hi != hi || e.len != len) return nullptr;
    count = e.count;
    return e.ids;
  }
  void put_piece(std::size_t slot, std::uint64_t lo, std::uint64_t hi, std::uint32_t len,
                 const TokenId* ids, std::size_t count) {
    if (count > kPieceIds) return;
    PieceEntry& e = pieces_[slot];
    e.lo = lo;
    e.hi = hi;
    e.len = static_cast<std::uint16_t>(len);
    e.count = static_cast<std::uint16_t>(count);
    std::copy(ids, ids + count, e.ids);
  }

 private:
  struct RankEntry {
    std::uint64_t key;  // the bytes, zero-padded
    std::uint32_t len;  // 0: empty
    TokenId id;
  };
  struct PieceEntry {
    std::uint64_t lo;
    std::uint64_t hi;
    std::uint16_t len;  // 0: empty
    std::uint16_t count;
    TokenId ids[kPieceIds];
  };
  static_assert(kRanks == 1u << 12, "rank() takes the top 12 bits of the hash");
  static_assert(kPieces == 1u << 11, "piece() takes the top 11 bits of the hash");
  std::uint64_t owner_ = 0;
  std::uint64_t last_use_ = 0;
  RankEntry ranks_[kRanks] = {};
  PieceEntry pieces_[kPieces] = {};
};

std::atomic<std::uint64_t> next_serial{1};

// Keys as words (load_key, BytesIndex::load_short) put byte k at bits 8k.
static_assert(std::endian::native == std::endian::little,
              "BPE keys are read as little-endian words");

// The len (1..8) bytes at p as a zero-padded word; p must have 8 readable bytes.
std::uint64_t load_key(const char* p, std::uint32_t len) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return len >= 8 ? v : v & ((std::uint64_t{1} << (8 * len)) - 1);
}

std::size_t table_size_for(std::size_t n) {
  std::size_t size = 16;
  while (size < n * 2) size <<= 1;
  return size;
}

}  // namespace

void* allocate_bytes(std::size_t bytes) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  if (bytes < kHuge) return std::malloc(bytes);
  const std::size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, size);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p) madvise(p, size, MADV_HUGEPAGE);  // advice only: 4 KB pages still work
#endif
  return p;
}

void BytesIndex::build(const std::vector<std::string_view>& keys) {
  keys_.assign(keys.begin(), keys.end());
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

void BpeModel::set_token(TokenId id, std::string_view bytes) {
  pending_.emplace_back(id, std::string(bytes));
}

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
    if (s.key != kEmpty)
      insert_pair(static_cast<TokenId>(s.key >> 32), static_cast<TokenId>(s.key), s.rank, s.merged);
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

bool BpeModel::prepare_rank_merge() {
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_token_[b] = find(std::string_view(&c, 1));
    if (byte_token_[b] == kNoToken) return false;
  }
  pair2_.assign(65536, kNoToken);
  std::size_t longer = 0;
  for (TokenId id = 0; id < id_space(); ++id) {
    const std::string_view bytes = token_bytes(id);
    if (bytes.size() == 2) {
      TokenId& slot =
          pair2_[static_cast<unsigned char>(bytes[0]) << 8 | static_cast<unsigned char>(bytes[1])];
      slot = std::min(slot, find(bytes));  // find: the id the index keeps for duplicates
    } else if (bytes.size() > 2) {
      ++longer;
    }
  }
  // About 10 bits a key: a lookup of a concatenation that is not a token passes the filter
  // about 4% of the time.
  std::size_t words = 64;
  while (words * 64 < longer * 8) words <<= 1;
  filter_.assign(words, 0);
  filter_mask_ = words - 1;
  for (TokenId id = 0; id < id_space(); ++id) {
    const std::string_view bytes = token_bytes(id);
    if (bytes.size() <= 2) continue;
    const std::uint64_t h = BytesIndex::hash(bytes);
    filter_[(h >> 40) & filter_mask_] |=
        (std::uint64_t{1} << (h & 63)) | (std::uint64_t{1} << ((h >> 6) & 63));
  }
  serial_ = next_serial.fetch_add(1);
  return true;
}

void BpeModel::merge_by_rank(std::string_view piece, std::vector<TokenId>& out) const {
  const std::size_t n = piece.size();
  const char* s = piece.data();
  if (n <= 1) {
    if (n == 1) out.push_back(byte_token_[static_cast<unsigned char>(s[0])]);
    return;
  }
  if (n > kSmallPiece) {
    merge_by_rank_large(piece, out);
    return;
  }
  // Part i is the token ids[i] = bytes [starts[i], starts[i + 1]); ranks[i] is the id of the
  // concatenation of parts i and i + 1 (kNoToken when it is not a token). Rank = id.
  // A copy with 16 bytes of slack, so that a short key is one 8-byte load.
  char buf[kSmallPiece + 16];
  std::memcpy(buf, s, n);
  std::memset(buf + n, 0, 16);
  s = buf;
  RankMemo& memo = RankMemo::for_model(serial_);
  std::size_t piece_slot = 0;
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  const bool keep = n <= RankMemo::kPieceBytes;
  if (keep) {
    std::memcpy(&lo, s, 8);  // the zeroed slack pads both words
    std::memcpy(&hi, s + 8, 8);
    std::uint32_t count = 0;
    if (const TokenId* ids = memo.piece(lo, hi, static_cast<std::uint32_t>(n), count, piece_slot)) {
      out.insert(out.end(), ids, ids + count);
      return;
    }
  }
  auto rank_of = [&](const char* p, std::uint32_t len) -> TokenId {
    if (len == 2)
      return pair2_[static_cast<unsigned char>(p[0]) << 8 | static_cast<unsigned char>(p[1])];
    if (len > 8) return long_rank_of(p, len);
    const std::uint64_t key = load_key(p, len);
    return memo.rank(key, len, [&] { return short_rank_of(key, len); });
  };
  std::uint32_t starts[kSmallPiece + 1];
  TokenId ids[kSmallPiece];
  TokenId ranks[kSmallPiece];
  std::size_t parts = n;
  for (std::size_t i = 0; i < n; ++i) {
    starts[i] = static_cast<std::uint32_t>(i);
    ids[i] = byte_token_[static_cast<unsigned char>(s[i])];
  }
  starts[n] = static_cast<std::uint32_t>(n);
  for (std::size_t i = 0; i + 1 < n; ++i) ranks[i] = rank_of(s + i, 2);
  ranks[n - 1] = kNoToken;
  while (parts > 1) {
    // The lowest rank, leftmost on ties, without a branch per pair.
    std::uint64_t lowest = ~std::uint64_t{0};
    for (std::size_t i = 0; i + 1 < parts; ++i)
      lowest = std::min(lowest, std::uint64_t{ranks[i]} << 32 | i);
    const TokenId best_rank = static_cast<TokenId>(lowest >> 32);
    const std::size_t best = static_cast<std::uint32_t>(lowest);
    if (best_rank == kNoToken) break;
    // Part best absorbs part best + 1.
    ids[best] = best_rank;
    for (std::size_t i = best + 1; i + 1 < parts; ++i) {
      starts[i] = starts[i + 1];
      ids[i] = ids[i + 1];
      ranks[i] =
          ranks[i + 1];  // the last copy reads ranks[parts - 1]: past the last pair, kNoToken
    }
    starts[parts - 1] = starts[parts];
    --parts;
    const TokenId right =
        best + 1 < parts ? rank_of(s + starts[best], starts[best + 2] - starts[best]) : kNoToken;
    const TokenId left =
        best > 0 ? rank_of(s + starts[best - 1], starts[best + 1] - starts[best - 1]) : kNoToken;
    if (best + 1 < parts) ranks[best] = right;
    if (best > 0) ranks[best - 1] = left;
  }
  if (keep) memo.put_piece(piece_slot, lo, hi, static_cast<std::uint32_t>(n), ids, parts);
  out.insert(out.end(), ids, ids + parts);
}

namespace {

// A bucket queue over ranks for merge_by_rank_large: candidates (left part start, end of the
// part after it) by rank, and a two-level bitmap of the non-empty ranks. The piece's initial
// pairs are counting-sorted into one array, a slice per rank; candidates made while merging go
// to a chain of 64-byte chunks per rank, so draining a rank costs one cache miss per 7 of them
// rather than one each. Buckets are drained completely by the merge loop, so the per-thread
// instance is clean between calls.
class RankQueue {
 public:
  static constexpr std::uint32_t kEnd = 0xFFFFFFFFu;
  struct Candidate {
    std::uint32_t left;
    std::uint32_t end;
  };

  void reset(std::size_t rank_space) {
    if (head_.size() < rank_space) {
      head_.assign(rank_space, kEnd);
      initial_end_.assign(rank_space, 0);
      initial_count_.assign(rank_space, 0);
      level0_.assign((rank_space + 63) / 64, 0);
      level1_.assign((level0_.size() + 63) / 64, 0);
    }
    chunks_.clear();
  }
  // Queues the candidates (i, i + 2) of every i with rank_at(i) != kNoToken, i < n - 1.
  template <typename RankAt>
  void push_initial(std::uint32_t n, RankAt&& rank_at) {
    touched_.clear();
    for (std::uint32_t i = 0; i + 1 < n; ++i) {
      const TokenId rank = rank_at(i);
      if (rank != kNoToken && initial_count_[rank]++ == 0) touched_.push_back(rank);
    }
    std::uint32_t offset = 0;
    for (const TokenId rank : touched_) {
      initial_end_[rank] = offset;  // a cursor while scattering; the slice's end afterwards
      offset += initial_count_[rank];
      mark(rank);
    }
    initial_.resize(offset);
    for (std::uint32_t i = 0; i + 1 < n; ++i) {
      const TokenId rank = rank_at(i);
      if (rank != kNoToken) initial_[initial_end_[rank]++] = i;
    }
  }
  void push(TokenId rank, std::uint32_t left, std::uint32_t end) {
    std::uint32_t c = head_[rank];
    if (c == kEnd || chunks_[c].count == Chunk::kItems) {
      chunks_.push_back(Chunk{c, 0, {}});
      c = static_cast<std::uint32_t>(chunks_.size() - 1);
      head_[rank] = c;
    }
    Chunk& chunk = chunks_[c];
    chunk.items[chunk.count++] = Candidate{left, end};
    mark(rank);
  }
  // The smallest non-empty rank >= r, or kEnd.
  std::uint32_t next(std::uint32_t r) const {
    std::size_t w = r >> 6;
    if (w >= level0_.size()) return kEnd;
    const std::uint64_t bits = level0_[w] & (~std::uint64_t{0} << (r & 63));
    if (bits)
      return static_cast<std::uint32_t>((w << 6) | static_cast<std::size_t>(__builtin_ctzll(bits)));
    const std::size_t w1 = w + 1;
    std::size_t i = w1 >> 6;
    if (i >= level1_.size()) return kEnd;
    std::uint64_t summary = level1_[i] & (~std::uint64_t{0} << (w1 & 63));
    while (!summary) {
      if (++i >= level1_.size()) return kEnd;
      summary = level1_[i];
    }
    w = (i << 6) | static_cast<std::size_t>(__builtin_ctzll(summary));
    return static_cast<std::uint32_t>((w << 6) |
                                      static_cast<std::size_t>(__builtin_ctzll(level0_[w])));
  }
  // Moves the candidates of `rank` into `batch`, by ascending left.
  void drain(TokenId rank, std::vector<Candidate>& batch) {
    batch.clear();
    for (std::uint32_t c = head_[rank]; c != kEnd; c = chunks_[c].older) {
      const Chunk& chunk = chunks_[c];
      for (std::uint32_t k = chunk.count; k-- > 0;) batch.push_back(chunk.items[k]);
    }
    if (const std::uint32_t count = initial_count_[rank]) {
      for (std::uint32_t k = initial_end_[rank]; k-- > initial_end_[rank] - count;) {
        batch.push_back(Candidate{initial_[k], initial_[k] + 2});
      }
      initial_count_[rank] = 0;
    }
    head_[rank] = kEnd;
    level0_[rank >> 6] &= ~(std::uint64_t{1} << (rank & 63));
    if (!level0_[rank >> 6]) level1_[rank >> 12] &= ~(std::uint64_t{1} << ((rank >> 6) & 63));
    std::reverse(batch.begin(), batch.end());  // the initial slice first, then by insertion
    const auto by_left = [](const Candidate& a, const Candidate& b) { return a.left < b.left; };
    if (!std::is_sorted(batch.begin(), batch.end(), by_left))
      std::sort(batch.begin(), batch.end(), by_left);
  }
  void release() {
    std::vector<Chunk>().swap(chunks_);
    std::vector<std::uint32_t>().swap(initial_);
  }

 private:
  struct Chunk {
    static constexpr std::uint32_t kItems = 7;
    std::uint32_t older;  // the chunk filled before this one, kEnd if none
    std::uint32_t count;
    Candidate items[kItems];
  };
  static_assert(sizeof(Chunk) == 64);
  void mark(TokenId rank) {
    level0_[rank >> 6] |= std::uint64_t{1} << (rank & 63);
    level1_[rank >> 12] |= std::uint64_t{1} << ((rank >> 6) & 63);
  }

  std::vector<std::uint32_t> initial_;        // left positions of the initial pairs, by rank
  std::vector<std::uint32_t> initial_end_;    // rank -> end of its slice of initial_
  std::vector<std::uint32_t> initial_count_;  // rank -> size of that slice; 0 once drained
  std::vector<TokenId> touched_;
  std::vector<std::uint32_t> head_;    // rank -> newest chunk
  std::vector<std::uint64_t> level0_;  // bit per rank: non-empty
  std::vector<std::uint64_t> level1_;  // bit per level0_ word: non-zero
  std::vector<Chunk> chunks_;
};

}  // namespace

void BpeModel::merge_by_rank_large(std::string_view piece, std::vector<TokenId>& out) const {
  // Parts as a linked list over their start positions: part i ends at nodes[i].next (0 once it
  // has been absorbed), the part before it starts at nodes[i].prev. Candidates wait in a bucket
  // queue by rank; a rank's candidates merge leftmost first, and a merge can only create
  // candidates of other ranks (their bytes are longer). One of lower rank than the rank being
  // merged sends the loop back to it, as tiktoken's global minimum would.
  struct Node {
    std::uint32_t next;
    std::uint32_t prev;  // nodes[0].prev is never read
    TokenId id;
  };
  const std::uint32_t n = static_cast<std::uint32_t>(piece.size());
  thread_local std::string copy;  // the piece with 8 bytes of slack (see load_key)
  copy.assign(piece);
  copy.append(8, '\0');
  const char* s = copy.data();
  thread_local std::vector<Node> nodes;
  thread_local std::vector<RankQueue::Candidate> batch;
  thread_local RankQueue queue;
  nodes.resize(n);
  queue.reset(id_space());
  RankMemo& memo = RankMemo::for_model(serial_);
  auto rank_of = [&](const char* p, std::uint32_t len) -> TokenId {
    if (len == 2)
      return pair2_[static_cast<unsigned char>(p[0]) << 8 | static_cast<unsigned char>(p[1])];
    if (len > 8) return long_rank_of(p, len);
    const std::uint64_t key = load_key(p, len);
    return memo.rank(key, len, [&] { return short_rank_of(key, len); });
  };
  for (std::uint32_t i = 0; i < n; ++i)
    nodes[i] = Node{i + 1, i - 1, byte_token_[static_cast<unsigned char>(s[i])]};
  queue.push_initial(n, [&](std::uint32_t i) { return rank_of(s + i, 2); });
  // Queues the candidate of the part at `left` and its successor; returns its rank.
  auto push = [&](std::uint32_t left) -> TokenId {
    const std::uint32_t right = nodes[left].next;
    if (right >= n) return kNoToken;
    const std::uint32_t end = nodes[right].next;
    const TokenId rank = rank_of(s + left, end - left);
    if (rank != kNoToken) queue.push(rank, left, end);
    return rank;
  };
  std::uint32_t rank = 0;
  while ((rank = queue.next(rank)) != RankQueue::kEnd) {
    queue.drain(rank, batch);
    TokenId lower = kNoToken;
    std::size_t k = 0;
    while (k < batch.size()) {
      // A rank's candidates lie far apart in a long piece: fetch their nodes ahead.
      if (k + 8 < batch.size()) __builtin_prefetch(&nodes[batch[k + 8].left]);
      const RankQueue::Candidate c = batch[k++];
      Node& left = nodes[c.left];
      const std::uint32_t right = left.next;
      if (right == 0 || right >= n || nodes[right].next != c.end)
        continue;  // absorbed, or a side changed
      left.id = rank;
      left.next = c.end;
      nodes[right].next = 0;
      if (c.end < n) nodes[c.end].prev = c.left;
      const TokenId before = c.left > 0 ? push(left.prev) : kNoToken;
      const TokenId after = push(c.left);
      lower = std::min(before, after);
      if (lower < rank) break;
    }
    if (lower < rank) {
      for (; k < batch.size(); ++k) queue.push(rank, batch[k].left, batch[k].end);
      rank = lower;
    } else {
      ++rank;
    }
  }
  for (std::uint32_t i = 0; i < n; i = nodes[i].next) out.push_back(nodes[i].id);
  if (n > (1u << 16)) {  // do not keep megabytes per thread after a long piece
    std::vector<Node>().swap(nodes);
    std::vector<RankQueue::Candidate>().swap(batch);
    std::string().swap(copy);
    queue.release();
  }
}

}  // namespace ferry::tokenizer
