#include "local_engine/kernels/packed.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/thread_pool.h"

namespace ferry::kernels {
namespace {

// The 32 signed values of a source block (Q8_0's quants; Q5_0's 5-bit values - 16) and its
// scale.
uint16_t block_values(TensorType type, const uint8_t* row, int64_t i, int8_t v[kQK]) {
  if (type == TensorType::kQ5_0) {
    const auto& b = reinterpret_cast<const BlockQ5_0*>(row)[i];
    uint32_t high;
    std::memcpy(&high, b.qh, sizeof high);
    for (int l = 0; l < kQK; ++l) {
      const int low = l < kQK / 2 ? b.qs[l] & 0xF : b.qs[l - kQK / 2] >> 4;
      v[l] = static_cast<int8_t>((low | static_cast<int>((high >> l) & 1) << 4) - 16);
    }
    return b.d;
  }
  const auto& b = reinterpret_cast<const BlockQ8_0*>(row)[i];
  std::memcpy(v, b.qs, kQK);
  return b.d;
}

// Writes one row (j) of one block into the packed layout.
void pack_block(TensorType type, const int8_t v[kQK], int64_t j, uint8_t* block) {
  if (type == TensorType::kQ5_0) {
    for (int l = 0; l < kQK; ++l) {
      const auto u = static_cast<unsigned>(v[l] + 16);  // 0..31
      const int k = l / 4;
      const int64_t p = j * 4 + l % 4;
      uint8_t& nibbles = block[(k / 2) * 64 + p];
      nibbles = static_cast<uint8_t>(k % 2 == 0 ? (nibbles & 0xF0) | (u & 0xF)
                                                : (nibbles & 0x0F) | ((u & 0xF) << 4));
      uint64_t mask;
      std::memcpy(&mask, block + 256 + k * 8, sizeof mask);
      mask = (mask & ~(uint64_t{1} << p)) | (static_cast<uint64_t>(u >> 4) << p);
      std::memcpy(block + 256 + k * 8, &mask, sizeof mask);
    }
    return;
  }
  for (int l = 0; l < kQK; ++l) {
    block[(l / 4) * 4 * kPackRows + j * 4 + l % 4] = static_cast<uint8_t>(v[l]) ^ 0x80;
  }
}

}  // namespace

float packed_dot_serial_ref(TensorType type, int64_t n, const void* w, const void* a) {
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc = 0.0f;
  int8_t v[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint16_t d = block_values(type, static_cast<const uint8_t*>(w), i, v);
    int32_t isum = 0;
    for (int l = 0; l < kQK; ++l) isum += v[l] * y[i].qs[l];
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(d) * fp16_to_fp32(y[i].d), acc);
  }
  return acc;
}

void FreeBytes::operator()(uint8_t* p) const {
  std::free(p);
}

StreamedBytes allocate_streamed(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t align = bytes >= kHuge ? kHuge : 64;
  void* memory = nullptr;
  if (posix_memalign(&memory, align, bytes == 0 ? 64 : bytes) != 0) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE)
  if (align == kHuge) (void)madvise(memory, bytes / kHuge * kHuge, MADV_HUGEPAGE);  // a hint
#endif
  return StreamedBytes(static_cast<uint8_t*>(memory));
}

namespace {
int64_t block_bytes_of(TensorType type) {
  return type == TensorType::kQ5_0 ? 320 : 512;
}
int64_t group_bytes_of(TensorType type, int64_t cols) {
  const int64_t nb = cols / kQK;
  return (nb * block_bytes_of(type) + nb * 2 * kPackRows + 63) / 64 * 64;
}
}  // namespace

int64_t PackedWeights::block_bytes() const {
  return block_bytes_of(type_);
}

int64_t PackedWeights::packed_bytes(const MatrixView& w) {
  return group_bytes_of(w.type, w.cols) * (w.rows / kPackRows);
}

