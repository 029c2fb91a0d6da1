#include "local_engine/kv_cache.h"

#include <algorithm>
#include <cassert>
#include <string>

namespace ferry::engine {

namespace {
constexpr int64_t kMinCapacity = 64;  // positions of a sequence's first allocation
}  // namespace

Status KvCache::seq_add(SeqId id) {
  if (seqs_.count(id) != 0) {
    return Error::make(ErrorCode::kInvalidRequest, "sequence " + std::to_string(id) + " exists");
  }
  Seq& s = seqs_[id];
  s.k.resize(static_cast<size_t>(n_layer_));
  s.v.resize(static_cast<size_t>(n_layer_));
  return {};
}

void KvCache::seq_remove(SeqId id) {
  seqs_.erase(id);
}

int64_t KvCache::seq_len(SeqId id) const {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? 0 : it->second.len;
}

void KvCache::seq_truncate(SeqId id, int64_t len) {
  Seq& s = seq(id);
  s.len = std::clamp<int64_t>(len, 0, s.len);
}

Status KvCache::seq_copy(SeqId src, SeqId dst, int64_t len) {
  if (!seq_exists(src)) {
    return Error::make(ErrorCode::kInvalidRequest, "no sequence " + std::to_string(src));
  }
  if (auto s = seq_add(dst); !s) return s;
  len = std::clamp<int64_t>(len, 0, seq(src).len);
  seq_extend(dst, len);
  const Seq& from = seq(src);
  Seq& to = seq(dst);
  const auto n = static_cast<size_t>(len * kv_dim_);
  for (size_t layer = 0; layer < static_cast<size_t>(n_layer_); ++layer) {
    std::copy_n(from.k[layer].begin(), n, to.k[layer].begin());
    std::copy_n(from.v[layer].begin(), n, to.v[layer].begin());
  }
  return {};
}

void KvCache::seq_extend(SeqId id, int64_t len) {
  Seq& s = seq(id);
  assert(len <= n_ctx_);  // the engine checks positions against n_ctx before extending
  if (len > s.capacity) {
    const int64_t capacity =
        std::min(n_ctx_, std::max<int64_t>({len, s.capacity * 2, kMinCapacity}));
    for (size_t layer = 0; layer < static_cast<size_t>(n_layer_); ++layer) {
      s.k[layer].resize(static_cast<size_t>(capacity * kv_dim_));
      s.v[layer].resize(static_cast<size_t>(capacity * kv_dim_));
    }
    s.capacity = capacity;
  }
  s.len = std::max(s.len, len);
}

uint16_t* KvCache::k(SeqId id, int64_t layer, int64_t pos) {
  return seq(id).k[static_cast<size_t>(layer)].data() + pos * kv_dim_;
}
uint16_t* KvCache::v(SeqId id, int64_t layer, int64_t pos) {
  return seq(id).v[static_cast<size_t>(layer)].data() + pos * kv_dim_;
}
const uint16_t* KvCache::k(SeqId id, int64_t layer, int64_t pos) const {
  return seq(id).k[static_cast<size_t>(layer)].data() + pos * kv_dim_;
}
const uint16_t* KvCache::v(SeqId id, int64_t layer, int64_t pos) const {
  return seq(id).v[static_cast<size_t>(layer)].data() + pos * kv_dim_;
}

size_t KvCache::memory_bytes() const {
  size_t total = 0;
  for (const auto& [id, s] : seqs_) {
    total += 2 * static_cast<size_t>(n_layer_ * s.capacity * kv_dim_) * sizeof(uint16_t);
  }
  return total;
}

int64_t KvCache::allocation_bytes(int64_t len) const {
  const int64_t capacity = std::min(n_ctx_, std::max<int64_t>(len, kMinCapacity));
  return 2 * n_layer_ * capacity * kv_dim_ * static_cast<int64_t>(sizeof(uint16_t));
}

KvCache::Seq& KvCache::seq(SeqId id) {
  auto it = seqs_.find(id);
  assert(it != seqs_.end());  // callers check seq_exists first
  return it->second;
}
const KvCache::Seq& KvCache::seq(SeqId id) const {
  auto it = seqs_.find(id);
  assert(it != seqs_.end());  // callers check seq_exists first
  return it->second;
}

}  // namespace ferry::engine
