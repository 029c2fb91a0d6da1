// AVX2 + FMA + F16C kernels (maddubs-based integer dots). Compiled with -mavx2 -mfma -mf16c;
// called only after CPUID says so. Everything here stays in an anonymous namespace so no
// AVX2 code can be picked for an inline function shared with other translation units.
#include <immintrin.h>

#include <cstdint>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/kernels_internal.h"

namespace ferry::kernels {
namespace {

#define FERRY_VNNI 0
#include "local_engine/kernels/simd_x86.inc"
#undef FERRY_VNNI

}  // namespace

namespace detail {

void fill_avx2_table(TypeKernels* table) { fill_simd_table(table); }

float dot_f32_avx2(int64_t n, const float* a, const float* b) { return dot_f32_simd(n, a, b); }
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

}  // namespace detail
}  // namespace ferry::kernels
