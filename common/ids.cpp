#include "common/ids.h"

#include <array>
#include <chrono>
#include <cstdint>
#include <random>

namespace ferry {
namespace {

std::array<uint8_t, 16> uuid_v7_bytes() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  auto ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count());
  std::array<uint8_t, 16> b{};
  for (int i = 0; i < 6; ++i) b[i] = static_cast<uint8_t>(ms >> (8 * (5 - i)));
  uint64_t r1 = rng();
  uint64_t r2 = rng();
  for (int i = 6; i < 16; ++i) b[i] = static_cast<uint8_t>((i < 11 ? r1 : r2) >> (8 * (i % 8)));
  b[6] = static_cast<uint8_t>(0x70 | (b[6] & 0x0f));  // version 7
  b[8] = static_cast<uint8_t>(0x80 | (b[8] & 0x3f));  // variant 10
  return b;
}

constexpr char kHex[] = "0123456789abcdef";

}  // namespace

std::string make_uuid_v7() {
  auto b = uuid_v7_bytes();
  std::string out;
  out.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[b[i] >> 4]);
    out.push_back(kHex[b[i] & 0xf]);
  }
  return out;
}

std::string make_request_id() {
  auto b = uuid_v7_bytes();
  std::string out = "req_";
  for (int i = 0; i < 13; ++i) {
    out.push_back(kHex[b[i] >> 4]);
    out.push_back(kHex[b[i] & 0xf]);
  }
  return out;
}

}  // namespace ferry
