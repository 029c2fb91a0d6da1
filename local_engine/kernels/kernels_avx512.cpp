// AVX-512 (F, BW, VL, VNNI) kernels: the integer dots use vpdpbusd. Compiled with those flags;
// called only after CPUID says so. Everything stays in an anonymous namespace (see
// kernels_avx2.cpp for why).
#include <immintrin.h>

#include <cstdint>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/kernels_internal.h"

namespace ferry::kernels {
namespace {

#define FERRY_VNNI 1
#include "local_engine/kernels/simd_x86.inc"
#undef FERRY_VNNI

}  // namespace

namespace detail {

void fill_avx512_table(TypeKernels* table) { fill_simd_table(table); }

}  // namespace detail
}  // namespace ferry::kernels
