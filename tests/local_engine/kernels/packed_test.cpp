#include "local_engine/kernels/packed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels.h"
#include "tests/local_engine/kernels/test_util.h"

namespace ferry::kernels {
namespace {

using testing::quantize;
using testing::random_row;

// One token of extreme Q8_0 activations (-128 and 127, scale 2) over a.size() blocks, in place.
QuantizedActivations extreme_activations(std::vector<BlockQ8_0>& a) {
  for (auto& b : a) {
    b.d = 0x4000;  // 2.0
    for (int l = 0; l < kQK; ++l) b.qs[l] = static_cast<int8_t>(l % 3 == 0 ? -128 : 127);
  }
  QuantizedActivations qa;
  qa.type = TensorType::kQ8_0;
  qa.n_tokens = 1;
  qa.cols = static_cast<int64_t>(a.size()) * kQK;
  qa.row_stride = a.size() * sizeof(BlockQ8_0);
  qa.data = a.data();
  return qa;
}

// Every row of every batch size equals the serial-order reference bit for bit, on the active
// ISA's kernel and on the scalar one, for any 16-aligned row range: so a token's result never
// depends on the other tokens of its batch nor on how the rows were split over threads.
TEST(Packed, EqualsTheSerialReferenceForEveryBatchAndRowRange) {
  const int64_t rows = 48;
  for (const TensorType type : {TensorType::kQ8_0, TensorType::kQ5_0}) {
    for (const int64_t cols : {int64_t{64}, int64_t{96}, int64_t{320}}) {
      SCOPED_TRACE(std::string(tensor_type_name(type)));
      const auto w = quantize(type, random_row(rows * cols, 21, 0.05f));
      const MatrixView view = make_matrix_view(type, rows, cols, w.data());
      ASSERT_TRUE(packable(view));
      const PackedWeights packed(view);
      // The packed layout holds every value of the original.
      const auto* row0 = reinterpret_cast<const uint8_t*>(view.row(17));
      ASSERT_EQ(packed.value(packed.group(1) + packed.block_bytes(), 1, 5), [&] {
        std::vector<float> f(static_cast<size_t>(cols));
        kernels_for(type, Isa::kScalar)->to_float(row0, f.data(), cols);
        const uint16_t d = type == TensorType::kQ5_0
                               ? reinterpret_cast<const BlockQ5_0*>(row0)[1].d
                               : reinterpret_cast<const BlockQ8_0*>(row0)[1].d;
        return static_cast<int>(std::lround(f[32 + 5] / fp16_to_fp32(d)));
      }());
      for (const int64_t n_tokens : {1, 2, 3, 4, 5, 8, 9, 13, 17, 64}) {
        const auto x = random_row(n_tokens * cols, 22 + static_cast<uint32_t>(n_tokens));
        const QuantizedActivations qa = quantize_activations(type, x.data(), n_tokens, cols);
        std::vector<float> fast(static_cast<size_t>(n_tokens * rows), -1.0f),
            split(fast.size(), -1.0f), scalar(fast.size(), -1.0f);
        packed_rows(packed, qa, fast.data(), rows, 0, rows);
        packed_rows(packed, qa, split.data(), rows, 0, 16);
        packed_rows(packed, qa, split.data(), rows, 16, rows);
        packed_rows_scalar(packed, qa, scalar.data(), rows, 0, rows);
        for (int64_t t = 0; t < n_tokens; ++t) {
          const auto* act = static_cast<const uint8_t*>(qa.data) + t * qa.row_stride;
          for (int64_t r = 0; r < rows; ++r) {
            const size_t at = static_cast<size_t>(t * rows + r);
            const float expect = packed_dot_serial_ref(type, cols, view.row(r), act);
            ASSERT_EQ(fast[at], expect)
                << "cols " << cols << " tokens " << n_tokens << " t " << t << " r " << r;
            ASSERT_EQ(split[at], expect) << "cols " << cols << " tokens " << n_tokens;
            ASSERT_EQ(scalar[at], expect) << "cols " << cols << " tokens " << n_tokens;
          }
        }
      }
    }
  }
}

// The tokens' block sums a thread keeps between calls belong to one quantization: a new one in
// the same recycled storage (the same pointer) and a weight of the other offset (Q5_0 after
// Q8_0 on the same activations) get their own.
TEST(Packed, KeptTokenSumsBelongToOneQuantization) {
  const int64_t rows = 32, cols = 96, n_tokens = 3;
  const auto w8 = quantize(TensorType::kQ8_0, random_row(rows * cols, 81, 0.05f));
  const auto w5 = quantize(TensorType::kQ5_0, random_row(rows * cols, 82, 0.05f));
  const MatrixView v8 = make_matrix_view(TensorType::kQ8_0, rows, cols, w8.data());
  const MatrixView v5 = make_matrix_view(TensorType::kQ5_0, rows, cols, w5.data());
  const PackedWeights p8(v8), p5(v5);
  const void* first_storage = nullptr;
  for (uint32_t round = 0; round < 3; ++round) {
    const auto x = random_row(n_tokens * cols, 83 + round);
    const QuantizedActivations qa =
        quantize_activations(TensorType::kQ8_0, x.data(), n_tokens, cols);
    if (round == 0) {
      first_storage = qa.data;
    } else {
      EXPECT_EQ(qa.data, first_storage);  // the storage is recycled
    }
    for (const auto* pw : {&p8, &p5, &p8}) {
      const MatrixView& view = pw == &p5 ? v5 : v8;
      std::vector<float> y(static_cast<size_t>(n_tokens * rows), -1.0f);
      packed_rows(*pw, qa, y.data(), rows, 0, 16);
      packed_rows(*pw, qa, y.data(), rows, 16, rows);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const auto* act = static_cast<const uint8_t*>(qa.data) + t * qa.row_stride;
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(y[static_cast<size_t>(t * rows + r)],
                    packed_dot_serial_ref(pw->type(), cols, view.row(r), act))
              << "round " << round << " t " << t << " r " << r;
        }
      }
    }
  }
}

