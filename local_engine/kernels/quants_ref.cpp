// Scalar reference kernels: quantize, dequantize and dot products for every type ferry runs.
// These define correctness; every SIMD kernel is tested against them.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels_internal.h"
#include "local_engine/kernels/ops.h"

namespace ferry::kernels {
namespace {

int nearest_int(float x) {
  return static_cast<int>(std::nearbyint(x));
}

// The element of x[0..n) of largest magnitude (the first, on ties), with its sign.
float signed_extreme(const float* x, int n) {
  float amax = 0, extreme = 0;
  for (int l = 0; l < n; ++l) {
    if (std::fabs(x[l]) > amax) {
      amax = std::fabs(x[l]);
      extreme = x[l];
    }
  }
  return extreme;
}

// The dot products below follow llama.cpp's x86 kernels operation for operation (ggml-cpu,
// arch/x86/quants.c and repack.cpp, AVX2/AVX-512 builds), so the SIMD versions and llama.cpp
// give the same bits: integer partial sums in eight 32-bit lanes (lane k holds the products of
// bytes 4k..4k+3 of each 32-byte group), converted to float and accumulated per lane with a
// fused multiply-add per block, the lanes summed in hsum8's order at the end.

// ggml's hsum_float_8: upper half onto lower, then pairs.
float hsum8(const float* v) {
  float r[4];
  for (int i = 0; i < 4; ++i) r[i] = v[4 + i] + v[i];
  return (r[0] + r[2]) + (r[1] + r[3]);
}

// Integer dot of 4 consecutive elements: one 32-bit lane of vpdpbusd / maddubs+madd.
template <typename A, typename B>
int32_t dot4(const A* a, const B* b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
}

// ---- plain float types ----

void f32_to_float(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void f32_from_float(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void f16_to_float(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}
void f16_from_float(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}
void bf16_to_float(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
}
void bf16_from_float(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
}

float f32_dot(int64_t n, const void* w, const void* a) {
  return detail::dot_f32_ref(n, static_cast<const float*>(w), static_cast<const float*>(a));
}
// F16 weights take F16 activations, as in llama.cpp: ggml_vec_dot_f16's order for one
// activation row (the 4 x 16 lane tree of ops.h), and for batches of several rows the order of
// llama.cpp's tinyBLAS F16 GEMM (one 16-lane chain of fused multiply-adds over the row, then
// the 16 lanes reduced like _mm512_reduce_add_ps), which it uses when the matrix has a multiple
// of 4 rows and of 16 columns (matmul.cpp decides).
float f16_dot(int64_t n, const void* w, const void* a) {
  return detail::dot_f16_f16_ref(n, static_cast<const uint16_t*>(w),
                                 static_cast<const uint16_t*>(a));
}

float f16_dot_tiled(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  float lanes[16] = {};
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) {
      lanes[l] = std::fma(fp16_to_fp32(x[i + l]), fp16_to_fp32(y[i + l]), lanes[l]);
    }
  }
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = lanes[8 + i] + lanes[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[4 + i] + t3[i];
  return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}
// The batch-invariant F16 order (kernels.h, TypeKernels::gemm_invariant): per dot one 8-lane
// chain of fused multiply-adds over whole 8-element chunks (lane l sums elements 8i + l),
// reduced as hsum_ps reduces (lanes l and l + 4, then 0 + 2 and 1 + 3, then the two), then the
// remaining elements in index order; activations are the F16 row widened to float.
float f16_dot_invariant(int64_t n, const uint16_t* w, const uint16_t* a) {
  float lanes[8] = {};
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8) {
    for (int l = 0; l < 8; ++l) {
      lanes[l] = std::fma(fp16_to_fp32(w[i + l]), fp16_to_fp32(a[i + l]), lanes[l]);
    }
  }
  float s4[4];
  for (int i = 0; i < 4; ++i) s4[i] = lanes[i] + lanes[i + 4];
  float sum = (s4[0] + s4[2]) + (s4[1] + s4[3]);
  for (int64_t i = n8; i < n; ++i) sum = std::fma(fp16_to_fp32(w[i]), fp16_to_fp32(a[i]), sum);
  return sum;
}

void f16_gemm_invariant(int64_t n, const void* w, int64_t w_stride, int64_t n_w, const void* a,
                        int64_t a_stride, int64_t n_a, float* out, int64_t out_stride) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int64_t t = 0; t < n_a; ++t) {
    for (int64_t r = 0; r < n_w; ++r) {
      out[t * out_stride + r] =
          f16_dot_invariant(n, reinterpret_cast<const uint16_t*>(wb + r * w_stride),
                            reinterpret_cast<const uint16_t*>(ab + t * a_stride));
    }
  }
}

float bf16_dot(int64_t n, const void* w, const void* a) {
  const auto* h = static_cast<const uint16_t*>(w);
  const auto* x = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_fp32(h[i])) * x[i];
  return static_cast<float>(sum);
}

// ---- Q8_0 ----

void q8_0_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int l = 0; l < kQK; ++l) dst[i * kQK + l] = d * static_cast<float>(b[i].qs[l]);
  }
}

// As quantize_row_q8_0 of ggml's x86 build (also its activation quantizer): d = amax / 127,
// q = round-to-nearest-even(x * (127 / amax)).
void q8_0_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax = 0;
    for (int l = 0; l < kQK; ++l) amax = std::max(amax, std::fabs(x[l]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int l = 0; l < kQK; ++l) {
      b[i].qs[l] = static_cast<int8_t>(std::clamp(nearest_int(x[l] * id), -127, 127));
    }
  }
}

float q8_0_dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
    for (int k = 0; k < 8; ++k) {
      acc[k] = std::fma(d, static_cast<float>(dot4(x[i].qs + 4 * k, y[i].qs + 4 * k)), acc[k]);
    }
  }
  return hsum8(acc);
}

// ---- Q4_0 ----

void q4_0_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int l = 0; l < kQK / 2; ++l) {
      dst[i * kQK + l] = d * static_cast<float>((b[i].qs[l] & 0xF) - 8);
      dst[i * kQK + l + kQK / 2] = d * static_cast<float>((b[i].qs[l] >> 4) - 8);
    }
  }
}

