#include "common/clock.h"

#include <gtest/gtest.h>

#include <string>

namespace ferry {
namespace {

TEST(Clock, FormatsUtcWithMicroseconds) {
  EXPECT_EQ(format_utc_micros(0), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(format_utc_micros(1'780'000'000'123'456), "2026-05-28T20:26:40.123456Z");
  EXPECT_EQ(format_utc_micros(951'782'400'000'001), "2000-02-29T00:00:00.000001Z");  // leap day
  EXPECT_EQ(format_utc_micros(-1), "1969-12-31T23:59:59.999999Z");
}

// write_utc_micros remembers the last second per thread: moving to another second, back, and
// across a day must still give the right calendar part.
TEST(Clock, WriteUtcMicrosFollowsTheSecond) {
  auto text = [](int64_t us) {
    char buf[kUtcMicrosChars];
    write_utc_micros(us, buf);
    return std::string(buf, sizeof buf);
  };
  const int64_t s = 1'780'000'000;
  EXPECT_EQ(text(s * 1000000 + 999999), "2026-05-28T20:26:40.999999Z");
  EXPECT_EQ(text((s + 1) * 1000000), "2026-05-28T20:26:41.000000Z");
  EXPECT_EQ(text(s * 1000000 + 5), "2026-05-28T20:26:40.000005Z");
  EXPECT_EQ(text(s * 1000000 + 7), "2026-05-28T20:26:40.000007Z");
  EXPECT_EQ(text((s + 86400) * 1000000 + 7), "2026-05-29T20:26:40.000007Z");
  EXPECT_EQ(text(-1), "1969-12-31T23:59:59.999999Z");
  EXPECT_EQ(text(-1000000), "1969-12-31T23:59:59.000000Z");
  EXPECT_EQ(text(0), "1970-01-01T00:00:00.000000Z");
  for (int64_t us = -3'000'001; us < 3'000'001; us += 250'001) {
    EXPECT_EQ(text(us), format_utc_micros(us)) << us;
  }
}

}  // namespace
}  // namespace ferry
