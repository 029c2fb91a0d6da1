#include "common/clock.h"

#include <cstdio>
#include <ctime>

namespace ferry {

std::string format_utc_micros(int64_t unix_micros) {
  int64_t secs = unix_micros >= 0 ? unix_micros / 1000000 : (unix_micros - 999999) / 1000000;
  auto frac = static_cast<int>(unix_micros - secs * 1000000);
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

}  // namespace ferry
