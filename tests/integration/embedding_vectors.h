// Embedding vectors as the OpenAI reply carries them (a JSON array of floats, or base64 of
// little-endian float32), for the embeddings integration tests. Pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/integration/ferry_test_base.h"

namespace ferry::itest {

inline std::vector<float> floats(const json& e) {
  std::vector<float> v;
  for (const auto& x : e) v.push_back(x.get<float>());
  return v;
}

// Little-endian float32 from base64 (what the OpenAI client decodes).
inline std::vector<float> from_base64(const std::string& s) {
  static const std::string k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  for (size_t i = 0; i + 3 < s.size(); i += 4) {
    uint32_t n = 0;
    int pad = 0;
    for (size_t j = 0; j < 4; ++j) {
      if (s[i + j] == '=') {
        ++pad;
        n <<= 6;
      } else {
        n = (n << 6) | static_cast<uint32_t>(k.find(s[i + j]));
      }
    }
    bytes += static_cast<char>(n >> 16);
    if (pad < 2) bytes += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) bytes += static_cast<char>(n & 0xff);
  }
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);  // x86: little-endian
  return v;
}

}  // namespace ferry::itest
