// llama.cpp's numerics, pinned: the activation quantizers on hand-computed blocks, the float
// accumulation order of every quantized dot product (written out here from its definition), the
// forward-pass operations of ops.h against their definitions, and every ISA bit-identical to
// the scalar reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/ops.h"
#include "tests/local_engine/kernels/test_util.h"

namespace ferry::kernels {
namespace {

using testing::quantize;
using testing::random_row;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// ggml's hsum_float_8.
float hsum8(const float* v) {
  float r[4];
  for (int i = 0; i < 4; ++i) r[i] = v[4 + i] + v[i];
  return (r[0] + r[2]) + (r[1] + r[3]);
}

TEST(Numerics, Q8_0ActivationsRoundToNearestEvenWithScale127OverAmax) {
  float x[32] = {};
  x[0] = 127.0f;  // amax: d = 1, id = 127 / 127 = 1
  x[1] = 2.5f;    // ties go to even
  x[2] = 3.5f;
  x[3] = -2.5f;
  x[4] = 1.49f;
  x[5] = -126.5f;
  BlockQ8_0 b;
  quantize_row_q8_0_ref(x, &b, 32);
  EXPECT_EQ(fp16_to_fp32(b.d), 1.0f);
  const int8_t want[6] = {127, 2, 4, -2, 1, -126};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b.qs[i], want[i]) << i;
  for (int i = 6; i < 32; ++i) EXPECT_EQ(b.qs[i], 0) << i;

  float zeros[32] = {};
  quantize_row_q8_0_ref(zeros, &b, 32);
  EXPECT_EQ(b.d, 0);
  for (int8_t q : b.qs) EXPECT_EQ(q, 0);
}

TEST(Numerics, Q8_KActivationsMapTheFirstLargestElementToMinus127) {
  std::vector<float> x(256, 0.0f);
  x[5] = -4.0f;  // the first of the largest magnitude: iscale = -127 / -4
  x[7] = 4.0f;   // same magnitude, later: not the reference
  x[20] = 1.0f;  // 31.75 -> 32 (nearest even)
  x[21] = 0.5f;  // 15.875 -> 16
  BlockQ8_K b;
  quantize_row_q8_k_ref(x.data(), &b, 256);
  EXPECT_EQ(b.d, 1.0f / 31.75f);
  EXPECT_EQ(b.qs[5], -127);
  EXPECT_EQ(b.qs[7], 127);
  EXPECT_EQ(b.qs[20], 32);
  EXPECT_EQ(b.qs[21], 16);
  EXPECT_EQ(b.bsums[0], 0);   // -127 + 127
  EXPECT_EQ(b.bsums[1], 48);  // elements 16..31
  for (int j = 2; j < 16; ++j) EXPECT_EQ(b.bsums[j], 0);

  x[5] = 4.0f;  // a positive extreme: d is negative, the extreme still -127
  quantize_row_q8_k_ref(x.data(), &b, 256);
  EXPECT_EQ(b.d, -1.0f / 31.75f);
  EXPECT_EQ(b.qs[5], -127);
  EXPECT_EQ(b.qs[20], -32);

  std::fill(x.begin(), x.end(), 0.0f);
  quantize_row_q8_k_ref(x.data(), &b, 256);
  EXPECT_EQ(b.d, 0.0f);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.bsums[j], 0);
}

// The documented order of the Q8_0 dot product: 8 lanes of 4 consecutive products, one fused
// multiply-add per block and lane, hsum8 at the end. It is not the sequential sum, so the test
// can tell them apart.
TEST(Numerics, Q8_0DotAccumulatesInEightLanes) {
  const int64_t n = 4096;
  const auto wq = quantize(TensorType::kQ8_0, random_row(n, 11));
  const auto aq = quantize(TensorType::kQ8_0, random_row(n, 12));
  const auto* w = reinterpret_cast<const BlockQ8_0*>(wq.data());
  const auto* a = reinterpret_cast<const BlockQ8_0*>(aq.data());
  float lanes[8] = {};
  float sequential = 0.0f;
  for (int64_t i = 0; i < n / 32; ++i) {
    const float d = fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d);
    int total = 0;
    for (int k = 0; k < 8; ++k) {
      int s = 0;
      for (int l = 0; l < 4; ++l) s += w[i].qs[4 * k + l] * a[i].qs[4 * k + l];
      lanes[k] = std::fma(d, static_cast<float>(s), lanes[k]);
      total += s;
    }
    sequential += d * static_cast<float>(total);
  }
  const float want = hsum8(lanes);
  EXPECT_NE(bits(want), bits(sequential)) << "pick data where the orders differ";
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    EXPECT_EQ(bits(kernels_for(TensorType::kQ8_0, isa)->vec_dot(n, w, a)), bits(want))
        << isa_name(isa);
  }
}

