// Tensor element types as GGUF numbers them (ggml_type ids), with their block geometry.
// Pure functions over constant tables; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry::model_format {

// Every id a GGUF file may carry. Only the ones marked "runs" have kernels; the others are
// known so that a reader can size and describe them (and refuse them by name).
enum class TensorType : uint32_t {
  kF32 = 0,    // runs
  kF16 = 1,    // runs
  kQ4_0 = 2,   // runs
  kQ4_1 = 3,   // runs
  kQ5_0 = 6,   // runs
  kQ5_1 = 7,   // runs
  kQ8_0 = 8,   // runs
  kQ8_1 = 9,   // activation type of the Q4_1 / Q5_1 dot products
  kQ2_K = 10,  // runs
  kQ3_K = 11,  // runs
  kQ4_K = 12,  // runs
  kQ5_K = 13,  // runs
  kQ6_K = 14,  // runs
  kQ8_K = 15,  // activation type of the K-quants' dot products
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,  // runs
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,  // runs
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};

// Name as llama.cpp prints it ("F32", "Q4_K", ...); "?" for an unknown id.
std::string_view tensor_type_name(TensorType type);
// Parses a name (case-insensitive: "q8_0", "Q4_K", "bf16").
std::optional<TensorType> tensor_type_from_name(std::string_view name);
// True for ids listed above.
bool tensor_type_known(uint32_t id);
// True when ferry has kernels for it (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS).
bool tensor_type_runs(TensorType type);
// Elements per block (1 for plain types) and bytes per block; 0 for an unknown id.
int64_t block_elems(TensorType type);
int64_t block_bytes(TensorType type);
// Bytes of a row of n elements; nullopt when n is negative or not a whole number of blocks,
// or the type is unknown. Overflow-safe for any int64 n.
std::optional<uint64_t> row_bytes(TensorType type, int64_t n);

}  // namespace ferry::model_format
