// Time helpers shared by every module. Thread-safe: the only state is a per-thread cache.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {

using SteadyTime = std::chrono::steady_clock::time_point;

inline int64_t unix_micros_now() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline int64_t micros_between(SteadyTime from, SteadyTime to) {
  return std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
}

// RFC 3339 UTC with microseconds: "2026-11-29T21:35:04.123456Z".
std::string format_utc_micros(int64_t unix_micros);

// The same text written to `out`: exactly kUtcMicrosChars bytes, no terminator. The calendar
// part is remembered per thread for the last second, so most calls only write the fraction.
inline constexpr size_t kUtcMicrosChars = 27;
void write_utc_micros(int64_t unix_micros, char* out);

}  // namespace ferry
