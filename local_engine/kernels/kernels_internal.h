// Private to ferry_kernels: the per-ISA table fillers and the scalar reference functions they
// fall back to. Not for use outside local_engine/kernels/.
#pragma once

#include <cstdint>

#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/ops.h"

namespace ferry::kernels::detail {

inline constexpr int kTableSize = 31;  // indexed by TensorType id (0..30)

// Scalar reference: every type, every operation.
void fill_scalar_table(TypeKernels* table);
// Overwrite the entries that have a faster version; each TU is compiled with its ISA's flags
// and must only be called when isa_supported() says so.
void fill_avx2_table(TypeKernels* table);
void fill_avx512_table(TypeKernels* table);

// The 256 values (q + 32, 0..63) of a Q6_K block, in element order.
void q6_k_values(const void* block, uint8_t* q);

// Scalar vector helpers (the active-ISA versions dispatch to these or to SIMD ones).
float dot_f32_ref(int64_t n, const float* a, const float* b);
float dot_f16_f32_ref(int64_t n, const uint16_t* a, const float* b);
void axpy_f16_ref(int64_t n, float alpha, const uint16_t* x, float* y);

float dot_f32_avx2(int64_t n, const float* a, const float* b);
float dot_f16_f32_avx2(int64_t n, const uint16_t* a, const float* b);
void axpy_f16_avx2(int64_t n, float alpha, const uint16_t* x, float* y);
void fp32_to_fp16_row_avx2(const float* src, uint16_t* dst, int64_t n);
void fp16_to_fp32_row_avx2(const uint16_t* src, float* dst, int64_t n);

// ops.h on AVX2 + FMA + F16C (used by the AVX-512 table too); bit-identical to ops.cpp's.
float dot_f16_f16_avx2(int64_t n, const uint16_t* x, const uint16_t* y);
void swiglu_row_avx2(int64_t n, const float* gate, const float* up, float* out);
int64_t argmax_row_avx2(int64_t n, const float* x);
void rope_apply_avx2(const float* cache, int64_t n_dims, bool neox, int64_t n_heads,
                     int64_t head_dim, float* heads);
void attend_rows_tiled_avx512(int64_t head_dim, int64_t n_rows, const TiledRow* rows,
                              const float* keys_t, int64_t kt_stride, const float* values,
                              int64_t value_stride, float scale, float softcap);
void attend_rows_tiled_avx2(int64_t head_dim, int64_t n_rows, const TiledRow* rows,
                            const float* keys_t, int64_t kt_stride, const float* values,
                            int64_t value_stride, float scale, float softcap);
void attend_head_f16_avx2(int64_t head_dim, const float* q, const uint16_t* keys,
                          int64_t key_stride, const uint16_t* values, int64_t value_stride,
                          int64_t n_keys, float scale, float* out, float softcap);

}  // namespace ferry::kernels::detail
