#include "local_engine/kernels/q8_0_packed.h"

#include <gtest/gtest.h>

#include <cstring>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/kernels.h"
#include "tests/local_engine/kernels/test_util.h"

namespace ferry::kernels {
namespace {

using testing::quantize;
using testing::random_row;

// Every row of every batch size equals the serial-order reference bit for bit, on the active
// ISA's kernel and on the scalar one, for any 16-aligned row range: so a token's result never
// depends on the other tokens of its batch nor on how the rows were split over threads.
TEST(Q8_0Packed, EqualsTheSerialReferenceForEveryBatchAndRowRange) {
  const int64_t rows = 48;
  for (const int64_t cols : {int64_t{64}, int64_t{96}, int64_t{320}}) {
    const auto w = quantize(TensorType::kQ8_0, random_row(rows * cols, 21, 0.05f));
    const MatrixView view = make_matrix_view(TensorType::kQ8_0, rows, cols, w.data());
    ASSERT_TRUE(q8_0_packable(view));
    const PackedQ8_0 packed(view);
    for (const int64_t n_tokens : {1, 2, 3, 4, 5, 8, 9, 13, 17, 64}) {
      const auto x = random_row(n_tokens * cols, 22 + static_cast<uint32_t>(n_tokens));
      const QuantizedActivations qa =
          quantize_activations(TensorType::kQ8_0, x.data(), n_tokens, cols);
      std::vector<float> fast(static_cast<size_t>(n_tokens * rows), -1.0f),
          split(fast.size(), -1.0f), scalar(fast.size(), -1.0f);
      q8_0_packed_rows(packed, qa, fast.data(), rows, 0, rows);
      q8_0_packed_rows(packed, qa, split.data(), rows, 0, 16);
      q8_0_packed_rows(packed, qa, split.data(), rows, 16, rows);
      q8_0_packed_rows_scalar(packed, qa, scalar.data(), rows, 0, rows);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const auto* act = static_cast<const uint8_t*>(qa.data) + t * qa.row_stride;
        for (int64_t r = 0; r < rows; ++r) {
          const size_t at = static_cast<size_t>(t * rows + r);
          const float expect = q8_0_dot_serial_ref(cols, view.row(r), act);
          ASSERT_EQ(fast[at], expect)
              << "cols " << cols << " tokens " << n_tokens << " t " << t << " r " << r;
          ASSERT_EQ(split[at], expect) << "cols " << cols << " tokens " << n_tokens;
          ASSERT_EQ(scalar[at], expect) << "cols " << cols << " tokens " << n_tokens;
        }
      }
    }
  }
}

// The serial order is a different rounding of the same integer sums as vec_dot's lanes: close.
TEST(Q8_0Packed, SerialOrderIsCloseToTheLaneOrder) {
  const int64_t cols = 2560;
  const auto w = quantize(TensorType::kQ8_0, random_row(cols, 31, 0.05f));
  const auto x = random_row(cols, 32);
  const QuantizedActivations qa = quantize_activations(TensorType::kQ8_0, x.data(), 1, cols);
  const float lanes = kernels_for(TensorType::kQ8_0)->vec_dot(cols, w.data(), qa.data);
  const float serial = q8_0_dot_serial_ref(cols, w.data(), qa.data);
  EXPECT_NEAR(serial, lanes, 1e-4 * (std::fabs(lanes) + 1));
}

// Extreme quants (-128, 127) and large scales: the +128 storage and its correction are exact.
TEST(Q8_0Packed, ExtremeQuantsAreExact) {
  const int64_t rows = 16, cols = 64;
  std::vector<BlockQ8_0> w(static_cast<size_t>(rows * cols / kQK));
  std::vector<BlockQ8_0> a(static_cast<size_t>(cols / kQK));
  for (size_t b = 0; b < w.size(); ++b) {
    w[b].d = 0x3C00;  // 1.0
    for (int l = 0; l < kQK; ++l) w[b].qs[l] = static_cast<int8_t>((b + l) % 2 == 0 ? -128 : 127);
  }
  for (auto& b : a) {
    b.d = 0x4000;  // 2.0
    for (int l = 0; l < kQK; ++l) b.qs[l] = static_cast<int8_t>(l % 3 == 0 ? -128 : 127);
  }
  const MatrixView view = make_matrix_view(TensorType::kQ8_0, rows, cols, w.data());
  const PackedQ8_0 packed(view);
  QuantizedActivations qa;
  qa.type = TensorType::kQ8_0;
  qa.n_tokens = 1;
  qa.cols = cols;
  qa.row_stride = a.size() * sizeof(BlockQ8_0);
  qa.data = a.data();
  std::vector<float> y(rows);
  q8_0_packed_rows(packed, qa, y.data(), rows, 0, rows);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(y[static_cast<size_t>(r)], q8_0_dot_serial_ref(cols, view.row(r), a.data())) << r;
  }
}

}  // namespace
}  // namespace ferry::kernels
