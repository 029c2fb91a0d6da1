// The ledger's little binary codec: integers as 8 little-endian bytes, strings length-prefixed,
// token counts, money and costs; a reader that fails (never reads past the end, never trusts a
// count beyond what is left) and is checked once at the end. Used by the journal's entries and
// the response cache's persistent tier. Values only; not thread-safe.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/money.h"
#include "ledger/types.h"

namespace ferry::ledger {

class ByteWriter {
 public:
  ByteWriter() = default;
  // Appends to `out` (kept by the caller) instead of a string of its own: take() is then empty.
  explicit ByteWriter(std::string& out) : out_(&out) {}
  ByteWriter(const ByteWriter&) = delete;
  ByteWriter& operator=(const ByteWriter&) = delete;

  void u8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void i64(int64_t v) {
    // The 8 bytes little-endian in one append (g++ 12 wrote a byte loop of the shifts before:
    // ~1% of ferry-full's samples on the ledger writer).
    auto u = static_cast<uint64_t>(v);
    if constexpr (std::endian::native == std::endian::big) u = __builtin_bswap64(u);
    char bytes[8];
    std::memcpy(bytes, &u, 8);
    out_->append(bytes, 8);
  }
  void str(std::string_view s) {
    i64(static_cast<int64_t>(s.size()));
    out_->append(s);
  }
  void strs(const std::vector<std::string>& v) {
    i64(static_cast<int64_t>(v.size()));
    for (const auto& s : v) str(s);
  }
  void money(Money m) { i64(m.micros()); }
  void tokens(const Tokens& t) {
    for (const TokenCount* c : {&t.input, &t.cached_input, &t.output, &t.reasoning}) {
      i64(c->count);
      u8(static_cast<uint8_t>(c->source));
    }
  }
  void cost(const Cost& c) {
    u8(static_cast<uint8_t>(c.pricing));
    str(c.price_version);
    money(c.input);
    money(c.cached_input);
    money(c.output);
    money(c.reasoning);
  }
  std::string take() { return std::move(own_); }

 private:
  std::string own_;
  std::string* out_ = &own_;
};

// Reads what ByteWriter wrote; any read past the end (or a count beyond what is left) marks the
// reader failed and yields zeros, checked once at the end.
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool at_end() const { return at_ == in_.size(); }
  uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<uint8_t>(in_[at_++]);
  }
  int64_t i64() {
    if (!need(8)) return 0;
    uint64_t u = 0;
    std::memcpy(&u, in_.data() + at_, 8);
    at_ += 8;
    if constexpr (std::endian::native == std::endian::big) u = __builtin_bswap64(u);
    return static_cast<int64_t>(u);
  }
  // An int written by i64(): a value beyond int's range marks the reader failed (a damaged
  // entry is refused, never read as a different number).
  int int32() {
    int64_t v = i64();
    if (v < INT32_MIN || v > INT32_MAX) {
      ok_ = false;
      return 0;
    }
    return static_cast<int>(v);
  }
  std::string str() {
    int64_t n = i64();
    if (n < 0) ok_ = false;
    if (n < 0 || !need(static_cast<size_t>(n))) return {};
    std::string s(in_.substr(at_, static_cast<size_t>(n)));
    at_ += static_cast<size_t>(n);
    return s;
  }
  // A count of items that each take at least `min_bytes`: bounded by what is left.
  size_t count(size_t min_bytes) {
    int64_t n = i64();
    if (n < 0 || static_cast<uint64_t>(n) > (in_.size() - at_) / min_bytes) {
      ok_ = false;
      return 0;
    }
    return static_cast<size_t>(n);
  }
  std::vector<std::string> strs() {
    std::vector<std::string> v(count(8));
    for (auto& s : v) s = str();
    return v;
  }
  Money money() { return Money::from_micros(i64()); }
  template <typename Enum>
  Enum small_enum(uint8_t last) {
    uint8_t v = u8();
    if (v > last) ok_ = false;
    return static_cast<Enum>(v);
  }
  Tokens tokens() {
    Tokens t;
    for (TokenCount* c : {&t.input, &t.cached_input, &t.output, &t.reasoning}) {
      c->count = i64();
      c->source = small_enum<TokenSource>(static_cast<uint8_t>(TokenSource::kEstimate));
    }
    return t;
  }
  Cost cost() {
    Cost c;
    c.pricing = small_enum<Pricing>(static_cast<uint8_t>(Pricing::kUnpriced));
    c.price_version = str();
    c.input = money();
    c.cached_input = money();
    c.output = money();
    c.reasoning = money();
    return c;
  }

 private:
  bool need(size_t n) {
    if (!ok_ || in_.size() - at_ < n) {
      ok_ = false;
      return false;
    }
    return true;
  }
  std::string_view in_;
  size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace ferry::ledger
