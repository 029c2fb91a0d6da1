// ferry::Money: an amount as an integer count of micro-units (1e-6 of the currency).
// Never a float. Plain value type; thread-safe as any int64.
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

  // Parses an exact decimal string: "12", "-0.5", "0.000001". More than six fractional
  // digits, exponents, or overflow are refused (nullopt), never rounded silently.
  static std::optional<Money> parse(std::string_view text);

  constexpr int64_t micros() const { return micros_; }

  // Exact decimal string with six fractional digits: "1.250000", "-0.000001".
  std::string to_string() const;

  constexpr Money operator+(Money other) const { return Money(micros_ + other.micros_); }
  constexpr Money operator-(Money other) const { return Money(micros_ - other.micros_); }
  constexpr Money& operator+=(Money other) { micros_ += other.micros_; return *this; }
  constexpr Money& operator-=(Money other) { micros_ -= other.micros_; return *this; }
  constexpr auto operator<=>(const Money&) const = default;

 private:
  constexpr explicit Money(int64_t micros) : micros_(micros) {}
  int64_t micros_ = 0;
};

// Cost of `tokens` at `price_per_million` (a Money per one million tokens), rounded half
// away from zero to the micro-unit. Computed in 128-bit integers: exact for any inputs
// whose result fits in int64.
Money cost_of_tokens(int64_t tokens, Money price_per_million);

}  // namespace ferry
