// Kernel tables per ISA, built once, and the run-time choice among them.
#include "local_engine/kernels/kernels.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels_internal.h"

namespace ferry::kernels {
namespace {

using Table = std::array<TypeKernels, detail::kTableSize>;

struct Tables {
  Table scalar{};
  Table avx2{};
  Table avx512{};
  bool has_avx2 = false;
  bool has_avx512 = false;
  Isa active = Isa::kScalar;
};

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14 has no "f16c" for __builtin_cpu_supports.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

const Tables& tables() {
  static const Tables instance = [] {
    Tables t;
    detail::fill_scalar_table(t.scalar.data());
    t.has_avx2 = cpu_has_avx2();
    t.has_avx512 = cpu_has_avx512();
    if (t.has_avx2) {
      t.avx2 = t.scalar;
      detail::fill_avx2_table(t.avx2.data());
    }
    if (t.has_avx512) {
      t.avx512 = t.avx2;
      detail::fill_avx512_table(t.avx512.data());
    }
    t.active = t.has_avx512 ? Isa::kAvx512 : t.has_avx2 ? Isa::kAvx2 : Isa::kScalar;
    if (const char* env = std::getenv("FERRY_ISA")) {
      const std::string want(env);
      if (want == "scalar") t.active = Isa::kScalar;
      if (want == "avx2" && t.has_avx2) t.active = Isa::kAvx2;
    }
    return t;
  }();
  return instance;
}

const Table* table_for(Isa isa) {
  const Tables& t = tables();
  switch (isa) {
    case Isa::kScalar:
      return &t.scalar;
    case Isa::kAvx2:
      return t.has_avx2 ? &t.avx2 : nullptr;
    case Isa::kAvx512:
      return t.has_avx512 ? &t.avx512 : nullptr;
  }
  return nullptr;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

Isa detect_isa() {
  const Tables& t = tables();
  return t.has_avx512 ? Isa::kAvx512 : t.has_avx2 ? Isa::kAvx2 : Isa::kScalar;
}

bool isa_supported(Isa isa) {
  return table_for(isa) != nullptr;
}

Isa active_isa() {
  return tables().active;
}

const TypeKernels* kernels_for(TensorType type, Isa isa) {
  const Table* table = table_for(isa);
  const auto id = static_cast<uint32_t>(type);
  if (!table || id >= detail::kTableSize) return nullptr;
  const TypeKernels& k = (*table)[id];
  return k.to_float ? &k : nullptr;
}

const TypeKernels* kernels_for(TensorType type) {
  return kernels_for(type, active_isa());
}

float dot_f32(int64_t n, const float* a, const float* b) {
  return active_isa() != Isa::kScalar ? detail::dot_f32_avx2(n, a, b)
                                      : detail::dot_f32_ref(n, a, b);
}

float dot_f16_f32(int64_t n, const uint16_t* a, const float* b) {
  return active_isa() != Isa::kScalar ? detail::dot_f16_f32_avx2(n, a, b)
                                      : detail::dot_f16_f32_ref(n, a, b);
}

void axpy_f16(int64_t n, float alpha, const uint16_t* x, float* y) {
  if (active_isa() != Isa::kScalar) {
    detail::axpy_f16_avx2(n, alpha, x, y);
  } else {
    detail::axpy_f16_ref(n, alpha, x, y);
  }
}

void fp32_to_fp16_row(const float* src, uint16_t* dst, int64_t n) {
  if (active_isa() != Isa::kScalar) {
    detail::fp32_to_fp16_row_avx2(src, dst, n);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
  }
}

void fp16_to_fp32_row(const uint16_t* src, float* dst, int64_t n) {
  if (active_isa() != Isa::kScalar) {
    detail::fp16_to_fp32_row_avx2(src, dst, n);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
  }
}

}  // namespace ferry::kernels
