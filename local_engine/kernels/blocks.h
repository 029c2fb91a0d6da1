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

// Q4_1: x[i] = d * q[i] + m; q[i] as in Q4_0 (low nibbles the first 16, high the next 16).
struct BlockQ4_1 {
  uint16_t d;  // fp16 scale
  uint16_t m;  // fp16 offset (the block's minimum)
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block is 20 bytes");

// Q5_0: x[i] = d * (q[i] - 16); the low four bits of q[i] as in Q4_0, the fifth is bit i of
// qh read as a little-endian uint32.
struct BlockQ5_0 {
  uint16_t d;  // fp16 scale
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block is 22 bytes");

// Q5_1: x[i] = d * q[i] + m, q[i] (0..31) stored as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block is 24 bytes");

// Q8_1: the activation type of Q4_1 / Q5_1 dot products. x = d * qs; s = fp16(d * sum(qs)).
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_1) == 36, "Q8_1 block is 36 bytes");

// Q2_K: 16 sub-blocks of 16; scales[j] holds sub-block j's 4-bit scale (low nibble) and min
// (high nibble); x = d * sc * q - dmin * m, q in 0..3. Per 128 elements (half h): qs[32h + l]
// bits 2s..2s+1 hold element 128h + 32s + l (s < 4, l < 32).
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;     // fp16 super-block scale of the scales
  uint16_t dmin;  // fp16 super-block scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block is 84 bytes");

// Q3_K: 16 sub-blocks of 16 with signed 6-bit scales (see q3_k_scale); x = d * sc * q, q in
// -4..3: the low two bits as in Q2_K, minus 4 where bit 4h + s of hmask[l] is clear.
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block is 110 bytes");

// Scale j (0..15) of a Q3_K block, -32..31: low four bits from the nibbles of bytes 0-7 (low
// nibbles for j < 8, high for j >= 8), the top two bits from byte 8 + j % 4, bits 2 (j / 4).
inline int q3_k_scale(const uint8_t* scales, int j) {
  const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// IQ4_NL: x[i] = d * kIq4Values[q[i]], q[i] the nibbles as in Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18, "IQ4_NL block is 18 bytes");

// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales ls (low four bits: nibble j % 2 of
// scales_l[j / 2]; top two: bits 2j..2j+1 of scales_h); x = d * (ls - 32) * kIq4Values[q],
// sub-block j's nibbles in qs[16j ..] as in IQ4_NL.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136, "IQ4_XS block is 136 bytes");

// The 16 non-uniform levels of IQ4_NL / IQ4_XS.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

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
