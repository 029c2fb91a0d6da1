#include "common/money.h"

#include <cstdlib>

namespace ferry {

std::optional<Money> Money::parse(std::string_view text) {
  if (text.empty()) return std::nullopt;
  bool negative = false;
  size_t pos = 0;
  if (text[0] == '-' || text[0] == '+') {
    negative = text[0] == '-';
    pos = 1;
  }
  __int128 whole = 0;
  int64_t frac = 0;
  int frac_digits = 0;
  bool seen_digit = false;
  bool seen_dot = false;
  for (; pos < text.size(); ++pos) {
    char c = text[pos];
    if (c == '.') {
      if (seen_dot) return std::nullopt;
      seen_dot = true;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    seen_digit = true;
    if (seen_dot) {
      if (++frac_digits > 6) return std::nullopt;
      frac = frac * 10 + (c - '0');
    } else {
      whole = whole * 10 + (c - '0');
      if (whole > INT64_MAX / 1000000) return std::nullopt;
    }
  }
  if (!seen_digit) return std::nullopt;
  for (int i = frac_digits; i < 6; ++i) frac *= 10;
  __int128 total = whole * 1000000 + frac;
  if (total > INT64_MAX) return std::nullopt;
  return Money(static_cast<int64_t>(negative ? -total : total));
}

std::string Money::to_string() const {
  // Work in unsigned 128 bits so INT64_MIN formats correctly.
  bool negative = micros_ < 0;
  unsigned __int128 magnitude =
      negative ? static_cast<unsigned __int128>(-static_cast<__int128>(micros_))
               : static_cast<unsigned __int128>(micros_);
  unsigned __int128 whole = magnitude / 1000000;
  auto frac = static_cast<unsigned>(magnitude % 1000000);
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(whole % 10)));
    whole /= 10;
  } while (whole > 0);
  std::string frac_text = std::to_string(frac);
  frac_text.insert(0, 6 - frac_text.size(), '0');
  return (negative ? "-" : "") + digits + "." + frac_text;
}

Money cost_of_tokens(int64_t tokens, Money price_per_million) {
  __int128 product = static_cast<__int128>(tokens) * price_per_million.micros();
  __int128 quotient = product / 1000000;
  __int128 remainder = product % 1000000;
  if (remainder * 2 >= 1000000) ++quotient;
  if (remainder * 2 <= -1000000) --quotient;
  // |product| < 2^126, so the quotient is exact; only its narrowing can overflow.
  if (quotient > INT64_MAX) return Money::max();
  if (quotient < INT64_MIN) return Money::min();
  return Money::from_micros(static_cast<int64_t>(quotient));
}

}  // namespace ferry
