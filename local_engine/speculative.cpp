#include "local_engine/speculative.h"

#include <algorithm>

namespace ferry::engine {
namespace {

constexpr int64_t kMaxSkip = 16;  // steps without a draft after misses, at most

}  // namespace

int64_t lookup_draft(std::span<const TokenId> tokens, int64_t min_match, int64_t limit,
                     std::vector<TokenId>& out) {
  out.clear();
  const auto n = static_cast<int64_t>(tokens.size());
  if (limit <= 0 || n < 2) return 0;
  min_match = std::max<int64_t>(1, min_match);
  const TokenId last = tokens[static_cast<size_t>(n - 1)];
  int64_t best_len = 0;
  int64_t best_end = -1;  // the earlier occurrence's last token
  // Most recent first, so the first occurrence of the longest length wins ties.
  for (int64_t j = n - 2; j >= 0; --j) {
    if (tokens[static_cast<size_t>(j)] != last) continue;
    int64_t m = 1;
    while (m < kMaxLookupMatch && j - m >= 0 &&
           tokens[static_cast<size_t>(j - m)] == tokens[static_cast<size_t>(n - 1 - m)]) {
      ++m;
    }
    if (m > best_len) {
      best_len = m;
      best_end = j;
      if (m == kMaxLookupMatch) break;
    }
  }
  if (best_len < min_match) return 0;
  for (int64_t i = 0; i < limit; ++i) {
    // What followed the occurrence; past the end of the tokens, what this draft predicts there
    // (the occurrence overlaps the suffix: a repeating pattern goes on repeating).
    const int64_t src = best_end + 1 + i;
    out.push_back(src < n ? tokens[static_cast<size_t>(src)] : out[static_cast<size_t>(src - n)]);
  }
  return best_len;
}

PromptLookup::PromptLookup(const SpeculativeOptions& options, std::span<const TokenId> prompt)
    : max_draft_(std::max<int64_t>(1, options.max_draft)),
      min_match_(std::max<int64_t>(1, options.min_match)),
      cap_(max_draft_),
      tokens_(prompt.begin(), prompt.end()) {}

void PromptLookup::draft(int64_t limit, std::vector<TokenId>& out, bool back_off) {
  out.clear();
  if (limit <= 0) return;
  if (!back_off) {
    skip_ = 0;
  } else if (skip_ > 0) {
    --skip_;
    return;
  }
  lookup_draft(tokens_, min_match_, std::min(limit, cap_), out);
}

void PromptLookup::feedback(int64_t drafted, int64_t accepted) {
  if (drafted <= 0) return;
  // A kept token counts for the position after it only when it was kept: the chance of the
  // i-th given the one before, as the cost model uses it.
  constexpr double kForget = 0.8;
  drafted_ = kForget * drafted_ + static_cast<double>(std::min(drafted, accepted + 1));
  kept_ = kForget * kept_ + static_cast<double>(accepted);
  if (accepted <= 0) {
    ++misses_;
    skip_ = std::min(kMaxSkip, int64_t{1} << std::min<int64_t>(misses_ - 1, 4));
    cap_ = std::max<int64_t>(1, cap_ / 2);
    return;
  }
  misses_ = 0;
  cap_ = accepted >= drafted ? std::min(max_draft_, 2 * cap_)
                             : std::clamp<int64_t>(accepted + 1, 1, max_draft_);
}

void DraftCost::observe(int64_t positions, double seconds) {
  constexpr double kForget = 0.98;  // about the last 50 steps
  const auto x = static_cast<double>(positions);
  n_ = kForget * n_ + 1;
  sx_ = kForget * sx_ + x;
  sy_ = kForget * sy_ + seconds;
  sxx_ = kForget * sxx_ + x * x;
  sxy_ = kForget * sxy_ + x * seconds;
}

bool DraftCost::known() const {
  if (n_ < 8) return false;
  const double mean = sx_ / n_;
  return sxx_ / n_ - mean * mean > 0.25;  // steps of different sizes seen
}

void DraftCost::line(double& a, double& b) const {
  const double mx = sx_ / n_, my = sy_ / n_;
  b = std::max(0.0, (sxy_ / n_ - mx * my) / (sxx_ / n_ - mx * mx));
  a = std::max(0.0, my - b * mx);
}

bool DraftCost::drafts_nearly_free() const {
  if (!known()) return false;
  double a = 0, b = 0;
  line(a, b);
  return a + b > 0 && b <= 0.25 * (a + b);
}

int64_t DraftCost::best_draft(int64_t limit, double alpha, int64_t sequences) const {
  if (limit <= 0 || !known()) return std::max<int64_t>(0, limit);
  double a = 0, b = 0;
  line(a, b);
  if (b <= 0) return limit;
  const double fixed = a / static_cast<double>(std::max<int64_t>(1, sequences));
  int64_t best = 0;
  const double undrafted = 1.0 / (fixed + b);
  double best_rate = undrafted * (1 + kMinDraftGain), expected = 0, term = 1;
  for (int64_t k = 1; k <= limit; ++k) {
    term *= alpha;
    expected += term;
    const double rate = (1 + expected) / (fixed + b * static_cast<double>(1 + k));
    if (rate > best_rate) best_rate = rate, best = k;
  }
  return best;
}

}  // namespace ferry::engine
