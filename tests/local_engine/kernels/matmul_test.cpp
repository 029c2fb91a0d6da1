#include "local_engine/kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/thread_pool.h"
#include "tests/local_engine/kernels/test_util.h"

namespace ferry::kernels {
namespace {

using testing::quantize;
using testing::random_row;

// matmul equals the per-row dot products of the quantized activations exactly, whatever the
// thread count and batch size (tiling must not change results), and is close to the float
// product of the dequantized weights.
TEST(Matmul, EqualsRowDotsForEveryTypeThreadCountAndBatch) {
  const int64_t rows = 37, cols = 512;
  ThreadPool pool1(1), pool3(3, 0);
  for (TensorType t : testing::kWeightTypes) {
    const auto wf = random_row(rows * cols, 5, 0.05f);
    const auto w = quantize(t, wf);
    const MatrixView view = make_matrix_view(t, rows, cols, w.data());
    ASSERT_EQ(view.row_bytes * rows, w.size());
    const TypeKernels* k = kernels_for(t);
    for (int64_t n_tokens : {1, 3, 70}) {
      const auto x = random_row(n_tokens * cols, 6);
      std::vector<float> y1(static_cast<size_t>(n_tokens * rows)), y3(y1.size());
      matmul(view, x.data(), n_tokens, y1.data(), pool1);
      matmul(view, x.data(), n_tokens, y3.data(), pool3);
      const QuantizedActivations qa = quantize_activations(t, x.data(), n_tokens, cols);
      std::vector<float> wrow(cols);
      for (int64_t tok = 0; tok < n_tokens; ++tok) {
        const auto* act = static_cast<const uint8_t*>(qa.data) + tok * qa.row_stride;
        for (int64_t r = 0; r < rows; ++r) {
          const size_t at = static_cast<size_t>(tok * rows + r);
          const float expect = k->vec_dot(cols, view.row(r), act);
          ASSERT_EQ(y1[at], expect) << tensor_type_name(t) << " tok " << tok << " row " << r;
          ASSERT_EQ(y3[at], expect) << tensor_type_name(t) << " tok " << tok << " row " << r;
          dequantize_row(view, r, wrow.data());
          double exact = 0, scale = 0;
          for (int64_t i = 0; i < cols; ++i) {
            exact += static_cast<double>(wrow[i]) * x[tok * cols + i];
            scale += std::fabs(static_cast<double>(wrow[i]) * x[tok * cols + i]);
          }
          // Activation quantization (8-bit) bounds the difference.
          ASSERT_NEAR(y1[at], exact, 0.02 * scale + 1e-5) << tensor_type_name(t);
        }
      }
    }
  }
}

// Quantized on a pool's threads, the activations are the same bytes as quantized on the caller.
TEST(Matmul, ActivationsQuantizedOnAPoolEqualTheSerialOnes) {
  const int64_t cols = 256;
  ThreadPool pool3(3, 0);
  for (const TensorType t : {TensorType::kQ8_0, TensorType::kQ4_K}) {
    for (const int64_t n_tokens : {1, 2, 37}) {
      const auto x = random_row(n_tokens * cols, 9);
      const QuantizedActivations serial = quantize_activations(t, x.data(), n_tokens, cols);
      const QuantizedActivations pooled = quantize_activations(t, x.data(), n_tokens, cols, pool3);
      ASSERT_EQ(pooled.type, serial.type);
      ASSERT_EQ(pooled.row_stride, serial.row_stride);
      const size_t bytes = serial.row_stride * static_cast<size_t>(n_tokens);
      EXPECT_EQ(std::memcmp(pooled.data, serial.data, bytes), 0)
          << tensor_type_name(t) << " tokens " << n_tokens;
    }
  }
}

TEST(Matmul, TwoStepApiOnCallerThreads) {
  const int64_t rows = 20, cols = 256;
  const auto w = quantize(TensorType::kQ4_K, random_row(rows * cols, 8, 0.05f));
  const MatrixView view = make_matrix_view(TensorType::kQ4_K, rows, cols, w.data());
  const auto x = random_row(2 * cols, 9);
  const QuantizedActivations qa = quantize_activations(view.type, x.data(), 2, cols);
  EXPECT_EQ(qa.type, TensorType::kQ8_K);
  std::vector<float> a(2 * rows), b(2 * rows);
  matmul_rows(view, qa, a.data(), 0, rows);
  matmul_rows(view, qa, b.data(), 0, 7);
  matmul_rows(view, qa, b.data(), 7, rows);
  EXPECT_EQ(a, b);
}

// The serial (repacked) order: in llama.cpp's batch forms, tokens of whole groups of 4 take the
// gemm form and the rest the gemv form; batch-invariant forms give every token the gemv form.
// Whatever the kernels (tiles or row by row), thread count and row split, every output is the
// scalar reference's.
TEST(Matmul, SerialOrderFollowsTheBatchForms) {
  const int64_t rows = 40, cols = 512;
  ThreadPool pool1(1), pool3(3, 0);
  for (TensorType t : {TensorType::kQ4_0, TensorType::kQ4_K, TensorType::kQ2_K}) {
    const auto w = quantize(t, random_row(rows * cols, 11, 0.05f));
    MatrixView view = make_matrix_view(t, rows, cols, w.data());
    view.order = DotOrder::kSerial;
    const TypeKernels* ref = kernels_for(t, Isa::kScalar);
    for (int64_t n_tokens : {1, 3, 6, 70}) {
      const auto x = random_row(n_tokens * cols, 12);
      const QuantizedActivations qa = quantize_activations(t, x.data(), n_tokens, cols);
      for (BatchForms forms : {BatchForms::kLlamaCpp, BatchForms::kInvariant}) {
        const int64_t n4 = forms == BatchForms::kLlamaCpp && n_tokens > 1 ? n_tokens / 4 * 4 : 0;
        std::vector<float> want(static_cast<size_t>(n_tokens * rows));
        for (int64_t r = 0; r < rows; ++r) {
          const auto* act = static_cast<const uint8_t*>(qa.data);
          if (n4 > 0) {
            ref->vec_dot_batch_serial4(cols, view.row(r), act, static_cast<int64_t>(qa.row_stride),
                                       n4, want.data() + r, rows);
          }
          ref->vec_dot_batch_serial(cols, view.row(r), act + n4 * qa.row_stride,
                                    static_cast<int64_t>(qa.row_stride), n_tokens - n4,
                                    want.data() + n4 * rows + r, rows);
        }
        for (ThreadPool* pool : {&pool1, &pool3}) {
          std::vector<float> got(want.size(), -1.0f);
          matmul(view, x.data(), n_tokens, got.data(), *pool, forms);
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_EQ(got[i], want[i]) << tensor_type_name(t) << " tokens " << n_tokens << " at "
                                       << i << (forms == BatchForms::kLlamaCpp ? "" : " invariant");
          }
        }
      }
    }
  }
}

// The serving path's F16 products (TypeKernels::gemm_invariant): every token's outputs are
// the scalar reference's bit for bit, whatever the batch around it (1 to 13 tokens: every
// tile shape and pass split), the thread count and the row split; the columns include a tail
// that is not a whole 8-element chunk. Close to the exact product of the F16-rounded inputs.
TEST(Matmul, InvariantF16IsOneOrderForEveryBatch) {
  const int64_t rows = 29;
  ThreadPool pool1(1), pool3(3, 0);
  const TypeKernels* ref = kernels_for(TensorType::kF16, Isa::kScalar);
  ASSERT_NE(ref->gemm_invariant, nullptr);
  for (int64_t cols : {128, 203}) {
    const auto w = quantize(TensorType::kF16, random_row(rows * cols, 21, 0.05f));
    const MatrixView view = make_matrix_view(TensorType::kF16, rows, cols, w.data());
    const auto x = random_row(13 * cols, 22);
    const QuantizedActivations all = quantize_activations(TensorType::kF16, x.data(), 13, cols);
    std::vector<float> want(static_cast<size_t>(13 * rows));
    ref->gemm_invariant(cols, w.data(), static_cast<int64_t>(view.row_bytes), rows, all.data,
                        static_cast<int64_t>(all.row_stride), 13, want.data(), rows);
    for (int64_t n_tokens = 1; n_tokens <= 13; ++n_tokens) {
      for (ThreadPool* pool : {&pool1, &pool3}) {
        std::vector<float> got(static_cast<size_t>(n_tokens * rows), -1.0f);
        matmul(view, x.data(), n_tokens, got.data(), *pool, BatchForms::kInvariant);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i], want[i]) << "cols " << cols << " tokens " << n_tokens << " at " << i;
        }
      }
    }
    std::vector<float> wrow(static_cast<size_t>(cols)), xrow(wrow.size());
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(view, r, wrow.data());
      kernels_for(TensorType::kF16)
          ->to_float(static_cast<const uint8_t*>(all.data) + 5 * all.row_stride, xrow.data(), cols);
      double exact = 0, scale = 0;
      for (int64_t i = 0; i < cols; ++i) {
        exact += static_cast<double>(wrow[i]) * xrow[i];
        scale += std::fabs(static_cast<double>(wrow[i]) * xrow[i]);
      }
      ASSERT_NEAR(want[static_cast<size_t>(5 * rows + r)], exact, 1e-6 * scale + 1e-7);
    }
  }
}

