#include "local_engine/kernels/matmul.h"

#include <algorithm>

#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/thread_pool.h"

namespace ferry::kernels {
namespace {

// Activation rows multiplied per pass over a weight row range: their quantized form stays in
// L2 while each weight row is read once per tile.
constexpr int64_t kTokenTile = 64;
// Weight rows per unit of work handed to a thread.
constexpr int64_t kRowGrain = 16;

}  // namespace

MatrixView make_matrix_view(TensorType type, int64_t rows, int64_t cols, const void* data) {
  MatrixView view;
  view.type = type;
  view.rows = rows;
  view.cols = cols;
  view.data = data;
  view.row_bytes = static_cast<size_t>(row_bytes(type, cols).value_or(0));
  return view;
}

void dequantize_row(const MatrixView& w, int64_t index, float* out) {
  kernels_for(w.type)->to_float(w.row(index), out, w.cols);
}

namespace {

// Sets up qa (type, strides, storage) without quantizing; true when rows must be quantized.
bool prepare_activations(TensorType weight_type, const float* x, int64_t n_tokens, int64_t cols,
                         QuantizedActivations& qa) {
  const TypeKernels* wk = kernels_for(weight_type);
  qa.type = wk->vec_dot_type;
  qa.n_tokens = n_tokens;
  qa.cols = cols;
  if (qa.type == TensorType::kF32) {
    qa.row_stride = static_cast<size_t>(cols) * sizeof(float);
    qa.data = x;
    return false;
  }
  qa.row_stride = static_cast<size_t>(row_bytes(qa.type, cols).value_or(0));
  qa.storage.resize(qa.row_stride * static_cast<size_t>(n_tokens));
  qa.data = qa.storage.data();
  return true;
}

void quantize_rows(const float* x, QuantizedActivations& qa, int64_t begin, int64_t end) {
  const TypeKernels* ak = kernels_for(qa.type);
  for (int64_t t = begin; t < end; ++t) {
    ak->from_float(x + t * qa.cols, qa.storage.data() + static_cast<size_t>(t) * qa.row_stride,
                   qa.cols);
  }
}

}  // namespace

QuantizedActivations quantize_activations(TensorType weight_type, const float* x,
                                          int64_t n_tokens, int64_t cols) {
  QuantizedActivations qa;
  if (prepare_activations(weight_type, x, n_tokens, cols, qa)) quantize_rows(x, qa, 0, n_tokens);
  return qa;
}

void matmul_rows(const MatrixView& w, const QuantizedActivations& qa, float* y, int64_t row_begin,
                 int64_t row_end) {
  const TypeKernels* k = kernels_for(w.type);
  const auto* act = static_cast<const uint8_t*>(qa.data);
  const auto stride = static_cast<int64_t>(qa.row_stride);
  if (qa.n_tokens == 1) {
    for (int64_t r = row_begin; r < row_end; ++r) y[r] = k->vec_dot(w.cols, w.row(r), act);
    return;
  }
  for (int64_t t0 = 0; t0 < qa.n_tokens; t0 += kTokenTile) {
    const int64_t nt = std::min(kTokenTile, qa.n_tokens - t0);
    if (k->gemm) {
      k->gemm(w.cols, w.row(row_begin), static_cast<int64_t>(w.row_bytes), row_end - row_begin,
              act + t0 * stride, stride, nt, y + t0 * w.rows + row_begin, w.rows);
      continue;
    }
    for (int64_t r = row_begin; r < row_end; ++r) {
      k->vec_dot_batch(w.cols, w.row(r), act + t0 * stride, stride, nt, y + t0 * w.rows + r,
                       w.rows);
    }
  }
}

void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  if (n_tokens <= 0 || w.rows <= 0) return;
  QuantizedActivations qa;
  if (prepare_activations(w.type, x, n_tokens, w.cols, qa)) {
    if (n_tokens > 1) {  // prefill: quantize the batch on every thread too
      pool.parallel_for(n_tokens, 1,
                        [&](int64_t begin, int64_t end) { quantize_rows(x, qa, begin, end); });
    } else {
      quantize_rows(x, qa, 0, 1);
    }
  }
  pool.parallel_for(w.rows, kRowGrain,
                    [&](int64_t begin, int64_t end) { matmul_rows(w, qa, y, begin, end); });
}

}  // namespace ferry::kernels