// With a bias, every output is the product without one plus the row's bias, rounded once: the
// same bits as adding it afterwards, on the active ISA's kernel and the scalar one, for any
// 16-aligned row range and batch size (full tiles of 8 tokens and the remainders).
TEST(Packed, BiasIsAddedToEachRowsProduct) {
  const int64_t rows = 48, cols = 96;
  for (const TensorType type : {TensorType::kQ8_0, TensorType::kQ5_0}) {
    SCOPED_TRACE(std::string(tensor_type_name(type)));
    const auto w = quantize(type, random_row(rows * cols, 41, 0.05f));
    const MatrixView view = make_matrix_view(type, rows, cols, w.data());
    const PackedWeights packed(view);
    const auto bias = random_row(rows, 42);
    for (const int64_t n_tokens : {1, 7, 8, 11, 19}) {
      const auto x = random_row(n_tokens * cols, 43 + static_cast<uint32_t>(n_tokens));
      const QuantizedActivations qa = quantize_activations(type, x.data(), n_tokens, cols);
      std::vector<float> plain(static_cast<size_t>(n_tokens * rows), -1.0f),
          fast(plain.size(), -1.0f), scalar(plain.size(), -1.0f);
      packed_rows(packed, qa, plain.data(), rows, 0, rows);
      packed_rows(packed, qa, fast.data(), rows, 0, 32, bias.data());
      packed_rows(packed, qa, fast.data(), rows, 32, rows, bias.data());
      packed_rows_scalar(packed, qa, scalar.data(), rows, 0, rows, bias.data());
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          const size_t at = static_cast<size_t>(t * rows + r);
          const float expect = plain[at] + bias[static_cast<size_t>(r)];
          ASSERT_NE(expect, plain[at]) << "t " << t << " r " << r;
          ASSERT_EQ(fast[at], expect) << "tokens " << n_tokens << " t " << t << " r " << r;
          ASSERT_EQ(scalar[at], expect) << "tokens " << n_tokens << " t " << t << " r " << r;
        }
      }
    }
  }
}

// The serial order is a different rounding of the same integer sums as vec_dot's lanes: close.
TEST(Packed, SerialOrderIsCloseToTheLaneOrder) {
  const int64_t cols = 2560;
  for (const TensorType type : {TensorType::kQ8_0, TensorType::kQ5_0}) {
    const auto w = quantize(type, random_row(cols, 31, 0.05f));
    const auto x = random_row(cols, 32);
    const QuantizedActivations qa = quantize_activations(type, x.data(), 1, cols);
    const float lanes = kernels_for(type)->vec_dot(cols, w.data(), qa.data);
    const float serial = packed_dot_serial_ref(type, cols, w.data(), qa.data);
    EXPECT_NEAR(serial, lanes, 1e-4 * (std::fabs(lanes) + 1)) << tensor_type_name(type);
  }
}