// Q4_K: the scaled products in 8 lanes, the mins' products in 4 lanes (each its own fused
// multiply-add chain with -d_act * dmin), both summed at the end; the repacked (serial) forms
// with one accumulator each, per super-block (gemv) or per 64 elements (gemm).
TEST(Numerics, Q4_KDotOrders) {
  const int64_t n = 1024;
  const auto wq = quantize(TensorType::kQ4_K, random_row(n, 21, 0.05f));
  const auto aq = quantize(TensorType::kQ8_K, random_row(n, 22));
  const auto* w = reinterpret_cast<const BlockQ4_K*>(wq.data());
  const auto* a = reinterpret_cast<const BlockQ8_K*>(aq.data());
  float lanes[8] = {}, mins[4] = {};
  float serial = 0, serial_m = 0, gemm = 0, gemm_m = 0;
  for (int64_t i = 0; i < n / 256; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, w[i].scales, &sc[j], &mn[j]);
    auto q = [&](int e) { return (w[i].qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0xF; };
    auto dot = [&](int j, int from, int count) {
      int s = 0;
      for (int e = 32 * j + from; e < 32 * j + from + count; ++e) s += q(e) * a[i].qs[e];
      return s;
    };
    auto sub_sum = [&](int j) { return a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]; };
    const float d = a[i].d * fp16_to_fp32(w[i].d);
    const float dmin = -a[i].d * fp16_to_fp32(w[i].dmin);
    for (int m = 0; m < 4; ++m) {
      const int s = mn[2 * m] * sub_sum(2 * m) + mn[2 * m + 1] * sub_sum(2 * m + 1);
      mins[m] = std::fma(dmin, static_cast<float>(s), mins[m]);
    }
    for (int k = 0; k < 8; ++k) {
      int s = 0;
      for (int j = 0; j < 8; ++j) s += sc[j] * dot(j, 4 * k, 4);
      lanes[k] = std::fma(d, static_cast<float>(s), lanes[k]);
    }
    const float dx = fp16_to_fp32(w[i].d) * a[i].d, dmx = fp16_to_fp32(w[i].dmin) * a[i].d;
    int isum = 0, imin = 0;
    for (int p = 0; p < 4; ++p) {
      int ps = 0, pm = 0;
      for (int j = 2 * p; j < 2 * p + 2; ++j) {
        ps += sc[j] * dot(j, 0, 32);
        pm += mn[j] * sub_sum(j);
      }
      gemm = std::fma(static_cast<float>(ps), dx, gemm);
      gemm_m = std::fma(static_cast<float>(pm), dmx, gemm_m);
      isum += ps;
      imin += pm;
    }
    serial = std::fma(static_cast<float>(isum), dx, serial);
    serial_m = std::fma(static_cast<float>(imin), dmx, serial_m);
  }
  const float want = hsum8(lanes) + ((mins[0] + mins[2]) + (mins[1] + mins[3]));
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    const TypeKernels* k = kernels_for(TensorType::kQ4_K, isa);
    EXPECT_EQ(bits(k->vec_dot(n, w, a)), bits(want)) << isa_name(isa);
    EXPECT_EQ(bits(k->vec_dot_serial(n, w, a)), bits(serial - serial_m)) << isa_name(isa);
    float out = 0;
    k->vec_dot_batch_serial4(n, w, a, 0, 1, &out, 1);
    EXPECT_EQ(bits(out), bits(gemm - gemm_m)) << isa_name(isa);
  }
}