// DotOrder::kSerialFrom8 (IQ4_XS, llama.cpp's IQ panel gemm): vec_dot's lanes below 8 tokens,
// the serial form for every token from 8; the batch-invariant forms always take the lanes.
TEST(Matmul, SerialFrom8SwitchesAtEightTokens) {
  const int64_t rows = 24, cols = 512;
  const TensorType t = TensorType::kIQ4_XS;
  ThreadPool pool1(1), pool3(3, 0);
  const auto w = quantize(t, random_row(rows * cols, 13, 0.05f));
  MatrixView view = make_matrix_view(t, rows, cols, w.data());
  view.order = DotOrder::kSerialFrom8;
  const TypeKernels* ref = kernels_for(t, Isa::kScalar);
  int serial_differs = 0;
  for (int64_t n_tokens : {1, 7, 8, 13}) {
    const auto x = random_row(n_tokens * cols, 14);
    const QuantizedActivations qa = quantize_activations(t, x.data(), n_tokens, cols);
    for (BatchForms forms : {BatchForms::kLlamaCpp, BatchForms::kInvariant}) {
      const bool serial = forms == BatchForms::kLlamaCpp && n_tokens >= 8;
      for (ThreadPool* pool : {&pool1, &pool3}) {
        std::vector<float> got(static_cast<size_t>(n_tokens * rows), -1.0f);
        matmul(view, x.data(), n_tokens, got.data(), *pool, forms);
        for (int64_t tok = 0; tok < n_tokens; ++tok) {
          const auto* act = static_cast<const uint8_t*>(qa.data) + tok * qa.row_stride;
          for (int64_t r = 0; r < rows; ++r) {
            const float lanes = ref->vec_dot(cols, view.row(r), act);
            const float ser = ref->vec_dot_serial(cols, view.row(r), act);
            serial_differs += lanes != ser ? 1 : 0;
            ASSERT_EQ(got[static_cast<size_t>(tok * rows + r)], serial ? ser : lanes)
                << "tokens " << n_tokens << " token " << tok << " row " << r
                << (forms == BatchForms::kLlamaCpp ? "" : " invariant");
          }
        }
      }
    }
  }
  EXPECT_GT(serial_differs, 0) << "pick data where the two orders round differently";
}

}  // namespace
}  // namespace ferry::kernels
