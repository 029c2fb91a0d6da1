// Helpers for the kernel tests: deterministic random rows and tolerance-aware comparisons.
// Not thread-safe; one generator per test.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "local_engine/kernels/kernels.h"
#include "model_format/tensor_type.h"

namespace ferry::kernels::testing {

inline std::vector<float> random_row(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& v : out) v = dist(rng);
  // A few outliers, as real weights have.
  for (int64_t i = 0; i < n; i += 97) out[static_cast<size_t>(i)] *= 4.0f;
  return out;
}

inline std::vector<uint8_t> quantize(TensorType type, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> out(static_cast<size_t>(row_bytes(type, n).value()));
  kernels_for(type, Isa::kScalar)->from_float(x.data(), out.data(), n);
  return out;
}

inline std::vector<float> dequantize(TensorType type, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  kernels_for(type, Isa::kScalar)->to_float(q.data(), out.data(), n);
  return out;
}

inline const TensorType kWeightTypes[] = {
    TensorType::kF32,  TensorType::kF16,    TensorType::kBF16,  TensorType::kQ8_0,
    TensorType::kQ4_0, TensorType::kQ4_1,   TensorType::kQ5_0,  TensorType::kQ5_1,
    TensorType::kQ2_K, TensorType::kQ3_K,   TensorType::kQ4_K,  TensorType::kQ5_K,
    TensorType::kQ6_K, TensorType::kIQ4_NL, TensorType::kIQ4_XS};

}  // namespace ferry::kernels::testing
