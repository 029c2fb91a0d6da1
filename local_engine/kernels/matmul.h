// y = W x for a batch of activation rows: the forward pass's one heavy operation.
// Quantizes the activations to the weight type's vec_dot_type once, then splits the weight
// rows over the thread pool. Thread-safe for distinct outputs; scratch is per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "local_engine/kernels/kernels.h"

namespace ferry::kernels {

class ThreadPool;

// A 2-D weight: `rows` rows (output features, GGUF ne[1]) of `cols` elements each (input
// features, GGUF ne[0]), row-major, rows `row_bytes` apart (row_bytes(type, cols) when packed).
// How a quantized dot product accumulates its blocks in float. kLanes: eight lanes per row,
// summed at the end (llama.cpp's vec_dot kernels); kSerial: one accumulator per row (llama.cpp's
// repacked "8x8" kernels, which it uses for Q4_0, Q4_K and IQ4_NL matrices of a multiple of 8
// rows, and for Q2_K ones on AVX-512 CPUs); kSerialFrom8: kLanes for batches of fewer than 8
// tokens, kSerial from 8 (llama.cpp's IQ panel gemm, IQ4_XS). Same integers, different float
// roundings; matching llama.cpp needs the one it uses. BatchForms::kInvariant treats
// kSerialFrom8 as kLanes, so a row's result does not depend on the batch.
enum class DotOrder : uint8_t { kLanes = 0, kSerial = 1, kSerialFrom8 = 2 };

struct MatrixView {
  TensorType type = TensorType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  size_t row_bytes = 0;
  DotOrder order = DotOrder::kLanes;  // kSerial only where the type has serial kernels

  const uint8_t* row(int64_t index) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(index) * row_bytes;
  }
};

// llama.cpp picks some kernels by the shape of the batch: for Q4_0 / Q4_K (repacked) and F16
// matrices, a row of a multi-row batch gets a different float order than a lone row (see
// TypeKernels). kLlamaCpp follows llama.cpp (ferry then matches it bit for bit, batch for
// batch); kInvariant gives every row the lone-row order, so a row's result never depends on
// what else is in the batch (continuous batching, prefix caching).
enum class BatchForms : uint8_t { kLlamaCpp = 0, kInvariant = 1 };

// A packed view over GGUF tensor bytes (ne0 = cols, ne1 = rows).
MatrixView make_matrix_view(TensorType type, int64_t rows, int64_t cols, const void* data);

// out[0..cols) = row `index` of w as floats.
void dequantize_row(const MatrixView& w, int64_t index, float* out);

// y[t * w.rows + r] = sum_i W[r][i] * x[t * w.cols + i] for t < n_tokens, r < w.rows.
// w.type must run (tensor_type_runs) and w.cols be a whole number of its blocks.
void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            BatchForms forms = BatchForms::kLlamaCpp);

// The same split in two steps, for callers that run their own threads:
//   QuantizedActivations qa = quantize_activations(w.type, x, n_tokens, w.cols);  // once
//   matmul_rows(w, qa, y, row_begin, row_end);  // per thread, on disjoint row ranges
struct QuantizedActivations {
  TensorType type = TensorType::kF32;  // the vec_dot_type
  int64_t n_tokens = 0;
  int64_t cols = 0;
  size_t row_stride = 0;       // bytes between tokens
  const void* data = nullptr;  // points into storage (or at the caller's floats for F32)
  // Unique to each quantization (0: made by hand), so that what a kernel derives from these
  // rows once per thread (packed.h: the blocks' sums) is not taken for another product's.
  uint64_t id = 0;
  // At least n_tokens * row_stride bytes. Taken from, and on destruction given back to, a small
  // per-thread pool, so prefill does not fault in fresh pages for every matrix product.
  std::vector<uint8_t> storage;

  QuantizedActivations() = default;
  QuantizedActivations(QuantizedActivations&&) = default;
  QuantizedActivations& operator=(QuantizedActivations&&) = default;
  ~QuantizedActivations();
};
QuantizedActivations quantize_activations(TensorType weight_type, const float* x, int64_t n_tokens,
                                          int64_t cols);
// The same, the tokens quantized on the pool's threads when there are several.
QuantizedActivations quantize_activations(TensorType weight_type, const float* x, int64_t n_tokens,
                                          int64_t cols, ThreadPool& pool);
// quantize_activations in two halves, for a caller that quantizes rows on its own threads (each
// row's bytes are the same wherever it is quantized): prepare_activations sets qa up (type,
// strides, storage, id) and returns true when its rows must then be quantized, which
// quantize_rows does for rows [begin, end) of x (n_tokens rows of cols floats).
bool prepare_activations(TensorType weight_type, const float* x, int64_t n_tokens, int64_t cols,
                         QuantizedActivations& qa);
void quantize_rows(const float* x, QuantizedActivations& qa, int64_t begin, int64_t end);
void matmul_rows(const MatrixView& w, const QuantizedActivations& qa, float* y, int64_t row_begin,
                 int64_t row_end, BatchForms forms = BatchForms::kLlamaCpp);

}  // namespace ferry::kernels