void q4_0_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    // The element of largest magnitude maps to q = 0 (value -8 d): d carries its sign.
    const float extreme = signed_extreme(x, kQK);
    const float d = extreme / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int l = 0; l < kQK / 2; ++l) {
      const int q0 = std::clamp(nearest_int(x[l] * id) + 8, 0, 15);
      const int q1 = std::clamp(nearest_int(x[l + kQK / 2] * id) + 8, 0, 15);
      b[i].qs[l] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// The 32 values (q - 8) of a Q4_0 block in element order.
void q4_0_values(const BlockQ4_0& b, int8_t* v) {
  for (int l = 0; l < kQK / 2; ++l) {
    v[l] = static_cast<int8_t>((b.qs[l] & 0xF) - 8);
    v[l + kQK / 2] = static_cast<int8_t>((b.qs[l] >> 4) - 8);
  }
}

float q4_0_dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc[8] = {};
  int8_t v[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    q4_0_values(x[i], v);
    const float d = fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
    for (int k = 0; k < 8; ++k) {
      acc[k] = std::fma(d, static_cast<float>(dot4(v + 4 * k, y[i].qs + 4 * k)), acc[k]);
    }
  }
  return hsum8(acc);
}

// llama.cpp's repacked Q4_0 kernels (q4_0_8x8 gemv/gemm): one accumulator per output, one
// fused multiply-add per block of the block's whole integer dot.
float q4_0_dot_q8_0_serial(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc = 0.0f;
  int8_t v[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    q4_0_values(x[i], v);
    int32_t isum = 0;
    for (int l = 0; l < kQK; ++l) isum += v[l] * y[i].qs[l];
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d), acc);
  }
  return acc;
}

// ---- Q4_1, Q5_0, Q5_1 (and Q8_1, the activations of Q4_1 / Q5_1) ----

// The fifth bits of a Q5_0 / Q5_1 block: bit l is element l's.
uint32_t q5_high_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  return bits;
}

// The 32 values of a Q4_1 / Q5_0 / Q5_1 block (0..15 or 0..31) in element order.
void q4_1_values(const uint8_t* qs, uint8_t* v) {
  for (int l = 0; l < kQK / 2; ++l) {
    v[l] = static_cast<uint8_t>(qs[l] & 0xF);
    v[l + kQK / 2] = static_cast<uint8_t>(qs[l] >> 4);
  }
}
void q5_values(const uint8_t* qs, const uint8_t* qh, uint8_t* v) {
  const uint32_t bits = q5_high_bits(qh);
  q4_1_values(qs, v);
  for (int l = 0; l < kQK; ++l) v[l] = static_cast<uint8_t>(v[l] | (((bits >> l) & 1) << 4));
}

// Packs 32 values (0..15 / 0..31) into qs (low nibbles first) and, for 5 bits, qh.
void pack_q4(const uint8_t* q, uint8_t* qs) {
  for (int l = 0; l < kQK / 2; ++l) {
    qs[l] = static_cast<uint8_t>((q[l] & 0xF) | ((q[l + kQK / 2] & 0xF) << 4));
  }
}
void pack_q5(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
  pack_q4(q, qs);
  uint32_t bits = 0;
  for (int l = 0; l < kQK; ++l) bits |= static_cast<uint32_t>(q[l] >> 4) << l;
  std::memcpy(qh, &bits, sizeof(bits));
}

// Fits x[0..32) ~ d * q + m with q in 0..qmax from the block's range (ggml's Q4_1 / Q5_1).
void quantize_min_block(const float* x, int qmax, uint16_t* d_out, uint16_t* m_out, uint8_t* q) {
  float lo = x[0], hi = x[0];
  for (int l = 1; l < kQK; ++l) {
    lo = std::min(lo, x[l]);
    hi = std::max(hi, x[l]);
  }
  const float d = (hi - lo) / static_cast<float>(qmax);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d_out = fp32_to_fp16(d);
  *m_out = fp32_to_fp16(lo);
  for (int l = 0; l < kQK; ++l) {
    q[l] = static_cast<uint8_t>(std::clamp(nearest_int((x[l] - lo) * id), 0, qmax));
  }
}

void q4_1_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_1*>(dst);
  uint8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    quantize_min_block(src + i * kQK, 15, &b[i].d, &b[i].m, q);
    pack_q4(q, b[i].qs);
  }
}

void q5_1_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_1*>(dst);
  uint8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    quantize_min_block(src + i * kQK, 31, &b[i].d, &b[i].m, q);
    pack_q5(q, b[i].qs, b[i].qh);
  }
}

// As Q4_0: the element of largest magnitude maps to q = 0 (value -16 d).
void q5_0_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_0*>(dst);
  uint8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float extreme = signed_extreme(x, kQK);
    const float d = extreme / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int l = 0; l < kQK; ++l) {
      q[l] = static_cast<uint8_t>(std::clamp(nearest_int(x[l] * id) + 16, 0, 31));
    }
    pack_q5(q, b[i].qs, b[i].qh);
  }
}

void q4_1_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_1*>(src);
  uint8_t v[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
    q4_1_values(b[i].qs, v);
    for (int l = 0; l < kQK; ++l) dst[i * kQK + l] = d * static_cast<float>(v[l]) + m;
  }
}

void q5_0_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(src);
  uint8_t v[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    q5_values(b[i].qs, b[i].qh, v);
    for (int l = 0; l < kQK; ++l) dst[i * kQK + l] = d * static_cast<float>(v[l] - 16);
  }
}

void q5_1_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(src);
  uint8_t v[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
    q5_values(b[i].qs, b[i].qh, v);
    for (int l = 0; l < kQK; ++l) dst[i * kQK + l] = d * static_cast<float>(v[l]) + m;
  }
}

void q8_1_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int l = 0; l < kQK; ++l) dst[i * kQK + l] = d * static_cast<float>(b[i].qs[l]);
  }
}

// Q5_0 against Q8_0, as ggml_vec_dot_q5_0_q8_0 (x86): the signed values q - 16 in Q4_0's lanes.
float q5_0_dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc[8] = {};
  uint8_t u[kQK];
  int8_t v[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    q5_values(x[i].qs, x[i].qh, u);
    for (int l = 0; l < kQK; ++l) v[l] = static_cast<int8_t>(u[l] - 16);
    const float d = fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
    for (int k = 0; k < 8; ++k) {
      acc[k] = std::fma(d, static_cast<float>(dot4(v + 4 * k, y[i].qs + 4 * k)), acc[k]);
    }
  }
  return hsum8(acc);
}

// Q4_1 / Q5_1 against Q8_1, as ggml_vec_dot_q4_1_q8_1 / q5_1_q8_1 (x86): the unsigned values in
// eight lanes scaled by d_x d_y, and the offsets m_x s_y in one float accumulated alongside.
template <typename Block, bool kFive>
float q_1_dot_q8_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float acc[8] = {};
  float summs = 0.0f;
  uint8_t v[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    if constexpr (kFive) {
      q5_values(x[i].qs, x[i].qh, v);
    } else {
      q4_1_values(x[i].qs, v);
    }
    summs = std::fma(fp16_to_fp32(x[i].m), fp16_to_fp32(y[i].s), summs);
    const float d = fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
    for (int k = 0; k < 8; ++k) {
      acc[k] = std::fma(d, static_cast<float>(dot4(v + 4 * k, y[i].qs + 4 * k)), acc[k]);
    }
  }
  return hsum8(acc) + summs;
}

