// Non-x86 builds: no SIMD tables; the scalar reference runs. The dispatcher never calls the
// fill functions there (CPUID reports nothing), but they must link.
#include "local_engine/kernels/kernels_internal.h"
#include "local_engine/kernels/ops.h"

namespace ferry::kernels::detail {

void fill_avx2_table(TypeKernels*) {}
void fill_avx512_table(TypeKernels*) {}
float dot_f32_avx2(int64_t n, const float* a, const float* b) {
  return dot_f32_ref(n, a, b);
}
float dot_f16_f32_avx2(int64_t n, const uint16_t* a, const float* b) {
  return dot_f16_f32_ref(n, a, b);
}
void axpy_f16_avx2(int64_t n, float alpha, const uint16_t* x, float* y) {
  axpy_f16_ref(n, alpha, x, y);
}
void fp32_to_fp16_row_avx2(const float*, uint16_t*, int64_t) {}
void fp16_to_fp32_row_avx2(const uint16_t*, float*, int64_t) {}
float dot_f16_f16_avx2(int64_t n, const uint16_t* x, const uint16_t* y) {
  return dot_f16_f16_ref(n, x, y);
}
void swiglu_row_avx2(int64_t n, const float* gate, const float* up, float* out) {
  swiglu_row_ref(n, gate, up, out);
}
int64_t argmax_row_avx2(int64_t n, const float* x) {
  return argmax_row_ref(n, x);
}
void rope_apply_avx2(const float*, int64_t, bool, int64_t, int64_t, float*) {}
void attend_rows_tiled_avx512(int64_t head_dim, int64_t n_rows, const TiledRow* rows,
                              const float* keys_t, int64_t kt_stride, const float* values,
                              int64_t value_stride, float scale) {
  attend_rows_tiled_avx2(head_dim, n_rows, rows, keys_t, kt_stride, values, value_stride, scale);
}
void attend_rows_tiled_avx2(int64_t head_dim, int64_t n_rows, const TiledRow* rows,
                            const float* keys_t, int64_t kt_stride, const float* values,
                            int64_t value_stride, float scale) {
  for (int64_t r = 0; r < n_rows; ++r) {
    attend_head_tiled_ref(head_dim, rows[r].q, keys_t, kt_stride, values, value_stride,
                          rows[r].n_keys, scale, rows[r].out);
  }
}
void attend_head_f16_avx2(int64_t head_dim, const float* q, const uint16_t* keys,
                          int64_t key_stride, const uint16_t* values, int64_t value_stride,
                          int64_t n_keys, float scale, float* out) {
  attend_head_f16_ref(head_dim, q, keys, key_stride, values, value_stride, n_keys, scale, out);
}

}  // namespace ferry::kernels::detail