// The orders llama.cpp uses for Q2_K repacked on AVX-512 (q2_K_8x8: the scaled sum and the mins'
// sum each in one accumulator, per super-block in the gemv form and per 128 elements in the gemm
// form, subtracted at the end) and for IQ4_XS in its IQ panel gemm (one accumulator, per
// super-block), written out here from the block layouts.
TEST(Numerics, Q2_KAndIq4XsSerialOrders) {
  const int64_t n = 8192;
  {
    const auto wq = quantize(TensorType::kQ2_K, random_row(n, 23, 0.05f));
    const auto aq = quantize(TensorType::kQ8_K, random_row(n, 24));
    const auto* w = reinterpret_cast<const BlockQ2_K*>(wq.data());
    const auto* a = reinterpret_cast<const BlockQ8_K*>(aq.data());
    float serial = 0, serial_m = 0, gemm = 0, gemm_m = 0;
    for (int64_t i = 0; i < n / 256; ++i) {
      // Element e: bits 2 * ((e % 128) / 32) of byte 32 * (e / 128) + e % 32.
      auto q = [&](int e) {
        return (w[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      };
      const float dx = fp16_to_fp32(w[i].d) * a[i].d, dmx = fp16_to_fp32(w[i].dmin) * a[i].d;
      int isum = 0, imin = 0;
      for (int half = 0; half < 2; ++half) {
        int hs = 0, hm = 0;
        for (int j = 8 * half; j < 8 * half + 8; ++j) {
          int dot = 0;
          for (int e = 16 * j; e < 16 * j + 16; ++e) dot += q(e) * a[i].qs[e];
          hs += (w[i].scales[j] & 0xF) * dot;
          hm += (w[i].scales[j] >> 4) * a[i].bsums[j];
        }
        gemm = std::fma(static_cast<float>(hs), dx, gemm);
        gemm_m = std::fma(static_cast<float>(hm), dmx, gemm_m);
        isum += hs;
        imin += hm;
      }
      serial = std::fma(static_cast<float>(isum), dx, serial);
      serial_m = std::fma(static_cast<float>(imin), dmx, serial_m);
    }
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      const TypeKernels* k = kernels_for(TensorType::kQ2_K, isa);
      EXPECT_EQ(bits(k->vec_dot_serial(n, w, a)), bits(serial - serial_m)) << isa_name(isa);
      float out = 0;
      k->vec_dot_batch_serial4(n, w, a, 0, 1, &out, 1);
      EXPECT_EQ(bits(out), bits(gemm - gemm_m)) << isa_name(isa);
    }
    EXPECT_NE(bits(serial - serial_m), bits(gemm - gemm_m)) << "pick data where the forms differ";
  }
  {
    const auto wq = quantize(TensorType::kIQ4_XS, random_row(n, 25, 0.05f));
    const auto aq = quantize(TensorType::kQ8_K, random_row(n, 26));
    const auto* w = reinterpret_cast<const BlockIQ4_XS*>(wq.data());
    const auto* a = reinterpret_cast<const BlockQ8_K*>(aq.data());
    float serial = 0;
    for (int64_t i = 0; i < n / 256; ++i) {
      int isum = 0;
      for (int j = 0; j < 8; ++j) {
        const int ls = ((w[i].scales_l[j / 2] >> (4 * (j % 2))) & 0xF) |
                       (((w[i].scales_h >> (2 * j)) & 3) << 4);
        int dot = 0;
        for (int l = 0; l < 16; ++l) {
          dot += kIq4Values[w[i].qs[16 * j + l] & 15] * a[i].qs[32 * j + l];
          dot += kIq4Values[w[i].qs[16 * j + l] >> 4] * a[i].qs[32 * j + l + 16];
        }
        isum += (ls - 32) * dot;
      }
      serial = std::fma(static_cast<float>(isum), fp16_to_fp32(w[i].d) * a[i].d, serial);
    }
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      const TypeKernels* k = kernels_for(TensorType::kIQ4_XS, isa);
      EXPECT_EQ(bits(k->vec_dot_serial(n, w, a)), bits(serial)) << isa_name(isa);
    }
  }
}

// Q4_1 / Q5_1 against Q8_1: the values' products in 8 lanes with d_x d_y, and m_x s_y in one
// fused multiply-add chain, added after the lanes' sum (ggml_vec_dot_q4_1_q8_1 / q5_1_q8_1).
TEST(Numerics, OffsetTypesAddTheirMinimaInOneChain) {
  const int64_t n = 1024;
  for (TensorType t : {TensorType::kQ4_1, TensorType::kQ5_1}) {
    const auto wq = quantize(t, random_row(n, 61, 0.05f));
    const auto aq = quantize(TensorType::kQ8_1, random_row(n, 62));
    const auto* a = reinterpret_cast<const BlockQ8_1*>(aq.data());
    const auto wf = testing::dequantize(t, wq, n);
    const size_t bb = static_cast<size_t>(block_bytes(t));
    float lanes[8] = {}, summs = 0;
    for (int64_t i = 0; i < n / 32; ++i) {
      uint16_t dh, mh;
      std::memcpy(&dh, wq.data() + i * bb, 2);
      std::memcpy(&mh, wq.data() + i * bb + 2, 2);
      const float dx = fp16_to_fp32(dh), mx = fp16_to_fp32(mh);
      summs = std::fma(mx, fp16_to_fp32(a[i].s), summs);
      const float d = dx * fp16_to_fp32(a[i].d);
      for (int k = 0; k < 8; ++k) {
        int s = 0;
        for (int l = 4 * k; l < 4 * k + 4; ++l) {
          // q from the dequantized value: x = d q + m exactly for these small integers
          const int q = static_cast<int>(std::lround((wf[i * 32 + l] - mx) / dx));
          s += q * a[i].qs[l];
        }
        lanes[k] = std::fma(d, static_cast<float>(s), lanes[k]);
      }
    }
    const float want = hsum8(lanes) + summs;
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      EXPECT_EQ(bits(kernels_for(t, isa)->vec_dot(n, wq.data(), aq.data())), bits(want))
          << tensor_type_name(t) << " " << isa_name(isa);
    }
  }
}