// ---- IQ4_NL, IQ4_XS ----

void iq4_values(const uint8_t* qs, int8_t* v) {
  for (int l = 0; l < kQK / 2; ++l) {
    v[l] = kIq4Values[qs[l] & 0xF];
    v[l + kQK / 2] = kIq4Values[qs[l] >> 4];
  }
}

// The level index nearest to t (levels ascending).
int nearest_iq4(float t) {
  int best = 0;
  for (int k = 1; k < 16; ++k) {
    if (std::fabs(t - kIq4Values[k]) < std::fabs(t - kIq4Values[best])) best = k;
  }
  return best;
}

// Indexes for 32 values at scale d, then the least-squares scale for those indexes.
float fit_iq4_block(const float* x, float d, uint8_t* q) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  double sxv = 0, svv = 0;
  for (int l = 0; l < kQK; ++l) {
    q[l] = static_cast<uint8_t>(nearest_iq4(x[l] * id));
    sxv += static_cast<double>(x[l]) * kIq4Values[q[l]];
    svv += static_cast<double>(kIq4Values[q[l]]) * kIq4Values[q[l]];
  }
  return svv > 0 ? static_cast<float>(sxv / svv) : 0.0f;
}

// The block's extreme element maps to the level -127, refined once by least squares.
float iq4_block_scale(const float* x, uint8_t* q) {
  const float extreme = signed_extreme(x, kQK);
  const float d = fit_iq4_block(x, extreme / -127.0f, q);
  fit_iq4_block(x, d, q);
  return d;
}

void iq4_nl_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockIQ4_NL*>(dst);
  uint8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    b[i].d = fp32_to_fp16(iq4_block_scale(x, q));
    fit_iq4_block(x, fp16_to_fp32(b[i].d), q);  // indexes for the stored scale
    pack_q4(q, b[i].qs);
  }
}

void iq4_nl_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_NL*>(src);
  int8_t v[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    iq4_values(b[i].qs, v);
    for (int l = 0; l < kQK; ++l) dst[i * kQK + l] = d * static_cast<float>(v[l]);
  }
}

int iq4_xs_scale(const BlockIQ4_XS& b, int j) {
  return (((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4)) - 32;
}

void iq4_xs_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_XS*>(src);
  int8_t v[kQK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < 8; ++j) {
      const float dl = d * static_cast<float>(iq4_xs_scale(b[i], j));
      iq4_values(b[i].qs + 16 * j, v);
      for (int l = 0; l < kQK; ++l) dst[i * kQKK + 32 * j + l] = dl * static_cast<float>(v[l]);
    }
  }
}

// Sub-block scales as IQ4_NL finds them, stored as d * (ls - 32) with the largest -> -32.
void iq4_xs_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockIQ4_XS*>(dst);
  uint8_t q[kQK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float scales[8], max_scale = 0;
    for (int j = 0; j < 8; ++j) {
      scales[j] = iq4_block_scale(x + 32 * j, q);
      if (std::fabs(scales[j]) > std::fabs(max_scale)) max_scale = scales[j];
    }
    b[i].d = fp32_to_fp16(max_scale / -32.0f);
    const float dq = fp16_to_fp32(b[i].d);
    b[i].scales_h = 0;
    std::memset(b[i].scales_l, 0, sizeof(b[i].scales_l));
    for (int j = 0; j < 8; ++j) {
      const int ls = dq != 0 ? std::clamp(nearest_int(scales[j] / dq), -32, 31) : 0;
      const int u = ls + 32;
      b[i].scales_l[j / 2] =
          static_cast<uint8_t>(b[i].scales_l[j / 2] | ((u & 0xF) << (4 * (j % 2))));
      b[i].scales_h = static_cast<uint16_t>(b[i].scales_h | ((u >> 4) << (2 * j)));
      fit_iq4_block(x + 32 * j, dq * static_cast<float>(ls), q);
      pack_q4(q, b[i].qs + 16 * j);
    }
  }
}

// As ggml_vec_dot_iq4_nl_q8_0 (x86): Q4_0's lanes, even blocks into one set of eight float
// accumulators and odd blocks into another, added lane by lane before the horizontal sum; an
// odd last block is added afterwards in one fused multiply-add.
float iq4_nl_dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const int64_t nb = n / kQK;
  const int64_t paired = nb - nb % 2;
  float acc[2][8] = {};
  int8_t v[kQK];
  for (int64_t i = 0; i < paired; ++i) {
    iq4_values(x[i].qs, v);
    const float d = fp16_to_fp32(y[i].d) * fp16_to_fp32(x[i].d);
    for (int k = 0; k < 8; ++k) {
      acc[i % 2][k] =
          std::fma(d, static_cast<float>(dot4(v + 4 * k, y[i].qs + 4 * k)), acc[i % 2][k]);
    }
  }
  float sum[8];
  for (int k = 0; k < 8; ++k) sum[k] = acc[0][k] + acc[1][k];
  float total = hsum8(sum);
  if (paired < nb) {
    const int64_t i = paired;
    iq4_values(x[i].qs, v);
    int32_t isum = 0;
    for (int l = 0; l < kQK; ++l) isum += v[l] * y[i].qs[l];
    total = std::fma(fp16_to_fp32(y[i].d) * fp16_to_fp32(x[i].d), static_cast<float>(isum), total);
  }
  return total;
}

// llama.cpp repacks IQ4_NL like Q4_0 (iq4_nl_8x8, the same gemv / gemm with a level table):
// q4_0_dot_q8_0_serial's order.
float iq4_nl_dot_q8_0_serial(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc = 0.0f;
  int8_t v[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    iq4_values(x[i].qs, v);
    int32_t isum = 0;
    for (int l = 0; l < kQK; ++l) isum += v[l] * y[i].qs[l];
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d), acc);
  }
  return acc;
}

// As ggml_vec_dot_iq4_xs_q8_K (x86): lane sums with the signed sub-block scales, one fused
// multiply-add per super-block.
float iq4_xs_dot_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  int8_t v[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int j = 0; j < 8; ++j) iq4_values(x[i].qs + 16 * j, v + 32 * j);
    int32_t lanes[8] = {};
    for (int k = 0; k < 8; ++k) {
      for (int j = 0; j < 8; ++j) {
        lanes[k] += iq4_xs_scale(x[i], j) * dot4(v + 32 * j + 4 * k, y[i].qs + 32 * j + 4 * k);
      }
    }
    const float d = fp16_to_fp32(x[i].d) * y[i].d;
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  return hsum8(acc);
}

