#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "ledger/time_util.h"

namespace ferry::ledger {
namespace {

TEST(TimeUtil, CivilRoundTrip) {
  for (int64_t days : {-800000LL, -1LL, 0LL, 59LL, 10957LL, 20619LL, 2932896LL}) {
    EXPECT_EQ(days_from_civil(civil_from_days(days)), days);
  }
  EXPECT_EQ(days_from_civil({2026, 6, 15}), 1781524800LL / 86400);
  EXPECT_EQ(utc_day(1781524800LL * 1000000), "2026-06-15");
  EXPECT_EQ(utc_day(-1), "1969-12-31");
}

// The day's text against std::chrono's calendar, every day of years -20..10020 around the
// edges of the digit-by-digit range (0..9999) and random instants in between.
TEST(TimeUtil, UtcDayIsTheCalendarsDate) {
  using namespace std::chrono;
  auto expected = [](int64_t unix_us) {
    const auto day = floor<days>(sys_time<microseconds>(microseconds(unix_us)));
    const year_month_day ymd{day};
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04d-%02u-%02u", static_cast<int>(ymd.year()),
                  static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
    return std::string(buf);
  };
  constexpr int64_t kDay = 86400LL * 1000000;
  const int64_t year0 = days_from_civil({0, 1, 1}), year10000 = days_from_civil({10000, 1, 1});
  for (int64_t edge : {year0, year10000, int64_t{0}}) {
    for (int64_t d = edge - 7400; d < edge + 7400; ++d) {
      ASSERT_EQ(utc_day(d * kDay), expected(d * kDay)) << d;
      ASSERT_EQ(utc_day(d * kDay + kDay - 1), expected(d * kDay + kDay - 1)) << d;
    }
  }
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<int64_t> instant(year0 * kDay - 30 * kDay, year10000 * kDay);
  for (int i = 0; i < 200000; ++i) {
    const int64_t at = instant(rng);
    ASSERT_EQ(utc_day(at), expected(at)) << at;
  }
}

TEST(TimeUtil, ParsesUtcTimes) {
  EXPECT_EQ(parse_utc_time("2026-06-15"), 1781481600LL * 1000000);
  EXPECT_EQ(parse_utc_time("2026-06-15T12:00:00Z"), 1781524800LL * 1000000);
  EXPECT_EQ(parse_utc_time("2026-06-15T12:00:00.25Z"), 1781524800LL * 1000000 + 250000);
  EXPECT_FALSE(parse_utc_time("2026-02-30"));
  EXPECT_FALSE(parse_utc_time("2026-6-15"));
  EXPECT_FALSE(parse_utc_time("2026-06-15T25:00:00Z"));
  EXPECT_FALSE(parse_utc_time("2026-06-15 x"));
}

TEST(TimeUtil, FixedOffsetZone) {
  auto zone = TimeZone::load("+05:30");
  ASSERT_TRUE(zone);
  EXPECT_EQ(zone->offset_at(0), 5 * 3600 + 1800);
  // Local midnight of 2026-06-15 at +05:30 is 18:30Z the day before.
  EXPECT_EQ(zone->local_midnight({2026, 6, 15}), (1781481600LL - 19800) * 1000000);
  EXPECT_FALSE(TimeZone::load("+5:30"));
  EXPECT_FALSE(TimeZone::load("../etc/passwd"));
}

TEST(TimeUtil, IanaZoneFollowsDst) {
  if (!std::filesystem::exists("/usr/share/zoneinfo/Europe/Berlin")) {
    GTEST_SKIP() << "no tzdata on this machine";
  }
  auto zone = TimeZone::load("Europe/Berlin");
  ASSERT_TRUE(zone) << zone.error().message;
  EXPECT_EQ(zone->offset_at(1781524800LL * 1000000), 7200);  // June: CEST
  EXPECT_EQ(zone->offset_at(1767225600LL * 1000000), 3600);  // 2026-01-01: CET
  EXPECT_EQ(format_local_time(zone->local_midnight({2026, 7, 1}), *zone),
            "2026-07-01T00:00:00+02:00");
  EXPECT_EQ(format_local_time(zone->local_midnight({2026, 12, 1}), *zone),
            "2026-12-01T00:00:00+01:00");
  EXPECT_FALSE(TimeZone::load("Not/AZone"));
}

}  // namespace
}  // namespace ferry::ledger
