// Picks the next token from logits: logit bias, repetition/frequency/presence penalties, then
// greedy, or temperature with top-k, top-p and min-p and a seeded draw. One Sampler per
// sequence; not thread-safe (its RNG and history are the sequence's own).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace ferry::engine {

struct SamplingParams {
  float temperature = 0.0f;         // <= 0: greedy (argmax)
  int32_t top_k = 0;                // <= 0: off
  float top_p = 1.0f;               // >= 1: off
  float min_p = 0.0f;               // <= 0: off
  float repetition_penalty = 1.0f;  // 1: off; divides positive logits, multiplies negative ones
  int32_t penalty_last_n = 64;      // tokens of history the penalties look at; -1: all
  float frequency_penalty = 0.0f;   // minus count * value
  float presence_penalty = 0.0f;    // minus value when present
  std::unordered_map<int32_t, float> logit_bias;  // added to the logit; -inf bans
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);

  // Remembers a token (prompt or generated) for the penalties.
  void accept(int32_t token);
  // Picks a token from logits (n_vocab floats, modified in place).
  int32_t sample(std::span<float> logits);

  const SamplingParams& params() const { return params_; }

 private:
  double next_uniform();  // [0, 1), same sequence on every platform for a seed

  SamplingParams params_;
  uint64_t rng_state_;
  std::vector<int32_t> history_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
};

}  // namespace ferry::engine