// llama.cpp's IQ panel gemm (ggml-cpu/iqp.cpp), which it uses for IQ4_XS matrices of a multiple
// of 8 rows in batches of 8 tokens or more: one accumulator per output, one fused multiply-add
// of the super-block's exact integer sum.
float iq4_xs_dot_q8_k_serial(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc = 0.0f;
  int8_t v[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int j = 0; j < 8; ++j) iq4_values(x[i].qs + 16 * j, v + 32 * j);
    int32_t isum = 0;
    for (int j = 0; j < 8; ++j) {
      int32_t dot = 0;
      for (int l = 32 * j; l < 32 * j + 32; ++l) dot += v[l] * y[i].qs[l];
      isum += iq4_xs_scale(x[i], j) * dot;
    }
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(x[i].d) * y[i].d, acc);
  }
  return acc;
}

// ---- Q8_K (activations of the K-quants) ----

void q8_k_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int l = 0; l < kQKK; ++l) dst[i * kQKK + l] = b[i].d * static_cast<float>(b[i].qs[l]);
  }
}

// ---- K-quant helpers ----

// Fits x[0..n) ~ scale * q - min with q in 0..qmax, min >= 0: starts from the range, then
// alternates assigning q and solving the two-parameter least squares. Returns scale and min.
void fit_scale_min(const float* x, int n, int qmax, float* scale_out, float* min_out) {
  float lo = x[0], hi = x[0];
  for (int l = 1; l < n; ++l) {
    lo = std::min(lo, x[l]);
    hi = std::max(hi, x[l]);
  }
  lo = std::min(lo, 0.0f);
  if (hi <= lo) {
    *scale_out = 0;
    *min_out = -lo;
    return;
  }
  float scale = (hi - lo) / static_cast<float>(qmax);
  float min = -lo;
  auto error = [&](float s, float m) {
    float err = 0;
    for (int l = 0; l < n; ++l) {
      const int q = std::clamp(nearest_int((x[l] + m) / s), 0, qmax);
      const float diff = s * static_cast<float>(q) - m - x[l];
      err += diff * diff;
    }
    return err;
  };
  float best_err = error(scale, min);
  for (int iter = 0; iter < 3; ++iter) {
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int l = 0; l < n; ++l) {
      const int q = std::clamp(nearest_int((x[l] + min) / scale), 0, qmax);
      sq += q;
      sqq += static_cast<double>(q) * q;
      sx += x[l];
      sqx += static_cast<double>(q) * x[l];
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) break;
    double s = (n * sqx - sq * sx) / det;
    double m = (sq * sqx - sqq * sx) / det;  // x ~ s q - m  =>  m = (s sq - sx) / n
    if (m < 0) {                             // the constraint binds: min = 0, scale alone
      m = 0;
      s = sqq > 0 ? sqx / sqq : 0;
    }
    if (s <= 0) break;
    const float err = error(static_cast<float>(s), static_cast<float>(m));
    if (err >= best_err) break;
    best_err = err;
    scale = static_cast<float>(s);
    min = static_cast<float>(m);
  }
  *scale_out = scale;
  *min_out = min;
}

// Quantizes one 256-element super-block to sub-block scales/mins (6-bit) and q in 0..qmax.
void quantize_k_superblock(const float* x, int qmax, uint16_t* d_out, uint16_t* dmin_out,
                           uint8_t* scales_packed, uint8_t* q) {
  float scales[8], mins[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    fit_scale_min(x + 32 * j, 32, qmax, &scales[j], &mins[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float d = max_scale / 63.0f;
  const float dmin = max_min / 63.0f;
  *d_out = fp32_to_fp16(d);
  *dmin_out = fp32_to_fp16(dmin);
  const float dq = fp16_to_fp32(*d_out);
  const float dminq = fp16_to_fp32(*dmin_out);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(dq > 0 ? std::clamp(nearest_int(scales[j] / dq), 0, 63) : 0);
    mn[j] = static_cast<uint8_t>(dminq > 0 ? std::clamp(nearest_int(mins[j] / dminq), 0, 63) : 0);
  }
  pack_scale_min_k4(sc, mn, scales_packed);
  for (int j = 0; j < 8; ++j) {
    const float s = dq * sc[j];
    const float m = dminq * mn[j];
    for (int l = 0; l < 32; ++l) {
      q[32 * j + l] = static_cast<uint8_t>(
          s > 0 ? std::clamp(nearest_int((x[32 * j + l] + m) / s), 0, qmax) : 0);
    }
  }
}

// ---- Q2_K, Q3_K (16-element sub-blocks) ----

// The two low bits of element e (0..255) of a Q2_K / Q3_K block.
int q2_bits(const uint8_t* qs, int e) {
  const int h = e / 128, r = e % 128;
  return (qs[32 * h + r % 32] >> (2 * (r / 32))) & 3;
}
// Q3_K's value of element e, -4..3.
int q3_value(const BlockQ3_K& b, int e) {
  const int h = e / 128, r = e % 128;
  const int high = (b.hmask[r % 32] >> (4 * h + r / 32)) & 1;
  return q2_bits(b.qs, e) - (high ? 0 : 4);
}

// Lane sums of a super-block with one scale per 16 elements, as ggml's x86 Q2_K / Q3_K / Q6_K
// kernels form them: lane k gets, from each 32-element group g, sc[2g] (bytes 0..15) or
// sc[2g + 1] (bytes 16..31) times the dot of its elements 4k..4k+3.
template <typename V>
void k16_lane_sums(const V* v, const int* sc, const int8_t* q8, int32_t* lanes) {
  for (int k = 0; k < 8; ++k) {
    lanes[k] = 0;
    for (int g = 0; g < 8; ++g) {
      lanes[k] += sc[2 * g + (k >= 4 ? 1 : 0)] * dot4(v + 32 * g + 4 * k, q8 + 32 * g + 4 * k);
    }
  }
}

void q2_k_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    for (int e = 0; e < kQKK; ++e) {
      const uint8_t sm = b[i].scales[e / 16];
      dst[i * kQKK + e] =
          d * static_cast<float>(sm & 0xF) * static_cast<float>(q2_bits(b[i].qs, e)) -
          dmin * static_cast<float>(sm >> 4);
    }
  }
}

void q3_k_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int e = 0; e < kQKK; ++e) {
      dst[i * kQKK + e] = d * static_cast<float>(q3_k_scale(b[i].scales, e / 16)) *
                          static_cast<float>(q3_value(b[i], e));
    }
  }
}

// Packs the two low bits of 256 values (element order) into qs.
void pack_q2_bits(const uint8_t* q, uint8_t* qs) {
  std::memset(qs, 0, kQKK / 4);
  for (int e = 0; e < kQKK; ++e) {
    const int h = e / 128, r = e % 128;
    qs[32 * h + r % 32] =
        static_cast<uint8_t>(qs[32 * h + r % 32] | ((q[e] & 3) << (2 * (r / 32))));
  }
}

