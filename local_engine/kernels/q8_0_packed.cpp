#include "local_engine/kernels/q8_0_packed.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/thread_pool.h"

namespace ferry::kernels {

float q8_0_dot_serial_ref(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t isum = 0;
    for (int l = 0; l < kQK; ++l) isum += x[i].qs[l] * y[i].qs[l];
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d), acc);
  }
  return acc;
}

void PackedQ8_0::Free::operator()(uint8_t* p) const {
  std::free(p);
}

PackedQ8_0::PackedQ8_0(const MatrixView& w, ThreadPool* pool) : rows_(w.rows), cols_(w.cols) {
  const int64_t nb = cols_ / kQK;
  group_bytes_ = (nb * (kQK * kPackRows + 2 * kPackRows) + 63) / 64 * 64;
  const auto bytes = static_cast<size_t>(group_bytes_ * (rows_ / kPackRows));
  data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes)));
  if (!data_) throw std::bad_alloc();
  const int64_t used = nb * (kQK + 2) * kPackRows;
  auto pack_groups = [&](int64_t first, int64_t last) {
    for (int64_t g = first; g < last; ++g) {
      uint8_t* quants = data_.get() + g * group_bytes_;
      auto* scales = reinterpret_cast<uint16_t*>(quants + nb * kQK * kPackRows);
      std::memset(quants + used, 0, static_cast<size_t>(group_bytes_ - used));
      for (int64_t j = 0; j < kPackRows; ++j) {
        const auto* row = reinterpret_cast<const BlockQ8_0*>(w.row(g * kPackRows + j));
        for (int64_t i = 0; i < nb; ++i) {
          scales[i * kPackRows + j] = row[i].d;
          uint8_t* block = quants + i * kQK * kPackRows + j * 4;
          for (int k = 0; k < kQK / 4; ++k) {  // 4 bytes at a time, made unsigned (+ 128)
            uint32_t four;
            std::memcpy(&four, row[i].qs + 4 * k, 4);
            four ^= 0x80808080u;
            std::memcpy(block + k * 4 * kPackRows, &four, 4);
          }
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

bool q8_0_packed_supported() {
  return active_isa() == Isa::kAvx512;
}

bool q8_0_packable(const MatrixView& w) {
  return w.type == TensorType::kQ8_0 && w.rows > 0 && w.rows % kPackRows == 0 &&
         w.cols % kQK == 0 && w.row_bytes == static_cast<size_t>(w.cols / kQK) * sizeof(BlockQ8_0);
}

void q8_0_packed_rows_scalar(const PackedQ8_0& w, const QuantizedActivations& qa, float* y,
                             int64_t y_stride, int64_t row_begin, int64_t row_end) {
  const int64_t nb = w.cols() / kQK;
  const auto* act = static_cast<const uint8_t*>(qa.data);
  for (int64_t g = row_begin / kPackRows; g < row_end / kPackRows; ++g) {
    const uint8_t* quants = w.group(g);
    const auto* scales = reinterpret_cast<const uint16_t*>(quants + nb * kQK * kPackRows);
    for (int64_t t = 0; t < qa.n_tokens; ++t) {
      const auto* a =
          reinterpret_cast<const BlockQ8_0*>(act + static_cast<size_t>(t) * qa.row_stride);
      for (int64_t j = 0; j < kPackRows; ++j) {
        float acc = 0.0f;
        for (int64_t i = 0; i < nb; ++i) {
          const uint8_t* block = quants + i * kQK * kPackRows;
          int32_t isum = 0;
          for (int l = 0; l < kQK; ++l) {
            const auto wq =
                static_cast<int8_t>(block[(l / 4) * 4 * kPackRows + j * 4 + l % 4] ^ 0x80);
            isum += wq * a[i].qs[l];
          }
          acc = std::fma(static_cast<float>(isum),
                         fp16_to_fp32(scales[i * kPackRows + j]) * fp16_to_fp32(a[i].d), acc);
        }
        y[t * y_stride + g * kPackRows + j] = acc;
      }
    }
  }
}

void q8_0_packed_rows(const PackedQ8_0& w, const QuantizedActivations& qa, float* y,
                      int64_t y_stride, int64_t row_begin, int64_t row_end) {
#if defined(__x86_64__) || defined(__i386__)
  if (q8_0_packed_supported()) {
    detail::q8_0_packed_rows_avx512(w, qa, y, y_stride, row_begin, row_end);
    return;
  }
#endif
  q8_0_packed_rows_scalar(w, qa, y, y_stride, row_begin, row_end);
}

}  // namespace ferry::kernels
