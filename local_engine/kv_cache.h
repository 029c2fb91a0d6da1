// Per-sequence key/value cache in F16: for each sequence, each layer, each position, the
// n_head_kv * head_dim keys and values. Owned and mutated by one thread (the engine's owner).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/error.h"

namespace ferry::engine {

using SeqId = int32_t;

class KvCache {
 public:
  KvCache(int64_t n_layer, int64_t kv_dim, int64_t n_ctx)
      : n_layer_(n_layer), kv_dim_(kv_dim), n_ctx_(n_ctx) {}

  int64_t n_ctx() const { return n_ctx_; }
  int64_t kv_dim() const { return kv_dim_; }

  // Starts an empty sequence; an error if the id is in use.
  Status seq_add(SeqId id);
  // Forgets a sequence and frees its memory.
  void seq_remove(SeqId id);
  bool seq_exists(SeqId id) const { return seqs_.count(id) != 0; }
  // Positions [0, len) are filled; the next token goes at position len.
  int64_t seq_len(SeqId id) const;
  // Keeps positions [0, len) only (len <= seq_len), e.g. to reuse a shared prompt prefix.
  void seq_truncate(SeqId id, int64_t len);
  // Copies positions [0, len) of `src` into a new sequence `dst` (prefix sharing).
  Status seq_copy(SeqId src, SeqId dst, int64_t len);

  // Makes room for positions [0, len) and marks them filled; the caller writes them.
  void seq_extend(SeqId id, int64_t len);
  uint16_t* k(SeqId id, int64_t layer, int64_t pos);
  uint16_t* v(SeqId id, int64_t layer, int64_t pos);
  const uint16_t* k(SeqId id, int64_t layer, int64_t pos) const;
  const uint16_t* v(SeqId id, int64_t layer, int64_t pos) const;

  // Bytes held by all sequences.
  size_t memory_bytes() const;
  // Bytes a new sequence holds after seq_extend(id, len): capacity min(n_ctx, max(len, 64)).
  int64_t allocation_bytes(int64_t len) const;

 private:
  struct Seq {
    int64_t len = 0;
    int64_t capacity = 0;
    std::vector<std::vector<uint16_t>> k;  // per layer: (capacity, kv_dim)
    std::vector<std::vector<uint16_t>> v;
  };
  Seq& seq(SeqId id);
  const Seq& seq(SeqId id) const;

  int64_t n_layer_;
  int64_t kv_dim_;
  int64_t n_ctx_;
  std::unordered_map<SeqId, Seq> seqs_;
};

}  // namespace ferry::engine