void q2_k_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float scales[16], mins[16], max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      fit_scale_min(x + 16 * j, 16, 3, &scales[j], &mins[j]);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    b[i].d = fp32_to_fp16(max_scale / 15.0f);
    b[i].dmin = fp32_to_fp16(max_min / 15.0f);
    const float dq = fp16_to_fp32(b[i].d), dminq = fp16_to_fp32(b[i].dmin);
    uint8_t q[kQKK];
    for (int j = 0; j < 16; ++j) {
      const int sc = dq > 0 ? std::clamp(nearest_int(scales[j] / dq), 0, 15) : 0;
      const int mn = dminq > 0 ? std::clamp(nearest_int(mins[j] / dminq), 0, 15) : 0;
      b[i].scales[j] = static_cast<uint8_t>(sc | (mn << 4));
      const float s = dq * static_cast<float>(sc), m = dminq * static_cast<float>(mn);
      for (int l = 0; l < 16; ++l) {
        q[16 * j + l] = static_cast<uint8_t>(
            s > 0 ? std::clamp(nearest_int((x[16 * j + l] + m) / s), 0, 3) : 0);
      }
    }
    pack_q2_bits(q, b[i].qs);
  }
}

// Symmetric: each sub-block's extreme element maps to -4, the largest scale to -32.
void q3_k_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float scales[16], max_scale = 0;
    for (int j = 0; j < 16; ++j) {
      const float extreme = signed_extreme(x + 16 * j, 16);
      scales[j] = extreme / -4.0f;
      if (std::fabs(scales[j]) > std::fabs(max_scale)) max_scale = scales[j];
    }
    b[i].d = fp32_to_fp16(max_scale / -32.0f);
    const float dq = fp16_to_fp32(b[i].d);
    std::memset(b[i].scales, 0, sizeof(b[i].scales));
    std::memset(b[i].hmask, 0, sizeof(b[i].hmask));
    uint8_t q[kQKK];
    for (int j = 0; j < 16; ++j) {
      const int sc = dq != 0 ? std::clamp(nearest_int(scales[j] / dq), -32, 31) : 0;
      const int u = sc + 32;
      b[i].scales[j % 8] =
          static_cast<uint8_t>(b[i].scales[j % 8] | ((u & 0xF) << (j < 8 ? 0 : 4)));
      b[i].scales[8 + j % 4] =
          static_cast<uint8_t>(b[i].scales[8 + j % 4] | ((u >> 4) << (2 * (j / 4))));
      const float s = dq * static_cast<float>(sc);
      for (int l = 0; l < 16; ++l) {
        const int v = s != 0 ? std::clamp(nearest_int(x[16 * j + l] / s), -4, 3) : 0;
        q[16 * j + l] = static_cast<uint8_t>(v + 4);
      }
    }
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, r = e % 128;
      if (q[e] >= 4)
        b[i].hmask[r % 32] = static_cast<uint8_t>(b[i].hmask[r % 32] | (1 << (4 * h + r / 32)));
    }
    pack_q2_bits(q, b[i].qs);
  }
}

// As ggml_vec_dot_q2_K_q8_K (x86): per super-block the mins' eight lanes (lane k = m[2k]
// bsums[2k] + m[2k+1] bsums[2k+1]) times -d_y dmin, then the scaled lanes times d_y d, both into
// the same eight float accumulators.
float q2_k_dot_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  uint8_t v[kQKK];
  int sc[16];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int e = 0; e < kQKK; ++e) v[e] = static_cast<uint8_t>(q2_bits(x[i].qs, e));
    for (int j = 0; j < 16; ++j) sc[j] = x[i].scales[j] & 0xF;
    const float d = y[i].d * fp16_to_fp32(x[i].d);
    const float dmin = -y[i].d * fp16_to_fp32(x[i].dmin);
    int32_t lanes[8];
    for (int k = 0; k < 8; ++k) {
      const int32_t m = (x[i].scales[2 * k] >> 4) * y[i].bsums[2 * k] +
                        (x[i].scales[2 * k + 1] >> 4) * y[i].bsums[2 * k + 1];
      acc[k] = std::fma(dmin, static_cast<float>(m), acc[k]);
    }
    k16_lane_sums(v, sc, y[i].qs, lanes);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  return hsum8(acc);
}

// llama.cpp repacks Q2_K like Q4_K on AVX-512 CPUs (q2_K_8x8): per output, the scaled sum and
// the mins' sum each in one accumulator, subtracted at the end. The gemv form takes one fused
// multiply-add per super-block (groups = 1), the gemm form one per 128 elements (groups = 2).
template <int Groups>
float q2_k_dot_q8_k_serial_in(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  constexpr int kSubs = 16 / Groups;  // 16-element sub-blocks per fused multiply-add
  float acc = 0.0f, acc_m = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float dx = fp16_to_fp32(x[i].d) * y[i].d;
    const float dmx = fp16_to_fp32(x[i].dmin) * y[i].d;
    for (int g = 0; g < Groups; ++g) {
      int32_t isum = 0, imin = 0;
      for (int j = g * kSubs; j < (g + 1) * kSubs; ++j) {
        int32_t dot = 0;
        for (int l = 16 * j; l < 16 * j + 16; ++l) dot += q2_bits(x[i].qs, l) * y[i].qs[l];
        isum += (x[i].scales[j] & 0xF) * dot;
        imin += (x[i].scales[j] >> 4) * y[i].bsums[j];
      }
      acc = std::fma(static_cast<float>(isum), dx, acc);
      acc_m = std::fma(static_cast<float>(imin), dmx, acc_m);
    }
  }
  return acc - acc_m;
}
float q2_k_dot_q8_k_serial(int64_t n, const void* w, const void* a) {
  return q2_k_dot_q8_k_serial_in<1>(n, w, a);
}
float q2_k_dot_q8_k_serial4(int64_t n, const void* w, const void* a) {
  return q2_k_dot_q8_k_serial_in<2>(n, w, a);
}

// As ggml_vec_dot_q3_K_q8_K (x86): the values -4..3 in Q6_K's scaled lanes.
float q3_k_dot_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  int8_t v[kQKK];
  int sc[16];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int e = 0; e < kQKK; ++e) v[e] = static_cast<int8_t>(q3_value(x[i], e));
    for (int j = 0; j < 16; ++j) sc[j] = q3_k_scale(x[i].scales, j);
    const float d = y[i].d * fp16_to_fp32(x[i].d);
    int32_t lanes[8];
    k16_lane_sums(v, sc, y[i].qs, lanes);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  return hsum8(acc);
}

