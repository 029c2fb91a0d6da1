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
  // "YYYY-MM-DDTHH:MM:SS.ffffffZ", digits written directly (this runs once per request).
  char buf[28];
  auto put = [&buf](int at, int value, int width) {
    for (int i = width - 1; i >= 0; --i) {
      buf[at + i] = static_cast<char>('0' + value % 10);
      value /= 10;
    }
  };
  int year = tm.tm_year + 1900;
  if (year < 0 || year > 9999) year = 0;
  put(0, year, 4);
  buf[4] = '-';
  put(5, tm.tm_mon + 1, 2);
  buf[7] = '-';
  put(8, tm.tm_mday, 2);
  buf[10] = 'T';
  put(11, tm.tm_hour, 2);
  buf[13] = ':';
  put(14, tm.tm_min, 2);
  buf[16] = ':';
  put(17, tm.tm_sec, 2);
  buf[19] = '.';
  put(20, frac, 6);
  buf[26] = 'Z';
  return std::string(buf, 27);
}

}  // namespace ferry