// IQ4_NL: even blocks in one set of 8 lanes, odd blocks in another, the two added lane by lane
// and summed; an odd last block after that in one fused multiply-add. The repacked (serial)
// form as Q4_0's: one accumulator, one fused multiply-add per block.
TEST(Numerics, Iq4NlDotOrders) {
  const int64_t n = 32 * 33;  // an odd number of blocks
  const auto wq = quantize(TensorType::kIQ4_NL, random_row(n, 71, 0.05f));
  const auto aq = quantize(TensorType::kQ8_0, random_row(n, 72));
  const auto* w = reinterpret_cast<const BlockIQ4_NL*>(wq.data());
  const auto* a = reinterpret_cast<const BlockQ8_0*>(aq.data());
  float lanes[2][8] = {}, serial = 0;
  int tail = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    int v[32];
    for (int l = 0; l < 16; ++l) {
      v[l] = kIq4Values[w[i].qs[l] & 15];
      v[l + 16] = kIq4Values[w[i].qs[l] >> 4];
    }
    const float d = fp16_to_fp32(a[i].d) * fp16_to_fp32(w[i].d);
    int total = 0;
    for (int k = 0; k < 8; ++k) {
      int s = 0;
      for (int l = 4 * k; l < 4 * k + 4; ++l) s += v[l] * a[i].qs[l];
      if (i < 32) lanes[i % 2][k] = std::fma(d, static_cast<float>(s), lanes[i % 2][k]);
      total += s;
    }
    if (i == 32) tail = total;
    serial =
        std::fma(static_cast<float>(total), fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d), serial);
  }
  float sum[8];
  for (int k = 0; k < 8; ++k) sum[k] = lanes[0][k] + lanes[1][k];
  const float want =
      std::fma(fp16_to_fp32(a[32].d) * fp16_to_fp32(w[32].d), static_cast<float>(tail), hsum8(sum));
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    const TypeKernels* k = kernels_for(TensorType::kIQ4_NL, isa);
    EXPECT_EQ(bits(k->vec_dot(n, w, a)), bits(want)) << isa_name(isa);
    EXPECT_EQ(bits(k->vec_dot_serial(n, w, a)), bits(serial)) << isa_name(isa);
  }
}

// Every ISA gives the scalar reference's bits, for every form of every quantized dot product.
TEST(Numerics, EveryIsaMatchesTheScalarReferenceBitForBit) {
  const int64_t n = 2048;
  const int64_t n_act = 7;  // 4 + 2 + 1: every batched width
  for (TensorType t : testing::kWeightTypes) {
    if (block_elems(t) == 1) continue;  // the float types sum in their own orders
    const TypeKernels* ref = kernels_for(t, Isa::kScalar);
    const auto w = quantize(t, random_row(n, 31, 0.05f));
    std::vector<uint8_t> acts;
    size_t stride = 0;
    for (int64_t j = 0; j < n_act; ++j) {
      const auto q = quantize(ref->vec_dot_type, random_row(n, 40 + static_cast<uint32_t>(j)));
      stride = q.size();
      acts.insert(acts.end(), q.begin(), q.end());
    }
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      const TypeKernels* k = kernels_for(t, isa);
      std::vector<float> want(n_act), got(n_act);
      ref->vec_dot_batch(n, w.data(), acts.data(), static_cast<int64_t>(stride), n_act, want.data(),
                         1);
      k->vec_dot_batch(n, w.data(), acts.data(), static_cast<int64_t>(stride), n_act, got.data(),
                       1);
      for (int64_t j = 0; j < n_act; ++j) {
        EXPECT_EQ(bits(got[j]), bits(want[j])) << tensor_type_name(t) << " " << isa_name(isa);
        EXPECT_EQ(bits(k->vec_dot(n, w.data(), acts.data() + j * stride)), bits(want[j]));
      }
      if (ref->vec_dot_serial == nullptr) continue;
      ref->vec_dot_batch_serial(n, w.data(), acts.data(), static_cast<int64_t>(stride), n_act,
                                want.data(), 1);
      k->vec_dot_batch_serial(n, w.data(), acts.data(), static_cast<int64_t>(stride), n_act,
                              got.data(), 1);
      for (int64_t j = 0; j < n_act; ++j) EXPECT_EQ(bits(got[j]), bits(want[j])) << "serial";
      ref->vec_dot_batch_serial4(n, w.data(), acts.data(), static_cast<int64_t>(stride), n_act,
                                 want.data(), 1);
      k->vec_dot_batch_serial4(n, w.data(), acts.data(), static_cast<int64_t>(stride), n_act,
                               got.data(), 1);
      for (int64_t j = 0; j < n_act; ++j) EXPECT_EQ(bits(got[j]), bits(want[j])) << "serial4";
    }
  }
}

