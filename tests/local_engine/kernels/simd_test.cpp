// Every SIMD kernel against the scalar reference, per type, with explicit tolerances.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels.h"
#include "tests/local_engine/kernels/test_util.h"

namespace ferry::kernels {
namespace {

using testing::quantize;
using testing::random_row;

class SimdVsScalar : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << isa_name(GetParam()) << " not on this CPU";
  }
};

// Integer parts are exact; only the float accumulation order differs, so the tolerance is
// relative to the sum of |w_i a_i|.
TEST_P(SimdVsScalar, VecDotPerType) {
  for (TensorType t : testing::kWeightTypes) {
    const TypeKernels* ref = kernels_for(t, Isa::kScalar);
    const TypeKernels* simd = kernels_for(t, GetParam());
    ASSERT_NE(simd, nullptr);
    ASSERT_EQ(simd->vec_dot_type, ref->vec_dot_type);
    for (int64_t n : {256, 768, 2560, 4096}) {
      for (uint32_t seed = 0; seed < 4; ++seed) {
        const auto wf = random_row(n, 100 + seed, 0.05f);
        const auto xf = random_row(n, 200 + seed);
        const auto w = quantize(t, wf);
        const auto a = quantize(ref->vec_dot_type, xf);
        const float expect = ref->vec_dot(n, w.data(), a.data());
        const float got = simd->vec_dot(n, w.data(), a.data());
        double scale = 0;
        for (int64_t i = 0; i < n; ++i) scale += std::fabs(static_cast<double>(wf[i]) * xf[i]);
        EXPECT_NEAR(got, expect, 2e-5 * scale + 1e-6)
            << tensor_type_name(t) << " n=" << n << " seed=" << seed;
      }
    }
  }
}

// The batched form gives exactly the single-row results, for every remainder of 4 (F16 aside:
// its batched form is llama.cpp's GEMM order, pinned against the scalar one instead).
TEST_P(SimdVsScalar, VecDotBatchEqualsSingle) {
  const int64_t n = 512;
  for (TensorType t : testing::kWeightTypes) {
    const TypeKernels* k = kernels_for(t, GetParam());
    const TypeKernels* ref = kernels_for(t, Isa::kScalar);
    const auto w = quantize(t, random_row(n, 1, 0.05f));
    const int64_t stride = static_cast<int64_t>(row_bytes(k->vec_dot_type, n).value());
    for (int64_t n_act : {1, 2, 3, 4, 5, 7, 9}) {
      std::vector<uint8_t> acts;
      for (int64_t j = 0; j < n_act; ++j) {
        const auto a = quantize(k->vec_dot_type, random_row(n, 50 + static_cast<uint32_t>(j)));
        acts.insert(acts.end(), a.begin(), a.end());
      }
      std::vector<float> out(static_cast<size_t>(n_act * 3), -1.0f);
      k->vec_dot_batch(n, w.data(), acts.data(), stride, n_act, out.data(), 3);
      std::vector<float> want(static_cast<size_t>(n_act * 3), -1.0f);
      ref->vec_dot_batch(n, w.data(), acts.data(), stride, n_act, want.data(), 3);
      for (int64_t j = 0; j < n_act; ++j) {
        const float single = k->vec_dot(n, w.data(), acts.data() + j * stride);
        if (t != TensorType::kF32 && t != TensorType::kBF16) {  // those two sum differently
          EXPECT_EQ(single, ref->vec_dot(n, w.data(), acts.data() + j * stride))
              << tensor_type_name(t) << " row " << j;
        }
        EXPECT_EQ(out[static_cast<size_t>(j * 3)], t == TensorType::kF16 ? want[j * 3] : single)
            << tensor_type_name(t) << " row " << j << " of " << n_act;
        EXPECT_EQ(out[static_cast<size_t>(j * 3 + 1)], -1.0f);
      }
    }
  }
}