// ---- Q4_K ----

void q4_k_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    float* y = dst + i * kQKK;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      unpack_scale_min_k4(j, b[i].scales, &sc, &m);
      const uint8_t* qs = b[i].qs + 32 * (j / 2);
      const int shift = (j % 2) * 4;
      for (int l = 0; l < 32; ++l) {
        y[32 * j + l] = d * sc * static_cast<float>((qs[l] >> shift) & 0xF) - dmin * m;
      }
    }
  }
}

void q4_k_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_K*>(dst);
  uint8_t q[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    quantize_k_superblock(src + i * kQKK, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
    for (int p = 0; p < 4; ++p) {
      for (int l = 0; l < 32; ++l) {
        b[i].qs[32 * p + l] = static_cast<uint8_t>(q[64 * p + l] | (q[64 * p + 32 + l] << 4));
      }
    }
  }
}

// The 256 values of a Q4_K / Q5_K block (0..15 / 0..31) in element order, and its scales/mins.
void q4_k_values(const BlockQ4_K& b, uint8_t* v, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 8; ++j) {
    unpack_scale_min_k4(j, b.scales, &sc[j], &mn[j]);
    const uint8_t* qs = b.qs + 32 * (j / 2);
    const int shift = (j % 2) * 4;
    for (int l = 0; l < 32; ++l) v[32 * j + l] = static_cast<uint8_t>((qs[l] >> shift) & 0xF);
  }
}
void q5_k_values(const BlockQ5_K& b, uint8_t* v, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 8; ++j) {
    unpack_scale_min_k4(j, b.scales, &sc[j], &mn[j]);
    const uint8_t* qs = b.qs + 32 * (j / 2);
    const int shift = (j % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      v[32 * j + l] = static_cast<uint8_t>(((qs[l] >> shift) & 0xF) | (((b.qh[l] >> j) & 1) << 4));
    }
  }
}

// Lane sums of a K-quant super-block with one scale per 32 elements: lane k gets, from each
// 32-element sub-block j, sc[j] * (dot of its elements 4k..4k+3).
void k_lane_sums(const uint8_t* v, const uint8_t* sc, const int8_t* q8, int32_t* lanes) {
  for (int k = 0; k < 8; ++k) {
    lanes[k] = 0;
    for (int j = 0; j < 8; ++j) lanes[k] += sc[j] * dot4(v + 32 * j + 4 * k, q8 + 32 * j + 4 * k);
  }
}

// The mins' products in ggml's four lanes: lane m = mn[2m] * s(2m) + mn[2m+1] * s(2m+1), with
// s(j) the sum of the activations of sub-block j.
void k_min_lanes(const uint8_t* mn, const int16_t* bsums, int32_t* lanes) {
  for (int m = 0; m < 4; ++m) {
    lanes[m] = mn[2 * m] * (bsums[4 * m] + bsums[4 * m + 1]) +
               mn[2 * m + 1] * (bsums[4 * m + 2] + bsums[4 * m + 3]);
  }
}

float q4_k_dot_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {}, acc_m[4] = {};
  uint8_t v[kQKK], sc[8], mn[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    q4_k_values(x[i], v, sc, mn);
    const float d = y[i].d * fp16_to_fp32(x[i].d);
    const float dmin = -y[i].d * fp16_to_fp32(x[i].dmin);
    int32_t lanes[8], mins[4];
    k_min_lanes(mn, y[i].bsums, mins);
    for (int m = 0; m < 4; ++m) acc_m[m] = std::fma(dmin, static_cast<float>(mins[m]), acc_m[m]);
    k_lane_sums(v, sc, y[i].qs, lanes);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  return hsum8(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]));
}

// llama.cpp's repacked Q4_K kernels (q4_K_8x8): per output, the scaled sum and the mins' sum
// each in one accumulator, one fused multiply-add per super-block, subtracted at the end.
float q4_k_dot_q8_k_serial(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc = 0.0f, acc_m = 0.0f;
  uint8_t v[kQKK], sc[8], mn[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    q4_k_values(x[i], v, sc, mn);
    int32_t isum = 0, imin = 0;
    for (int j = 0; j < 8; ++j) {
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) dot += v[32 * j + l] * y[i].qs[32 * j + l];
      isum += sc[j] * dot;
      imin += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(x[i].d) * y[i].d, acc);
    acc_m = std::fma(static_cast<float>(imin), fp16_to_fp32(x[i].dmin) * y[i].d, acc_m);
  }
  return acc - acc_m;
}

// The gemm form of llama.cpp's repacked Q4_K kernel: the same, but one fused multiply-add per
// 64 elements (a pair of sub-blocks).
float q4_k_dot_q8_k_serial4(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc = 0.0f, acc_m = 0.0f;
  uint8_t v[kQKK], sc[8], mn[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    q4_k_values(x[i], v, sc, mn);
    const float dx = fp16_to_fp32(x[i].d) * y[i].d;
    const float dmx = fp16_to_fp32(x[i].dmin) * y[i].d;
    for (int p = 0; p < 4; ++p) {
      int32_t isum = 0, imin = 0;
      for (int j = 2 * p; j < 2 * p + 2; ++j) {
        int32_t dot = 0;
        for (int l = 0; l < 32; ++l) dot += v[32 * j + l] * y[i].qs[32 * j + l];
        isum += sc[j] * dot;
        imin += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
      }
      acc = std::fma(static_cast<float>(isum), dx, acc);
      acc_m = std::fma(static_cast<float>(imin), dmx, acc_m);
    }
  }
  return acc - acc_m;
}

// ---- Q5_K ----

void q5_k_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    float* y = dst + i * kQKK;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      unpack_scale_min_k4(j, b[i].scales, &sc, &m);
      const uint8_t* qs = b[i].qs + 32 * (j / 2);
      const int shift = (j % 2) * 4;
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[l] >> shift) & 0xF) | (((b[i].qh[l] >> j) & 1) << 4);
        y[32 * j + l] = d * sc * static_cast<float>(q) - dmin * m;
      }
    }
  }
}

void q5_k_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_K*>(dst);
  uint8_t q[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    quantize_k_superblock(src + i * kQKK, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int p = 0; p < 4; ++p) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * p + l], hi = q[64 * p + 32 + l];
        b[i].qs[32 * p + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        b[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * p)) | ((hi >> 4) << (2 * p + 1)));
      }
    }
  }
}

float q5_k_dot_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  float summs = 0.0f;
  uint8_t v[kQKK], sc[8], mn[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    q5_k_values(x[i], v, sc, mn);
    const float d = y[i].d * fp16_to_fp32(x[i].d);
    const float dmin = -y[i].d * fp16_to_fp32(x[i].dmin);
    int32_t lanes[8], mins[4];
    k_min_lanes(mn, y[i].bsums, mins);
    summs = std::fma(dmin, static_cast<float>((mins[0] + mins[1]) + (mins[2] + mins[3])), summs);
    k_lane_sums(v, sc, y[i].qs, lanes);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  return hsum8(acc) + summs;
}

