#include "local_engine/sampler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

#include "local_engine/kernels/ops.h"

namespace ferry::engine {

void sort_by_logit(std::vector<Candidate>& candidates, std::vector<Candidate>& scratch) {
  constexpr size_t kRadixFrom = 2048;  // below: a comparison sort is as fast
  if (candidates.size() < kRadixFrom) {
    std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    return;
  }
  // A key whose ascending unsigned order is the floats' descending order (-0 counted as +0).
  const auto key = [](float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f + 0.0f);
    return (u & 0x80000000u) != 0 ? u : ~u & 0x7fffffffu;
  };
  constexpr int kBits = 11;  // three passes over 32 bits
  constexpr uint32_t kBuckets = 1u << kBits;
  scratch.resize(candidates.size());
  for (int shift = 0; shift < 32; shift += kBits) {
    std::array<uint32_t, kBuckets> at{};
    for (const Candidate& c : candidates) ++at[(key(c.first) >> shift) & (kBuckets - 1)];
    uint32_t sum = 0;
    for (uint32_t& n : at) sum += std::exchange(n, sum);
    for (const Candidate& c : candidates)
      scratch[at[(key(c.first) >> shift) & (kBuckets - 1)]++] = c;
    candidates.swap(scratch);
  }
}

Sampler::Sampler(SamplingParams params)
    : params_(std::move(params)), rng_state_(params_.seed ^ 0x9e3779b97f4a7c15ull) {
  if (params_.think.active() && params_.think.open_at_start) {
    think_ = Think::kInside;
    if (params_.think.max_tokens == 0) start_closing();
  }
}

void Sampler::accept(int32_t token) {
  history_.push_back(token);
}

