// Scalar references of the forward-pass operations (ops.h) and their run-time dispatch.
// Compiled with -ffp-contract=off: every fused multiply-add here is an explicit std::fma, where
// ggml's compiled code has one, and nothing else is fused.
#include "local_engine/kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/kernels_internal.h"

namespace ferry::kernels {
namespace {

// GCC's _mm512_reduce_add_ps: halves added pairwise down to one lane.
float reduce16(const float* v) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = v[8 + i] + v[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[4 + i] + t3[i];
  const float t8_0 = t6[0] + t6[2];
  const float t8_1 = t6[1] + t6[3];
  return t8_0 + t8_1;
}

// ggml_v_expf (AVX-512): exp(x) from a degree-5 polynomial on the reduced argument and a
// scaling by 2^n, elementwise.
float ggml_expf_approx(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : std::numeric_limits<float>::infinity();
  return std::ldexp(j, static_cast<int>(n));
}

}  // namespace

void rms_norm_row(int64_t n, const float* x, const float* w, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

namespace {

// The double sums of squares of NR rows of n (rms_norm_row's, each row's one chain in its
// order), advanced together: a row's chain of dependent additions is the norm's latency, so
// rows side by side cost little more than one. NR a constant, so the sums stay in registers.
template <int NR>
void sums_of_squares(int64_t n, const float* xs, double* out) {
  double sum[NR] = {};
  for (int64_t i = 0; i < n; ++i) {
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      const float v = xs[r * n + i];
      sum[r] += static_cast<double>(v * v);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = sum[r];
}

// out[i] = x[i] * scale * w[i], four at a time (GCC does not vectorize at -O2; out may alias x):
// each element's two products in rms_norm_row's order.
void scale_row(int64_t n, const float* x, float scale, const float* w, float* out) {
  using F4 = float __attribute__((vector_size(16)));
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    F4 a, b;
    std::memcpy(&a, x + i, sizeof a);
    std::memcpy(&b, w + i, sizeof b);
    a = a * scale * b;
    std::memcpy(out + i, &a, sizeof a);
  }
  for (; i < n; ++i) out[i] = x[i] * scale * w[i];
}

using SumsFn = void (*)(int64_t, const float*, double*);
constexpr SumsFn kSums[] = {nullptr,
                            sums_of_squares<1>,
                            sums_of_squares<2>,
                            sums_of_squares<3>,
                            sums_of_squares<4>,
                            sums_of_squares<5>,
                            sums_of_squares<6>,
                            sums_of_squares<7>,
                            sums_of_squares<8>};

}  // namespace

void rms_norm_rows(int64_t rows, int64_t n, const float* x, const float* w, float eps, float* out) {
  constexpr int64_t kTogether = 8;
  for (int64_t r0 = 0; r0 < rows; r0 += kTogether) {
    const int64_t nr = std::min(kTogether, rows - r0);
    const float* xs = x + r0 * n;
    double sum[kTogether];
    kSums[nr](n, xs, sum);
    for (int64_t r = 0; r < nr; ++r) {
      const auto mean = static_cast<float>(sum[r] / static_cast<double>(n));
      const float scale = 1.0f / std::sqrt(mean + eps);
      scale_row(n, xs + r * n, scale, w, out + (r0 + r) * n);
    }
  }
}

float rope_theta_scale(float freq_base, int64_t n_dims) {
  return std::pow(freq_base, -2.0f / static_cast<float>(n_dims));
}

void rope_cache(int64_t pos, int64_t n_dims, float theta_scale, float freq_scale,
                const float* freq_factors, float* cache, float mscale) {
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < n_dims / 2; ++i) {
    const float ff = freq_factors != nullptr ? freq_factors[i] : 1.0f;
    const float t = freq_scale * (theta / ff);
    cache[2 * i] = std::cos(t) * mscale;
    cache[2 * i + 1] = std::sin(t) * mscale;
    theta *= theta_scale;
  }
}

void rope_apply(const float* cache, int64_t n_dims, bool neox, int64_t n_heads, int64_t head_dim,
                float* heads) {
  if (active_isa() != Isa::kScalar) {
    detail::rope_apply_avx2(cache, n_dims, neox, n_heads, head_dim, heads);
  } else {
    detail::rope_apply_ref(cache, n_dims, neox, n_heads, head_dim, heads);
  }
}

void swiglu_row(int64_t n, const float* gate, const float* up, float* out) {
  if (active_isa() != Isa::kScalar) {
    detail::swiglu_row_avx2(n, gate, up, out);
  } else {
    detail::swiglu_row_ref(n, gate, up, out);
  }
}

int64_t argmax_row(int64_t n, const float* x) {
  return active_isa() != Isa::kScalar ? detail::argmax_row_avx2(n, x)
                                      : detail::argmax_row_ref(n, x);
}

float dot_f16_f16(int64_t n, const uint16_t* x, const uint16_t* y) {
  return active_isa() != Isa::kScalar ? detail::dot_f16_f16_avx2(n, x, y)
                                      : detail::dot_f16_f16_ref(n, x, y);
}

void attend_head_f16(int64_t head_dim, const float* q, const uint16_t* keys, int64_t key_stride,
                     const uint16_t* values, int64_t value_stride, int64_t n_keys, float scale,
                     float* out, float softcap) {
  if (active_isa() != Isa::kScalar) {
    detail::attend_head_f16_avx2(head_dim, q, keys, key_stride, values, value_stride, n_keys, scale,
                                 out, softcap);
  } else {
    detail::attend_head_f16_ref(head_dim, q, keys, key_stride, values, value_stride, n_keys, scale,
                                out, softcap);
  }
}

namespace {

// ggml_gelu_f32 (the float GELU of ggml's F16 table); the inner product-sum fused, as the
// compiler contracts it in ggml's build.
float ggml_gelu_f32(float x) {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * std::fma(kCoefA * x, x, 1.0f)));
}

