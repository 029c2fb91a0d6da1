// Prompt-lookup drafting (local_engine/speculative.h): the longest recent suffix found earlier
// proposes what followed it, repeating patterns continue, short matches propose nothing; drafts
// are judged by the odds of their class and the measured cost of a drafted position; and the
// acceptance rule the scheduler applies to a drafted token (one draw from the sampler compared
// with it) keeps the sampler's distribution, checked by chi-square.
#include "local_engine/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "local_engine/sampler.h"

namespace ferry::engine {
namespace {

std::vector<TokenId> draft(const std::vector<TokenId>& tokens, int64_t min_match, int64_t limit,
                           int64_t* matched = nullptr) {
  std::vector<TokenId> out = {99};  // emptied first
  const int64_t m = lookup_draft(tokens, min_match, limit, out);
  if (matched != nullptr) *matched = m;
  return out;
}

TEST(PromptLookup, DraftsWhatFollowedTheLongestRecentSuffix) {
  int64_t m = 0;
  // "2 3 4" ends at 3 and at 8 (equally long): the most recent one proposes 7 8 2 3.
  EXPECT_EQ(draft({1, 2, 3, 4, 5, 9, 2, 3, 4, 7, 8, 2, 3, 4}, 2, 4, &m),
            (std::vector<TokenId>{7, 8, 2, 3}));
  EXPECT_EQ(m, 3);
  // "5 2 3 4" occurs only at 0-3: longer beats more recent.
  EXPECT_EQ(draft({5, 2, 3, 4, 1, 6, 2, 3, 4, 7, 5, 2, 3, 4}, 2, 3, &m),
            (std::vector<TokenId>{1, 6, 2}));
  EXPECT_EQ(m, 4);
  // Fewer tokens follow the occurrence than asked for: the draft is what there is.
  EXPECT_EQ(draft({4, 5, 6, 7, 4, 5}, 2, 8), (std::vector<TokenId>{6, 7, 4, 5, 6, 7, 4, 5}));
}

TEST(PromptLookup, ARepeatingPatternGoesOnRepeating) {
  EXPECT_EQ(draft({1, 2, 3, 1, 2, 3, 1, 2}, 2, 7), (std::vector<TokenId>{3, 1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(draft({7, 7, 7}, 2, 3), (std::vector<TokenId>{7, 7, 7}));
}

TEST(PromptLookup, ShortOrMissingMatchesProposeNothing) {
  EXPECT_TRUE(draft({1, 2, 3, 9, 3}, 2, 4).empty());  // "3" recurs, "9 3" does not
  EXPECT_EQ(draft({1, 2, 3, 9, 3}, 1, 2), (std::vector<TokenId>{9, 3}));
  EXPECT_TRUE(draft({1, 2, 3, 4}, 1, 4).empty());
  EXPECT_TRUE(draft({1, 2, 1, 2}, 2, 0).empty());
  EXPECT_TRUE(draft({1}, 1, 4).empty());
}

TEST(PromptLookup, DraftsWithinItsLengthAndSaysHowLongTheMatchWas) {
  SpeculativeOptions o;
  o.max_draft = 8;
  o.min_match = 2;
  const std::vector<TokenId> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2};
  PromptLookup lookup(o, prompt);
  std::vector<TokenId> d = {99};
  EXPECT_EQ(lookup.draft(100, d), 2);
  EXPECT_EQ(d.size(), 8u);  // max_draft
  EXPECT_EQ(lookup.draft(3, d), 2);
  EXPECT_EQ(d, (std::vector<TokenId>{3, 4, 5}));  // the caller's limit
  // Tokens pushed are looked up too, and a longer suffix says so.
  lookup.push(3);
  EXPECT_EQ(lookup.draft(2, d), 3);
  EXPECT_EQ(d, (std::vector<TokenId>{4, 5}));
  lookup.push(42);
  EXPECT_EQ(lookup.draft(8, d), 0);
  EXPECT_TRUE(d.empty());
}

// Drafts are judged by their class: the suffix's length and whether the sequence samples. What
// one class shows does not move another's estimate.
TEST(DraftOdds, EachClassKeepsItsOwnCounts) {
  DraftOdds odds;
  EXPECT_DOUBLE_EQ(odds.acceptance(8, false), 0.5);  // nothing seen
  for (int i = 0; i < 30; ++i) {
    odds.observe(8, false, 8, 8);  // long matches of greedy sequences: taken whole
    odds.observe(2, false, 4, 0);  // 2-token matches: the first token already wrong
  }
  EXPECT_GT(odds.acceptance(8, false), 0.9);
  EXPECT_LT(odds.acceptance(2, false), 0.1);
  EXPECT_DOUBLE_EQ(odds.acceptance(8, true), 0.5);  // sampled sequences: their own class
  EXPECT_DOUBLE_EQ(odds.acceptance(3, false), 0.5);
  // Suffixes of 5, 6 and 7 tokens share a class.
  odds.observe(5, false, 4, 4);
  EXPECT_DOUBLE_EQ(odds.acceptance(7, false), odds.acceptance(6, false));
  EXPECT_GT(odds.acceptance(7, false), 0.5);
  // A kept token counts for the next position only: 2 of 8 kept is 2 kept of 3 tried.
  DraftOdds partly;
  partly.observe(4, false, 8, 2);
  EXPECT_DOUBLE_EQ(partly.acceptance(4, false), (2.0 + 1.0) / (3.0 + 2.0));
  // Newer drafts outweigh older ones: a class that stops being kept falls below a half.
  for (int i = 0; i < 100; ++i) odds.observe(8, false, 1, 0);
  EXPECT_LT(odds.acceptance(8, false), 0.2);
}

TEST(DraftOdds, ADeclinedClassIsTriedAgainNowAndThen) {
  DraftOdds odds;
  int tried = 0;
  for (int i = 1; i <= 64; ++i) {
    const bool t = odds.explore(2, false, 16);
    EXPECT_EQ(t, i % 16 == 0) << i;
    tried += t ? 1 : 0;
  }
  EXPECT_EQ(tried, 4);
  EXPECT_FALSE(odds.explore(2, true, 16));  // each class counts its own
}

// The cost model: where a step's fixed cost dominates (memory-bound), drafts go in full; where
// each position costs about a whole step (compute-bound), only nearly-sure drafts are worth it.
TEST(DraftCost, DraftsWhereTheyPay) {
  DraftCost memory_bound, compute_bound;
  EXPECT_EQ(memory_bound.best_draft(6, 0.5, 1), 6);  // nothing known yet: the drafter's length
  for (int i = 0; i < 40; ++i) {
    const int64_t positions = 1 + i % 5;
    memory_bound.observe(positions, 10e-3 + 0.2e-3 * static_cast<double>(positions));
    compute_bound.observe(positions, 0.02e-3 + 0.2e-3 * static_cast<double>(positions));
  }
  ASSERT_TRUE(memory_bound.known());
  EXPECT_EQ(memory_bound.best_draft(8, 0.9, 1), 8);
  // Half kept: the 5th and later drafted tokens would add less than they cost.
  EXPECT_EQ(memory_bound.best_draft(8, 0.5, 1), 4);
  EXPECT_EQ(compute_bound.best_draft(8, 0.5, 1), 0);
  EXPECT_EQ(compute_bound.best_draft(8, 0.3, 1), 0);
  // Even nearly sure drafts gain under 4 % when a drafted position costs what a token does:
  // within what the fit cannot see, so nothing is drafted.
  EXPECT_EQ(compute_bound.best_draft(8, 0.97, 1), 0);
  // The demo model on a quiet machine: verifying k = 1 / 8 drafted tokens cost 1.77 / 7.51 times
  // one token's step. At 87 % kept a one-token draft would gain ~5 %: not drafted.
  DraftCost demo;
  for (int i = 0; i < 40; ++i) {
    const int64_t k = i % 9;
    demo.observe(1 + k, 0.130e-3 * (1.0 + 0.82 * static_cast<double>(k)));
  }
  ASSERT_TRUE(demo.known());
  EXPECT_EQ(demo.best_draft(8, 0.87, 1), 0);
  // Where a drafted position costs a third of a token's step, the same drafts pay.
  DraftCost cheaper;
  for (int i = 0; i < 40; ++i) {
    const int64_t k = i % 9;
    cheaper.observe(1 + k, 0.130e-3 * (1.0 + 0.33 * static_cast<double>(k)));
  }
  EXPECT_GT(cheaper.best_draft(8, 0.87, 1), 0);
  // A one-token draft now and then for a declined class costs at most 1 % of the steps it is
  // spread over: every 16th where a drafted position is cheap, rarer where it is dear.
  EXPECT_EQ(memory_bound.explore_interval(1), 16);
  EXPECT_EQ(DraftCost().explore_interval(1), 16);
  EXPECT_GE(compute_bound.explore_interval(1), 90);
  EXPECT_GE(demo.explore_interval(1), 40);
  // Sharing the step's fixed cost with 16 other sequences makes a memory-bound step's drafts
  // cost their positions: fewer pay.
  EXPECT_EQ(memory_bound.best_draft(8, 0.9, 64), 3);
  EXPECT_EQ(memory_bound.best_draft(0, 0.9, 1), 0);
}

// Steps of one size say nothing about what another size costs: a long run of them (every step
// drafting its whole length, or none drafting) keeps the line fitted before, instead of turning
// the fit unknown (which drafts everything) or fitting noise.
TEST(DraftCost, AWindowOfOneStepSizeKeepsTheLastLine) {
  DraftCost cost;
  for (int i = 0; i < 40; ++i) {
    const int64_t k = i % 9;
    cost.observe(1 + k, 0.130e-3 * (1.0 + 0.82 * static_cast<double>(k)));
  }
  ASSERT_TRUE(cost.known());
  const int64_t before = cost.best_draft(8, 0.87, 1);
  EXPECT_EQ(before, 0);
  for (int i = 0; i < 500; ++i)
    cost.observe(1, 0.130e-3 * (1.0 + 0.01 * static_cast<double>(i % 3)));
  EXPECT_TRUE(cost.known());
  EXPECT_EQ(cost.best_draft(8, 0.87, 1), before);
  EXPECT_EQ(DraftCost().best_draft(5, 0.1, 1), 5);  // never known: the drafter's length
}

// The scheduler's rule for a drafted token x: draw y from the sampler; keep x when y == x, else
// emit y. P(keep) must be p(x), and a rejection must be distributed as p without x,
// renormalised (the speculative-sampling rule for a point-mass draft). p is computed here from
// the logits independently of the sampler (softmax with temperature, top-k).
TEST(SpeculativeSampling, DraftAcceptanceKeepsTheDistribution) {
  const std::vector<float> logits = {1.0f, 2.2f, 0.3f, 1.7f, -0.5f, 2.0f};
  constexpr float kTemperature = 0.8f;
  constexpr int kTopK = 5;  // token 4 is out
  std::vector<double> p(logits.size(), 0.0);
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (i == 4) continue;
    p[i] = std::exp(static_cast<double>(logits[i]) / kTemperature);
    sum += p[i];
  }
  for (double& v : p) v /= sum;

  SamplingParams params;
  params.temperature = kTemperature;
  params.top_k = kTopK;
  params.seed = 2024;
  Sampler sampler(params);
  constexpr int kTrials = 60000;
  for (const TokenId x : {1, 3, 2}) {
    int kept = 0;
    std::vector<int> rejected(logits.size(), 0);
    for (int t = 0; t < kTrials; ++t) {
      std::vector<float> row = logits;
      const int32_t y = sampler.sample(row);
      if (y == x) {
        ++kept;
      } else {
        ++rejected[static_cast<size_t>(y)];
      }
    }
    // Kept with probability p(x): within 5 standard deviations.
    const double px = p[static_cast<size_t>(x)];
    const double sd = std::sqrt(kTrials * px * (1 - px));
    EXPECT_NEAR(kept, kTrials * px, 5 * sd) << "draft " << x;
    // Rejections follow the residual distribution: chi-square over the other tokens with p > 0
    // (4 cells, 3 degrees of freedom; P(chi2 > 25) < 2e-5).
    const int n_rejected = kTrials - kept;
    double chi2 = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (static_cast<TokenId>(i) == x) {
        EXPECT_EQ(rejected[i], 0);
        continue;
      }
      if (p[i] == 0) {
        EXPECT_EQ(rejected[i], 0) << "token " << i << " is outside top-k";
        continue;
      }
      const double expected = n_rejected * p[i] / (1 - px);
      chi2 += (rejected[i] - expected) * (rejected[i] - expected) / expected;
    }
    EXPECT_LT(chi2, 25.0) << "draft " << x;
  }
}

}  // namespace
}  // namespace ferry::engine
