#include "ledger/time_util.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

namespace ferry::ledger {

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Days since 1970-01-01 of a civil date (era-based algorithm: 400-year cycles of 146097 days).
int64_t days_from_civil(CivilDate date) {
  int64_t y = date.year - (date.month <= 2 ? 1 : 0);
  int64_t era = floor_div(y, 400);
  int64_t year_of_era = y - era * 400;
  int64_t m = date.month;
  int64_t day_of_year = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + date.day - 1;
  int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
  return era * 146097 + day_of_era - 719468;
}

CivilDate civil_from_days(int64_t days) {
  days += 719468;
  int64_t era = floor_div(days, 146097);
  int64_t day_of_era = days - era * 146097;
  int64_t year_of_era =
      (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
  int64_t day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
  int64_t mp = (5 * day_of_year + 2) / 153;
  int day = static_cast<int>(day_of_year - (153 * mp + 2) / 5 + 1);
  int month = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  int64_t year = year_of_era + era * 400 + (month <= 2 ? 1 : 0);
  return CivilDate{year, month, day};
}

std::string utc_day(int64_t unix_us) {
  CivilDate d = civil_from_days(floor_div(unix_us, kMicrosPerDay));
  if (d.year >= 0 && d.year <= 9999) {
    // Digit by digit: snprintf's parsing of its format was most of a row's day (the applier
    // makes one for every row).
    const auto year = static_cast<int>(d.year);
    const char text[10] = {static_cast<char>('0' + year / 1000),
                           static_cast<char>('0' + year / 100 % 10),
                           static_cast<char>('0' + year / 10 % 10),
                           static_cast<char>('0' + year % 10),
                           '-',
                           static_cast<char>('0' + d.month / 10),
                           static_cast<char>('0' + d.month % 10),
                           '-',
                           static_cast<char>('0' + d.day / 10),
                           static_cast<char>('0' + d.day % 10)};
    return std::string(text, sizeof text);
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04lld-%02d-%02d", static_cast<long long>(d.year), d.month,
                d.day);
  return buf;
}

namespace {

bool read_digits(std::string_view text, size_t pos, size_t count, int64_t& out) {
  if (pos + count > text.size()) return false;
  out = 0;
  for (size_t i = pos; i < pos + count; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    out = out * 10 + (text[i] - '0');
  }
  return true;
}

int days_in_month(int64_t year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 2 && leap ? 29 : kDays[month - 1];
}

}  // namespace

std::optional<CivilDate> parse_civil_date(std::string_view text) {
  int64_t y = 0;
  int64_t m = 0;
  int64_t d = 0;
  if (text.size() != 10 || text[4] != '-' || text[7] != '-') return std::nullopt;
  if (!read_digits(text, 0, 4, y) || !read_digits(text, 5, 2, m) || !read_digits(text, 8, 2, d)) {
    return std::nullopt;
  }
  if (m < 1 || m > 12 || d < 1 || d > days_in_month(y, static_cast<int>(m))) return std::nullopt;
  return CivilDate{y, static_cast<int>(m), static_cast<int>(d)};
}

std::optional<int64_t> parse_utc_time(std::string_view text) {
  auto date = parse_civil_date(text.substr(0, std::min<size_t>(10, text.size())));
  if (!date) return std::nullopt;
  int64_t us = days_from_civil(*date) * kMicrosPerDay;
  if (text.size() == 10) return us;
  // "THH:MM:SS[.f]Z"
  int64_t h = 0;
  int64_t mi = 0;
  int64_t s = 0;
  if (text.size() < 20 || (text[10] != 'T' && text[10] != ' ') || text[13] != ':' ||
      text[16] != ':' || text.back() != 'Z') {
    return std::nullopt;
  }
  if (!read_digits(text, 11, 2, h) || !read_digits(text, 14, 2, mi) ||
      !read_digits(text, 17, 2, s) || h > 23 || mi > 59 || s > 59) {
    return std::nullopt;
  }
  us += ((h * 60 + mi) * 60 + s) * kMicrosPerSecond;
  std::string_view rest = text.substr(19, text.size() - 20);
  if (!rest.empty()) {
    if (rest[0] != '.' || rest.size() < 2 || rest.size() > 7) return std::nullopt;
    int64_t frac = 0;
    if (!read_digits(rest, 1, rest.size() - 1, frac)) return std::nullopt;
    for (size_t i = rest.size() - 1; i < 6; ++i) frac *= 10;
    us += frac;
  }
  return us;
}

TimeZone TimeZone::utc() {
  TimeZone z;
  z.name_ = "UTC";
  return z;
}

namespace {

int64_t read_be(const std::string& data, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(data[pos + i]);
  if (bytes == 4) return static_cast<int32_t>(static_cast<uint32_t>(v));
  return static_cast<int64_t>(v);
}

}  // namespace

Result<TimeZone> TimeZone::load(const std::string& name, const std::string& zoneinfo_dir) {
  if (name == "UTC" || name == "Etc/UTC" || name == "Z") return utc();
  TimeZone zone;
  zone.name_ = name;
  if (!name.empty() && (name[0] == '+' || name[0] == '-')) {
    int64_t h = 0;
    int64_t m = 0;
    if (name.size() != 6 || name[3] != ':' || !read_digits(name, 1, 2, h) ||
        !read_digits(name, 4, 2, m) || h > 23 || m > 59) {
      return Error::make(ErrorCode::kInvalidRequest,
                         "time zone '" + name + "': expected UTC, +HH:MM, -HH:MM or an IANA name");
    }
    zone.fixed_offset_s_ = (name[0] == '-' ? -1 : 1) * (h * 3600 + m * 60);
    return zone;
  }
  if (name.find("..") != std::string::npos || name.empty() || name[0] == '/') {
    return Error::make(ErrorCode::kInvalidRequest, "time zone '" + name + "': invalid name");
  }
  std::ifstream in(zoneinfo_dir + "/" + name, std::ios::binary);
  if (!in) return Error::make(ErrorCode::kInvalidRequest, "time zone '" + name + "': not found");
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&] {
    return Error::make(ErrorCode::kInvalidRequest, "time zone '" + name + "': not a TZif file");
  };
  // TZif (RFC 8536): header, then v1 data block with 32-bit times; a v2+ file repeats the
  // header and data with 64-bit times, which we prefer.
  auto parse_block = [&](size_t pos, int time_bytes, size_t& end) -> bool {
    if (data.size() < pos + 44 || data.compare(pos, 4, "TZif") != 0) return false;
    int64_t isutcnt = read_be(data, pos + 20, 4);
    int64_t isstdcnt = read_be(data, pos + 24, 4);
    int64_t leapcnt = read_be(data, pos + 28, 4);
    int64_t timecnt = read_be(data, pos + 32, 4);
    int64_t typecnt = read_be(data, pos + 36, 4);
    int64_t charcnt = read_be(data, pos + 40, 4);
    if (timecnt < 0 || typecnt <= 0 || charcnt < 0 || leapcnt < 0) return false;
    size_t p = pos + 44;
    size_t need = static_cast<size_t>(timecnt * time_bytes + timecnt + typecnt * 6 + charcnt +
                                      leapcnt * (time_bytes + 4) + isstdcnt + isutcnt);
    if (data.size() < p + need) return false;
    std::vector<int64_t> times;
    for (int64_t i = 0; i < timecnt; ++i)
      times.push_back(read_be(data, p + i * time_bytes, time_bytes));
    size_t idx_pos = p + timecnt * time_bytes;
    size_t type_pos = idx_pos + timecnt;
    std::vector<int64_t> type_offsets;
    std::vector<bool> type_dst;
    for (int64_t i = 0; i < typecnt; ++i) {
      type_offsets.push_back(read_be(data, type_pos + i * 6, 4));
      type_dst.push_back(data[type_pos + i * 6 + 4] != 0);
    }
    zone.transitions_s_.clear();
    zone.offsets_s_.clear();
    for (int64_t i = 0; i < timecnt; ++i) {
      auto type = static_cast<uint8_t>(data[idx_pos + i]);
      if (type >= typecnt) return false;
      zone.transitions_s_.push_back(times[i]);
      zone.offsets_s_.push_back(type_offsets[type]);
    }
    // Before the first transition: the first non-DST type (RFC 8536 section 3.2).
    zone.initial_offset_s_ = type_offsets[0];
    for (int64_t i = 0; i < typecnt; ++i) {
      if (!type_dst[i]) {
        zone.initial_offset_s_ = type_offsets[i];
        break;
      }
    }
    end = p + need;
    return true;
  };
  size_t end = 0;
  if (!parse_block(0, 4, end)) return bad();
  if (data[4] >= '2') {
    size_t end2 = 0;
    if (!parse_block(end, 8, end2)) return bad();
  }
  return zone;
}

int64_t TimeZone::offset_at(int64_t unix_us) const {
  if (transitions_s_.empty()) return fixed_offset_s_ + (offsets_s_.empty() ? initial_offset_s_ : 0);
  int64_t s = floor_div(unix_us, kMicrosPerSecond);
  auto it = std::upper_bound(transitions_s_.begin(), transitions_s_.end(), s);
  if (it == transitions_s_.begin()) return initial_offset_s_;
  return offsets_s_[static_cast<size_t>(it - transitions_s_.begin()) - 1];
}

CivilDate TimeZone::local_date(int64_t unix_us) const {
  int64_t local = unix_us + offset_at(unix_us) * kMicrosPerSecond;
  return civil_from_days(floor_div(local, kMicrosPerDay));
}

int64_t TimeZone::local_midnight(CivilDate date) const {
  int64_t local = days_from_civil(date) * kMicrosPerDay;
  // Two passes settle the offset in effect; where midnight does not exist (a DST gap at
  // midnight) the result is the first instant of that local day.
  int64_t guess = local - offset_at(local) * kMicrosPerSecond;
  guess = local - offset_at(guess) * kMicrosPerSecond;
  CivilDate got = local_date(guess);
  if (days_from_civil(got) < days_from_civil(date)) {
    // Still the previous day: the local day starts at the next transition.
    auto it = std::upper_bound(transitions_s_.begin(), transitions_s_.end(),
                               floor_div(guess, kMicrosPerSecond));
    if (it != transitions_s_.end()) guess = *it * kMicrosPerSecond;
  }
  return guess;
}

std::string format_local_time(int64_t unix_us, const TimeZone& zone) {
  int64_t off = zone.offset_at(unix_us);
  int64_t local_s = floor_div(unix_us, kMicrosPerSecond) + off;
  CivilDate d = civil_from_days(floor_div(local_s, 86400));
  int64_t sod = local_s - floor_div(local_s, 86400) * 86400;
  int64_t abs_off = off < 0 ? -off : off;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04lld-%02d-%02dT%02lld:%02lld:%02lld%c%02lld:%02lld",
                static_cast<long long>(d.year), d.month, d.day, static_cast<long long>(sod / 3600),
                static_cast<long long>(sod / 60 % 60), static_cast<long long>(sod % 60),
                off < 0 ? '-' : '+', static_cast<long long>(abs_off / 3600),
                static_cast<long long>(abs_off / 60 % 60));
  return buf;
}

}  // namespace ferry::ledger
