#include "common/ids.h"

#include <sys/random.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>

namespace ferry {
namespace {

// A per-thread SplitMix64 generator seeded from the OS: ids need uniqueness, not secrecy, and
// this costs a few instructions a draw where std::mt19937_64 cost hundreds.
class IdRandom {
 public:
  IdRandom() {
    if (getrandom(&state_, sizeof state_, 0) != static_cast<ssize_t>(sizeof state_)) {
      std::random_device rd;
      state_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
  }
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_ = 0;
};

// A UUIDv7 as two big-endian halves: 48 bits of Unix milliseconds, version 7, 12 random bits;
// variant 0b10, 62 random bits.
struct Uuid {
  uint64_t hi;
  uint64_t lo;
};

Uuid uuid_v7() {
  thread_local IdRandom rng;
  auto ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count());
  uint64_t r1 = rng.next();
  uint64_t r2 = rng.next();
  return {(ms << 16) | 0x7000 | (r1 & 0x0fff), (r2 >> 2) | (uint64_t{1} << 63)};
}

// The 8 hex digits of `v`, most significant first in memory (little-endian word), without a
// table: spread the nibbles one to a byte, then add '0', and 'a' - '0' - 10 more for 10-15.
uint64_t hex8(uint32_t v) {
  uint64_t x = v;
  x = (x | (x << 16)) & 0x0000ffff0000ffffULL;
  x = (x | (x << 8)) & 0x00ff00ff00ff00ffULL;
  x = (x | (x << 4)) & 0x0f0f0f0f0f0f0f0fULL;  // byte i holds nibble i (0 the lowest)
  uint64_t letters = ((x + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL;
  x += 0x3030303030303030ULL + letters * ('a' - '0' - 10);
  if constexpr (std::endian::native == std::endian::little) x = __builtin_bswap64(x);
  return x;
}

// Writes the 32 hex digits of hi then lo.
void put_hex32(char* out, uint64_t hi, uint64_t lo) {
  uint64_t words[4] = {hex8(static_cast<uint32_t>(hi >> 32)), hex8(static_cast<uint32_t>(hi)),
                       hex8(static_cast<uint32_t>(lo >> 32)), hex8(static_cast<uint32_t>(lo))};
  std::memcpy(out, words, sizeof words);
}

}  // namespace

std::string make_uuid_v7() {
  Uuid u = uuid_v7();
  char hex[32];
  put_hex32(hex, u.hi, u.lo);
  char buf[36];
  std::memcpy(buf, hex, 8);
  buf[8] = '-';
  std::memcpy(buf + 9, hex + 8, 4);
  buf[13] = '-';
  std::memcpy(buf + 14, hex + 12, 4);
  buf[18] = '-';
  std::memcpy(buf + 19, hex + 16, 4);
  buf[23] = '-';
  std::memcpy(buf + 24, hex + 20, 12);
  return std::string(buf, sizeof buf);
}

std::string make_request_id() {
  Uuid u = uuid_v7();
  char buf[4 + 32] = {'r', 'e', 'q', '_'};
  put_hex32(buf + 4, u.hi, u.lo);
  return std::string(buf, 4 + 26);  // the first 13 bytes of the UUID
}

std::string make_random_id(std::string_view prefix, size_t chars) {
  static constexpr char kSymbols[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  thread_local IdRandom rng;
  std::string id(prefix);
  id.reserve(prefix.size() + chars);
  while (chars > 0) {
    // Eight symbols per draw, one a byte scaled to 0..61 by a multiply (no division).
    uint64_t r = rng.next();
    for (int k = 0; k < 8 && chars > 0; ++k, --chars, r >>= 8) {
      id.push_back(kSymbols[((r & 0xff) * 62) >> 8]);
    }
  }
  return id;
}

}  // namespace ferry