// ---- Q6_K ----

// q in 0..63 of element e (0..255) of a Q6_K block.
int q6_k_value(const BlockQ6_K& b, int e) {
  const int h = e / 128, r = e % 128, group = r / 32, l = r % 32;
  const uint8_t ql = b.ql[64 * h + 32 * (group & 1) + l];
  const int low = group < 2 ? (ql & 0xF) : (ql >> 4);
  const int high = (b.qh[32 * h + l] >> (2 * group)) & 3;
  return low | (high << 4);
}

void q6_k_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int e = 0; e < kQKK; ++e) {
      // NOLINTNEXTLINE(bugprone-integer-division): e / 16 is the sub-block index, not a value
      dst[i * kQKK + e] = d * b[i].scales[e / 16] * static_cast<float>(q6_k_value(b[i], e) - 32);
    }
  }
}

void q6_k_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
      const float extreme = signed_extreme(x + 16 * j, 16);
      scales[j] = extreme / -32.0f;  // the extreme element maps to q - 32 = -32
      if (std::fabs(scales[j]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    const float d = max_scale / -127.0f;
    b[i].d = fp32_to_fp16(d);
    const float dq = fp16_to_fp32(b[i].d);
    uint8_t q[kQKK];
    for (int j = 0; j < 16; ++j) {
      const int sc = dq != 0 ? std::clamp(nearest_int(scales[j] / dq), -127, 127) : 0;
      b[i].scales[j] = static_cast<int8_t>(sc);
      const float s = dq * static_cast<float>(sc);
      for (int l = 0; l < 16; ++l) {
        q[16 * j + l] = static_cast<uint8_t>(
            s != 0 ? std::clamp(nearest_int(x[16 * j + l] / s), -32, 31) + 32 : 32);
      }
    }
    std::memset(b[i].ql, 0, sizeof(b[i].ql));
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, r = e % 128, group = r / 32, l = r % 32;
      uint8_t& ql = b[i].ql[64 * h + 32 * (group & 1) + l];
      ql |= static_cast<uint8_t>(group < 2 ? (q[e] & 0xF) : ((q[e] & 0xF) << 4));
      b[i].qh[32 * h + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * group));
    }
  }
}

float q6_k_dot_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  uint8_t v[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int e = 0; e < kQKK; ++e) v[e] = static_cast<uint8_t>(q6_k_value(x[i], e));
    const int8_t* sc = x[i].scales;
    const float d = y[i].d * fp16_to_fp32(x[i].d);
    int32_t lanes[8];
    for (int k = 0; k < 8; ++k) {
      // q is stored as q + 32 (0..63): the products use it unsigned and the 32 * scale *
      // (sum of activations) comes off per lane, lane m taking sub-blocks 2m and 2m+1.
      lanes[k] = -32 * (y[i].bsums[2 * k] * sc[2 * k] + y[i].bsums[2 * k + 1] * sc[2 * k + 1]);
      for (int g = 0; g < 8; ++g) {  // 32-element groups; bytes 0..15 use scale 2g, 16..31 2g+1
        // NOLINTNEXTLINE(bugprone-signed-char-misuse): Q6_K scales are int8, sign-extended
        const int s = sc[2 * g + (k >= 4 ? 1 : 0)];
        lanes[k] += s * dot4(v + 32 * g + 4 * k, y[i].qs + 32 * g + 4 * k);
      }
    }
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  return hsum8(acc);
}

// The order of Q6_K's panels (TypeKernels::panel_dot; the serving path on VNNI): per
// super-block the exact integer sum over its 16 sub-blocks of scale * sum((q - 32) * y), then
// one fused multiply-add by d_w * d_y into one accumulator from 0. (llama.cpp's vec_dot keeps
// eight lanes per row instead, which a 16-row panel cannot hold without doubling its bytes.)
float q6_k_dot_q8_k_panel(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t s = 0;
      for (int l = 0; l < 16; ++l) {
        s += (q6_k_value(x[i], 16 * j + l) - 32) * y[i].qs[16 * j + l];
      }
      isum += x[i].scales[j] * s;
    }
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(x[i].d) * y[i].d, acc);
  }
  return acc;
}

template <VecDotFn kDot>
void batch_from_dot(int64_t n, const void* w, const void* a, int64_t act_stride, int64_t n_act,
                    float* out, int64_t out_stride) {
  const auto* act = static_cast<const uint8_t*>(a);
  for (int64_t j = 0; j < n_act; ++j) out[j * out_stride] = kDot(n, w, act + j * act_stride);
}

void set(TypeKernels* table, TensorType type, ToFloatFn to, FromFloatFn from, TensorType dot_type,
         VecDotFn dot, VecDotBatchFn batch) {
  TypeKernels& k = table[static_cast<int>(type)];
  k = TypeKernels{type, to, from, dot_type, dot, batch, nullptr, nullptr, nullptr, nullptr};
}

}  // namespace

void quantize_row_q8_0_ref(const float* x, void* y, int64_t n) {
  q8_0_from_float(x, y, n);
}

// As ggml's quantize_row_q8_K_ref: the element of largest magnitude (the first, on ties) maps
// to -127; d = 1 / iscale carries the sign; q = round-to-nearest-even(iscale * x).
void quantize_row_q8_k_ref(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(y);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* v = x + i * kQKK;
    float amax = 0, max = 0;
    for (int l = 0; l < kQKK; ++l) {
      if (std::fabs(v[l]) > amax) {
        amax = std::fabs(v[l]);
        max = v[l];
      }
    }
    if (amax == 0.0f) {
      b[i] = BlockQ8_K{};
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) {
        const int q = std::min(127, nearest_int(iscale * v[16 * j + l]));
        b[i].qs[16 * j + l] = static_cast<int8_t>(q);
        sum += q;
      }
      b[i].bsums[j] = static_cast<int16_t>(sum);
    }
    b[i].d = 1 / iscale;
  }
}

// As quantize_row_q8_1 of ggml's x86 build: Q8_0's rounding, plus s = fp16(d * sum(q)).
void quantize_row_q8_1_ref(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ8_1*>(y);
  for (int64_t i = 0; i < n / kQK; ++i) {
    BlockQ8_0 q;
    q8_0_from_float(x + i * kQK, &q, kQK);
    float amax = 0;
    for (int l = 0; l < kQK; ++l) amax = std::max(amax, std::fabs(x[i * kQK + l]));
    int sum = 0;
    for (int l = 0; l < kQK; ++l) sum += q.qs[l];
    b[i].d = q.d;
    b[i].s = fp32_to_fp16(amax / 127.0f * static_cast<float>(sum));
    std::memcpy(b[i].qs, q.qs, sizeof(q.qs));
  }
}

