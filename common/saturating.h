// Saturating int64 arithmetic for token counts and byte sizes: a result beyond int64 is clamped
// to INT64_MAX / INT64_MIN instead of wrapping, so "prompt + max_tokens > context" stays true for
// any max_tokens. Pure functions; thread-safe.
#pragma once

#include <cstdint>

namespace ferry {

constexpr int64_t saturating_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return b > 0 ? INT64_MAX : INT64_MIN;
  return sum;
}

constexpr int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
  return product;
}

}  // namespace ferry
