// Reference quantize/dequantize against the GGUF block definitions, written out again here
// independently of the library, and round-trip error bounds per type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels.h"
#include "tests/local_engine/kernels/test_util.h"

namespace ferry::kernels {
namespace {

using testing::dequantize;
using testing::quantize;
using testing::random_row;

// Random block bytes whose fp16 scale fields are sane (no NaN/inf).
std::vector<uint8_t> random_blocks(TensorType type, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes(type, n).value()));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const int64_t bb = block_bytes(type);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (size_t off = 0; off < bytes.size(); off += static_cast<size_t>(bb)) {
    auto put = [&](size_t at) {
      const uint16_t h = fp32_to_fp16(scale(rng));
      std::memcpy(&bytes[off + at], &h, 2);
    };
    switch (type) {
      case TensorType::kQ8_0:
      case TensorType::kQ4_0:
      case TensorType::kQ5_0:
      case TensorType::kIQ4_NL:
      case TensorType::kIQ4_XS:
        put(0);
        break;
      case TensorType::kQ4_1:
      case TensorType::kQ5_1:
      case TensorType::kQ4_K:
      case TensorType::kQ5_K:
        put(0);
        put(2);
        break;
      case TensorType::kQ6_K:
        put(208);
        break;
      case TensorType::kQ2_K:
        put(80);
        put(82);
        break;
      case TensorType::kQ3_K:
        put(108);
        break;
      default:
        break;
    }
  }
  return bytes;
}

// ---- The block definitions, spelled out the way the format describes them ----

std::vector<float> spec_q8_0(const uint8_t* p, int64_t n) {
  std::vector<float> y;
  for (int64_t b = 0; b < n / 32; ++b, p += 34) {
    uint16_t d;
    std::memcpy(&d, p, 2);
    for (int i = 0; i < 32; ++i) y.push_back(fp16_to_fp32(d) * static_cast<int8_t>(p[2 + i]));
  }
  return y;
}

std::vector<float> spec_q4_0(const uint8_t* p, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / 32; ++b, p += 18) {
    uint16_t d;
    std::memcpy(&d, p, 2);
    for (int i = 0; i < 16; ++i) {
      y[static_cast<size_t>(b * 32 + i)] = fp16_to_fp32(d) * ((p[2 + i] & 15) - 8);
      y[static_cast<size_t>(b * 32 + i + 16)] = fp16_to_fp32(d) * ((p[2 + i] >> 4) - 8);
    }
  }
  return y;
}

// Q4_1: d, m (fp16), 16 bytes of nibbles; x = d q + m. Q5_0: d, 4 bytes of fifth bits, 16 of
// nibbles; x = d (q - 16). Q5_1: d, m, fifth bits, nibbles; x = d q + m. Element i < 16 takes
// the low nibble of byte i, element i + 16 its high nibble; the fifth bit of element i is bit
// i % 8 of fifth-bit byte i / 8.
std::vector<float> spec_q_small(const uint8_t* p, int64_t n, bool has_min, bool five_bit) {
  std::vector<float> y(static_cast<size_t>(n));
  const size_t bb = 2 + (has_min ? 2 : 0) + (five_bit ? 4 : 0) + 16;
  for (int64_t b = 0; b < n / 32; ++b, p += bb) {
    uint16_t dh, mh = 0;
    std::memcpy(&dh, p, 2);
    if (has_min) std::memcpy(&mh, p + 2, 2);
    const uint8_t* qh = p + (has_min ? 4 : 2);
    const uint8_t* qs = qh + (five_bit ? 4 : 0);
    for (int i = 0; i < 32; ++i) {
      int q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
      if (five_bit) q |= ((qh[i / 8] >> (i % 8)) & 1) << 4;
      const float d = fp16_to_fp32(dh);
      y[static_cast<size_t>(b * 32 + i)] = has_min ? d * q + fp16_to_fp32(mh) : d * (q - 16);
    }
  }
  return y;
}

