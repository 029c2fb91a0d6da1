#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace ferry::ledger {
namespace {

using testing::budgets_from;
using testing::kJune15;

TEST(Budgets, ParsesAndValidates) {
  auto defs = budgets_from(R"(
- name: team-a-daily
  scope: team
  match: team-a
  amount: 10.50
  period: day
  mode: soft
- name: key-month
  scope: key
  match: key-a
  amount: "100"
  period: month
  timezone: "+02:00"
)");
  ASSERT_EQ(defs.size(), 2u);
  EXPECT_EQ(defs[0].amount, Money::from_micros(10500000));
  EXPECT_FALSE(defs[0].hard);
  EXPECT_TRUE(defs[1].hard);
  EXPECT_EQ(defs[1].zone.offset_at(0), 7200);
  EXPECT_THROW(budgets_from("- name: x\n  scope: galaxy\n  match: a\n  amount: 1\n  period: day\n"),
               yaml::YamlError);
  EXPECT_THROW(budgets_from("- name: x\n  scope: team\n  match: a\n  amount: 1\n  period: year\n"),
               yaml::YamlError);
  EXPECT_THROW(
      budgets_from("- name: x\n  scope: team\n  match: a\n  amount: 1.5e3\n  period: day\n"),
      yaml::YamlError);
  EXPECT_THROW(budgets_from("- name: x\n  scope: team\n  match: a\n  amount: 1\n  period: day\n"
                            "- name: x\n  scope: team\n  match: b\n  amount: 1\n  period: day\n"),
               yaml::YamlError);
}

TEST(Budgets, PeriodBounds) {
  BudgetDef def;
  def.period = BudgetPeriod::kWeek;
  // 2026-06-17 (Wednesday) -> week of Monday 2026-06-15.
  PeriodBounds week = budget_period_at(def, kJune15 + 2 * kMicrosPerDay);
  EXPECT_EQ(utc_day(week.start_us), "2026-06-15");
  EXPECT_EQ(utc_day(week.end_us), "2026-06-22");
  def.period = BudgetPeriod::kMonth;
  PeriodBounds month = budget_period_at(def, kJune15);
  EXPECT_EQ(utc_day(month.start_us), "2026-06-01");
  EXPECT_EQ(utc_day(month.end_us), "2026-07-01");
  def.period = BudgetPeriod::kDay;
  def.zone = *TimeZone::load("-05:00");
  PeriodBounds day = budget_period_at(def, kJune15 + 20 * 3600 * kMicrosPerSecond);  // 08:00Z +1d
  EXPECT_EQ(format_local_time(day.start_us, def.zone), "2026-06-16T00:00:00-05:00");
}

TEST(Budgets, MonthInBerlinResetsAtLocalMidnight) {
  if (!std::filesystem::exists("/usr/share/zoneinfo/Europe/Berlin")) GTEST_SKIP() << "no tzdata";
  BudgetDef def;
  def.period = BudgetPeriod::kMonth;
  def.zone = *TimeZone::load("Europe/Berlin");
  // 2026-06-30T22:30Z is already July 1st in Berlin.
  PeriodBounds b = budget_period_at(def, *parse_utc_time("2026-06-30T22:30:00Z"));
  EXPECT_EQ(format_local_time(b.start_us, def.zone), "2026-07-01T00:00:00+02:00");
  EXPECT_EQ(b.start_us, *parse_utc_time("2026-06-30T22:00:00Z"));
}

TEST(Budgets, HardRefusesSoftWarns) {
  auto defs = budgets_from(R"(
- {name: hard-team, scope: team, match: t, amount: 1.00, period: day}
- {name: soft-key, scope: key, match: k, amount: 0.50, period: day, mode: soft}
)");
  BudgetBook book(std::move(defs));
  Subject s{"k", "t", "p"};
  auto r1 = book.reserve(s, Money::from_micros(400000), kJune15);
  ASSERT_TRUE(r1);
  EXPECT_TRUE(r1->soft_exceeded.empty());
  auto r2 = book.reserve(s, Money::from_micros(400000), kJune15);
  ASSERT_TRUE(r2);
  ASSERT_EQ(r2->soft_exceeded.size(), 1u);
  EXPECT_EQ(r2->soft_exceeded[0], "soft-key");
  auto r3 = book.reserve(s, Money::from_micros(400000), kJune15);
  ASSERT_FALSE(r3);
  EXPECT_EQ(r3.error().code, ErrorCode::kRateLimited);
  EXPECT_EQ(r3.error().param, "hard-team");
  EXPECT_EQ(r3.error().type_code, "budget_exceeded");
  EXPECT_NE(r3.error().message.find("resets at 2026-06-16T00:00:00+00:00"), std::string::npos)
      << r3.error().message;
  // Settling below the worst case frees room.
  book.settle(*r1, Money::from_micros(100000), kJune15, kJune15);
  book.settle(*r2, Money::from_micros(100000), kJune15, kJune15);
  auto r4 = book.reserve(s, Money::from_micros(700000), kJune15);
  ASSERT_TRUE(r4);
  EXPECT_NEAR(*r4->left_pct, 0.0, 1e-9);  // soft key: 0.2 + 0.7 of 0.5 -> clamped at 0
  book.release(*r4);
  EXPECT_NEAR(*book.left_pct(Subject{"other", "t", ""}, kJune15), 80.0, 1e-9);
  EXPECT_FALSE(book.left_pct(Subject{"x", "y", "z"}, kJune15));
  // The next day the spent amount starts again from zero.
  EXPECT_NEAR(*book.left_pct(Subject{"other", "t", ""}, kJune15 + kMicrosPerDay), 100.0, 1e-9);
}

TEST(Budgets, ASaturatedWorstCaseIsOverEveryHardBudget) {
  // The largest budget Money holds, and a small one with room left: a worst case that saturated
  // (too large to hold) is refused by both, however little was spent.
  auto defs = budgets_from(R"(
- {name: huge, scope: team, match: t, amount: 9223372036854.775807, period: day}
- {name: small, scope: key, match: k, amount: 0.004000, period: day, mode: soft}
)");
  BudgetBook book(std::move(defs));
  Subject s{"k", "t", "p"};
  auto spent = book.reserve(s, Money::from_micros(3850), kJune15);
  ASSERT_TRUE(spent);
  for (Money worst : {Money::max(), Money::from_micros(INT64_MAX - 1) + Money::from_micros(5)}) {
    auto r = book.reserve(s, worst, kJune15);
    ASSERT_FALSE(r) << worst.to_string();
    EXPECT_EQ(r.error().param, "huge");
  }
  // A soft budget only warns; its left percentage stays defined (no int64 overflow).
  auto soft_only = budgets_from(R"(
- {name: small, scope: key, match: k, amount: 0.004000, period: day, mode: soft}
)");
  BudgetBook soft(std::move(soft_only));
  auto warned = soft.reserve(s, Money::max(), kJune15);
  ASSERT_TRUE(warned);
  ASSERT_EQ(warned->soft_exceeded.size(), 1u);
  EXPECT_NEAR(*warned->left_pct, 0.0, 1e-9);
  soft.release(*warned);
  EXPECT_NEAR(*soft.left_pct(s, kJune15), 100.0, 1e-9);
}

}  // namespace
}  // namespace ferry::ledger