double Sampler::next_uniform() {
  // splitmix64: tiny, fast, and fully specified here, so a seed means the same draws everywhere.
  uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

void Sampler::apply_bias_and_penalties(std::span<float> logits) {
  const auto n_vocab = static_cast<int32_t>(logits.size());
  for (const auto& [token, bias] : params_.logit_bias) {
    if (token >= 0 && token < n_vocab) logits[static_cast<size_t>(token)] += bias;
  }

  const bool penalize = params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                        params_.presence_penalty != 0.0f;
  if (penalize && !history_.empty()) {
    size_t first = 0;
    if (params_.penalty_last_n >= 0 &&
        history_.size() > static_cast<size_t>(params_.penalty_last_n)) {
      first = history_.size() - static_cast<size_t>(params_.penalty_last_n);
    }
    std::unordered_map<int32_t, int> counts;
    for (size_t i = first; i < history_.size(); ++i) ++counts[history_[i]];
    for (const auto& [token, count] : counts) {
      if (token < 0 || token >= n_vocab) continue;
      float& l = logits[static_cast<size_t>(token)];
      if (params_.repetition_penalty != 1.0f) {
        l = l > 0.0f ? l / params_.repetition_penalty : l * params_.repetition_penalty;
      }
      l -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
    }
  }
}

int32_t Sampler::sample(std::span<float> logits) {
  if (think_ == Think::kClosing) return forced_close();
  const int32_t token = pick(logits);
  if (token != kNoAllowedToken && params_.think.active()) note_think(token);
  return token;
}

// ---- the think budget ---------------------------------------------------------------------------

namespace {

bool ends_with(const std::vector<int32_t>& tail, std::span<const int32_t> marker) {
  return !marker.empty() && tail.size() >= marker.size() &&
         std::equal(marker.begin(), marker.end(),
                    tail.end() - static_cast<ptrdiff_t>(marker.size()));
}

}  // namespace

void Sampler::note_think(int32_t token) {
  const ThinkBudget& t = params_.think;
  if (think_ == Think::kAfter) return;
  tail_.push_back(token);
  const size_t keep = std::max(t.open.size(), t.close.size());
  if (tail_.size() > keep) tail_.erase(tail_.begin(), tail_.end() - static_cast<ptrdiff_t>(keep));
  if (think_ == Think::kBefore) {
    if (!ends_with(tail_, t.open)) return;
    think_ = Think::kInside;
    tail_.clear();
    if (t.max_tokens == 0) start_closing();
    return;
  }
  ++think_count_;
  if (ends_with(tail_, t.close)) {
    think_ = Think::kAfter;
  } else if (think_count_ >= t.max_tokens) {
    start_closing();
  }
}

// The budget is spent: the closing tokens follow, less the part of them the picks just made.
void Sampler::start_closing() {
  const std::vector<int32_t>& close = params_.think.close;
  think_ = Think::kClosing;
  think_capped_ = true;
  forced_ = 0;
  for (size_t k = std::min(close.size() - 1, tail_.size()); k > 0; --k) {
    if (ends_with(tail_, std::span<const int32_t>(close.data(), k))) {
      forced_ = k;
      break;
    }
  }
}

int32_t Sampler::forced_close() {
  const std::vector<int32_t>& close = params_.think.close;
  const int32_t token = close[forced_++];
  if (params_.constraint && !params_.constraint->accept_token(token)) return kNoAllowedToken;
  if (forced_ == close.size()) think_ = Think::kAfter;
  return token;
}

// ---- picking ------------------------------------------------------------------------------------

int32_t Sampler::pick(std::span<float> logits) {
  apply_bias_and_penalties(logits);
  if (params_.constraint) return sample_allowed(logits);
  if (params_.temperature <= 0.0f) {
    // Greedy: the first of the largest logits (std::max_element's, vectorized).
    if (logits.empty()) return 0;
    return static_cast<int32_t>(
        kernels::argmax_row(static_cast<int64_t>(logits.size()), logits.data()));
  }

  const auto n_vocab = static_cast<int32_t>(logits.size());
  candidates_.clear();
  for (int32_t i = 0; i < n_vocab; ++i) {
    const float l = logits[static_cast<size_t>(i)];
    if (l != -std::numeric_limits<float>::infinity()) candidates_.emplace_back(l, i);
  }
  if (candidates_.empty()) return 0;
  return draw();
}

// Only the tokens the matcher allows are candidates (walked by the set bits of its mask, so a
// narrow mask costs little); the token picked advances the matcher.
int32_t Sampler::sample_allowed(std::span<float> logits) {
  constrain::Matcher& matcher = *params_.constraint;
  matcher.fill_mask(mask_);
  candidates_.clear();
  const size_t n = logits.size();
  for (size_t w = 0; w < mask_.size(); ++w) {
    for (uint64_t bits = mask_[w]; bits != 0; bits &= bits - 1) {
      const size_t i = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
      if (i >= n) break;
      const float l = logits[i];
      if (l != -std::numeric_limits<float>::infinity())
        candidates_.emplace_back(l, static_cast<int32_t>(i));
    }
  }
  if (candidates_.empty()) return kNoAllowedToken;
  int32_t token = candidates_.front().second;
  if (params_.temperature <= 0.0f) {
    float best = candidates_.front().first;
    for (const auto& [l, i] : candidates_) {
      if (l > best) {
        best = l;
        token = i;
      }
    }
  } else {
    token = draw();
  }
  if (!matcher.accept_token(static_cast<constrain::TokenId>(token))) return kNoAllowedToken;
  return token;
}

int32_t Sampler::draw() {
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = static_cast<size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(keep),
                      candidates_.end(), by_logit);
    candidates_.resize(keep);
  } else {
    sort_by_logit(candidates_, sorted_);
  }

  // Softmax with temperature, as probabilities in place of logits.
  const float max_logit = candidates_.front().first;
  double sum = 0.0;
  std::vector<double>& probs = probs_;
  probs.resize(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i) {
    probs[i] = std::exp(static_cast<double>(candidates_[i].first - max_logit) /
                        static_cast<double>(params_.temperature));
    sum += probs[i];
  }
  for (double& p : probs) p /= sum;

  // top-p: the smallest prefix whose mass reaches p (at least one token).
  size_t n = probs.size();
  if (params_.top_p < 1.0f) {
    double mass = 0.0;
    for (size_t i = 0; i < probs.size(); ++i) {
      mass += probs[i];
      if (mass >= static_cast<double>(params_.top_p)) {
        n = i + 1;
        break;
      }
    }
  }
  // min-p: drop tokens below min_p times the most likely one.
  if (params_.min_p > 0.0f) {
    const double floor = probs[0] * static_cast<double>(params_.min_p);
    size_t kept = 1;
    while (kept < n && probs[kept] >= floor) ++kept;
    n = kept;
  }

  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += probs[i];
  double r = next_uniform() * total;
  for (size_t i = 0; i < n; ++i) {
    r -= probs[i];
    if (r < 0.0) return candidates_[i].second;
  }
  return candidates_[n - 1].second;
}

}  // namespace ferry::engine
