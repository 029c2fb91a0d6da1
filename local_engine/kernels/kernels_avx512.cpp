// AVX-512 (F, BW, VL, VNNI) kernels: the integer dots use vpdpbusd. Compiled with those flags;
// called only after CPUID says so. Everything stays in an anonymous namespace (see
// kernels_avx2.cpp for why).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/kernels_internal.h"
#include "local_engine/kernels/vnni.h"

namespace ferry::kernels {
namespace {

// GCC 12 reports the _mm512_undefined_* inside its own 256 <-> 512-bit intrinsics as
// uninitialized (GCC bug 105593); nothing here reads an undefined lane.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define FERRY_VNNI 1
#include "local_engine/kernels/simd_x86.inc"
#undef FERRY_VNNI
#pragma GCC diagnostic pop

}  // namespace

namespace detail {

void fill_avx512_table(TypeKernels* table) {
  fill_simd_table(table);
}

void attend_rows_tiled_avx512(int64_t head_dim, int64_t n_rows, const TiledRow* rows,
                              const float* keys_t, int64_t kt_stride, const float* values,
                              int64_t value_stride, float scale, float softcap) {
  attend_rows_tiled_simd(head_dim, n_rows, rows, keys_t, kt_stride, values, value_stride, scale,
                         softcap);
}

}  // namespace detail
}  // namespace ferry::kernels