TEST(Numerics, ActivationQuantizersAreTheSameOnEveryIsa) {
  auto x = random_row(2048, 91);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // an all-zero block of each type's size
  for (int i = 256; i < 512; ++i) x[i] = 0.0f;
  x[600] = 9.0f;  // ties in magnitude: the first one decides the Q8_K sign
  x[601] = -9.0f;
  x[700] = -9.5f;
  x[701] = 9.5f;
  for (TensorType t : {TensorType::kQ8_0, TensorType::kQ8_K, TensorType::kQ8_1}) {
    const auto want = quantize(t, x);
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      std::vector<uint8_t> got(want.size());
      kernels_for(t, isa)->from_float(x.data(), got.data(), 2048);
      EXPECT_EQ(got, want) << tensor_type_name(t) << " " << isa_name(isa);
    }
  }
}

TEST(Numerics, RmsNormSumsSquaresInDouble) {
  const auto x = random_row(960, 51);
  const auto w = random_row(960, 52);
  double sum = 0;
  for (float v : x) sum += static_cast<double>(v * v);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / 960.0) + 1e-5f);
  std::vector<float> out(960);
  rms_norm_row(960, x.data(), w.data(), 1e-5f, out.data());
  for (int i = 0; i < 960; ++i) ASSERT_EQ(bits(out[i]), bits(x[i] * scale * w[i])) << i;
}

// The batch form gives every row rms_norm_row's bits, whole groups of 8 and the rest, in place
// or not.
TEST(Numerics, RmsNormRowsGivesEachRowTheBitsOfRmsNormRow) {
  const auto w = random_row(960, 53);
  for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 17}) {
    for (int64_t n : {64, 960}) {
      const auto x = random_row(static_cast<int>(rows * n), static_cast<uint32_t>(60 + rows));
      std::vector<float> want(x.size()), got(x.size()), in_place = x;
      for (int64_t r = 0; r < rows; ++r) {
        rms_norm_row(n, x.data() + r * n, w.data(), 1e-5f, want.data() + r * n);
      }
      rms_norm_rows(rows, n, x.data(), w.data(), 1e-5f, got.data());
      rms_norm_rows(rows, n, in_place.data(), w.data(), 1e-5f, in_place.data());
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(bits(got[i]), bits(want[i])) << rows << " x " << n << " at " << i;
        ASSERT_EQ(bits(in_place[i]), bits(want[i])) << rows << " x " << n << " at " << i;
      }
    }
  }
}

TEST(Numerics, RopeAnglesAreAChainOfProductsAndOneProductIsFused) {
  const float ts = rope_theta_scale(10000.0f, 64);
  EXPECT_EQ(ts, std::pow(10000.0f, -2.0f / 64.0f));
  float cache[64];
  rope_cache(7, 64, ts, 1.0f, nullptr, cache);
  float theta = 7.0f;
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(cache[2 * i], std::cos(theta)) << i;
    EXPECT_EQ(cache[2 * i + 1], std::sin(theta)) << i;
    theta *= ts;
  }
  const float factors[32] = {1, 2, 4, 8};
  rope_cache(7, 8, ts, 0.5f, factors, cache);
  EXPECT_EQ(cache[2], std::cos(0.5f * ((7.0f * ts) / 2.0f)));

  for (bool neox : {false, true}) {
    auto heads = random_row(2 * 64, 53);
    const auto before = heads;
    rope_cache(7, 64, ts, 1.0f, nullptr, cache);
    rope_apply(cache, 64, neox, 2, 64, heads.data());
    for (int h = 0; h < 2; ++h) {
      for (int i = 0; i < 32; ++i) {
        const int a = neox ? i : 2 * i, b = neox ? i + 32 : 2 * i + 1;
        const float x0 = before[h * 64 + a], x1 = before[h * 64 + b];
        const float c = cache[2 * i], s = cache[2 * i + 1];
        EXPECT_EQ(bits(heads[h * 64 + a]), bits(std::fma(x0, c, -(x1 * s))));
        EXPECT_EQ(bits(heads[h * 64 + b]), bits(std::fma(x0, s, x1 * c)));
      }
    }
  }
}

