// The kernel table: per tensor type, row conversion to/from float and the dot product of a
// weight row with an activation row (quantized to the type's vec_dot_type), for one ISA.
// Tables are immutable after start-up; every function is thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string_view>

#include "model_format/tensor_type.h"

namespace ferry::kernels {

// The tables are indexed by the file format's tensor types (model_format/, below both the GGUF
// reader and the kernels).
using model_format::block_bytes;
using model_format::block_elems;
using model_format::row_bytes;
using model_format::tensor_type_from_name;
using model_format::tensor_type_known;
using model_format::tensor_type_name;
using model_format::tensor_type_runs;
using model_format::TensorType;

// Instruction sets with a kernel table. kScalar runs everywhere and is the reference.
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view isa_name(Isa isa);
// The best ISA this CPU supports (CPUID via __builtin_cpu_supports): kAvx512 needs
// AVX512F+BW+VL+VNNI, kAvx2 needs AVX2+FMA+F16C.
Isa detect_isa();
// True when this CPU can run `isa`'s table.
bool isa_supported(Isa isa);
// The ISA the default table uses: detect_isa(), or lower when the environment variable
// FERRY_ISA=scalar|avx2|avx512 asks for it (never higher than supported). Fixed at first call.
Isa active_isa();

// Converts n elements (a whole number of blocks) of a row.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// Dot product of n elements: a weight row `w` of the table's type with an activation row `a`
// of its vec_dot_type. n is a whole number of blocks of both types.
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);
// Dot products of one weight row with n_act activation rows (rows act_stride bytes apart):
// out[j * out_stride] = vec_dot(n, w, a + j * act_stride). Batched so weights are loaded once.
using VecDotBatchFn = void (*)(int64_t n, const void* w, const void* a, int64_t act_stride,
                               int64_t n_act, float* out, int64_t out_stride);

// Tile form, optional (nullptr where a type has none): for w < n_w weight rows (w_stride bytes
// apart) and r < n_a activation rows, out[r * out_stride + w] = vec_dot(n, w_row, a_row),
// bit-identical to vec_dot. Prefill uses it when present.
using GemmFn = void (*)(int64_t n, const void* w, int64_t w_stride, int64_t n_w, const void* a,
                        int64_t a_stride, int64_t n_a, float* out, int64_t out_stride);

// Weights rearranged once for many products (see TypeKernels::pack_panels).
using PackPanelsFn = void (*)(int64_t n, const void* w, int64_t w_stride, int64_t n_w,
                              void* panels);
// a_id: the activations' QuantizedActivations::id (0: none), so that what a kernel derives from
// them is kept per thread across the ranges of one product.
using GemmPanelsFn = void (*)(int64_t n, const void* panels, int64_t n_w, const void* a,
                              int64_t a_stride, int64_t n_a, float* out, int64_t out_stride,
                              uint64_t a_id);

struct TypeKernels {
  TensorType type = TensorType::kF32;
  ToFloatFn to_float = nullptr;                // dequantize
  FromFloatFn from_float = nullptr;            // quantize (reference quality, deterministic)
  TensorType vec_dot_type = TensorType::kF32;  // what activations are quantized to
  VecDotFn vec_dot = nullptr;
  VecDotBatchFn vec_dot_batch = nullptr;
  GemmFn gemm = nullptr;
  // The same dot products in DotOrder::kSerial (matmul.h), for the types llama.cpp repacks
  // (Q4_0, Q4_K, IQ4_NL, Q2_K) or runs through its IQ panel gemm (IQ4_XS); nullptr elsewhere.
  // llama.cpp multiplies whole groups of 4 activation rows with its gemm kernel and the remaining
  // rows with its gemv kernel, which for Q4_K accumulate in different steps (per 64 elements vs per
  // 256): the `4` form is the gemm one.
  VecDotFn vec_dot_serial = nullptr;
  VecDotBatchFn vec_dot_batch_serial = nullptr;
  VecDotBatchFn vec_dot_batch_serial4 = nullptr;
  // vec_dot_batch_serial / vec_dot_batch_serial4 for many weight rows at once (GemmFn's
  // layout), bit-identical to them; optional (nullptr: matmul goes row by row).
  GemmFn gemm_serial = nullptr;
  GemmFn gemm_serial4 = nullptr;
  // The serving path's products (BatchForms::kInvariant) in an order of their own, the same for
  // every batch (GemmFn's layout, not bit-identical to vec_dot): F16 only, so that a few tokens
  // (speculative verification) read and widen each weight row once. nullptr: per token vec_dot.
  GemmFn gemm_invariant = nullptr;
  // The serving path's products on weights rearranged once at load (Q4_K and Q6_K on VNNI):
  // pack_panels writes n_w rows (a multiple of 16) into n_w / 16 * n / (block elements) *
  // panel_bytes bytes, 64-byte aligned; gemm_panels(n, panels of rows [r, r + n_w), ...) gives
  // panel_dot's bits for those rows and every token, r and n_w multiples of 16. panel_dot is
  // Q4_K's vec_dot_serial (llama.cpp repacks Q4_K per call; the panels do it once) and for
  // Q6_K an order of its own (quants_ref.cpp, q6_k_dot_q8_k_panel), set in every table so
  // tests can check the panels against it. nullptr: none.
  int64_t panel_bytes = 0;  // per 16 rows and one block
  PackPanelsFn pack_panels = nullptr;
  GemmPanelsFn gemm_panels = nullptr;
  VecDotFn panel_dot = nullptr;
};

// The table entry for `type` on the active ISA; nullptr for a type ferry does not run.
const TypeKernels* kernels_for(TensorType type);
// The table entry for `type` on a given ISA (for tests and benchmarks); nullptr when the type
// does not run or the CPU lacks the ISA.
const TypeKernels* kernels_for(TensorType type, Isa isa);

// Scalar reference quantizers of the activation types, exported for tests.
void quantize_row_q8_0_ref(const float* x, void* y, int64_t n);
void quantize_row_q8_k_ref(const float* x, void* y, int64_t n);
void quantize_row_q8_1_ref(const float* x, void* y, int64_t n);

// Vector helpers for the forward pass (attention over an F16 KV cache and the like), on the
// active ISA.
float dot_f32(int64_t n, const float* a, const float* b);
float dot_f16_f32(int64_t n, const uint16_t* a, const float* b);
// y[i] += alpha * float(x[i])
void axpy_f16(int64_t n, float alpha, const uint16_t* x, float* y);
void fp32_to_fp16_row(const float* src, uint16_t* dst, int64_t n);
void fp16_to_fp32_row(const uint16_t* src, float* dst, int64_t n);

}  // namespace ferry::kernels
