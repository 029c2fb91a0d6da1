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
  EXPECT_EQ(cost_of_tokens(1, price).micros(), 3);   // 2.5 micro -> 3
  EXPECT_EQ(cost_of_tokens(3, *Money::parse("0.1")).micros(), 0);  // 0.3 micro -> 0
  EXPECT_EQ(cost_of_tokens(0, price).micros(), 0);
  EXPECT_EQ(cost_of_tokens(1, *Money::parse("-2.5")).micros(), -3);
}

}  // namespace
}  // namespace ferry
