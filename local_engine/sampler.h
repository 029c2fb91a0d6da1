// Picks the next token from logits: logit bias, repetition/frequency/presence penalties, an
// optional constraint (only the tokens its matcher allows), then greedy, or temperature with
// top-k, top-p and min-p and a seeded draw; a thinking budget that closes a think block by forcing
// its closing tokens. One Sampler per sequence; not thread-safe (its RNG, history, matcher and
// think state are the sequence's own).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "constrain/matcher.h"

namespace ferry::engine {

// A budget for a think block (Qwen3's `<think> ... </think>`). The block opens when the picked
// tokens end with `open` (or at once with `open_at_start`: the prompt opened it); inside it,
// tokens are picked as usual until the model picks `close` itself or `max_tokens` of them have
// been picked, and then the next picks are the rest of `close` (what the tail does not already
// hold of it), whatever the logits say. After the block sampling goes on as usual. Markers are
// matched as token sequences (the tokenizer's spelling of the marker text).
struct ThinkBudget {
  std::vector<int32_t> open;
  std::vector<int32_t> close;  // not empty when max_tokens >= 0
  int64_t max_tokens = -1;     // < 0: no budget
  bool open_at_start = false;
  bool active() const { return max_tokens >= 0 && !close.empty(); }
};

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
  ThinkBudget think;  // inactive by default (no cost)
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
  // Tokens picked inside the think block so far (its closing tokens not counted), and whether
  // the budget closed it.
  int64_t think_tokens() const { return think_count_; }
  bool think_capped() const { return think_capped_; }

 private:
  double next_uniform();  // [0, 1), same sequence on every platform for a seed
  void apply_bias_and_penalties(std::span<float> logits);
  int32_t sample_allowed(std::span<float> logits);  // with params_.constraint
  int32_t draw();                                   // from candidates_ (not empty)
  int32_t pick(std::span<float> logits);            // bias, penalties, constraint, draw
  int32_t forced_close();                           // the next closing token (budget spent)
  void start_closing();
  void note_think(int32_t token);  // a picked token moves the think state

  SamplingParams params_;
  uint64_t rng_state_;
  std::vector<int32_t> history_;
  std::vector<Candidate> candidates_;  // scratch
  std::vector<Candidate> sorted_;      // scratch: sort_by_logit's buffer
  std::vector<double> probs_;          // scratch: the candidates' probabilities
  std::vector<uint64_t> mask_;         // scratch: the constraint's mask
  // The think budget's state (params_.think).
  enum class Think { kBefore, kInside, kClosing, kAfter };
  Think think_ = Think::kBefore;
  int64_t think_count_ = 0;
  bool think_capped_ = false;
  size_t forced_ = 0;          // kClosing: the closing tokens given so far
  std::vector<int32_t> tail_;  // the last picks, as long as the longer marker
};

}  // namespace ferry::engine