// Extreme quants (-128, 127) and large scales: the +128 storage and its correction are exact.
TEST(Packed, ExtremeQ8_0QuantsAreExact) {
  const int64_t rows = 16, cols = 64;
  std::vector<BlockQ8_0> w(static_cast<size_t>(rows * cols / kQK));
  std::vector<BlockQ8_0> a(static_cast<size_t>(cols / kQK));
  for (size_t b = 0; b < w.size(); ++b) {
    w[b].d = 0x3C00;  // 1.0
    for (int l = 0; l < kQK; ++l) w[b].qs[l] = static_cast<int8_t>((b + l) % 2 == 0 ? -128 : 127);
  }
  const MatrixView view = make_matrix_view(TensorType::kQ8_0, rows, cols, w.data());
  const PackedWeights packed(view);
  const QuantizedActivations qa = extreme_activations(a);
  std::vector<float> y(rows);
  packed_rows(packed, qa, y.data(), rows, 0, rows);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(y[static_cast<size_t>(r)],
              packed_dot_serial_ref(TensorType::kQ8_0, cols, view.row(r), a.data()))
        << r;
  }
}

// Q5_0's extreme values (0 and 31, i.e. -16 and 15, every fifth bit set and clear) against
// extreme activations: the nibbles, the masks and the -16 correction are exact.
TEST(Packed, ExtremeQ5_0ValuesAreExact) {
  const int64_t rows = 32, cols = 96;
  std::vector<BlockQ5_0> w(static_cast<size_t>(rows * cols / kQK));
  std::vector<BlockQ8_0> a(static_cast<size_t>(cols / kQK));
  for (size_t b = 0; b < w.size(); ++b) {
    w[b].d = 0x3C00;  // 1.0
    uint32_t high = 0;
    for (int l = 0; l < kQK; ++l) {
      const int u = (b + static_cast<size_t>(l)) % 3 == 0 ? 0 : ((b + l) % 3 == 1 ? 31 : 16);
      if (u & 0x10) high |= uint32_t{1} << l;
      uint8_t& q = w[b].qs[l % (kQK / 2)];
      q = static_cast<uint8_t>(l < kQK / 2 ? (q & 0xF0) | (u & 0xF)
                                           : (q & 0x0F) | ((u & 0xF) << 4));
    }
    std::memcpy(w[b].qh, &high, sizeof high);
  }
  const MatrixView view = make_matrix_view(TensorType::kQ5_0, rows, cols, w.data());
  ASSERT_TRUE(packable(view));
  const PackedWeights packed(view);
  const QuantizedActivations qa = extreme_activations(a);
  std::vector<float> y(rows), scalar(rows);
  packed_rows(packed, qa, y.data(), rows, 0, rows);
  packed_rows_scalar(packed, qa, scalar.data(), rows, 0, rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float expect = packed_dot_serial_ref(TensorType::kQ5_0, cols, view.row(r), a.data());
    EXPECT_EQ(y[static_cast<size_t>(r)], expect) << r;
    EXPECT_EQ(scalar[static_cast<size_t>(r)], expect) << r;
    // The reference itself: the integer sum by hand.
    const auto* blocks = reinterpret_cast<const BlockQ5_0*>(view.row(r));
    float acc = 0;
    for (int64_t i = 0; i < cols / kQK; ++i) {
      uint32_t high;
      std::memcpy(&high, blocks[i].qh, sizeof high);
      int32_t isum = 0;
      for (int l = 0; l < kQK; ++l) {
        const int low = l < kQK / 2 ? blocks[i].qs[l] & 0xF : blocks[i].qs[l - kQK / 2] >> 4;
        isum +=
            ((low | static_cast<int>((high >> l) & 1) << 4) - 16) * a[static_cast<size_t>(i)].qs[l];
      }
      acc = std::fma(static_cast<float>(isum), 2.0f, acc);
    }
    EXPECT_EQ(expect, acc) << r;
  }
}

