// ferry::Money: an amount as an integer count of micro-units (1e-6 of the currency).
// Never a float, never wraps: sums and costs saturate at Money::max() / Money::min(), so an
// amount too large to hold compares above every real budget. Plain value type; thread-safe as
// any int64.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ferry {

class Money {
 public:
  constexpr Money() = default;
  static constexpr Money from_micros(int64_t micros) { return Money(micros); }
  // The saturation bounds: a result that does not fit in int64 micro-units becomes one of them.
  static constexpr Money max() { return Money(INT64_MAX); }
  static constexpr Money min() { return Money(INT64_MIN); }

  // Parses an exact decimal string: "12", "-0.5", "0.000001". More than six fractional
  // digits, exponents, or overflow are refused (nullopt), never rounded silently.
  static std::optional<Money> parse(std::string_view text);

  constexpr int64_t micros() const { return micros_; }

  // Exact decimal string with six fractional digits: "1.250000", "-0.000001".
  std::string to_string() const;

  // True at either saturation bound: the amount is "too large to hold", not an exact figure.
  constexpr bool saturated() const { return micros_ == INT64_MAX || micros_ == INT64_MIN; }

  // Saturating: an overflowing sum or difference is clamped to max() or min().
  constexpr Money operator+(Money other) const {
    int64_t sum = 0;
    if (__builtin_add_overflow(micros_, other.micros_, &sum))
      return other.micros_ > 0 ? max() : min();
    return Money(sum);
  }
  constexpr Money operator-(Money other) const {
    int64_t diff = 0;
    if (__builtin_sub_overflow(micros_, other.micros_, &diff))
      return other.micros_ < 0 ? max() : min();
    return Money(diff);
  }
  constexpr Money& operator+=(Money other) { return *this = *this + other; }
  constexpr Money& operator-=(Money other) { return *this = *this - other; }
  constexpr auto operator<=>(const Money&) const = default;

 private:
  constexpr explicit Money(int64_t micros) : micros_(micros) {}
  int64_t micros_ = 0;
};

// Cost of `tokens` at `price_per_million` (a Money per one million tokens), rounded half
// away from zero to the micro-unit. Computed in 128-bit integers: exact for any inputs
// whose result fits in int64; a result beyond it saturates to Money::max() (or min() for a
// negative product), never wraps.
Money cost_of_tokens(int64_t tokens, Money price_per_million);

}  // namespace ferry
