// Calendar arithmetic on unix microseconds (proleptic Gregorian, UTC) and time zones for
// budget periods: UTC, fixed offsets ("+05:30") and IANA names read from TZif files.
// TimeZone is immutable after loading; safe to share between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace ferry::ledger {

constexpr int64_t kMicrosPerSecond = 1000000;
constexpr int64_t kMicrosPerDay = 86400 * kMicrosPerSecond;

struct CivilDate {
  int64_t year = 1970;
  int month = 1;  // 1..12
  int day = 1;    // 1..31
};

int64_t days_from_civil(CivilDate date);
CivilDate civil_from_days(int64_t days);
int64_t floor_div(int64_t a, int64_t b);

// "YYYY-MM-DD" of a unix-microsecond instant in UTC.
std::string utc_day(int64_t unix_us);

// Parses "YYYY-MM-DD" (midnight UTC) or "YYYY-MM-DDTHH:MM:SS[.ffffff]Z" into unix micros.
std::optional<int64_t> parse_utc_time(std::string_view text);
// Parses "YYYY-MM-DD" only.
std::optional<CivilDate> parse_civil_date(std::string_view text);

class TimeZone {
 public:
  // "UTC", "+HH:MM"/"-HH:MM", or an IANA name found under `zoneinfo_dir`.
  static Result<TimeZone> load(const std::string& name,
                               const std::string& zoneinfo_dir = "/usr/share/zoneinfo");
  static TimeZone utc();

  // Offset from UTC, in seconds, in effect at the instant.
  int64_t offset_at(int64_t unix_us) const;
  // Unix micros of local midnight of a local civil date (the first instant of that day).
  int64_t local_midnight(CivilDate date) const;
  // The local civil date at the instant.
  CivilDate local_date(int64_t unix_us) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int64_t fixed_offset_s_ = 0;
  std::vector<int64_t> transitions_s_;  // unix seconds, ascending
  std::vector<int64_t> offsets_s_;      // offset after each transition
  int64_t initial_offset_s_ = 0;        // before the first transition
};

// Formats an instant as RFC 3339 in the zone: "2026-12-01T00:00:00+01:00".
std::string format_local_time(int64_t unix_us, const TimeZone& zone);

}  // namespace ferry::ledger