// Matrices the packing does not take stay on the row layout.
TEST(Packed, OnlyWholeGroupsOfQ8_0AndQ5_0ArePackable) {
  std::vector<uint8_t> bytes(1 << 16);
  EXPECT_TRUE(packable(make_matrix_view(TensorType::kQ5_0, 32, 64, bytes.data())));
  EXPECT_FALSE(packable(make_matrix_view(TensorType::kQ5_0, 24, 64, bytes.data())));
  EXPECT_FALSE(packable(make_matrix_view(TensorType::kQ4_0, 32, 64, bytes.data())));
  EXPECT_FALSE(packable(make_matrix_view(TensorType::kQ4_K, 32, 256, bytes.data())));
}

// The panels (TypeKernels::pack_panels, Q4_K and Q6_K where the table has them): packed once,
// every row of every batch and row range gives panel_dot's bits (Q4_K: vec_dot_serial).
TEST(Panels, PanelsGivePanelDotForEveryBatchAndRowRange) {
  for (const TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K}) {
    SCOPED_TRACE(tensor_type_name(type));
    const TypeKernels* k = kernels_for(type);
    if (k->gemm_panels == nullptr) GTEST_SKIP() << "no panels on this ISA";
    ASSERT_NE(k->panel_dot, nullptr);
    if (type == TensorType::kQ4_K) {
      EXPECT_EQ(k->panel_dot, k->vec_dot_serial);
    }
    const int64_t rows = 48, cols = 512;
    // Q6_K: each sub-block's extreme element is quantized to q - 32 = -32.
    const auto w = quantize(type, random_row(rows * cols, 41, 0.05f));
    const MatrixView view = make_matrix_view(type, rows, cols, w.data());
    const int64_t per_group = cols / 256 * k->panel_bytes;
    std::vector<uint8_t> panels(static_cast<size_t>(rows / 16 * per_group) + 64);
    auto* aligned =
        reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(panels.data()) + 63) / 64 * 64);
    k->pack_panels(cols, view.row(0), static_cast<int64_t>(view.row_bytes), rows, aligned);
    // Two activation matrices of 8 tokens one after the other (the second usually in the first
    // one's storage): what a kernel keeps per thread for one must not serve the other.
    uint32_t seen_eight = 0;
    for (const int64_t n_tokens : {1, 2, 3, 4, 5, 8, 8, 9}) {
      const auto x = random_row(n_tokens * cols, 42 + static_cast<uint32_t>(n_tokens) +
                                                     (n_tokens == 8 ? seen_eight++ : 0));
      const QuantizedActivations qa = quantize_activations(type, x.data(), n_tokens, cols);
      std::vector<float> y(static_cast<size_t>(n_tokens * rows), -1.0f);
      k->gemm_panels(cols, aligned, 16, qa.data, static_cast<int64_t>(qa.row_stride), n_tokens,
                     y.data(), rows, qa.id);
      k->gemm_panels(cols, aligned + per_group, rows - 16, qa.data,
                     static_cast<int64_t>(qa.row_stride), n_tokens, y.data() + 16, rows, qa.id);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const auto* act = static_cast<const uint8_t*>(qa.data) + t * qa.row_stride;
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(y[static_cast<size_t>(t * rows + r)], k->panel_dot(cols, view.row(r), act))
              << "tokens " << n_tokens << " t " << t << " r " << r;
        }
      }
    }
  }
}

// Q6_K's panel order is its own (one accumulator per row), but the same sum as llama.cpp's
// lanes: the two differ only in float rounding.
TEST(Panels, Q6_KPanelOrderIsCloseToTheLaneOrder) {
  const TypeKernels* k = kernels_for(TensorType::kQ6_K, Isa::kScalar);
  ASSERT_NE(k->panel_dot, nullptr);
  const int64_t cols = 1024;
  for (uint32_t seed = 0; seed < 8; ++seed) {
    const auto w = quantize(TensorType::kQ6_K, random_row(cols, 60 + seed, 0.05f));
    const auto x = random_row(cols, 70 + seed);
    const QuantizedActivations qa = quantize_activations(TensorType::kQ6_K, x.data(), 1, cols);
    const float lanes = k->vec_dot(cols, w.data(), qa.data);
    const float panel = k->panel_dot(cols, w.data(), qa.data);
    EXPECT_NEAR(panel, lanes, 1e-5f * (1.0f + std::fabs(lanes))) << seed;
  }
}

}  // namespace
}  // namespace ferry::kernels