TEST(Numerics, SwigluIsAccurateAndTheSameOnEveryIsa) {
  auto gate = random_row(1000, 61, 4.0f);  // 992 through the exp approximation, 8 through expf
  gate[3] = 150.0f;                        // exp(-150) underflows
  gate[4] = -150.0f;                       // exp(150) overflows: silu = -0
  gate[5] = 95.0f;                         // exp(-95) is subnormal
  const auto up = random_row(1000, 62);
  std::vector<float> want(1000), got(1000);
  detail::swiglu_row_ref(1000, gate.data(), up.data(), want.data());
  swiglu_row(1000, gate.data(), up.data(), got.data());
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(bits(got[i]), bits(want[i])) << i << " gate " << gate[i];
    const double x = gate[i];
    const double exact = x / (1.0 + std::exp(-x)) * up[i];
    EXPECT_NEAR(want[i], exact, 4e-7 * std::fabs(exact) + 1e-30) << i;
  }
}

// Greedy sampling's argmax is std::max_element's on every ISA: the first of equal maxima (and
// -0 / +0 count as equal), NaNs skipped unless at 0, tails shorter than a vector.
TEST(Numerics, ArgmaxIsTheFirstLargestAsMaxElementGivesIt) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> cases;
  for (const int n : {1, 7, 8, 9, 17, 1000, 49152}) {
    auto x = random_row(n, 90 + static_cast<uint32_t>(n));
    cases.push_back(x);
    if (n > 8) {
      x[static_cast<size_t>(n) / 2] = 100.0f;  // a tie: the first one wins
      x[static_cast<size_t>(n) - 1] = 100.0f;
      cases.push_back(x);
      x[3] = nan;  // NaNs are skipped
      x[static_cast<size_t>(n) - 2] = nan;
      cases.push_back(x);
      x[0] = nan;  // ... except at 0
      cases.push_back(x);
    }
  }
  cases.push_back({-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf});
  cases.push_back({-1.0f, -0.0f, -2.0f, 0.0f, -3.0f, -0.0f, -1.0f, -5.0f, 0.0f, -0.5f});
  cases.push_back({-0.0f, -1.0f, 0.0f, -2.0f, -3.0f, -4.0f, -5.0f, -6.0f, -7.0f, 0.0f});
  cases.push_back({nan, nan, nan, nan, nan, nan, nan, nan, nan, 1.0f});
  cases.push_back({1.0f, nan, nan, nan, nan, nan, nan, nan, nan, nan, 2.0f});
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::vector<float>& x = cases[c];
    const auto n = static_cast<int64_t>(x.size());
    const int64_t want = std::max_element(x.begin(), x.end()) - x.begin();
    EXPECT_EQ(detail::argmax_row_ref(n, x.data()), want) << c;
    EXPECT_EQ(argmax_row(n, x.data()), want) << c;  // the active ISA (the suite runs under each)
  }
}

TEST(Numerics, DotF16FollowsTheFourBySixteenLaneTree) {
  for (int64_t n : {64, 80, 128, 200}) {
    const auto xf = random_row(n, 71), yf = random_row(n, 72);
    std::vector<uint16_t> x(n), y(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = fp32_to_fp16(xf[i]);
      y[i] = fp32_to_fp16(yf[i]);
    }
    const float want = detail::dot_f16_f16_ref(n, x.data(), y.data());
    EXPECT_EQ(bits(dot_f16_f16(n, x.data(), y.data())), bits(want)) << n;
    double exact = 0;
    for (int64_t i = 0; i < n; ++i)
      exact += static_cast<double>(fp16_to_fp32(x[i])) * fp16_to_fp32(y[i]);
    EXPECT_NEAR(want, exact, 1e-5 * n);
  }
}

