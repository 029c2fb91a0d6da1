#include "local_engine/speculative.h"

#include <algorithm>
#include <cmath>

namespace ferry::engine {
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
      tokens_(prompt.begin(), prompt.end()) {}

int64_t PromptLookup::draft(int64_t limit, std::vector<TokenId>& out) const {
  return lookup_draft(tokens_, min_match_, std::min(limit, max_draft_), out);
}

size_t DraftOdds::cell(int64_t match, bool sampled) {
  static_assert(kMaxLookupMatch == 8, "the match classes below assume suffixes of 1 to 8");
  const int64_t m = std::clamp<int64_t>(match, 1, kMaxLookupMatch);
  const int64_t c = m <= 4 ? m - 1 : (m < kMaxLookupMatch ? 4 : 5);
  return static_cast<size_t>(c + (sampled ? kMatchClasses : 0));
}

double DraftOdds::acceptance(int64_t match, bool sampled) const {
  const Cell& c = cells_[cell(match, sampled)];
  return (c.kept + 1.0) / (c.drafted + 2.0);  // one kept of two before anything is seen
}

void DraftOdds::observe(int64_t match, bool sampled, int64_t drafted, int64_t accepted) {
  if (drafted <= 0) return;
  // A kept token counts for the position after it only when it was kept: the chance of the
  // i-th given the one before, as the cost model uses it. About the last 20 drafts count.
  constexpr double kForget = 0.95;
  Cell& c = cells_[cell(match, sampled)];
  c.drafted = kForget * c.drafted + static_cast<double>(std::min(drafted, accepted + 1));
  c.kept = kForget * c.kept + static_cast<double>(accepted);
}

bool DraftOdds::explore(int64_t match, bool sampled, int64_t every) {
  return ++cells_[cell(match, sampled)].declined % std::max<int64_t>(1, every) == 0;
}

void DraftCost::observe(int64_t positions, double seconds) {
  constexpr double kForget = 0.98;  // about the last 50 steps
  const auto x = static_cast<double>(positions);
  n_ = kForget * n_ + 1;
  sx_ = kForget * sx_ + x;
  sy_ = kForget * sy_ + seconds;
  sxx_ = kForget * sxx_ + x * x;
  sxy_ = kForget * sxy_ + x * seconds;
  if (n_ < 8) return;
  const double mx = sx_ / n_, my = sy_ / n_;
  const double var = sxx_ / n_ - mx * mx;
  if (var <= 0.25) return;  // steps of one size lately: the last line stands
  b_ = std::max(0.0, (sxy_ / n_ - mx * my) / var);
  a_ = std::max(0.0, my - b_ * mx);
  known_ = true;
}

int64_t DraftCost::explore_interval(int64_t sequences) const {
  constexpr int64_t kLeast = 16;
  if (!known_ || b_ <= 0) return kLeast;
  // A drafted position's share of a one-token step, over the 1 % it may cost.
  const double share = b_ / (a_ / static_cast<double>(std::max<int64_t>(1, sequences)) + b_);
  return std::max<int64_t>(kLeast, static_cast<int64_t>(std::ceil(share / 0.01)));
}

int64_t DraftCost::best_draft(int64_t limit, double alpha, int64_t sequences) const {
  if (limit <= 0 || !known_) return std::max<int64_t>(0, limit);
  if (b_ <= 0) return limit;
  const double fixed = a_ / static_cast<double>(std::max<int64_t>(1, sequences));
  int64_t best = 0;
  const double undrafted = 1.0 / (fixed + b_);
  double best_rate = undrafted * (1 + kMinDraftGain), expected = 0, term = 1;
  for (int64_t k = 1; k <= limit; ++k) {
    term *= alpha;
    expected += term;
    const double rate = (1 + expected) / (fixed + b_ * static_cast<double>(1 + k));
    if (rate > best_rate) best_rate = rate, best = k;
  }
  return best;
}

}  // namespace ferry::engine