// 6-bit scale/min j of the 12-byte K-quant scales field, from the bit layout:
// bytes 0-3: scales 0-3 (low 6 bits), top 2 bits = high bits of scales 4-7;
// bytes 4-7: mins 0-3 (low 6 bits), top 2 bits = high bits of mins 4-7;
// bytes 8-11: low nibble = low 4 bits of scales 4-7, high nibble = low 4 bits of mins 4-7.
void spec_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 0x3F;
    *m = s[4 + j] & 0x3F;
  } else {
    *sc = (s[8 + j - 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[8 + j - 4] >> 4) | ((s[4 + j - 4] >> 6) << 4);
  }
}

std::vector<float> spec_q4_k(const uint8_t* p, int64_t n, bool five_bit) {
  std::vector<float> y;
  const size_t bb = five_bit ? 176 : 144;
  for (int64_t b = 0; b < n / 256; ++b, p += bb) {
    uint16_t dh, mh;
    std::memcpy(&dh, p, 2);
    std::memcpy(&mh, p + 2, 2);
    const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
    const uint8_t* scales = p + 4;
    const uint8_t* qh = p + 16;
    const uint8_t* qs = five_bit ? p + 48 : p + 16;
    for (int chunk = 0; chunk < 4; ++chunk) {  // 64 elements per 32 bytes of qs
      for (int half = 0; half < 2; ++half) {   // low nibbles, then high nibbles
        const int j = 2 * chunk + half;
        int sc, m;
        spec_scale_min(scales, j, &sc, &m);
        for (int l = 0; l < 32; ++l) {
          int q = half ? qs[32 * chunk + l] >> 4 : qs[32 * chunk + l] & 15;
          if (five_bit) q += ((qh[l] >> j) & 1) * 16;
          y.push_back(d * sc * q - dmin * m);
        }
      }
    }
  }
  return y;
}

std::vector<float> spec_q6_k(const uint8_t* p, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / 256; ++b, p += 210) {
    const uint8_t* ql = p;
    const uint8_t* qh = p + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
    uint16_t dh;
    std::memcpy(&dh, p + 208, 2);
    const float d = fp16_to_fp32(dh);
    float* out = y.data() + b * 256;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, out += 128) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        out[l] = d * sc[l / 16] * q1;
        out[l + 32] = d * sc[l / 16 + 2] * q2;
        out[l + 64] = d * sc[l / 16 + 4] * q3;
        out[l + 96] = d * sc[l / 16 + 6] * q4;
      }
    }
  }
  return y;
}

// Q2_K (84 bytes): 16 scale bytes (low nibble scale, high nibble min of each 16 elements),
// 64 bytes of 2-bit values, d, dmin; x = d sc q - dmin m. Q3_K (110 bytes): 32 bytes of high
// bits, 64 of 2-bit values, 12 of scales, d; x = d (sc - 32) (q - 4 h'), h' = 1 when the high
// bit is clear. In both, 2-bit byte 32c + l (c = 0, 1) holds, at bits 2k..2k+1, element
// 128c + 32k + l; in Q3_K high-bit byte l holds, at bit 4c + k, that element's high bit.
std::vector<float> spec_q2_q3_k(const uint8_t* p, int64_t n, bool three) {
  std::vector<float> y(static_cast<size_t>(n));
  const size_t bb = three ? 110 : 84;
  for (int64_t b = 0; b < n / 256; ++b, p += bb) {
    const uint8_t* hm = p;
    const uint8_t* qs = three ? p + 32 : p + 16;
    const uint8_t* sc = three ? p + 96 : p;
    uint16_t dh, mh = 0;
    std::memcpy(&dh, three ? p + 108 : p + 80, 2);
    if (!three) std::memcpy(&mh, p + 82, 2);
    for (int c = 0; c < 2; ++c) {
      for (int k = 0; k < 4; ++k) {
        for (int l = 0; l < 32; ++l) {
          const int e = 128 * c + 32 * k + l, j = e / 16;
          int q = (qs[32 * c + l] >> (2 * k)) & 3;
          float v;
          if (three) {
            if (((hm[l] >> (4 * c + k)) & 1) == 0) q -= 4;
            // 6-bit scale j: low 4 bits in byte j % 8 (low nibble for j < 8), top 2 bits in
            // byte 8 + j % 4 at bit 2 (j / 4).
            const int lo = (sc[j % 8] >> (j < 8 ? 0 : 4)) & 15;
            const int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
            v = fp16_to_fp32(dh) * static_cast<float>((lo | (hi << 4)) - 32) * q;
          } else {
            v = fp16_to_fp32(dh) * static_cast<float>(sc[j] & 15) * q -
                fp16_to_fp32(mh) * static_cast<float>(sc[j] >> 4);
          }
          y[static_cast<size_t>(b * 256 + e)] = v;
        }
      }
    }
  }
  return y;
}

