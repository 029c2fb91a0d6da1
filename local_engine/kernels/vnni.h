// One AVX-512 VNNI dot with its signed operand broadcast by the instruction itself, for the
// TUs compiled with AVX-512 flags (kernels_avx512.cpp, packed_avx512.cpp) only.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ferry::kernels::detail {

// acc + the dots, lane by lane, of w's 4 unsigned bytes with the 4 signed bytes at p (the
// same 4 for every lane): vpdpbusd with an {1to16} memory operand. GCC 12 does not fold
// _mm512_set1_epi32 of a load into vpdpbusd, and the separate broadcast costs a vector uop per
// dot (about a tenth of an 8-token tile's time).
inline __m512i dpbusd_broadcast(__m512i acc, __m512i w, const int8_t* p) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0"
          : "+v"(acc)
          : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

}  // namespace ferry::kernels::detail