// The tile form (where a type has one) gives exactly the vec_dot results for every tile
// remainder, and writes nothing outside its tile.
TEST_P(SimdVsScalar, GemmEqualsVecDot) {
  const int64_t n = 512;
  for (TensorType t : testing::kWeightTypes) {
    const TypeKernels* k = kernels_for(t, GetParam());
    if (!k->gemm) continue;
    const int64_t w_stride = static_cast<int64_t>(row_bytes(t, n).value());
    const int64_t a_stride = static_cast<int64_t>(row_bytes(k->vec_dot_type, n).value());
    std::vector<uint8_t> w, a;
    for (int64_t i = 0; i < 9; ++i) {
      const auto row = quantize(t, random_row(n, 300 + static_cast<uint32_t>(i), 0.05f));
      w.insert(w.end(), row.begin(), row.end());
      const auto act = quantize(k->vec_dot_type, random_row(n, 400 + static_cast<uint32_t>(i)));
      a.insert(a.end(), act.begin(), act.end());
    }
    for (int64_t n_w : {1, 2, 3, 4, 5, 9}) {
      for (int64_t n_a : {1, 3, 4, 5, 9}) {
        const int64_t out_stride = 11;
        std::vector<float> out(static_cast<size_t>(n_a * out_stride), -7.0f);
        k->gemm(n, w.data(), w_stride, n_w, a.data(), a_stride, n_a, out.data(), out_stride);
        for (int64_t r = 0; r < n_a; ++r) {
          for (int64_t c = 0; c < out_stride; ++c) {
            const float got = out[static_cast<size_t>(r * out_stride + c)];
            if (c >= n_w) {
              ASSERT_EQ(got, -7.0f);
              continue;
            }
            ASSERT_EQ(got, k->vec_dot(n, w.data() + c * w_stride, a.data() + r * a_stride))
                << tensor_type_name(t) << " w " << c << "/" << n_w << " a " << r << "/" << n_a;
          }
        }
      }
    }
  }
}

// The serial tile forms (Q4_K on AVX-512: gemv and gemm orders) give exactly the scalar
// reference's vec_dot_batch_serial / _serial4 results for every row and token remainder, and
// write nothing else.
TEST_P(SimdVsScalar, GemmSerialFormsEqualRowForms) {
  const int64_t n = 768;
  int tested = 0;
  for (TensorType t : testing::kWeightTypes) {
    const TypeKernels* k = kernels_for(t, GetParam());
    if (!k->gemm_serial4 && !k->gemm_serial) continue;
    ASSERT_TRUE(k->gemm_serial4 && k->gemm_serial) << tensor_type_name(t) << ": both or neither";
    ++tested;
    const TypeKernels* ref = kernels_for(t, Isa::kScalar);
    const int64_t w_stride = static_cast<int64_t>(row_bytes(t, n).value());
    const int64_t a_stride = static_cast<int64_t>(row_bytes(k->vec_dot_type, n).value());
    std::vector<uint8_t> w, a;
    for (int64_t i = 0; i < 35; ++i) {
      const auto row = quantize(t, random_row(n, 500 + static_cast<uint32_t>(i), 0.05f));
      w.insert(w.end(), row.begin(), row.end());
    }
    for (int64_t i = 0; i < 9; ++i) {
      const auto act = quantize(k->vec_dot_type, random_row(n, 600 + static_cast<uint32_t>(i)));
      a.insert(a.end(), act.begin(), act.end());
    }
    for (int form = 0; form < 2; ++form) {
      const GemmFn gemm = form == 0 ? k->gemm_serial : k->gemm_serial4;
      const VecDotBatchFn rows = form == 0 ? ref->vec_dot_batch_serial : ref->vec_dot_batch_serial4;
      for (int64_t n_w : {1, 5, 16, 17, 35}) {
        for (int64_t n_a : {1, 3, 4, 5, 9}) {
          const int64_t out_stride = 37;
          std::vector<float> out(static_cast<size_t>(n_a * out_stride), -7.0f);
          gemm(n, w.data(), w_stride, n_w, a.data(), a_stride, n_a, out.data(), out_stride);
          for (int64_t c = 0; c < out_stride; ++c) {
            std::vector<float> want(static_cast<size_t>(n_a), -7.0f);
            if (c < n_w) rows(n, w.data() + c * w_stride, a.data(), a_stride, n_a, want.data(), 1);
            for (int64_t r = 0; r < n_a; ++r) {
              ASSERT_EQ(std::bit_cast<uint32_t>(out[static_cast<size_t>(r * out_stride + c)]),
                        std::bit_cast<uint32_t>(want[r]))
                  << tensor_type_name(t) << (form == 0 ? " gemv" : " gemm") << " w " << c << "/"
                  << n_w << " a " << r << "/" << n_a;
            }
          }
        }
      }
    }
  }
  if (GetParam() == Isa::kAvx512) {
    EXPECT_GT(tested, 0) << "Q4_K has serial tiles on AVX-512";
  }
}

