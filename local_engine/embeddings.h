// Embeddings from a decoder model: the pooling a GGUF names, pooling and L2 normalization of
// final-norm hidden states, and EmbeddingRunner, which computes the embeddings of queued
// requests in batched forward passes (no sampling, no KV kept after). The pooling functions are
// pure; an EmbeddingRunner belongs to the thread that owns its Engine (the scheduler thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "local_engine/engine.h"

namespace ferry::engine {

enum class Pooling { kMean, kCls, kLast };
std::string_view pooling_name(Pooling pooling);

// The pooling of `config.pooling_type` (1 mean, 2 cls, 3 last); a decoder model without the
// key pools its last token (the state that has seen the whole input). Errors (kInvalidRequest):
// 0 (none: per-token vectors) and 4 (rank: a reranker) and unknown values, by name.
Result<Pooling> pooling_for(const ModelConfig& config);

// Sums the hidden states a pooling keeps, over one or more forward passes of one input.
class PoolAccumulator {
 public:
  PoolAccumulator(Pooling pooling, int64_t dim)
      : pooling_(pooling), sum_(static_cast<size_t>(dim)) {}
  // Whether position `pos` of an input of `n` tokens is one the pooling reads.
  bool wants(int64_t pos, int64_t n) const;
  void add(std::span<const float> hidden);
  // The pooled vector (mean: the sum over the count), in float.
  std::vector<float> result() const;

 private:
  Pooling pooling_;
  std::vector<double> sum_;
  int64_t count_ = 0;
};

// v / ||v||_2 in place (the norm in double); a zero vector stays zero.
void l2_normalize(std::span<float> v);

struct EmbeddingResult {
  std::vector<std::vector<float>> vectors;  // one per input, L2-normalized
  int64_t tokens = 0;                       // all inputs' tokens
  int64_t queued_us = 0;                    // submit -> first forward
  int64_t total_us = 0;
};

struct EmbeddingRequest {
  std::vector<std::vector<TokenId>> inputs;  // each 1..n_ctx tokens of the vocabulary
  Pooling pooling = Pooling::kLast;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Exactly once, on the scheduler thread: the vectors, or the error (cancelled, deadline, ...).
  std::function<void(Result<EmbeddingResult>)> on_done;
};

// Runs embedding requests: each step() is one Engine::forward_hidden over up to `batch_tokens`
// input tokens, taken from the requests in order (several inputs, and several requests, share a
// pass; an input longer than the room left continues in the next pass with its KV kept). Each
// input is a sequence of its own whose KV (its whole length, allocated when it starts) is freed
// as soon as it is pooled. An input starts only when its KV fits the room the caller gives (the
// scheduler's budget less what chat sequences and cached prefixes hold); the next one waits.
class EmbeddingRunner {
 public:
  explicit EmbeddingRunner(int64_t batch_tokens) : batch_tokens_(batch_tokens) {}

  void add(uint64_t id, EmbeddingRequest request, std::chrono::steady_clock::time_point submitted);
  bool busy() const { return !jobs_.empty(); }
  // KV bytes the running inputs hold.
  int64_t kv_bytes() const { return kv_bytes_; }
  // KV bytes the next input to start needs (0: none waiting to start).
  int64_t next_kv_bytes(const Engine& engine) const;
  // True when the last step() left an input unstarted for want of KV room.
  bool waiting_for_kv() const { return waiting_for_kv_; }
  // All KV allocated (every sequence of the engine) at the last step's forward pass.
  int64_t last_pass_kv_bytes() const { return last_pass_kv_bytes_; }
  // Ends request `id` (queued or running) with `error`; unknown ids are ignored.
  void fail(Engine& engine, uint64_t id, const Error& error);
  // Ends every request past its deadline.
  void expire(Engine& engine, std::chrono::steady_clock::time_point now);
  void fail_all(Engine& engine, const Error& error);
  // One forward pass; `next_seq` hands out sequence ids (never reused); new inputs start while
  // their KV fits `kv_room` bytes beside what the running ones hold. Returns the tokens it
  // computed (0: nothing to do, or nothing fits).
  int64_t step(Engine& engine, SeqId& next_seq, int64_t kv_room);

 private:
  struct Input {
    uint64_t job = 0;  // the request's id
    size_t index = 0;  // in the request's inputs
    SeqId seq = -1;
    int64_t pos = 0;       // next position to compute
    int64_t kv_bytes = 0;  // its KV storage
    PoolAccumulator acc;
  };
  struct Job {
    uint64_t id = 0;
    EmbeddingRequest req;
    std::chrono::steady_clock::time_point submitted;
    std::optional<std::chrono::steady_clock::time_point> started;
    size_t next_input = 0;  // inputs [0, next_input) have been started
    size_t done_inputs = 0;
    EmbeddingResult result;
  };
  Job* find(uint64_t id);
  // Frees the request's running inputs and calls its on_done (the vectors, or `error`).
  void end(Engine& engine, uint64_t id, std::optional<Error> error);
  // Adds up to `room` tokens of running_[i] to the batch; returns how many.
  int64_t add_tokens(size_t i, int64_t room);
  // Starts the next inputs of the queued requests while there is room in the pass and their KV
  // fits `kv_room`; returns the room left in the pass.
  int64_t start_inputs(Engine& engine, SeqId& next_seq, int64_t room, int64_t kv_room);
  // Frees a running input's KV and forgets it.
  std::vector<Input>::iterator drop(Engine& engine, std::vector<Input>::iterator it);
  // Pools the inputs the pass completed and ends the requests whose inputs are all pooled.
  void finish_inputs(Engine& engine);

  int64_t batch_tokens_;
  int64_t kv_bytes_ = 0;
  int64_t last_pass_kv_bytes_ = 0;
  bool waiting_for_kv_ = false;
  std::deque<Job> jobs_;
  std::vector<Input> running_;  // inputs with KV, in order
  std::vector<BatchEntry> batch_;
  std::vector<size_t> rows_;  // the running_ index of each hidden row
  std::vector<float> hidden_;
};

}  // namespace ferry::engine