// ggml_table_gelu_f16: gelu of every F16 value, rounded to F16.
const uint16_t* gelu_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(size_t{1} << 16);
    for (size_t i = 0; i < t.size(); ++i) {
      t[i] = fp32_to_fp16(ggml_gelu_f32(fp16_to_fp32(static_cast<uint16_t>(i))));
    }
    return t;
  }();
  return table.data();
}

}  // namespace

void geglu_row(int64_t n, const float* gate, const float* up, float* out) {
  const uint16_t* table = gelu_table();
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    if (x <= -10.0f) {
      out[i] = 0.0f;
    } else if (x >= 10.0f) {
      out[i] = x * up[i];
    } else {
      out[i] = fp16_to_fp32(table[fp32_to_fp16(x)]) * up[i];
    }
  }
}

void softcap_row(int64_t n, float cap, float* x) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void attend_head_tiled(int64_t head_dim, const float* q, const float* keys_t, int64_t kt_stride,
                       const float* values, int64_t value_stride, int64_t n_keys, float scale,
                       float* out) {
  const TiledRow row{q, n_keys, out};
  attend_rows_tiled(head_dim, 1, &row, keys_t, kt_stride, values, value_stride, scale);
}

void attend_rows_tiled(int64_t head_dim, int64_t n_rows, const TiledRow* rows, const float* keys_t,
                       int64_t kt_stride, const float* values, int64_t value_stride, float scale,
                       float softcap) {
  if (active_isa() == Isa::kAvx512) {
    detail::attend_rows_tiled_avx512(head_dim, n_rows, rows, keys_t, kt_stride, values,
                                     value_stride, scale, softcap);
    return;
  }
  if (active_isa() == Isa::kAvx2) {
    detail::attend_rows_tiled_avx2(head_dim, n_rows, rows, keys_t, kt_stride, values, value_stride,
                                   scale, softcap);
    return;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    detail::attend_head_tiled_ref(head_dim, rows[r].q, keys_t, kt_stride, values, value_stride,
                                  rows[r].n_keys, scale, rows[r].out, rows[r].first_key, softcap);
  }
}

namespace detail {

void attend_head_tiled_ref(int64_t head_dim, const float* q, const float* keys_t, int64_t kt_stride,
                           const float* values, int64_t value_stride, int64_t n_keys, float scale,
                           float* out, int64_t first_key, float softcap) {
  constexpr int64_t kTile = 64;
  float acc[4096] = {};  // the loader's limit on head_dim
  float max_score = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
  if (softcap > 0.0f) scale /= softcap;
  for (int64_t ic = 0; ic < n_keys; ic += kTile) {
    const int64_t nk = std::min(kTile, n_keys - ic);
    if (ic + nk <= first_key) continue;  // every key of the tile masked
    float s[kTile], e[kTile];
    float tile_max = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < kTile; ++t) {
      if (t < nk && ic + t >= first_key) {
        float a = 0.0f;
        for (int64_t d = 0; d < head_dim; ++d)
          a = std::fma(q[d], keys_t[d * kt_stride + ic + t], a);
        s[t] = a * scale;
        if (softcap > 0.0f) s[t] = softcap * std::tanh(s[t]);
      } else {
        s[t] = -std::numeric_limits<float>::infinity();
      }
      tile_max = tile_max > s[t] ? tile_max : s[t];
    }
    const float new_max = std::fmax(max_score, tile_max);
    if (new_max > max_score) {
      const float ms = std::exp(max_score - new_max);
      for (int64_t d = 0; d < head_dim; ++d) acc[d] *= ms;
      sum *= ms;
    }
    max_score = new_max;
    double tile_sum = 0.0;
    for (int64_t c = 0; c < kTile; c += 16) {
      for (int64_t t = c; t < c + 16; ++t) e[t] = ggml_expf_approx(s[t] - max_score);
      tile_sum += reduce16(e + c);
    }
    sum = static_cast<float>(static_cast<double>(sum) + tile_sum);
    for (int64_t t = std::max<int64_t>(0, first_key - ic); t < nk; ++t) {
      const float* v = values + (ic + t) * value_stride;
      for (int64_t d = 0; d < head_dim; ++d) acc[d] = std::fma(e[t], v[d], acc[d]);
    }
  }
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int64_t d = 0; d < head_dim; ++d) out[d] = acc[d] * inv;
}

