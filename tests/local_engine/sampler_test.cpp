// Sampler: greedy, logit bias, penalties, top-k/top-p/min-p, seed determinism and the think
// budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>

#include "local_engine/sampler.h"

namespace ferry::engine {
namespace {

std::vector<float> logits_of(std::initializer_list<float> values) {
  return values;
}

TEST(Sampler, RadixSortByLogitGivesTheComparisonSortsOrder) {
  // A whole vocabulary's worth of candidates (the radix path), with many ties, both zeros,
  // subnormals, infinities' neighbours and both signs: the same order as sorting by (logit
  // descending, id ascending), so every seeded draw stays what it was.
  const float values[] = {0.0f,    -0.0f,  1.0f,  -1.0f, 1e-40f,
                          -1e-40f, 3.5f,   -3.5f, 1e30f, -1e30f,
                          7.25f,   -7.25f, 0.5f,  -0.5f, std::numeric_limits<float>::max(),
                          -2e-3f};
  uint64_t z = 42;
  std::vector<Candidate> candidates;
  for (int32_t id = 0; id < 152000; ++id) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    const float v = (z >> 60) < 8
                        ? values[(z >> 33) % std::size(values)]
                        : static_cast<float>(static_cast<int64_t>(z >> 40) - (1 << 23)) / 4096.0f;
    candidates.emplace_back(v, id);
  }
  std::vector<Candidate> expected = candidates;
  std::sort(expected.begin(), expected.end(), [](const Candidate& a, const Candidate& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  std::vector<Candidate> scratch;
  sort_by_logit(candidates, scratch);
  ASSERT_EQ(candidates.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(candidates[i].second, expected[i].second) << "at " << i;
  }
  std::vector<Candidate> few = {{1.0f, 0}, {-0.0f, 1}, {2.0f, 2}, {0.0f, 3}, {2.0f, 4}};
  sort_by_logit(few, scratch);
  EXPECT_EQ(few, (std::vector<Candidate>{{2.0f, 2}, {2.0f, 4}, {1.0f, 0}, {-0.0f, 1}, {0.0f, 3}}));
}

TEST(Sampler, GreedyPicksTheLargestLogitFirstOnTies) {
  Sampler s(SamplingParams{});
  auto l = logits_of({0.1f, 2.0f, -1.0f, 2.0f});
  EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, LogitBiasCanBanAndForceTokens) {
  SamplingParams p;
  p.logit_bias[1] = -std::numeric_limits<float>::infinity();
  p.logit_bias[2] = 5.0f;
  Sampler s(p);
  auto l = logits_of({0.1f, 2.0f, -1.0f, 1.0f});
  EXPECT_EQ(s.sample(l), 2);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  s.accept(0);
  s.accept(2);
  auto l = logits_of({3.0f, 2.0f, -1.0f});
  EXPECT_EQ(s.sample(l), 1);  // 3 -> 1.5 falls below 2
  EXPECT_FLOAT_EQ(l[0], 1.5f);
  EXPECT_FLOAT_EQ(l[2], -2.0f);
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountOccurrences) {
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  Sampler s(p);
  s.accept(0);
  s.accept(0);
  s.accept(1);
  auto l = logits_of({1.0f, 1.0f, 0.0f});
  s.sample(l);
  EXPECT_FLOAT_EQ(l[0], 1.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(l[1], 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(l[2], 0.0f);
}

TEST(Sampler, PenaltyWindowLooksOnlyAtTheLastTokens) {
  SamplingParams p;
  p.presence_penalty = 1.0f;
  p.penalty_last_n = 1;
  Sampler s(p);
  s.accept(0);
  s.accept(1);
  auto l = logits_of({1.0f, 1.0f});
  s.sample(l);
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_FLOAT_EQ(l[1], 0.0f);
}

std::map<int32_t, int> histogram(SamplingParams p, const std::vector<float>& logits, int n) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) {
    p.seed = static_cast<uint64_t>(i);
    Sampler s(p);
    auto l = logits;
    ++counts[s.sample(l)];
  }
  return counts;
}

TEST(Sampler, TopKOneIsGreedyAndTopKLimitsTheChoices) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  const std::vector<float> l = {0.0f, 0.5f, 0.4f, 0.3f};
  EXPECT_EQ(histogram(p, l, 200), (std::map<int32_t, int>{{1, 200}}));
  p.top_k = 2;
  const auto counts = histogram(p, l, 400);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_GT(counts.at(1), 0);
  EXPECT_GT(counts.at(2), 0);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingTheMass) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.6f;
  // probabilities ~ 0.5, 0.3, 0.2 (log-space)
  const std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  const auto counts = histogram(p, l, 400);
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_GT(counts.at(0), counts.at(1));
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.5f;
  const std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  const auto counts = histogram(p, l, 400);
  EXPECT_EQ(counts.count(2), 0u);  // 0.2 < 0.5 * 0.5
  EXPECT_GT(counts.at(1), 0);
}

TEST(Sampler, TemperatureSamplingFollowsTheDistribution) {
  SamplingParams p;
  p.temperature = 1.0f;
  const std::vector<float> l = {std::log(0.7f), std::log(0.2f), std::log(0.1f)};
  const auto counts = histogram(p, l, 2000);
  EXPECT_NEAR(counts.at(0) / 2000.0, 0.7, 0.05);
  EXPECT_NEAR(counts.at(1) / 2000.0, 0.2, 0.05);
  EXPECT_NEAR(counts.at(2) / 2000.0, 0.1, 0.05);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.5f;
  std::vector<float> base(50);
  for (size_t i = 0; i < base.size(); ++i) base[i] = std::sin(static_cast<float>(i));
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      auto l = base;
      out.push_back(s.sample(l));
    }
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

// Greedy picks over logits that favour `favourite` (vocabulary of 10) for `n` steps.
std::vector<int32_t> picks(Sampler& s, const std::vector<int32_t>& favourites) {
  std::vector<int32_t> out;
  for (const int32_t f : favourites) {
    std::vector<float> l(10, 0.0f);
    l[static_cast<size_t>(f)] = 5.0f;
    out.push_back(s.sample(l));
  }
  return out;
}

ThinkBudget think_budget(int64_t max_tokens, bool open_at_start) {
  ThinkBudget t;
  t.open = {8, 9};
  t.close = {7, 8, 9};
  t.max_tokens = max_tokens;
  t.open_at_start = open_at_start;
  return t;
}

TEST(Sampler, ThinkBudgetForcesTheClosingTokensWhateverTheLogits) {
  SamplingParams p;
  p.think = think_budget(3, /*open_at_start=*/true);
  Sampler s(p);
  // Three thinking tokens, then the closing marker although the logits say 1, then sampling.
  EXPECT_EQ(picks(s, {1, 2, 3, 1, 1, 1, 4}), (std::vector<int32_t>{1, 2, 3, 7, 8, 9, 4}));
  EXPECT_EQ(s.think_tokens(), 3);
  EXPECT_TRUE(s.think_capped());
  // A budget of 0 closes at once.
  p.think = think_budget(0, true);
  Sampler none(p);
  EXPECT_EQ(picks(none, {1, 1, 1, 2}), (std::vector<int32_t>{7, 8, 9, 2}));
  EXPECT_EQ(none.think_tokens(), 0);
}

TEST(Sampler, ThinkBudgetOpensAtTheMarkerAndLeavesAModelThatClosesInTime) {
  SamplingParams p;
  p.think = think_budget(4, /*open_at_start=*/false);
  Sampler s(p);
  // Outside the block nothing is counted; the opening marker (8, 9) starts the count.
  EXPECT_EQ(picks(s, {1, 8, 9, 2, 3, 2, 3, 5}), (std::vector<int32_t>{1, 8, 9, 2, 3, 2, 3, 7}));
  // The model closes its own block inside the budget: nothing forced, the count stops.
  SamplingParams q;
  q.think = think_budget(5, true);
  Sampler own(q);
  EXPECT_EQ(picks(own, {2, 7, 8, 9, 1, 1, 1, 1}), (std::vector<int32_t>{2, 7, 8, 9, 1, 1, 1, 1}));
  EXPECT_EQ(own.think_tokens(), 4);
  EXPECT_FALSE(own.think_capped());
}

TEST(Sampler, ThinkBudgetCompletesAClosingMarkerTheModelBegan) {
  SamplingParams p;
  p.think = think_budget(3, /*open_at_start=*/true);
  Sampler s(p);
  // The budget runs out right after the model picked the marker's first token: only the rest
  // of the marker is forced.
  EXPECT_EQ(picks(s, {1, 2, 7, 1, 1, 4}), (std::vector<int32_t>{1, 2, 7, 8, 9, 4}));
  EXPECT_TRUE(s.think_capped());
}

TEST(Sampler, ThinkBudgetKeepsSeededDrawsOutsideTheBlock) {
  // Forced tokens draw nothing from the RNG: a seeded sampler's draws are those of the same
  // sampler without a budget, with the closing tokens put in between.
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 9;
  for (const int32_t marker : {7, 8, 9}) p.logit_bias[marker] = -INFINITY;  // never drawn
  std::vector<float> base(10);
  for (size_t i = 0; i < base.size(); ++i) base[i] = std::cos(static_cast<float>(i));
  Sampler plain(p);
  p.think = think_budget(2, true);
  Sampler capped(p);
  std::vector<int32_t> a, b;
  for (int i = 0; i < 12; ++i) {
    auto l = base;
    a.push_back(plain.sample(l));
  }
  for (int i = 0; i < 15; ++i) {
    auto l = base;
    b.push_back(capped.sample(l));
  }
  ASSERT_EQ(std::vector<int32_t>(b.begin() + 2, b.begin() + 5), (std::vector<int32_t>{7, 8, 9}));
  b.erase(b.begin() + 2, b.begin() + 5);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace ferry::engine
