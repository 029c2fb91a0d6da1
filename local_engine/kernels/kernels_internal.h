// Private to ferry_kernels: the per-ISA table fillers and the scalar reference functions they
// fall back to. Not for use outside local_engine/kernels/.
#pragma once

#include <cstdint>

#include "local_engine/kernels/kernels.h"

namespace ferry::kernels::detail {

inline constexpr int kTableSize = 31;  // indexed by TensorType id (0..30)

// Scalar reference: every type, every operation.
void fill_scalar_table(TypeKernels* table);
// Overwrite the entries that have a faster version; each TU is compiled with its ISA's flags
// and must only be called when isa_supported() says so.
void fill_avx2_table(TypeKernels* table);
void fill_avx512_table(TypeKernels* table);

// Scalar vector helpers (the active-ISA versions dispatch to these or to SIMD ones).
float dot_f32_ref(int64_t n, const float* a, const float* b);
float dot_f16_f32_ref(int64_t n, const uint16_t* a, const float* b);
void axpy_f16_ref(int64_t n, float alpha, const uint16_t* x, float* y);

float dot_f32_avx2(int64_t n, const float* a, const float* b);
float dot_f16_f32_avx2(int64_t n, const uint16_t* a, const float* b);
void axpy_f16_avx2(int64_t n, float alpha, const uint16_t* x, float* y);
void fp32_to_fp16_row_avx2(const float* src, uint16_t* dst, int64_t n);
void fp16_to_fp32_row_avx2(const uint16_t* src, float* dst, int64_t n);

}  // namespace ferry::kernels::detail
