// y = W x for a batch of activation rows: the forward pass's one heavy operation.
// Quantizes the activations to the weight type's vec_dot_type once, then splits the weight
// rows over the thread pool. Thread-safe for distinct outputs; scratch is per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "local_engine/kernels/tensor_type.h"

namespace ferry::kernels {

class ThreadPool;

// A 2-D weight: `rows` rows (output features, GGUF ne[1]) of `cols` elements each (input
// features, GGUF ne[0]), row-major, rows `row_bytes` apart (row_bytes(type, cols) when packed).
struct MatrixView {
  TensorType type = TensorType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  size_t row_bytes = 0;

  const uint8_t* row(int64_t index) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(index) * row_bytes;
  }
};

// A packed view over GGUF tensor bytes (ne0 = cols, ne1 = rows).
MatrixView make_matrix_view(TensorType type, int64_t rows, int64_t cols, const void* data);

// out[0..cols) = row `index` of w as floats.
void dequantize_row(const MatrixView& w, int64_t index, float* out);

// y[t * w.rows + r] = sum_i W[r][i] * x[t * w.cols + i] for t < n_tokens, r < w.rows.
// w.type must run (tensor_type_runs) and w.cols be a whole number of its blocks.
void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// The same split in two steps, for callers that run their own threads:
//   QuantizedActivations qa = quantize_activations(w.type, x, n_tokens, w.cols);  // once
//   matmul_rows(w, qa, y, row_begin, row_end);  // per thread, on disjoint row ranges
struct QuantizedActivations {
  TensorType type = TensorType::kF32;  // the vec_dot_type
  int64_t n_tokens = 0;
  int64_t cols = 0;
  size_t row_stride = 0;  // bytes between tokens
  const void* data = nullptr;  // points into storage (or at the caller's floats for F32)
  std::vector<uint8_t> storage;
};
QuantizedActivations quantize_activations(TensorType weight_type, const float* x,
                                          int64_t n_tokens, int64_t cols);
void matmul_rows(const MatrixView& w, const QuantizedActivations& qa, float* y,
                 int64_t row_begin, int64_t row_end);

}  // namespace ferry::kernels
