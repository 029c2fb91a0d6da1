// Q8_0 and Q5_0 weights repacked 16 rows at a time for the batch-invariant engine
// (BatchForms::kInvariant) on AVX-512 VNNI: a block's 16 rows interleaved 4 columns at a time, so
// one 512-bit integer dot (unsigned weights, the Q8_0 activations' signed bytes) serves 16 rows
// and a row's block sum lands in one lane, and the weights stream sequentially whatever the
// batch. A packed copy is as large as the original. Immutable after packing; the kernels are
// thread-safe on disjoint outputs.
#pragma once

#include <cstdint>
#include <memory>

#include "local_engine/kernels/matmul.h"

namespace ferry::kernels {

class ThreadPool;

// The float order of these products is kSerial's (matmul.h): per 32-element block, the whole
// integer dot w.a (w the signed values: Q8_0's quants, Q5_0's q - 16), then
// acc = fma(float(dot), d_w * d_a, acc), one accumulator per row from 0; packed_dot_serial_ref
// is its definition (w one row of `type` blocks, a Q8_0 blocks). Every row of every batch gets
// exactly this, so results never depend on the batch (but differ in the last bits from the
// lane order of vec_dot).
float packed_dot_serial_ref(TensorType type, int64_t n, const void* w, const void* a);

inline constexpr int64_t kPackRows = 16;

// Memory for bytes a decode step streams whole (packed weights): 2 MiB-aligned when large, with
// a huge-page hint (with 4 KiB pages every page of the stream costs a TLB walk). Not rounded
// up: a last partial 2 MiB stays on small pages.
struct FreeBytes {
  void operator()(uint8_t* p) const;
};
using StreamedBytes = std::unique_ptr<uint8_t, FreeBytes>;
StreamedBytes allocate_streamed(size_t bytes);

class PackedWeights {
 public:
  // packable(w) must hold. Packs on the pool's threads when given one (the bytes are copied;
  // w may go away after), into `storage` when given (packed_bytes(w) bytes, 64-byte aligned,
  // outliving this object: one allocation for all of a model's packed matrices), else into
  // memory of its own.
  explicit PackedWeights(const MatrixView& w, ThreadPool* pool = nullptr,
                         uint8_t* storage = nullptr);
  // The bytes a packed copy of w takes (a multiple of 64).
  static int64_t packed_bytes(const MatrixView& w);

  TensorType type() const { return type_; }  // the original's: kQ8_0 or kQ5_0
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Quant bytes of one block of 32 columns of the 16 rows, all unsigned (the signed value plus
  // offset()); chunk k holds columns 4k..4k+3, row j's 4 bytes at j * 4 of the chunk's 64:
  // - Q8_0 (512 bytes): chunk k at k * 64, each byte w ^ 0x80 (w + 128);
  // - Q5_0 (320 bytes): line m (m < 4, at m * 64) holds chunk 2m in its low nibbles and chunk
  //   2m + 1 in its high ones (the values' low 4 bits); then per chunk a 64-bit mask at
  //   256 + k * 8, bit p the fifth bit of the chunk's byte p.
  int64_t block_bytes() const;
  int32_t offset() const { return type_ == TensorType::kQ5_0 ? 16 : 128; }
  // Bytes of one group of 16 rows: cols/32 blocks of block_bytes(), then cols/32 times 16 fp16
  // scales; rounded up to 64 bytes.
  int64_t group_bytes() const { return group_bytes_; }
  const uint8_t* group(int64_t g) const { return data_ + g * group_bytes_; }
  // The signed value of row j (< 16), column l (< 32) of a block (at group(g) + i *
  // block_bytes()) of this layout.
  int value(const uint8_t* block, int64_t j, int64_t l) const;

 private:
  TensorType type_ = TensorType::kQ8_0;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int64_t group_bytes_ = 0;
  StreamedBytes owned_;  // empty when packed into given storage
  uint8_t* data_ = nullptr;
};

// True when the active ISA has the packed kernel (AVX-512 VNNI); elsewhere callers keep the
// row layout (its products are batch-invariant too, in vec_dot's lane order).
bool packed_supported();
// A Q8_0 or Q5_0 matrix of whole 16-row groups and 32-column blocks, rows contiguous.
bool packable(const MatrixView& w);

// y[t * y_stride + r] = packed_dot_serial_ref(row r of the original matrix, token t) for
// t < qa.n_tokens and r in [row_begin, row_end), both multiples of kPackRows; qa holds Q8_0
// activations (quantize_activations(w.type(), ...)). With a bias (w.rows() floats), each is
// that float sum + bias[r], rounded once more: the bits of adding the bias afterwards, without
// another pass over y. Active ISA when supported, else scalar.
void packed_rows(const PackedWeights& w, const QuantizedActivations& qa, float* y, int64_t y_stride,
                 int64_t row_begin, int64_t row_end, const float* bias = nullptr);
// The scalar version on the packed layout (tests).
void packed_rows_scalar(const PackedWeights& w, const QuantizedActivations& qa, float* y,
                        int64_t y_stride, int64_t row_begin, int64_t row_end,
                        const float* bias = nullptr);

namespace detail {
void packed_rows_avx512(const PackedWeights& w, const QuantizedActivations& qa, float* y,
                        int64_t y_stride, int64_t row_begin, int64_t row_end, const float* bias);
}  // namespace detail

}  // namespace ferry::kernels