void rope_apply_ref(const float* cache, int64_t n_dims, bool neox, int64_t n_heads,
                    int64_t head_dim, float* heads) {
  const int64_t half = n_dims / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* head = heads + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float cos_t = cache[2 * i], sin_t = cache[2 * i + 1];
      const int64_t a = neox ? i : 2 * i;
      const int64_t b = neox ? i + half : 2 * i + 1;
      const float x0 = head[a], x1 = head[b];
      // ggml's compiled rotate_pairs: one product rounded, the other fused.
      head[a] = std::fma(x0, cos_t, -(x1 * sin_t));
      head[b] = std::fma(x0, sin_t, x1 * cos_t);
    }
  }
}

float dot_f16_f16_ref(int64_t n, const uint16_t* x, const uint16_t* y) {
  const int64_t np = n & ~int64_t{63};
  float acc[4][16] = {};
  for (int64_t i = 0; i < np; i += 64) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 16; ++l) {
        const int64_t k = i + 16 * j + l;
        acc[j][l] = std::fma(fp16_to_fp32(x[k]), fp16_to_fp32(y[k]), acc[j][l]);
      }
    }
  }
  for (int l = 0; l < 16; ++l) {
    acc[0][l] += acc[2][l];
    acc[1][l] += acc[3][l];
  }
  for (int l = 0; l < 16; ++l) acc[0][l] += acc[1][l];
  double sum = reduce16(acc[0]);
  for (int64_t i = np; i < n; ++i) {
    sum += static_cast<double>(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  }
  return static_cast<float>(sum);
}

int64_t argmax_row_ref(int64_t n, const float* x) {
  return std::max_element(x, x + n) - x;
}

void swiglu_row_ref(int64_t n, const float* gate, const float* up, float* out) {
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t i = 0; i < n16; ++i) {
    const float x = gate[i];
    const float e = ggml_expf_approx(0.0f - x);
    out[i] = (x / (1.0f + e)) * up[i];
  }
  for (int64_t i = n16; i < n; ++i) {
    const float x = gate[i];
    out[i] = x / (1.0f + std::exp(-x)) * up[i];
  }
}

void attend_head_f16_ref(int64_t head_dim, const float* q, const uint16_t* keys, int64_t key_stride,
                         const uint16_t* values, int64_t value_stride, int64_t n_keys, float scale,
                         float* out, float softcap) {
  if (softcap > 0.0f) scale /= softcap;
  constexpr int64_t kMaxHead = 4096;  // the loader's limit on head_dim
  uint16_t qh[kMaxHead];
  uint16_t acc[kMaxHead];
  for (int64_t i = 0; i < head_dim; ++i) {
    qh[i] = fp32_to_fp16(q[i]);
    acc[i] = 0;
  }
  float max_score = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
  for (int64_t p = 0; p < n_keys; ++p) {
    float s = dot_f16_f16_ref(head_dim, keys + p * key_stride, qh) * scale;
    if (softcap > 0.0f) s = softcap * std::tanh(s);
    float ms = 1.0f, vs = 1.0f;
    if (s > max_score) {
      const float old = max_score;
      max_score = s;
      ms = std::exp(old - max_score);
      for (int64_t i = 0; i < head_dim; ++i) acc[i] = fp32_to_fp16(fp16_to_fp32(acc[i]) * ms);
    } else {
      vs = std::exp(s - max_score);
    }
    const uint16_t* v = values + p * value_stride;
    for (int64_t i = 0; i < head_dim; ++i) {
      acc[i] = fp32_to_fp16(std::fma(fp16_to_fp32(v[i]), vs, fp16_to_fp32(acc[i])));
    }
    sum = sum * ms + vs;
  }
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int64_t i = 0; i < head_dim; ++i) out[i] = fp16_to_fp32(acc[i]) * inv;
}

}  // namespace detail
}  // namespace ferry::kernels
