// Block layouts of the quantized tensor types, byte for byte as GGUF/ggml stores them, pinned
// with static_asserts. Plain structs; thread-safe as data.
#pragma once

#include <cstdint>

namespace ferry::kernels {

inline constexpr int kQK = 32;    // elements per Q8_0 / Q4_0 block
inline constexpr int kQKK = 256;  // elements per K-quant super-block

// Q8_0: x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");

// Q4_0: x[i] = d * (q[i] - 8); q[i] = qs[i] & 15 for i < 16, qs[i - 16] >> 4 for i >= 16.
struct BlockQ4_0 {
  uint16_t d;  // fp16 scale
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");

// Q4_K: 8 sub-blocks of 32; sub-block j has a 6-bit scale sc[j] and min m[j] packed in
// `scales` (see unpack_scale_min_k4); x = d * sc[j] * q - dmin * m[j], q in 0..15.
// qs holds, per 64 elements, 32 bytes: low nibbles are the first 32, high nibbles the next 32.
struct BlockQ4_K {
  uint16_t d;     // fp16 super-block scale of the scales
  uint16_t dmin;  // fp16 super-block scale of the mins
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block is 144 bytes");

// Q5_K: as Q4_K plus a fifth bit per element: element 64*p + l (l < 32) takes bit 2p of
// qh[l], element 64*p + 32 + l takes bit 2p+1. q in 0..31.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block is 176 bytes");

// Q6_K: 16 sub-blocks of 16 with int8 scales; x = d * scales[j] * (q - 32), q in 0..63.
// Per 128 elements (half h): ql[64h + l] low nibble -> element l, ql[64h + 32 + l] low ->
// 32 + l, ql[64h + l] high -> 64 + l, ql[64h + 32 + l] high -> 96 + l (l < 32); the two high
// bits come from qh[32h + l] bits 0-1, 2-3, 4-5, 6-7 for those four groups.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block is 210 bytes");

// Q8_K: the activation type for the K-quants' dot products. x = d * qs; bsums[j] is the sum
// of qs[16j .. 16j+15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
static_assert(sizeof(BlockQ8_K) == 292, "Q8_K block is 292 bytes");

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K `scales` array.
inline void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Packs eight 6-bit scales and mins into the 12-byte layout unpack_scale_min_k4 reads.
inline void pack_scale_min_k4(const uint8_t* scale, const uint8_t* min, uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>((scale[j] & 63) | ((scale[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>((min[j] & 63) | ((min[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((scale[j + 4] & 0xF) | ((min[j + 4] & 0xF) << 4));
  }
}

}  // namespace ferry::kernels
