// RecentStats: the p90 time to first token and the error rate over the last outcomes, checked
// against a plain recomputation over a copy of the window.
#include "gateway/targets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace ferry::gateway {
namespace {

constexpr size_t kWindow = 128;  // RecentStats' window

std::optional<int64_t> reference_p90(const std::deque<int64_t>& ttfts) {
  if (ttfts.empty()) return std::nullopt;
  std::vector<int64_t> v(ttfts.begin(), ttfts.end());
  size_t k = (v.size() * 9 + 9) / 10 - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

TEST(RecentStats, EmptyHasNoFigures) {
  RecentStats stats;
  EXPECT_FALSE(stats.p90_ttft_ms());
  EXPECT_FALSE(stats.error_rate());
  stats.add(false, -1);  // a failure has no time to first token
  EXPECT_FALSE(stats.p90_ttft_ms());
  EXPECT_DOUBLE_EQ(*stats.error_rate(), 1.0);
}

TEST(RecentStats, P90AndErrorRateFollowTheLastOutcomesAsTheWindowSlides) {
  RecentStats stats;
  std::deque<int64_t> ttfts;  // the last kWindow successes' times
  std::deque<bool> failed;    // the last kWindow outcomes
  std::mt19937 rng(17);
  for (int i = 0; i < 1000; ++i) {
    bool ok = rng() % 5 != 0;
    // Few distinct values (repeats) in one stretch, a wide spread in another.
    int64_t ttft = i < 400 ? static_cast<int64_t>(rng() % 7) : static_cast<int64_t>(rng() % 5000);
    if (ok && rng() % 10 == 0) ttft = -1;  // a success with no first-token time
    stats.add(ok, ttft);
    failed.push_back(!ok);
    if (failed.size() > kWindow) failed.pop_front();
    if (ok && ttft >= 0) {
      ttfts.push_back(ttft);
      if (ttfts.size() > kWindow) ttfts.pop_front();
    }
    ASSERT_EQ(stats.p90_ttft_ms(), reference_p90(ttfts)) << "after outcome " << i;
    double rate = static_cast<double>(std::count(failed.begin(), failed.end(), true)) /
                  static_cast<double>(failed.size());
    ASSERT_DOUBLE_EQ(*stats.error_rate(), rate) << "after outcome " << i;
  }
}

}  // namespace
}  // namespace ferry::gateway
