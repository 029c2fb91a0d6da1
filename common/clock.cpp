#include "common/clock.h"

#include <cstring>
#include <ctime>

namespace ferry {

namespace {

// "YYYY-MM-DDTHH:MM:SS" for a whole second, digits written directly.
void put_utc_seconds(int64_t secs, char* buf) {
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  auto put = [buf](int at, int value, int width) {
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
}

}  // namespace

void write_utc_micros(int64_t unix_micros, char* out) {
  int64_t secs = unix_micros >= 0 ? unix_micros / 1000000 : (unix_micros - 999999) / 1000000;
  auto frac = static_cast<int>(unix_micros - secs * 1000000);
  // Requests come many a second: the calendar part is worked out once a second per thread.
  struct Cache {
    int64_t secs = INT64_MIN;
    char text[19];
  };
  thread_local Cache cache;
  if (cache.secs != secs) {
    put_utc_seconds(secs, cache.text);
    cache.secs = secs;
  }
  std::memcpy(out, cache.text, 19);
  out[19] = '.';
  for (int i = 25; i >= 20; --i) {
    out[i] = static_cast<char>('0' + frac % 10);
    frac /= 10;
  }
  out[26] = 'Z';
}

std::string format_utc_micros(int64_t unix_micros) {
  char buf[kUtcMicrosChars];
  write_utc_micros(unix_micros, buf);
  return std::string(buf, sizeof buf);
}

}  // namespace ferry
