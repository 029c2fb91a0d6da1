#include "local_engine/kernels/matmul.h"

#include <algorithm>
#include <atomic>

#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/thread_pool.h"

namespace ferry::kernels {
namespace {

// Activation rows multiplied per pass over a weight row range: their quantized form stays in
// L2 while each weight row is read once per tile.
constexpr int64_t kTokenTile = 64;
// DotOrder::kSerialFrom8: llama.cpp's GGML_IQP_MIN_BATCH.
constexpr int64_t kSerialFromTokens = 8;
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

// Spare activation buffers of this thread, kept at their largest size (resizing down and back
// up within that size neither frees nor clears memory).
thread_local std::vector<std::vector<uint8_t>> t_spare_storage;
constexpr size_t kMaxSpares = 8;

std::vector<uint8_t> take_storage(size_t bytes) {
  std::vector<uint8_t> v;
  if (!t_spare_storage.empty()) {
    v = std::move(t_spare_storage.back());
    t_spare_storage.pop_back();
  }
  if (v.size() < bytes) v.resize(bytes);
  return v;
}

}  // namespace

QuantizedActivations::~QuantizedActivations() {
  if (!storage.empty() && t_spare_storage.size() < kMaxSpares) {
    t_spare_storage.push_back(std::move(storage));
  }
}

bool prepare_activations(TensorType weight_type, const float* x, int64_t n_tokens, int64_t cols,
                         QuantizedActivations& qa) {
  static std::atomic<uint64_t> last_id{0};
  const TypeKernels* wk = kernels_for(weight_type);
  qa.id = last_id.fetch_add(1, std::memory_order_relaxed) + 1;
  qa.type = wk->vec_dot_type;
  qa.n_tokens = n_tokens;
  qa.cols = cols;
  if (qa.type == TensorType::kF32) {
    qa.row_stride = static_cast<size_t>(cols) * sizeof(float);
    qa.data = x;
    return false;
  }
  qa.row_stride = static_cast<size_t>(row_bytes(qa.type, cols).value_or(0));
  qa.storage = take_storage(qa.row_stride * static_cast<size_t>(n_tokens));
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

QuantizedActivations quantize_activations(TensorType weight_type, const float* x, int64_t n_tokens,
                                          int64_t cols) {
  QuantizedActivations qa;
  if (prepare_activations(weight_type, x, n_tokens, cols, qa)) quantize_rows(x, qa, 0, n_tokens);
  return qa;
}

void matmul_rows(const MatrixView& w, const QuantizedActivations& qa, float* y, int64_t row_begin,
                 int64_t row_end, BatchForms forms) {
  const TypeKernels* k = kernels_for(w.type);
  const auto* act = static_cast<const uint8_t*>(qa.data);
  const auto stride = static_cast<int64_t>(qa.row_stride);
  const bool invariant = forms == BatchForms::kInvariant;
  const bool serial_order =
      w.order == DotOrder::kSerial ||
      (w.order == DotOrder::kSerialFrom8 && !invariant && qa.n_tokens >= kSerialFromTokens);
  const bool serial = serial_order && k->vec_dot_serial != nullptr;
  // The serving path's F16 products (every table has them): one order for every batch.
  if (invariant && k->gemm_invariant != nullptr) {
    k->gemm_invariant(w.cols, w.row(row_begin), static_cast<int64_t>(w.row_bytes),
                      row_end - row_begin, act, stride, qa.n_tokens, y + row_begin, w.rows);
    return;
  }
  // F16 batches take llama.cpp's tinyBLAS order (vec_dot_batch) only where it has one.
  const bool per_token = w.type == TensorType::kF16 && (w.rows % 4 != 0 || w.cols % 16 != 0);
  const VecDotFn dot = serial ? k->vec_dot_serial : k->vec_dot;
  const VecDotBatchFn dot_batch = serial ? k->vec_dot_batch_serial : k->vec_dot_batch;
  if (qa.n_tokens == 1 || per_token) {
    for (int64_t t = 0; t < qa.n_tokens; ++t) {
      for (int64_t r = row_begin; r < row_end; ++r) {
        y[t * w.rows + r] = dot(w.cols, w.row(r), act + t * stride);
      }
    }
    return;
  }
  // Serial order: tokens of whole groups of 4 take llama.cpp's gemm form, the rest its gemv form.
  const int64_t n_group4 = serial && !invariant ? qa.n_tokens - qa.n_tokens % 4 : 0;
  if (serial && k->gemm_serial4 && k->gemm_serial) {
    // Each form's tokens in one call: the tile rearranges each group of weight rows once and
    // reuses it for every token.
    const auto row_stride = static_cast<int64_t>(w.row_bytes);
    if (n_group4 > 0) {
      k->gemm_serial4(w.cols, w.row(row_begin), row_stride, row_end - row_begin, act, stride,
                      n_group4, y + row_begin, w.rows);
    }
    if (qa.n_tokens > n_group4) {
      k->gemm_serial(w.cols, w.row(row_begin), row_stride, row_end - row_begin,
                     act + n_group4 * stride, stride, qa.n_tokens - n_group4,
                     y + n_group4 * w.rows + row_begin, w.rows);
    }
    return;
  }
  for (int64_t t0 = 0; t0 < qa.n_tokens; t0 += kTokenTile) {
    const int64_t nt = std::min(kTokenTile, qa.n_tokens - t0);
    if (k->gemm && !serial) {
      k->gemm(w.cols, w.row(row_begin), static_cast<int64_t>(w.row_bytes), row_end - row_begin,
              act + t0 * stride, stride, nt, y + t0 * w.rows + row_begin, w.rows);
      continue;
    }
    const int64_t n4 = std::clamp(n_group4 - t0, int64_t{0}, nt);
    for (int64_t r = row_begin; r < row_end; ++r) {
      if (n4 > 0) {
        k->vec_dot_batch_serial4(w.cols, w.row(r), act + t0 * stride, stride, n4,
                                 y + t0 * w.rows + r, w.rows);
      }
      if (nt > n4) {
        dot_batch(w.cols, w.row(r), act + (t0 + n4) * stride, stride, nt - n4,
                  y + (t0 + n4) * w.rows + r, w.rows);
      }
    }
  }
}

QuantizedActivations quantize_activations(TensorType weight_type, const float* x, int64_t n_tokens,
                                          int64_t cols, ThreadPool& pool) {
  QuantizedActivations qa;
  if (prepare_activations(weight_type, x, n_tokens, cols, qa)) {
    if (n_tokens > 1) {  // prefill: quantize the batch on every thread too
      pool.parallel_for(n_tokens, 1,
                        [&](int64_t begin, int64_t end) { quantize_rows(x, qa, begin, end); });
    } else {
      quantize_rows(x, qa, 0, 1);
    }
  }
  return qa;
}

void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            BatchForms forms) {
  if (n_tokens <= 0 || w.rows <= 0) return;
  const QuantizedActivations qa = quantize_activations(w.type, x, n_tokens, w.cols, pool);
  pool.parallel_for(w.rows, kRowGrain, w.rows * w.cols * n_tokens,
                    [&](int64_t begin, int64_t end) { matmul_rows(w, qa, y, begin, end, forms); });
}

}  // namespace ferry::kernels
