// Non-x86 builds: no SIMD tables; the scalar reference runs. The dispatcher never calls the
// fill functions there (CPUID reports nothing), but they must link.
#include "local_engine/kernels/kernels_internal.h"

namespace ferry::kernels::detail {

void fill_avx2_table(TypeKernels*) {}
void fill_avx512_table(TypeKernels*) {}
float dot_f32_avx2(int64_t n, const float* a, const float* b) { return dot_f32_ref(n, a, b); }
float dot_f16_f32_avx2(int64_t n, const uint16_t* a, const float* b) {
  return dot_f16_f32_ref(n, a, b);
}
void axpy_f16_avx2(int64_t n, float alpha, const uint16_t* x, float* y) {
  axpy_f16_ref(n, alpha, x, y);
}
void fp32_to_fp16_row_avx2(const float*, uint16_t*, int64_t) {}
void fp16_to_fp32_row_avx2(const uint16_t*, float*, int64_t) {}

}  // namespace ferry::kernels::detail