// IQ4_NL (18 bytes): d, 16 bytes of nibbles (as Q4_0) indexing the levels below. IQ4_XS (136
// bytes): d, 16 bits of scale high bits, 4 bytes of scale low nibbles, 8 x 16 bytes of nibbles;
// sub-block j's scale is (low nibble j % 2 of byte j / 2 | bits 2j, 2j+1 << 4) - 32.
std::vector<float> spec_iq4(const uint8_t* p, int64_t n, bool xs) {
  static const int kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};
  std::vector<float> y(static_cast<size_t>(n));
  const int64_t per = xs ? 256 : 32;
  for (int64_t b = 0; b < n / per; ++b, p += xs ? 136 : 18) {
    uint16_t dh, sh = 0;
    std::memcpy(&dh, p, 2);
    if (xs) std::memcpy(&sh, p + 2, 2);
    for (int j = 0; j < per / 32; ++j) {
      const uint8_t* qs = xs ? p + 8 + 16 * j : p + 2;
      const int ls =
          xs ? (((p[4 + j / 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4)) - 32 : 1;
      for (int i = 0; i < 32; ++i) {
        const int q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
        y[static_cast<size_t>(b * per + 32 * j + i)] =
            fp16_to_fp32(dh) * static_cast<float>(ls) * kLevels[q];
      }
    }
  }
  return y;
}

TEST(Quants, DequantizeMatchesTheBlockDefinitions) {
  const int64_t n = 1024;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    struct Case {
      TensorType type;
      std::vector<float> (*spec)(const uint8_t*, int64_t);
    };
    const Case cases[] = {
        {TensorType::kQ8_0, spec_q8_0},
        {TensorType::kQ4_0, spec_q4_0},
        {TensorType::kQ4_1,
         [](const uint8_t* p, int64_t m) { return spec_q_small(p, m, true, false); }},
        {TensorType::kQ5_0,
         [](const uint8_t* p, int64_t m) { return spec_q_small(p, m, false, true); }},
        {TensorType::kQ5_1,
         [](const uint8_t* p, int64_t m) { return spec_q_small(p, m, true, true); }},
        {TensorType::kQ4_K, [](const uint8_t* p, int64_t m) { return spec_q4_k(p, m, false); }},
        {TensorType::kQ5_K, [](const uint8_t* p, int64_t m) { return spec_q4_k(p, m, true); }},
        {TensorType::kQ6_K, spec_q6_k},
        {TensorType::kQ2_K, [](const uint8_t* p, int64_t m) { return spec_q2_q3_k(p, m, false); }},
        {TensorType::kQ3_K, [](const uint8_t* p, int64_t m) { return spec_q2_q3_k(p, m, true); }},
        {TensorType::kIQ4_NL, [](const uint8_t* p, int64_t m) { return spec_iq4(p, m, false); }},
        {TensorType::kIQ4_XS, [](const uint8_t* p, int64_t m) { return spec_iq4(p, m, true); }},
    };
    for (const auto& c : cases) {
      const auto bytes = random_blocks(c.type, n, seed);
      const auto expected = c.spec(bytes.data(), n);
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
        const TypeKernels* k = kernels_for(c.type, isa);
        if (!k) continue;
        std::vector<float> got(n);
        k->to_float(bytes.data(), got.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_FLOAT_EQ(got[i], expected[i])
              << tensor_type_name(c.type) << " " << isa_name(isa) << " element " << i;
        }
      }
    }
  }
}

