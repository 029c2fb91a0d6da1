// AVX2 + FMA + F16C kernels (maddubs-based integer dots). Compiled with -mavx2 -mfma -mf16c;
// called only after CPUID says so. Everything here stays in an anonymous namespace so no
// AVX2 code can be picked for an inline function shared with other translation units.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/kernels_internal.h"

namespace ferry::kernels {
namespace {

#define FERRY_VNNI 0
#include "local_engine/kernels/simd_x86.inc"
#undef FERRY_VNNI

}  // namespace

namespace detail {

void fill_avx2_table(TypeKernels* table) {
  fill_simd_table(table);
}

float dot_f32_avx2(int64_t n, const float* a, const float* b) {
  return dot_f32_simd(n, a, b);
}
float dot_f16_f32_avx2(int64_t n, const uint16_t* a, const float* b) {
  return dot_f16_f32_simd(n, a, b);
}
void axpy_f16_avx2(int64_t n, float alpha, const uint16_t* x, float* y) {
  axpy_f16_simd(n, alpha, x, y);
}
void fp32_to_fp16_row_avx2(const float* src, uint16_t* dst, int64_t n) {
  fp32_to_fp16_row_simd(src, dst, n);
}
void fp16_to_fp32_row_avx2(const uint16_t* src, float* dst, int64_t n) {
  fp16_to_fp32_row_simd(src, dst, n);
}
float dot_f16_f16_avx2(int64_t n, const uint16_t* x, const uint16_t* y) {
  return dot_f16_f16_simd(n, x, y);
}
void swiglu_row_avx2(int64_t n, const float* gate, const float* up, float* out) {
  swiglu_row_simd(n, gate, up, out);
}
// Eight lanes of running maxima (a NaN load leaves a lane as it was: vmaxps returns its second
// operand when either is NaN), then the first element equal to their maximum.
int64_t argmax_row_avx2(int64_t n, const float* x) {
  if (std::isnan(x[0])) return 0;
  __m256 m = _mm256_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float best = lanes[0];
  for (int l = 1; l < 8; ++l) best = lanes[l] > best ? lanes[l] : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  const __m256 b = _mm256_set1_ps(best);
  for (i = 0; i + 8 <= n; i += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), b, _CMP_EQ_OQ));
    if (hit != 0) return i + __builtin_ctz(static_cast<unsigned>(hit));
  }
  for (; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return 0;
}
void rope_apply_avx2(const float* cache, int64_t n_dims, bool neox, int64_t n_heads,
                     int64_t head_dim, float* heads) {
  rope_apply_simd(cache, n_dims, neox, n_heads, head_dim, heads);
}
void attend_rows_tiled_avx2(int64_t head_dim, int64_t n_rows, const TiledRow* rows,
                            const float* keys_t, int64_t kt_stride, const float* values,
                            int64_t value_stride, float scale, float softcap) {
  attend_rows_tiled_simd(head_dim, n_rows, rows, keys_t, kt_stride, values, value_stride, scale,
                         softcap);
}
void attend_head_f16_avx2(int64_t head_dim, const float* q, const uint16_t* keys,
                          int64_t key_stride, const uint16_t* values, int64_t value_stride,
                          int64_t n_keys, float scale, float* out, float softcap) {
  attend_head_f16_simd(head_dim, q, keys, key_stride, values, value_stride, n_keys, scale, out,
                       softcap);
}

}  // namespace detail
}  // namespace ferry::kernels
