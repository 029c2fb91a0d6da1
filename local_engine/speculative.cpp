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

void PromptLookup::draft(int64_t limit, std::vector<TokenId>& out) {
  out.clear();
  if (limit <= 0) return;
  if (skip_ > 0) {
    --skip_;
    return;
  }
  lookup_draft(tokens_, min_match_, std::min(limit, cap_), out);
}

void PromptLookup::feedback(int64_t drafted, int64_t accepted) {
  if (drafted <= 0) return;
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

}  // namespace ferry::engine
