// Q8_0 weights repacked 16 rows at a time for the batch-invariant engine (BatchForms::kInvariant)
// on AVX-512 VNNI: a block's 16 rows interleaved 4 bytes at a time, so one 512-bit integer dot
// serves 16 rows and a row's block sum lands in one lane, and the weights stream sequentially
// whatever the batch. Immutable after packing; the kernels are thread-safe on disjoint outputs.
#pragma once

#include <cstdint>
#include <memory>

#include "local_engine/kernels/matmul.h"

namespace ferry::kernels {

class ThreadPool;

// The float order of these products is kSerial's (matmul.h): per 32-element block, the whole
// integer dot w.a, then acc = fma(float(dot), d_w * d_a, acc), one accumulator per row from 0;
// q8_0_dot_serial_ref is its definition. Every row of every batch gets exactly this, so results
// never depend on the batch (but differ in the last bits from the lane order of vec_dot).
float q8_0_dot_serial_ref(int64_t n, const void* w, const void* a);

inline constexpr int64_t kPackRows = 16;

class PackedQ8_0 {
 public:
  // w.type must be kQ8_0, w.rows a multiple of kPackRows and w.cols of 32 (q8_0_packable).
  // Packs on the pool's threads when given one (the bytes are copied; w may go away after).
  explicit PackedQ8_0(const MatrixView& w, ThreadPool* pool = nullptr);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Bytes of one group of 16 rows: cols/32 blocks of 512 quant bytes (chunk k of 4 bytes, row j
  // at k * 64 + j * 4, each byte w ^ 0x80, i.e. w + 128 as unsigned), then cols/32 times 16
  // fp16 scales; rounded up to 64 bytes.
  int64_t group_bytes() const { return group_bytes_; }
  const uint8_t* group(int64_t g) const { return data_.get() + g * group_bytes_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int64_t group_bytes_ = 0;
  std::unique_ptr<uint8_t, Free> data_;
};

// True when the active ISA has the packed kernel (AVX-512 VNNI); elsewhere callers keep the
// row layout (its products are batch-invariant too, in vec_dot's lane order).
bool q8_0_packed_supported();
bool q8_0_packable(const MatrixView& w);

// y[t * y_stride + r] = q8_0_dot_serial_ref(row r of the original matrix, token t) for
// t < qa.n_tokens and r in [row_begin, row_end), both multiples of kPackRows; qa holds Q8_0
// activations (quantize_activations(kQ8_0, ...)). Active ISA when supported, else scalar.
void q8_0_packed_rows(const PackedQ8_0& w, const QuantizedActivations& qa, float* y,
                      int64_t y_stride, int64_t row_begin, int64_t row_end);
// The scalar version on the packed layout (tests).
void q8_0_packed_rows_scalar(const PackedQ8_0& w, const QuantizedActivations& qa, float* y,
                             int64_t y_stride, int64_t row_begin, int64_t row_end);

namespace detail {
void q8_0_packed_rows_avx512(const PackedQ8_0& w, const QuantizedActivations& qa, float* y,
                             int64_t y_stride, int64_t row_begin, int64_t row_end);
}  // namespace detail

}  // namespace ferry::kernels
