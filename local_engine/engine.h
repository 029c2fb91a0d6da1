// The forward pass: a batch of (sequence, position, token) entries through the model, with a
// per-sequence KV cache, returning logits for the entries that ask for them. One thread drives
// an Engine (the scheduler thread); the engine uses its own compute pool inside forward().
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "local_engine/kernels/packed.h"
#include "local_engine/kernels/thread_pool.h"
#include "local_engine/kv_cache.h"
#include "local_engine/model.h"

namespace ferry::engine {

using TokenId = int32_t;

struct EngineOptions {
  int n_threads = 0;  // 0: hardware concurrency
  int64_t n_ctx = 0;  // per-sequence context; 0: the model's training context (capped at 8192)
  // false: llama.cpp's numerics, which pick some kernels by batch shape (attention form for
  // batches of >= 64 entries, Q4_0/Q4_K/F16 multi-row products): a single sequence matches
  // llama.cpp bit for bit. true: every entry computed as if alone in its batch (short-batch
  // attention, lone-row products), so results never depend on the rest of the batch or on
  // how a prompt was split (continuous batching, prefix cache); prefill attention is slower.
  // With true, on AVX-512 VNNI, Q8_0 and Q5_0 matrices are also repacked (kernels/packed.h:
  // a copy of their bytes) and multiplied in the serial block order, which costs a few tokens
  // about what one costs (batched decode runs near the speed of prefill), and attention runs
  // in F32 with vector exps (kernels/attend_invariant.h). Invariant for a given ISA: the
  // numbers differ in the last bits between AVX-512 and other machines.
  bool batch_invariant = false;
  // The compute pool's threshold (kernels::ThreadPool::parallel_for): jobs of less work run on
  // the calling thread. Tests pass 0 to have every job, the per-row steps' too, shared out.
  int64_t serial_work = kernels::ThreadPool::kSerialWork;
};

// One token of one sequence. Entries of a sequence must come in order of position, starting
// at the sequence's current length; sequences may be mixed freely in one batch.
struct BatchEntry {
  SeqId seq = 0;
  int64_t pos = 0;
  TokenId token = 0;
  bool logits = false;  // return this entry's next-token logits
};

class Engine {
 public:
  Engine(std::unique_ptr<Model> model, const EngineOptions& options);

  const Model& model() const { return *model_; }
  const ModelConfig& config() const { return model_->config(); }
  int64_t n_ctx() const { return kv_.n_ctx(); }
  int n_threads() const { return pool_.n_threads(); }
  // Every entry computed as if alone in its batch (EngineOptions::batch_invariant).
  bool batch_invariant() const { return forms_ == kernels::BatchForms::kInvariant; }
  KvCache& kv() { return kv_; }
  const KvCache& kv() const { return kv_; }

  // Runs the batch; on success `logits` holds n_vocab floats per entry with logits == true, in
  // batch order. On error nothing changed in the cache.
  Status forward(std::span<const BatchEntry> batch, std::vector<float>& logits);
  // The same pass without the output projection: `hidden` holds the final-norm hidden state
  // (n_embd floats) of each entry with logits == true, in batch order (embeddings pool them).
  Status forward_hidden(std::span<const BatchEntry> batch, std::vector<float>& hidden);

 private:
  Status check_batch(std::span<const BatchEntry> batch) const;
  // Every layer and the final norm: tmp_ holds the normed rows of the n_out entries that want
  // logits (forward projects them, forward_hidden returns them).
  Status run_layers(std::span<const BatchEntry> batch, int64_t& n_out);
  // One layer's attention half (x_ += its output) and feed-forward half over the first `rows`
  // rows of x_.
  void attention_block(std::span<const BatchEntry> batch, int64_t layer);
  void ffn_block(int64_t layer, int64_t rows);
  // x_ += tmp_ over `rows` rows, tmp_ first RMS-normed by post_norm when it has one (gemma).
  void add_branch(const WeightView& post_norm, const char* post_name, int64_t layer, int64_t rows);
  void attention(std::span<const BatchEntry> batch, int64_t layer);
  // Attention for the given batch entries straight from the F16 cache (few queries; in a
  // batch-invariant engine on AVX-512, kernels/attend_invariant.h's F32 form).
  void attend_f16(std::span<const BatchEntry> batch, const std::vector<int64_t>& entries,
                  int64_t layer);
  // y_i = W_i x for several weights sharing the input: the activations are quantized once per
  // activation type and all rows are split over the pool in one pass (one sync, not one each).
  struct MatmulJob {
    const WeightView* w;
    float* y;
  };
  // A step done row by row (norms, RoPE, the KV store, SwiGLU, residual adds): fn(begin, end)
  // over rows [0, n) on the pool's threads, each row's arithmetic the same wherever it runs;
  // `row_elems` floats a row size the work (below the pool's threshold, on this thread).
  using RowFn = std::function<void(int64_t, int64_t)>;
  void per_row(int64_t n, int64_t row_elems, const RowFn& fn);
  // `prologue`, when given, makes x's rows first (per_row), in the same pass over the pool as
  // their quantization: a step's rows are made, quantized and multiplied with two hand-offs.
  void matmuls(std::initializer_list<MatmulJob> jobs, const float* x, int64_t n,
               const RowFn& prologue = {});
  // y = W x for one weight (matmuls when W is packed, else kernels::matmul).
  void project(const WeightView& w, const float* x, int64_t n, float* y,
               const RowFn& prologue = {});
  // The packed copy of a Q8_0 or Q5_0 weight (batch-invariant engines only), or nullptr.
  const kernels::PackedWeights* packed(const WeightView& w) const;
  // A Q4_K or Q6_K weight's panels (TypeKernels::pack_panels; batch-invariant engines on VNNI), or
  // nullptr.
  struct Panels {
    const uint8_t* data;  // into packed_arena_
    int64_t group_bytes;  // per 16 rows
    const kernels::TypeKernels* kernels;
  };
  const Panels* panels(const WeightView& w) const;

  std::unique_ptr<Model> model_;
  kernels::BatchForms forms_ = kernels::BatchForms::kLlamaCpp;
  kernels::ThreadPool pool_;
  KvCache kv_;
  // Scratch, reused between calls: (n, n_embd), (n, q_dim), (n, kv_dim), (n, n_ff).
  std::vector<float> x_, h_, q_, k_, v_, att_, tmp_, gate_, up_;
  std::vector<float> qkv_;      // phi3's fused projection (n, q_dim + 2 kv_dim)
  std::vector<float> kt_, vf_;  // one sequence's cached keys (transposed) and values, as F32
  // The batch's RoPE tables (n, rope_dim): global layers', sliding layers'.
  std::vector<float> rope_tab_, rope_tab_swa_;
  // Packed Q8_0 / Q5_0 weights by their data pointer (a tied output shares token_embd's).
  kernels::StreamedBytes packed_arena_;  // the packed copies' bytes (before packed_: outlives it)
  std::unordered_map<const void*, std::unique_ptr<kernels::PackedWeights>> packed_;
  std::unordered_map<const void*, Panels> panels_;
};

}  // namespace ferry::engine