TEST(Quants, KnownBlocks) {
  BlockQ4_0 b4{};
  b4.d = fp32_to_fp16(0.5f);
  b4.qs[0] = 0x2F;  // element 0: 15 - 8 = 7; element 16: 2 - 8 = -6
  float out[32];
  kernels_for(TensorType::kQ4_0, Isa::kScalar)->to_float(&b4, out, 32);
  EXPECT_FLOAT_EQ(out[0], 3.5f);
  EXPECT_FLOAT_EQ(out[16], -3.0f);
  EXPECT_FLOAT_EQ(out[1], -4.0f);

  uint8_t sc[8] = {1, 2, 3, 4, 63, 40, 17, 33}, mn[8] = {5, 6, 7, 8, 60, 0, 31, 48};
  uint8_t packed[12];
  pack_scale_min_k4(sc, mn, packed);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    unpack_scale_min_k4(j, packed, &s, &m);
    EXPECT_EQ(s, sc[j]) << j;
    EXPECT_EQ(m, mn[j]) << j;
    int s2, m2;
    spec_scale_min(packed, j, &s2, &m2);
    EXPECT_EQ(s2, sc[j]) << j;
    EXPECT_EQ(m2, mn[j]) << j;
  }
}

TEST(Quants, RoundTripErrorWithinBounds) {
  const int64_t n = 4096;
  struct Case {
    TensorType type;
    double max_rel_rmse;  // RMSE of the round trip / RMS of the data
  };
  const Case cases[] = {
      {TensorType::kF32, 0.0},   {TensorType::kF16, 1e-3},    {TensorType::kBF16, 5e-3},
      {TensorType::kQ8_0, 0.01}, {TensorType::kQ6_K, 0.035},  {TensorType::kQ5_K, 0.06},
      {TensorType::kQ4_K, 0.12}, {TensorType::kQ4_0, 0.14},   {TensorType::kQ4_1, 0.14},
      {TensorType::kQ5_0, 0.07}, {TensorType::kQ5_1, 0.07},   {TensorType::kQ3_K, 0.25},
      {TensorType::kQ2_K, 0.45}, {TensorType::kIQ4_NL, 0.12}, {TensorType::kIQ4_XS, 0.12}};
  const auto x = random_row(n, 42, 0.02f);
  double rms = 0;
  for (float v : x) rms += static_cast<double>(v) * v;
  rms = std::sqrt(rms / n);
  for (const auto& c : cases) {
    const auto q = quantize(c.type, x);
    const auto y = dequantize(c.type, q, n);
    double err = 0;
    for (int64_t i = 0; i < n; ++i) err += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
    const double rel = std::sqrt(err / n) / rms;
    EXPECT_LE(rel, c.max_rel_rmse) << tensor_type_name(c.type);
    // Quantizing the dequantized values again is stable (idempotent up to rounding).
    const auto y2 = dequantize(c.type, quantize(c.type, y), n);
    double drift = 0;
    for (int64_t i = 0; i < n; ++i)
      drift = std::max(drift, std::fabs(static_cast<double>(y2[i] - y[i])));
    EXPECT_LE(drift, 0.5 * c.max_rel_rmse * 4 * rms + 1e-7) << tensor_type_name(c.type);
  }
}

TEST(Quants, ZeroAndConstantRows) {
  for (TensorType t : testing::kWeightTypes) {
    std::vector<float> zeros(512, 0.0f);
    const auto y = dequantize(t, quantize(t, zeros), 512);
    for (float v : y) ASSERT_EQ(v, 0.0f) << tensor_type_name(t);
    std::vector<float> ones(512, 0.25f);
    const auto z = dequantize(t, quantize(t, ones), 512);
    for (float v : z) ASSERT_NEAR(v, 0.25f, 0.25f * 0.02f) << tensor_type_name(t);
  }
}

TEST(Quants, Q8KActivationsCarryBlockSums) {
  const auto x = random_row(512, 7);
  std::vector<BlockQ8_K> q(2);
  quantize_row_q8_k_ref(x.data(), q.data(), 512);
  for (const auto& b : q) {
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b.qs[16 * j + l];
      EXPECT_EQ(b.bsums[j], sum);
    }
    for (int l = 0; l < 256; ++l) EXPECT_GE(b.qs[l], -127);
  }
}