// Random F16 keys and values of n_keys positions, stride apart (the cache's form), and the F32
// forms the tiled attention reads: keys transposed (kt: dimension, position), values (vv).
struct AttentionInputs {
  std::vector<uint16_t> k, v;
  std::vector<float> kt, vv;
};
AttentionInputs attention_inputs(int64_t hd, int64_t n_keys, int64_t stride, uint32_t seed) {
  AttentionInputs in;
  const auto kf = random_row(n_keys * stride, seed);
  const auto vf = random_row(n_keys * stride, seed + 1);
  for (size_t i = 0; i < kf.size(); ++i) {
    in.k.push_back(fp32_to_fp16(kf[i]));
    in.v.push_back(fp32_to_fp16(vf[i]));
  }
  in.kt.resize(static_cast<size_t>(hd * n_keys));
  in.vv.resize(static_cast<size_t>(n_keys * hd));
  for (int64_t p = 0; p < n_keys; ++p) {
    for (int64_t d = 0; d < hd; ++d) {
      in.kt[d * n_keys + p] = fp16_to_fp32(in.k[p * stride + d]);
      in.vv[p * hd + d] = fp16_to_fp32(in.v[p * stride + d]);
    }
  }
  return in;
}

// Both attention forms against a plain double-precision softmax attention, and the active ISA
// against the reference bit for bit.
TEST(Numerics, AttentionFormsAgreeWithSoftmaxAttention) {
  const int64_t hd = 64, n_keys = 150, stride = 128;  // two heads' worth of cache per position
  const auto qf = random_row(hd, 81);
  const AttentionInputs in = attention_inputs(hd, n_keys, stride, 82);
  const std::vector<uint16_t>&k = in.k, &v = in.v;
  const std::vector<float>&kt = in.kt, &vv = in.vv;
  const float scale = 0.125f;
  // Reference: softmax over the F16-rounded keys and values, in double.
  std::vector<double> s(n_keys);
  double max_s = -1e300, sum = 0;
  for (int64_t p = 0; p < n_keys; ++p) {
    double dot = 0;
    for (int64_t d = 0; d < hd; ++d)
      dot += static_cast<double>(qf[d]) * fp16_to_fp32(k[p * stride + d]);
    s[p] = dot * scale;
    max_s = std::max(max_s, s[p]);
  }
  for (auto& x : s) sum += (x = std::exp(x - max_s));
  std::vector<double> exact(hd, 0.0);
  for (int64_t p = 0; p < n_keys; ++p) {
    for (int64_t d = 0; d < hd; ++d) exact[d] += s[p] / sum * fp16_to_fp32(v[p * stride + d]);
  }

  std::vector<float> f16_ref(hd), f16_got(hd), tiled_ref(hd), tiled_got(hd);
  detail::attend_head_f16_ref(hd, qf.data(), k.data(), stride, v.data(), stride, n_keys, scale,
                              f16_ref.data());
  attend_head_f16(hd, qf.data(), k.data(), stride, v.data(), stride, n_keys, scale, f16_got.data());
  detail::attend_head_tiled_ref(hd, qf.data(), kt.data(), n_keys, vv.data(), hd, n_keys, scale,
                                tiled_ref.data());
  attend_head_tiled(hd, qf.data(), kt.data(), n_keys, vv.data(), hd, n_keys, scale,
                    tiled_got.data());
  for (int64_t d = 0; d < hd; ++d) {
    EXPECT_EQ(bits(f16_got[d]), bits(f16_ref[d])) << d;
    EXPECT_EQ(bits(tiled_got[d]), bits(tiled_ref[d])) << d;
    // The F16 running sum loses about 11 bits per update; the tiled form keeps F32.
    EXPECT_NEAR(f16_ref[d], exact[d], 2e-3) << d;
    EXPECT_NEAR(tiled_ref[d], exact[d], 1e-5) << d;
  }
}

// Softmax attention in double over keys [first, n_keys) of F16-rounded keys and values, with
// scores soft-capped (cap * tanh(s / cap)) when cap > 0.
std::vector<double> exact_attention(const std::vector<float>& q, const std::vector<uint16_t>& k,
                                    const std::vector<uint16_t>& v, int64_t hd, int64_t stride,
                                    int64_t first, int64_t n_keys, double scale, double cap) {
  std::vector<double> s(static_cast<size_t>(n_keys), 0.0);
  double max_s = -1e300, sum = 0;
  for (int64_t p = first; p < n_keys; ++p) {
    double dot = 0;
    for (int64_t d = 0; d < hd; ++d)
      dot += static_cast<double>(q[d]) * fp16_to_fp32(k[p * stride + d]);
    s[p] = cap > 0 ? cap * std::tanh(dot * scale / cap) : dot * scale;
    max_s = std::max(max_s, s[p]);
  }
  for (int64_t p = first; p < n_keys; ++p) sum += (s[p] = std::exp(s[p] - max_s));
  std::vector<double> out(static_cast<size_t>(hd), 0.0);
  for (int64_t p = first; p < n_keys; ++p) {
    for (int64_t d = 0; d < hd; ++d) out[d] += s[p] / sum * fp16_to_fp32(v[p * stride + d]);
  }
  return out;
}

