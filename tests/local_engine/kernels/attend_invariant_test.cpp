#include "local_engine/kernels/attend_invariant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "local_engine/kernels/fp16.h"
#include "tests/local_engine/kernels/test_util.h"

namespace ferry::kernels {
namespace {

using testing::random_row;

std::vector<uint16_t> to_f16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = fp32_to_fp16(x[i]);
  return out;
}

// Softmax attention in double on the same F16 keys and values; a group of query heads gives
// each head exactly what it gets alone, so grouping (and batching) cannot change a bit.
TEST(AttendInvariant, MatchesSoftmaxAttentionAndEachHeadAlone) {
  for (const int64_t head_dim : {16, 64, 80, 128}) {
    if (!attend_invariant_supported(head_dim)) GTEST_SKIP() << "needs AVX2 or AVX-512";
    const int64_t n_q = 3, stride = 2 * head_dim;  // keys / values of two KV heads interleaved
    for (const int64_t n_keys : {1, 15, 16, 17, 100}) {
      const auto q = random_row(n_q * head_dim, 40 + static_cast<uint32_t>(n_keys));
      const auto keys = to_f16(random_row(n_keys * stride, 41, 0.5f));
      const auto values = to_f16(random_row(n_keys * stride, 42));
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      std::vector<float> group(static_cast<size_t>(n_q * head_dim)), alone(group.size());
      attend_group_invariant(head_dim, n_q, q.data(), head_dim, keys.data(), stride, values.data(),
                             stride, n_keys, scale, group.data(), head_dim);
      for (int64_t h = 0; h < n_q; ++h) {
        attend_group_invariant(head_dim, 1, q.data() + h * head_dim, head_dim, keys.data(), stride,
                               values.data(), stride, n_keys, scale, alone.data() + h * head_dim,
                               head_dim);
        std::vector<double> s(static_cast<size_t>(n_keys));
        double max_s = -INFINITY;
        for (int64_t p = 0; p < n_keys; ++p) {
          double dot = 0;
          for (int64_t d = 0; d < head_dim; ++d) {
            dot += static_cast<double>(q[h * head_dim + d]) * fp16_to_fp32(keys[p * stride + d]);
          }
          s[p] = dot * scale;
          max_s = std::max(max_s, s[p]);
        }
        double sum = 0;
        for (auto& v : s) sum += (v = std::exp(v - max_s));
        for (int64_t d = 0; d < head_dim; ++d) {
          double expect = 0;
          for (int64_t p = 0; p < n_keys; ++p)
            expect += s[p] * fp16_to_fp32(values[p * stride + d]);
          expect /= sum;
          const size_t at = static_cast<size_t>(h * head_dim + d);
          ASSERT_NEAR(group[at], expect, 1e-5 + 1e-5 * std::fabs(expect))
              << "head_dim " << head_dim << " keys " << n_keys << " h " << h << " d " << d;
        }
      }
      EXPECT_EQ(group, alone) << "head_dim " << head_dim << " keys " << n_keys;
    }
  }
}

// The vector forms equal the scalar reference bit for bit, the softmax's tiny weights included:
// queries scaled up so that scores spread over more than 88 (weights that flush to 0, and
// subnormal ones, which the vector exp must round exactly once); and with gemma2's soft-capped
// scores.
TEST(AttendInvariant, VectorFormEqualsTheScalarReferenceBitForBit) {
  for (const int64_t head_dim : {16, 32, 64, 128}) {
    if (!attend_invariant_supported(head_dim)) GTEST_SKIP() << "needs AVX2 or AVX-512";
    const int64_t n_q = 4, stride = 2 * head_dim;
    for (const int64_t n_keys : {1, 7, 16, 33, 200}) {
      for (const float spread : {1.0f, 40.0f, 400.0f}) {
        for (const float softcap : {0.0f, 5.0f}) {
          auto q = random_row(n_q * head_dim, 50 + static_cast<uint32_t>(n_keys));
          for (float& v : q) v *= spread;
          const auto keys = to_f16(random_row(n_keys * stride, 51, 0.5f));
          const auto values = to_f16(random_row(n_keys * stride, 52));
          const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
          std::vector<float> got(static_cast<size_t>(n_q * head_dim)), want(got.size());
          attend_group_invariant(head_dim, n_q, q.data(), head_dim, keys.data(), stride,
                                 values.data(), stride, n_keys, scale, got.data(), head_dim,
                                 softcap);
          detail::attend_group_invariant_ref(head_dim, n_q, q.data(), head_dim, keys.data(), stride,
                                             values.data(), stride, n_keys, scale, want.data(),
                                             head_dim, softcap);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(got[i], want[i])
                << "head_dim " << head_dim << " keys " << n_keys << " spread " << spread
                << " softcap " << softcap << " at " << i;
          }
        }
      }
    }
  }
}

// The softmax weights alone (the bert encoder's): the active form equals the scalar reference
// bit for bit, the padding up to 16 is zeroed, and the weights are e^(s - max) within the exp's
// 2 ulp (double reference), flushed to 0 far below the maximum.
TEST(AttendInvariant, SoftmaxWeightsEqualTheScalarReferenceAndExp) {
  for (const int64_t n : {1, 2, 15, 16, 17, 31, 128, 130}) {
    for (const float spread : {1.0f, 40.0f, 400.0f}) {
      auto scores = random_row(n, 60 + static_cast<uint32_t>(n));
      for (float& v : scores) v *= spread;
      const int64_t pad = (n + 15) / 16 * 16;
      std::vector<float> got(static_cast<size_t>(pad), -1.0f), want(got.size(), -2.0f);
      std::copy(scores.begin(), scores.end(), got.begin());
      std::copy(scores.begin(), scores.end(), want.begin());
      const float inv_got = softmax_weights(n, got.data());
      const float inv_want = detail::softmax_weights_ref(n, want.data());
      ASSERT_EQ(inv_got, inv_want) << "n " << n << " spread " << spread;
      const float mx = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (int64_t p = 0; p < pad; ++p) {
        const size_t i = static_cast<size_t>(p);
        ASSERT_EQ(got[i], want[i]) << "n " << n << " spread " << spread << " at " << p;
        if (p >= n) {
          ASSERT_EQ(got[i], 0.0f) << "padding at " << p;
          continue;
        }
        const float x = scores[i] - mx;  // the argument as the kernel rounds it
        const double expect = std::exp(static_cast<double>(x));
        if (x < -87.0f) {
          ASSERT_LE(got[i], 1e-37f);
        } else {
          ASSERT_NEAR(got[i], expect, 3e-7 * expect) << "n " << n << " at " << p;
        }
        sum += got[i];
      }
      EXPECT_NEAR(inv_got, 1.0 / sum, 1e-6 / sum);
    }
  }
}

}  // namespace
}  // namespace ferry::kernels
