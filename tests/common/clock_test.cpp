#include "common/clock.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(Clock, FormatsUtcWithMicroseconds) {
  EXPECT_EQ(format_utc_micros(0), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(format_utc_micros(1'780'000'000'123'456), "2026-05-28T20:26:40.123456Z");
  EXPECT_EQ(format_utc_micros(951'782'400'000'001), "2000-02-29T00:00:00.000001Z");  // leap day
  EXPECT_EQ(format_utc_micros(-1), "1969-12-31T23:59:59.999999Z");
}

}  // namespace
}  // namespace ferry