PackedWeights::PackedWeights(const MatrixView& w, ThreadPool* pool, uint8_t* storage)
    : type_(w.type), rows_(w.rows), cols_(w.cols) {
  const int64_t nb = cols_ / kQK;
  const int64_t quant_bytes = nb * block_bytes();
  group_bytes_ = group_bytes_of(type_, cols_);
  if (storage == nullptr) {
    owned_ = allocate_streamed(static_cast<size_t>(packed_bytes(w)));
    storage = owned_.get();
  }
  data_ = storage;
  auto pack_groups = [&](int64_t first, int64_t last) {
    int8_t v[kQK];
    for (int64_t g = first; g < last; ++g) {
      uint8_t* quants = data_ + g * group_bytes_;
      auto* scales = reinterpret_cast<uint16_t*>(quants + quant_bytes);
      std::memset(quants, 0, static_cast<size_t>(group_bytes_));
      for (int64_t j = 0; j < kPackRows; ++j) {
        const uint8_t* row = w.row(g * kPackRows + j);
        for (int64_t i = 0; i < nb; ++i) {
          scales[i * kPackRows + j] = block_values(type_, row, i, v);
          pack_block(type_, v, j, quants + i * block_bytes());
        }
      }
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(rows_ / kPackRows, 1, pack_groups);
  } else {
    pack_groups(0, rows_ / kPackRows);
  }
}

int PackedWeights::value(const uint8_t* block, int64_t j, int64_t l) const {
  const int64_t k = l / 4;
  const int64_t p = j * 4 + l % 4;
  if (type_ == TensorType::kQ5_0) {
    const uint8_t nibbles = block[(k / 2) * 64 + p];
    const int low = k % 2 == 0 ? nibbles & 0xF : nibbles >> 4;
    uint64_t mask;
    std::memcpy(&mask, block + 256 + k * 8, sizeof mask);
    return (low | static_cast<int>((mask >> p) & 1) << 4) - 16;
  }
  return static_cast<int8_t>(block[k * 4 * kPackRows + p] ^ 0x80);
}

bool packed_supported() {
  return active_isa() == Isa::kAvx512;
}

bool packable(const MatrixView& w) {
  size_t block = 0;
  if (w.type == TensorType::kQ8_0) block = sizeof(BlockQ8_0);
  if (w.type == TensorType::kQ5_0) block = sizeof(BlockQ5_0);
  return block != 0 && w.rows > 0 && w.rows % kPackRows == 0 && w.cols % kQK == 0 &&
         w.row_bytes == static_cast<size_t>(w.cols / kQK) * block;
}

void packed_rows_scalar(const PackedWeights& w, const QuantizedActivations& qa, float* y,
                        int64_t y_stride, int64_t row_begin, int64_t row_end, const float* bias) {
  const int64_t nb = w.cols() / kQK;
  const auto* act = static_cast<const uint8_t*>(qa.data);
  for (int64_t g = row_begin / kPackRows; g < row_end / kPackRows; ++g) {
    const uint8_t* quants = w.group(g);
    const auto* scales = reinterpret_cast<const uint16_t*>(quants + nb * w.block_bytes());
    for (int64_t t = 0; t < qa.n_tokens; ++t) {
      const auto* a =
          reinterpret_cast<const BlockQ8_0*>(act + static_cast<size_t>(t) * qa.row_stride);
      for (int64_t j = 0; j < kPackRows; ++j) {
        float acc = 0.0f;
        for (int64_t i = 0; i < nb; ++i) {
          const uint8_t* block = quants + i * w.block_bytes();
          int32_t isum = 0;
          for (int l = 0; l < kQK; ++l) isum += w.value(block, j, l) * a[i].qs[l];
          acc = std::fma(static_cast<float>(isum),
                         fp16_to_fp32(scales[i * kPackRows + j]) * fp16_to_fp32(a[i].d), acc);
        }
        const int64_t r = g * kPackRows + j;
        y[t * y_stride + r] = bias == nullptr ? acc : acc + bias[r];
      }
    }
  }
}

void packed_rows(const PackedWeights& w, const QuantizedActivations& qa, float* y, int64_t y_stride,
                 int64_t row_begin, int64_t row_end, const float* bias) {
#if defined(__x86_64__) || defined(__i386__)
  if (packed_supported()) {
    detail::packed_rows_avx512(w, qa, y, y_stride, row_begin, row_end, bias);
    return;
  }
#endif
  packed_rows_scalar(w, qa, y, y_stride, row_begin, row_end, bias);
}

}  // namespace ferry::kernels