// A sliding window (keys before first_key masked) and soft-capped scores in both attention
// forms: against double-precision attention over the window, and the active ISA against the
// scalar reference bit for bit. The tiled form masks inside its 64-key tiles (first_key 70:
// the first tile skipped, the second partly masked); the F16 form starts at the window.
TEST(Numerics, WindowedAndSoftCappedAttentionInBothForms) {
  const int64_t hd = 64, n_keys = 150, stride = 64;
  const auto qf = random_row(hd, 91);
  const AttentionInputs in = attention_inputs(hd, n_keys, stride, 92);
  const std::vector<uint16_t>&k = in.k, &v = in.v;
  const std::vector<float>&kt = in.kt, &vv = in.vv;
  const float scale = 0.5f;
  for (const int64_t first : {int64_t{0}, int64_t{70}}) {
    for (const float cap : {0.0f, 3.0f}) {
      const auto exact = exact_attention(qf, k, v, hd, stride, first, n_keys, scale, cap);
      std::vector<float> f16_ref(hd), f16_got(hd), tiled_ref(hd), tiled_got(hd);
      detail::attend_head_f16_ref(hd, qf.data(), k.data() + first * stride, stride,
                                  v.data() + first * stride, stride, n_keys - first, scale,
                                  f16_ref.data(), cap);
      attend_head_f16(hd, qf.data(), k.data() + first * stride, stride, v.data() + first * stride,
                      stride, n_keys - first, scale, f16_got.data(), cap);
      detail::attend_head_tiled_ref(hd, qf.data(), kt.data(), n_keys, vv.data(), hd, n_keys, scale,
                                    tiled_ref.data(), first, cap);
      const TiledRow row{qf.data(), n_keys, tiled_got.data(), first};
      attend_rows_tiled(hd, 1, &row, kt.data(), n_keys, vv.data(), hd, scale, cap);
      for (int64_t d = 0; d < hd; ++d) {
        EXPECT_EQ(bits(f16_got[d]), bits(f16_ref[d])) << first << " " << cap << " " << d;
        EXPECT_EQ(bits(tiled_got[d]), bits(tiled_ref[d])) << first << " " << cap << " " << d;
        // The F16 running sum: about 11 bits per update.
        EXPECT_NEAR(f16_ref[d], exact[d], 3e-3) << first << " " << cap << " " << d;
        EXPECT_NEAR(tiled_ref[d], exact[d], 1e-5) << first << " " << cap << " " << d;
      }
    }
  }
}

// GeGLU: ggml's F16 GELU table (tanh form) times up, exact at the clamps, within F16 rounding
// of the tanh-form GELU elsewhere; soft-capping as cap * tanh(x / cap).
TEST(Numerics, GegluAndSoftcapFollowTheirDefinitions) {
  const std::vector<float> gate = {-12.0f, -10.0f, -3.0f, -0.5f, 0.0f,
                                   0.25f,  1.0f,   4.0f,  10.0f, 11.0f};
  std::vector<float> up(gate.size(), 2.0f), out(gate.size());
  geglu_row(static_cast<int64_t>(gate.size()), gate.data(), up.data(), out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[8], 20.0f);
  EXPECT_EQ(out[9], 22.0f);
  for (size_t i = 2; i < 8; ++i) {
    const double x = fp16_to_fp32(fp32_to_fp16(gate[i]));
    const double gelu =
        0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(out[i], 2.0 * gelu, 2.0 * (std::fabs(gelu) * 1e-3 + 1e-7)) << gate[i];
  }
  std::vector<float> logits = {-100.0f, -1.0f, 0.0f, 2.0f, 100.0f};
  softcap_row(static_cast<int64_t>(logits.size()), 30.0f, logits.data());
  EXPECT_NEAR(logits[0], -30.0 * std::tanh(100.0 / 30.0), 1e-4);
  EXPECT_NEAR(logits[1], -30.0 * std::tanh(1.0 / 30.0), 1e-6);
  EXPECT_EQ(logits[2], 0.0f);
  EXPECT_NEAR(logits[4], 30.0 * std::tanh(100.0 / 30.0), 1e-4);
}

}  // namespace
}  // namespace ferry::kernels
