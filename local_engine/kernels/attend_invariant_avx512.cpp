// attend_group_invariant (attend_invariant.h) with 512-bit vectors. Compiled with AVX-512
// flags; called only when attend_invariant_supported(). Every sum runs in an order fixed by
// head_dim and n_keys: a score is one fused multiply-add chain over 16-element chunks of the
// head reduced by _mm512_reduce_add_ps; the softmax sum accumulates 16 keys per vector (the
// last vector masked) and is reduced the same way; each output element is one fused
// multiply-add chain over the keys in order. Grouping query heads only shares loads.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "local_engine/kernels/attend_invariant.h"

// GCC 12 reports the _mm512_undefined_* inside its own intrinsics as uninitialized (GCC bug
// 105593); nothing here reads an undefined lane.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ferry::kernels::detail {
namespace {

inline __m512 load_f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// e^x for the softmax's x <= 0: 2^n * poly(r), x = n ln2 + r, |r| <= ln2 / 2 (Cephes' split of
// ln2 and a degree-6 Taylor polynomial: within 2 ulp of expf), flushed to 0 below -88.
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// out_h[c] = inv_h * sum_p w_hp v_p[c] for NH heads and NC 16-element chunks of the head.
template <int NH, int NC>
void weighted_sum(int64_t n_keys, const float* w, int64_t w_stride, const float* inv,
                  const uint16_t* values, int64_t value_stride, float* out, int64_t out_stride) {
  __m512 acc[NH][NC];
  for (int h = 0; h < NH; ++h) {
    for (int c = 0; c < NC; ++c) acc[h][c] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < n_keys; ++p) {
    __m512 v[NC];
    for (int c = 0; c < NC; ++c) v[c] = load_f16x16(values + p * value_stride + 16 * c);
    for (int h = 0; h < NH; ++h) {
      const __m512 wp = _mm512_set1_ps(w[h * w_stride + p]);
      for (int c = 0; c < NC; ++c) acc[h][c] = _mm512_fmadd_ps(wp, v[c], acc[h][c]);
    }
  }
  for (int h = 0; h < NH; ++h) {
    for (int c = 0; c < NC; ++c) {
      _mm512_storeu_ps(out + h * out_stride + 16 * c,
                       _mm512_mul_ps(acc[h][c], _mm512_set1_ps(inv[h])));
    }
  }
}

using WeightedSumFn = void (*)(int64_t, const float*, int64_t, const float*, const uint16_t*,
                               int64_t, float*, int64_t);
constexpr WeightedSumFn kWeightedSums[4][4] = {
    {weighted_sum<1, 1>, weighted_sum<1, 2>, weighted_sum<1, 3>, weighted_sum<1, 4>},
    {weighted_sum<2, 1>, weighted_sum<2, 2>, weighted_sum<2, 3>, weighted_sum<2, 4>},
    {weighted_sum<3, 1>, weighted_sum<3, 2>, weighted_sum<3, 3>, weighted_sum<3, 4>},
    {weighted_sum<4, 1>, weighted_sum<4, 2>, weighted_sum<4, 3>, weighted_sum<4, 4>}};

}  // namespace

float softmax_weights_avx512(int64_t n_keys, float* s) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t p = 0; p < n_keys; p += 16) {
    mx = _mm512_mask_max_ps(mx, tail_mask(n_keys - p), mx, _mm512_loadu_ps(s + p));
  }
  const __m512 max_score = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t p = 0; p < n_keys; p += 16) {
    const __mmask16 m = tail_mask(n_keys - p);
    const __m512 e =
        _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_loadu_ps(s + p), max_score)));
    _mm512_storeu_ps(s + p, e);
    sum = _mm512_add_ps(sum, e);
  }
  const float total = _mm512_reduce_add_ps(sum);
  return total == 0.0f ? 0.0f : 1.0f / total;
}

void attend_group_invariant_avx512(int64_t head_dim, int64_t n_q, const float* q, int64_t q_stride,
                                   const uint16_t* keys, int64_t key_stride, const uint16_t* values,
                                   int64_t value_stride, int64_t n_keys, float scale, float* out,
                                   int64_t out_stride, float softcap) {
  const int64_t n_chunks = head_dim / 16;
  if (softcap > 0.0f) scale /= softcap;
  const int64_t n_pad = (n_keys + 15) / 16 * 16;
  thread_local std::vector<float> w, inv;
  w.resize(static_cast<size_t>(n_q * n_pad));
  inv.resize(static_cast<size_t>(n_q));
  // Scores.
  for (int64_t p = 0; p < n_keys; ++p) {
    const uint16_t* k = keys + p * key_stride;
    for (int64_t h = 0; h < n_q; ++h) {
      const float* qh = q + h * q_stride;
      __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(qh), load_f16x16(k));
      for (int64_t c = 1; c < n_chunks; ++c) {
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * c), load_f16x16(k + 16 * c), acc);
      }
      w[static_cast<size_t>(h * n_pad + p)] = _mm512_reduce_add_ps(acc) * scale;
    }
  }
  if (softcap > 0.0f) softcap_scores(w.data(), n_q, n_pad, n_keys, softcap);
  // Softmax weights (unnormalised) and the reciprocal of their sum.
  for (int64_t h = 0; h < n_q; ++h) {
    inv[static_cast<size_t>(h)] = softmax_weights_avx512(n_keys, w.data() + h * n_pad);
  }
  // Weighted sums of the values, up to 4 heads x 64 elements per pass over the keys.
  for (int64_t h0 = 0; h0 < n_q; h0 += 4) {
    const int64_t nh = std::min<int64_t>(4, n_q - h0);
    for (int64_t c0 = 0; c0 < n_chunks; c0 += 4) {
      const int64_t nc = std::min<int64_t>(4, n_chunks - c0);
      kWeightedSums[nh - 1][nc - 1](n_keys, w.data() + h0 * n_pad, n_pad, inv.data() + h0,
                                    values + 16 * c0, value_stride, out + h0 * out_stride + 16 * c0,
                                    out_stride);
    }
  }
}

}  // namespace ferry::kernels::detail

#pragma GCC diagnostic pop
