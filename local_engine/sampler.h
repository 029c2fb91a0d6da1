// Picks the next token from logits: logit bias, repetition/frequency/presence penalties, an
// optional constraint (only the tokens its matcher allows), then greedy, or temperature with
// top-k, top-p and min-p and a seeded draw. One Sampler per sequence; not thread-safe (its RNG,
// history and matcher are the sequence's own).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "constrain/matcher.h"

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
  // Constrained decoding: this sequence's own matcher (never shared between sequences). The
  // sampler masks the logits to the tokens it allows and advances it with the token picked.
  // Null: unconstrained (no cost).
  std::shared_ptr<constrain::Matcher> constraint;
};

// What sample() returns when a constraint allows no token (or only banned ones).
inline constexpr int32_t kNoAllowedToken = -1;

// (logit, token id) pairs, as the sampler ranks them.
using Candidate = std::pair<float, int32_t>;
// Sorts candidates given in ascending id order by logit, largest first, ties by id (the order
// of a comparison sort on (logit desc, id asc); -0 and +0 tie). Long lists (a whole vocabulary)
// by a stable radix sort on the floats' bits, in linear time; `scratch` is its buffer.
void sort_by_logit(std::vector<Candidate>& candidates, std::vector<Candidate>& scratch);

class Sampler {
 public:
  explicit Sampler(SamplingParams params);

  // Remembers a token (prompt or generated) for the penalties.
  void accept(int32_t token);
  // Picks a token from logits (n_vocab floats, modified in place); kNoAllowedToken when a
  // constraint leaves nothing to pick.
  int32_t sample(std::span<float> logits);

  const SamplingParams& params() const { return params_; }

 private:
  double next_uniform();  // [0, 1), same sequence on every platform for a seed
  void apply_bias_and_penalties(std::span<float> logits);
  int32_t sample_allowed(std::span<float> logits);  // with params_.constraint
  int32_t draw();                                   // from candidates_ (not empty)

  SamplingParams params_;
  uint64_t rng_state_;
  std::vector<int32_t> history_;
  std::vector<Candidate> candidates_;  // scratch
  std::vector<Candidate> sorted_;      // scratch: sort_by_logit's buffer
  std::vector<double> probs_;          // scratch: the candidates' probabilities
  std::vector<uint64_t> mask_;         // scratch: the constraint's mask
};

}  // namespace ferry::engine