TEST_P(SimdVsScalar, ToFloatIsExact) {
  const int64_t n = 1024;
  for (TensorType t : testing::kWeightTypes) {
    const auto q = quantize(t, random_row(n, 9));
    std::vector<float> a(n), b(n);
    kernels_for(t, Isa::kScalar)->to_float(q.data(), a.data(), n);
    kernels_for(t, GetParam())->to_float(q.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], b[i]) << tensor_type_name(t) << " " << i;
  }
}

// Extreme quantized values (all q at their range ends) must not overflow the int16 steps of
// the AVX2 path.
TEST_P(SimdVsScalar, ExtremeValuesDoNotOverflow) {
  const int64_t n = 512;
  std::vector<float> big(n);
  for (int64_t i = 0; i < n; ++i) big[i] = (i % 2 ? 1.0f : -1.0f) * (i % 3 ? 1.0f : 0.999f);
  for (TensorType t : testing::kWeightTypes) {
    const TypeKernels* ref = kernels_for(t, Isa::kScalar);
    const auto w = quantize(t, big);
    const auto a = quantize(ref->vec_dot_type, big);
    const float expect = ref->vec_dot(n, w.data(), a.data());
    EXPECT_NEAR(kernels_for(t, GetParam())->vec_dot(n, w.data(), a.data()), expect,
                1e-5 * std::fabs(expect) + 1e-4)
        << tensor_type_name(t);
  }
}

TEST_P(SimdVsScalar, VectorHelpers) {
  // The active-ISA helpers are compared with plain loops.
  const int64_t n = 1001;
  const auto a = random_row(n, 11), b = random_row(n, 12);
  std::vector<uint16_t> h(n);
  fp32_to_fp16_row(a.data(), h.data(), n);
  double d32 = 0, d16 = 0;
  std::vector<float> y(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    d32 += static_cast<double>(a[i]) * b[i];
    d16 += static_cast<double>(fp16_to_fp32(h[i])) * b[i];
  }
  EXPECT_NEAR(dot_f32(n, a.data(), b.data()), d32, 1e-3);
  EXPECT_NEAR(dot_f16_f32(n, h.data(), b.data()), d16, 1e-3);
  axpy_f16(n, 0.5f, h.data(), y.data());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(y[i], 1.0f + 0.5f * fp16_to_fp32(h[i]), 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, SimdVsScalar, ::testing::Values(Isa::kAvx2, Isa::kAvx512),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

TEST(Dispatch, ActiveIsaIsSupportedAndScalarAlwaysIs) {
  EXPECT_TRUE(isa_supported(Isa::kScalar));
  EXPECT_TRUE(isa_supported(active_isa()));
  EXPECT_TRUE(isa_supported(detect_isa()));
  for (TensorType t : testing::kWeightTypes) {
    ASSERT_NE(kernels_for(t), nullptr);
    ASSERT_NE(kernels_for(t, Isa::kScalar), nullptr);
  }
}

}  // namespace
}  // namespace ferry::kernels
