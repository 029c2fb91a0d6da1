// Scalar reference kernels: quantize, dequantize and dot products for every type ferry runs.
// These define correctness; every SIMD kernel is tested against them.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels_internal.h"

namespace ferry::kernels {
namespace {

int nearest_int(float x) { return static_cast<int>(std::nearbyint(x)); }

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
float f16_dot(int64_t n, const void* w, const void* a) {
  return detail::dot_f16_f32_ref(n, static_cast<const uint16_t*>(w),
                                 static_cast<const float*>(a));
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

void q8_0_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax = 0;
    for (int l = 0; l < kQK; ++l) amax = std::max(amax, std::fabs(x[l]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int l = 0; l < kQK; ++l) {
      b[i].qs[l] = static_cast<int8_t>(std::clamp(nearest_int(x[l] * id), -127, 127));
    }
  }
}

float q8_0_dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t isum = 0;
    for (int l = 0; l < kQK; ++l) isum += x[i].qs[l] * y[i].qs[l];
    sum += fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d) * static_cast<float>(isum);
  }
  return sum;
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
    float amax = 0, extreme = 0;
    for (int l = 0; l < kQK; ++l) {
      if (std::fabs(x[l]) > amax) {
        amax = std::fabs(x[l]);
        extreme = x[l];
      }
    }
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

float q4_0_dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t isum = 0;
    for (int l = 0; l < kQK / 2; ++l) {
      isum += ((x[i].qs[l] & 0xF) - 8) * y[i].qs[l];
      isum += ((x[i].qs[l] >> 4) - 8) * y[i].qs[l + kQK / 2];
    }
    sum += fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d) * static_cast<float>(isum);
  }
  return sum;
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
    if (m < 0) {  // the constraint binds: min = 0, scale alone
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

float q4_k_dot_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      unpack_scale_min_k4(j, x[i].scales, &sc, &m);
      const uint8_t* qs = x[i].qs + 32 * (j / 2);
      const int shift = (j % 2) * 4;
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) dot += ((qs[l] >> shift) & 0xF) * y[i].qs[32 * j + l];
      isum += sc * dot;
      msum += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    sum += y[i].d * (fp16_to_fp32(x[i].d) * static_cast<float>(isum) -
                     fp16_to_fp32(x[i].dmin) * static_cast<float>(msum));
  }
  return sum;
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
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      unpack_scale_min_k4(j, x[i].scales, &sc, &m);
      const uint8_t* qs = x[i].qs + 32 * (j / 2);
      const int shift = (j % 2) * 4;
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[l] >> shift) & 0xF) | (((x[i].qh[l] >> j) & 1) << 4);
        dot += q * y[i].qs[32 * j + l];
      }
      isum += sc * dot;
      msum += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    sum += y[i].d * (fp16_to_fp32(x[i].d) * static_cast<float>(isum) -
                     fp16_to_fp32(x[i].dmin) * static_cast<float>(msum));
  }
  return sum;
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
      float amax = 0, extreme = 0;
      for (int l = 0; l < 16; ++l) {
        if (std::fabs(x[16 * j + l]) > amax) {
          amax = std::fabs(x[16 * j + l]);
          extreme = x[16 * j + l];
        }
      }
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
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t dot = 0;
      for (int l = 0; l < 16; ++l) {
        dot += (q6_k_value(x[i], 16 * j + l) - 32) * y[i].qs[16 * j + l];
      }
      isum += x[i].scales[j] * dot;
    }
    sum += y[i].d * fp16_to_fp32(x[i].d) * static_cast<float>(isum);
  }
  return sum;
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
  k = TypeKernels{type, to, from, dot_type, dot, batch, nullptr};
}

}  // namespace

void quantize_row_q8_0_ref(const float* x, void* y, int64_t n) { q8_0_from_float(x, y, n); }

void quantize_row_q8_k_ref(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(y);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* v = x + i * kQKK;
    float amax = 0;
    for (int l = 0; l < kQKK; ++l) amax = std::max(amax, std::fabs(v[l]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = d;
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) {
        const int q = std::clamp(nearest_int(v[16 * j + l] * id), -127, 127);
        b[i].qs[16 * j + l] = static_cast<int8_t>(q);
        sum += q;
      }
      b[i].bsums[j] = static_cast<int16_t>(sum);
    }
  }
}

namespace detail {

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
  set(table, T::kF16, f16_to_float, f16_from_float, T::kF32, f16_dot, batch_from_dot<f16_dot>);
  set(table, T::kBF16, bf16_to_float, bf16_from_float, T::kF32, bf16_dot,
      batch_from_dot<bf16_dot>);
  set(table, T::kQ8_0, q8_0_to_float, q8_0_from_float, T::kQ8_0, q8_0_dot_q8_0,
      batch_from_dot<q8_0_dot_q8_0>);
  set(table, T::kQ4_0, q4_0_to_float, q4_0_from_float, T::kQ8_0, q4_0_dot_q8_0,
      batch_from_dot<q4_0_dot_q8_0>);
  set(table, T::kQ4_K, q4_k_to_float, q4_k_from_float, T::kQ8_K, q4_k_dot_q8_k,
      batch_from_dot<q4_k_dot_q8_k>);
  set(table, T::kQ5_K, q5_k_to_float, q5_k_from_float, T::kQ8_K, q5_k_dot_q8_k,
      batch_from_dot<q5_k_dot_q8_k>);
  set(table, T::kQ6_K, q6_k_to_float, q6_k_from_float, T::kQ8_K, q6_k_dot_q8_k,
      batch_from_dot<q6_k_dot_q8_k>);
  // Q8_K is only an activation type: conversions, no dot product of its own.
  set(table, T::kQ8_K, q8_k_to_float, quantize_row_q8_k_ref, T::kQ8_K, nullptr, nullptr);
}

}  // namespace detail
}  // namespace ferry::kernels
