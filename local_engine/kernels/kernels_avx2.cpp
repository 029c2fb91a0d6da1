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