namespace detail {

void q6_k_values(const void* block, uint8_t* q) {
  const auto& b = *static_cast<const BlockQ6_K*>(block);
  for (int e = 0; e < kQKK; ++e) q[e] = static_cast<uint8_t>(q6_k_value(b, e));
}

float dot_f32_ref(int64_t n, const float* a, const float* b) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(sum);
}

float dot_f16_f32_ref(int64_t n, const uint16_t* a, const float* b) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(fp16_to_fp32(a[i])) * b[i];
  return static_cast<float>(sum);
}

void axpy_f16_ref(int64_t n, float alpha, const uint16_t* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * fp16_to_fp32(x[i]);
}

void fill_scalar_table(TypeKernels* table) {
  using T = TensorType;
  set(table, T::kF32, f32_to_float, f32_from_float, T::kF32, f32_dot, batch_from_dot<f32_dot>);
  set(table, T::kF16, f16_to_float, f16_from_float, T::kF16, f16_dot,
      batch_from_dot<f16_dot_tiled>);
  table[static_cast<int>(T::kF16)].gemm_invariant = f16_gemm_invariant;
  set(table, T::kBF16, bf16_to_float, bf16_from_float, T::kF32, bf16_dot, batch_from_dot<bf16_dot>);
  set(table, T::kQ8_0, q8_0_to_float, q8_0_from_float, T::kQ8_0, q8_0_dot_q8_0,
      batch_from_dot<q8_0_dot_q8_0>);
  set(table, T::kQ4_0, q4_0_to_float, q4_0_from_float, T::kQ8_0, q4_0_dot_q8_0,
      batch_from_dot<q4_0_dot_q8_0>);
  set(table, T::kQ4_K, q4_k_to_float, q4_k_from_float, T::kQ8_K, q4_k_dot_q8_k,
      batch_from_dot<q4_k_dot_q8_k>);
  table[static_cast<int>(T::kQ4_0)].vec_dot_serial = q4_0_dot_q8_0_serial;
  table[static_cast<int>(T::kQ4_0)].vec_dot_batch_serial = batch_from_dot<q4_0_dot_q8_0_serial>;
  table[static_cast<int>(T::kQ4_K)].vec_dot_serial = q4_k_dot_q8_k_serial;
  table[static_cast<int>(T::kQ4_K)].panel_dot = q4_k_dot_q8_k_serial;
  table[static_cast<int>(T::kQ4_K)].vec_dot_batch_serial = batch_from_dot<q4_k_dot_q8_k_serial>;
  table[static_cast<int>(T::kQ4_0)].vec_dot_batch_serial4 = batch_from_dot<q4_0_dot_q8_0_serial>;
  table[static_cast<int>(T::kQ4_K)].vec_dot_batch_serial4 = batch_from_dot<q4_k_dot_q8_k_serial4>;
  set(table, T::kQ5_K, q5_k_to_float, q5_k_from_float, T::kQ8_K, q5_k_dot_q8_k,
      batch_from_dot<q5_k_dot_q8_k>);
  set(table, T::kQ6_K, q6_k_to_float, q6_k_from_float, T::kQ8_K, q6_k_dot_q8_k,
      batch_from_dot<q6_k_dot_q8_k>);
  table[static_cast<int>(T::kQ6_K)].panel_dot = q6_k_dot_q8_k_panel;
  set(table, T::kQ4_1, q4_1_to_float, q4_1_from_float, T::kQ8_1, q_1_dot_q8_1<BlockQ4_1, false>,
      batch_from_dot<q_1_dot_q8_1<BlockQ4_1, false>>);
  set(table, T::kQ5_0, q5_0_to_float, q5_0_from_float, T::kQ8_0, q5_0_dot_q8_0,
      batch_from_dot<q5_0_dot_q8_0>);
  set(table, T::kQ5_1, q5_1_to_float, q5_1_from_float, T::kQ8_1, q_1_dot_q8_1<BlockQ5_1, true>,
      batch_from_dot<q_1_dot_q8_1<BlockQ5_1, true>>);
  set(table, T::kQ8_1, q8_1_to_float, quantize_row_q8_1_ref, T::kQ8_1, nullptr, nullptr);
  set(table, T::kQ2_K, q2_k_to_float, q2_k_from_float, T::kQ8_K, q2_k_dot_q8_k,
      batch_from_dot<q2_k_dot_q8_k>);
  TypeKernels& q2_k = table[static_cast<int>(T::kQ2_K)];
  q2_k.vec_dot_serial = q2_k_dot_q8_k_serial;
  q2_k.vec_dot_batch_serial = batch_from_dot<q2_k_dot_q8_k_serial>;
  q2_k.vec_dot_batch_serial4 = batch_from_dot<q2_k_dot_q8_k_serial4>;
  set(table, T::kQ3_K, q3_k_to_float, q3_k_from_float, T::kQ8_K, q3_k_dot_q8_k,
      batch_from_dot<q3_k_dot_q8_k>);
  set(table, T::kIQ4_NL, iq4_nl_to_float, iq4_nl_from_float, T::kQ8_0, iq4_nl_dot_q8_0,
      batch_from_dot<iq4_nl_dot_q8_0>);
  TypeKernels& iq4_nl = table[static_cast<int>(T::kIQ4_NL)];
  iq4_nl.vec_dot_serial = iq4_nl_dot_q8_0_serial;
  iq4_nl.vec_dot_batch_serial = batch_from_dot<iq4_nl_dot_q8_0_serial>;
  iq4_nl.vec_dot_batch_serial4 = iq4_nl.vec_dot_batch_serial;
  set(table, T::kIQ4_XS, iq4_xs_to_float, iq4_xs_from_float, T::kQ8_K, iq4_xs_dot_q8_k,
      batch_from_dot<iq4_xs_dot_q8_k>);
  TypeKernels& iq4_xs = table[static_cast<int>(T::kIQ4_XS)];
  iq4_xs.vec_dot_serial = iq4_xs_dot_q8_k_serial;
  iq4_xs.vec_dot_batch_serial = batch_from_dot<iq4_xs_dot_q8_k_serial>;
  iq4_xs.vec_dot_batch_serial4 = iq4_xs.vec_dot_batch_serial;
  // Q8_K is only an activation type: conversions, no dot product of its own.
  set(table, T::kQ8_K, q8_k_to_float, quantize_row_q8_k_ref, T::kQ8_K, nullptr, nullptr);
}

}  // namespace detail
}  // namespace ferry::kernels
