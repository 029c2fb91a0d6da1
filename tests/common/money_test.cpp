#include "common/money.h"

#include <gtest/gtest.h>

#include <climits>

namespace ferry {
namespace {

TEST(Money, ParsesExactDecimals) {
  EXPECT_EQ(Money::parse("0.15")->micros(), 150000);
  EXPECT_EQ(Money::parse("12")->micros(), 12000000);
  EXPECT_EQ(Money::parse("-0.000001")->micros(), -1);
  EXPECT_EQ(Money::parse("+3.5")->micros(), 3500000);
  EXPECT_EQ(Money::parse(".5")->micros(), 500000);
}

TEST(Money, RefusesWhatItCannotHoldExactly) {
  EXPECT_FALSE(Money::parse(""));
  EXPECT_FALSE(Money::parse("0.0000001"));  // seven fractional digits
  EXPECT_FALSE(Money::parse("1e3"));
  EXPECT_FALSE(Money::parse("1.2.3"));
  EXPECT_FALSE(Money::parse("-"));
  EXPECT_FALSE(Money::parse("99999999999999999999"));
}

TEST(Money, FormatsWithSixDigits) {
  EXPECT_EQ(Money::from_micros(1250000).to_string(), "1.250000");
  EXPECT_EQ(Money::from_micros(-1).to_string(), "-0.000001");
  EXPECT_EQ(Money::from_micros(0).to_string(), "0.000000");
  EXPECT_EQ(Money::from_micros(INT64_MIN).to_string(), "-9223372036854.775808");
}

TEST(Money, RoundTripsThroughText) {
  for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{-999999}, int64_t{123456789012}}) {
    auto m = Money::from_micros(v);
    EXPECT_EQ(Money::parse(m.to_string())->micros(), v);
  }
}

TEST(Money, CostOfTokensRoundsHalfAwayFromZero) {
  auto price = *Money::parse("2.50");  // per million tokens
  EXPECT_EQ(cost_of_tokens(1000000, price).micros(), 2500000);
  EXPECT_EQ(cost_of_tokens(1, price).micros(), 3);                 // 2.5 micro -> 3
  EXPECT_EQ(cost_of_tokens(3, *Money::parse("0.1")).micros(), 0);  // 0.3 micro -> 0
  EXPECT_EQ(cost_of_tokens(0, price).micros(), 0);
  EXPECT_EQ(cost_of_tokens(1, *Money::parse("-2.5")).micros(), -3);
}

// The extremes of every integer a request or a backend can put in front of a price.
constexpr int64_t kTokenExtremes[] = {INT64_MIN,
                                      INT64_MIN + 1,
                                      -(int64_t{1} << 53) - 1,
                                      -1000000,
                                      -1,
                                      0,
                                      1,
                                      999999,
                                      1000000,
                                      (int64_t{1} << 31) - 1,
                                      (int64_t{1} << 53) + 1,
                                      999999999999999999,
                                      int64_t{1} << 62,
                                      INT64_MAX - 1,
                                      INT64_MAX};

TEST(Money, CostOfTokensNeverWrapsOverTheExtremes) {
  const int64_t prices[] = {INT64_MIN, -15000000,     -1,       0, 1, 3000000, 15000000, 999999,
                            1000000,   INT64_MAX / 2, INT64_MAX};
  for (int64_t tokens : kTokenExtremes) {
    for (int64_t price : prices) {
      SCOPED_TRACE("tokens " + std::to_string(tokens) + " price " + std::to_string(price));
      const __int128 exact = static_cast<__int128>(tokens) * price;  // micro-units * 1e6
      const Money cost = cost_of_tokens(tokens, Money::from_micros(price));
      // The sign is never flipped by overflow: a charge is never a credit.
      if (exact > 0) {
        EXPECT_GE(cost.micros(), 0);
      }
      if (exact < 0) {
        EXPECT_LE(cost.micros(), 0);
      }
      if (exact == 0) {
        EXPECT_EQ(cost.micros(), 0);
      }
      const __int128 whole = exact / 1000000;  // truncated; the result is within one of it
      if (whole >= INT64_MAX) {
        EXPECT_EQ(cost, Money::max());
      } else if (whole <= INT64_MIN) {
        EXPECT_EQ(cost, Money::min());
      } else {
        const __int128 diff = static_cast<__int128>(cost.micros()) - whole;
        EXPECT_TRUE(diff >= -1 && diff <= 1) << static_cast<int64_t>(diff);
      }
    }
  }
}

TEST(Money, UsageFromTheIssueIsNotACredit) {
  // 999999999999999999 tokens at 3.00 and 15.00 per million: more than int64 micro-units.
  const Money input = cost_of_tokens(999999999999999999, *Money::parse("3.00"));
  const Money output = cost_of_tokens(999999999999999999, *Money::parse("15.00"));
  EXPECT_EQ(input.micros(), 2999999999999999997);  // exact: 3 * (1e18 - 1)
  EXPECT_EQ(output, Money::max());
  EXPECT_EQ(input + output, Money::max());
  EXPECT_TRUE((input + output).saturated());
}

TEST(Money, WorstCaseOfAHugeMaxTokensStaysAboveAnyBudget) {
  // max_tokens 2^62 at 15.00 per million: 2^62 * 15 micro-units overflow int64.
  const Money worst = cost_of_tokens(int64_t{1} << 62, *Money::parse("15")) + Money::from_micros(3);
  EXPECT_EQ(worst, Money::max());
  const Money budget = *Money::parse("9223372036854.775806");  // the largest below max()
  EXPECT_GT(Money::from_micros(150) + worst, budget);
}

TEST(Money, SumsAndDifferencesSaturate) {
  const int64_t values[] = {INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX};
  for (int64_t a : values) {
    for (int64_t b : values) {
      SCOPED_TRACE(std::to_string(a) + " and " + std::to_string(b));
      const __int128 sum = static_cast<__int128>(a) + b;
      const __int128 diff = static_cast<__int128>(a) - b;
      auto clamp = [](__int128 v) {
        return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : static_cast<int64_t>(v);
      };
      EXPECT_EQ((Money::from_micros(a) + Money::from_micros(b)).micros(), clamp(sum));
      EXPECT_EQ((Money::from_micros(a) - Money::from_micros(b)).micros(), clamp(diff));
      Money m = Money::from_micros(a);
      m += Money::from_micros(b);
      EXPECT_EQ(m.micros(), clamp(sum));
      m = Money::from_micros(a);
      m -= Money::from_micros(b);
      EXPECT_EQ(m.micros(), clamp(diff));
    }
  }
}

}  // namespace
}  // namespace ferry