TEST(Quants, Q8_1ActivationsCarryScaledSums) {
  const auto x = random_row(256, 8);
  std::vector<BlockQ8_1> q(8);
  quantize_row_q8_1_ref(x.data(), q.data(), 256);
  std::vector<uint8_t> q8(static_cast<size_t>(row_bytes(TensorType::kQ8_0, 256).value()));
  quantize_row_q8_0_ref(x.data(), q8.data(), 256);
  const auto* b8 = reinterpret_cast<const BlockQ8_0*>(q8.data());
  for (int i = 0; i < 8; ++i) {
    int sum = 0;
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(q[i].qs[l], b8[i].qs[l]);  // the same rounding as Q8_0
      sum += q[i].qs[l];
    }
    EXPECT_EQ(q[i].d, b8[i].d);
    EXPECT_NEAR(fp16_to_fp32(q[i].s), fp16_to_fp32(q[i].d) * sum,
                std::fabs(fp16_to_fp32(q[i].d) * sum) * 2e-3 + 1e-6);
  }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    const TypeKernels* k = kernels_for(TensorType::kQ8_1, isa);
    if (!k) continue;
    std::vector<BlockQ8_1> got(8);
    k->from_float(x.data(), got.data(), 256);
    EXPECT_EQ(std::memcmp(got.data(), q.data(), sizeof(BlockQ8_1) * 8), 0) << isa_name(isa);
  }
}

// The scalar dot of (weights, quantized activations) equals the float dot of their
// dequantized forms: the two halves of each format agree.
TEST(Quants, ScalarDotMatchesDequantizedDot) {
  const int64_t n = 2048;
  for (TensorType t : testing::kWeightTypes) {
    const TypeKernels* k = kernels_for(t, Isa::kScalar);
    const auto w = quantize(t, random_row(n, 3, 0.05f));
    const auto x = random_row(n, 4);
    const auto a = quantize(k->vec_dot_type, x);
    const auto wf = dequantize(t, w, n);
    const auto af = dequantize(k->vec_dot_type, a, n);
    double expect = 0, scale = 0;
    for (int64_t i = 0; i < n; ++i) {
      expect += static_cast<double>(wf[i]) * af[i];
      scale += std::fabs(static_cast<double>(wf[i]) * af[i]);
    }
    EXPECT_NEAR(k->vec_dot(n, w.data(), a.data()), expect, 1e-5 * scale + 1e-6)
        << tensor_type_name(t);
  }
}

TEST(TensorTypes, NamesAndSizes) {
  EXPECT_EQ(tensor_type_name(TensorType::kQ4_K), "Q4_K");
  EXPECT_EQ(tensor_type_from_name("q5_k"), TensorType::kQ5_K);
  EXPECT_EQ(tensor_type_from_name("bf16"), TensorType::kBF16);
  EXPECT_FALSE(tensor_type_from_name("Q9_9").has_value());
  EXPECT_EQ(row_bytes(TensorType::kQ8_0, 64), 68u);
  EXPECT_EQ(row_bytes(TensorType::kQ4_K, 512), 288u);
  EXPECT_FALSE(row_bytes(TensorType::kQ4_K, 100).has_value());
  EXPECT_FALSE(row_bytes(TensorType::kQ8_0, -32).has_value());
  EXPECT_FALSE(row_bytes(TensorType::kF32, INT64_MAX).has_value());  // overflows uint64
  EXPECT_FALSE(tensor_type_known(5));
  EXPECT_TRUE(tensor_type_runs(TensorType::kQ6_K));
  EXPECT_TRUE(tensor_type_runs(TensorType::kQ5_0));
  EXPECT_FALSE(tensor_type_runs(TensorType::kIQ2_XXS));
  EXPECT_EQ(kernels_for(TensorType::kIQ2_XXS), nullptr);
  EXPECT_EQ(row_bytes(TensorType::kQ5_1, 896), 672u);  // 28 blocks of 24 bytes
}

}  // namespace
}  // namespace ferry::kernels
