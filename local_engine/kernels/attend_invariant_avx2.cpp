// attend_group_invariant (attend_invariant.h) with 256-bit vectors, bit-identical to the
// AVX-512 form: a 16-lane vector of that form is a pair of 8-lane halves here, and every sum is
// taken in its order (a score's fused multiply-add chain per lane, then _mm512_reduce_add_ps's
// tree; the softmax sum per lane over 16-key vectors; each output element's chain over the
// keys). exp16 reproduces exp512 lane for lane, its final scaling included. Compiled with
// -mavx2 -mfma -mf16c; called only when attend_invariant_supported().
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "local_engine/kernels/attend_invariant.h"

namespace ferry::kernels::detail {
namespace {

// One 16-lane vector of the AVX-512 form: lanes 0-7 and 8-15.
struct V16 {
  __m256 lo, hi;
};

inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// _mm512_reduce_add_ps: upper 8 lanes onto lower 8, then 4, then pairs (i, i + 2), then the two.
inline float reduce_add16(const V16& v) {
  const __m256 t3 = _mm256_add_ps(v.hi, v.lo);
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_add_ps(t6, _mm_movehl_ps(t6, t6));
  return _mm_cvtss_f32(_mm_add_ss(t8, _mm_movehdup_ps(t8)));
}

inline float reduce_max16(const V16& v) {
  __m256 m = _mm256_max_ps(v.lo, v.hi);
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
}

// Lanes [0, left) of a 16-lane vector set (all bits), the others clear.
inline V16 tail_mask(int64_t left) {
  const __m256i n = _mm256_set1_epi32(static_cast<int>(std::min<int64_t>(left, 16)));
  const __m256i lo_idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i hi_idx = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
  return {_mm256_castsi256_ps(_mm256_cmpgt_epi32(n, lo_idx)),
          _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, hi_idx))};
}

// exp512 on 8 lanes. Its _mm512_scalef_ps(p, n) rounds p * 2^n once; n is in [-127, 0] here
// and p in [0.7, 1.5], so p * 2^n is taken as (p * 2^(n + 64)) * 2^-64 when n < -64 (the first
// product exact, the second rounding once, into the subnormals where it must) and as p * 2^n,
// exact, otherwise.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256 small = _mm256_cmp_ps(n, _mm256_set1_ps(-64.0f), _CMP_LT_OQ);
  const __m256 n_adj = _mm256_add_ps(n, _mm256_and_ps(small, _mm256_set1_ps(64.0f)));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n_adj), _mm256_set1_epi32(127)), 23);
  const __m256 scaled = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  return _mm256_mul_ps(scaled,
                       _mm256_blendv_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(0x1p-64f), small));
}

// out_h[c] = inv_h * sum_p w_hp v_p[c] for NH heads and NC 8-element chunks of the head.
template <int NH, int NC>
void weighted_sum(int64_t n_keys, const float* w, int64_t w_stride, const float* inv,
                  const uint16_t* values, int64_t value_stride, float* out, int64_t out_stride) {
  __m256 acc[NH][NC];
  for (int h = 0; h < NH; ++h) {
    for (int c = 0; c < NC; ++c) acc[h][c] = _mm256_setzero_ps();
  }
  for (int64_t p = 0; p < n_keys; ++p) {
    __m256 v[NC];
    for (int c = 0; c < NC; ++c) v[c] = load_f16x8(values + p * value_stride + 8 * c);
    for (int h = 0; h < NH; ++h) {
      const __m256 wp = _mm256_set1_ps(w[h * w_stride + p]);
      for (int c = 0; c < NC; ++c) acc[h][c] = _mm256_fmadd_ps(wp, v[c], acc[h][c]);
    }
  }
  for (int h = 0; h < NH; ++h) {
    for (int c = 0; c < NC; ++c) {
      _mm256_storeu_ps(out + h * out_stride + 8 * c,
                       _mm256_mul_ps(acc[h][c], _mm256_set1_ps(inv[h])));
    }
  }
}

using WeightedSumFn = void (*)(int64_t, const float*, int64_t, const float*, const uint16_t*,
                               int64_t, float*, int64_t);
constexpr WeightedSumFn kWeightedSums[2][4] = {
    {weighted_sum<1, 1>, weighted_sum<1, 2>, weighted_sum<1, 3>, weighted_sum<1, 4>},
    {weighted_sum<2, 1>, weighted_sum<2, 2>, weighted_sum<2, 3>, weighted_sum<2, 4>}};

// The scaled score of query q against key k: one chain per lane over 16-element chunks.
inline float score(int64_t n_chunks, const float* q, const uint16_t* k) {
  V16 acc{_mm256_mul_ps(_mm256_loadu_ps(q), load_f16x8(k)),
          _mm256_mul_ps(_mm256_loadu_ps(q + 8), load_f16x8(k + 8))};
  for (int64_t c = 1; c < n_chunks; ++c) {
    acc.lo = _mm256_fmadd_ps(_mm256_loadu_ps(q + 16 * c), load_f16x8(k + 16 * c), acc.lo);
    acc.hi = _mm256_fmadd_ps(_mm256_loadu_ps(q + 16 * c + 8), load_f16x8(k + 16 * c + 8), acc.hi);
  }
  return reduce_add16(acc);
}

}  // namespace

// Scores s[0, n_keys) become unnormalised softmax weights (zeros up to the next 16); returns
// the reciprocal of their sum.
float softmax_weights_avx2(int64_t n_keys, float* s) {
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  V16 mx{neg_inf, neg_inf};
  for (int64_t p = 0; p < n_keys; p += 16) {
    const V16 m = tail_mask(n_keys - p);
    mx.lo = _mm256_blendv_ps(mx.lo, _mm256_max_ps(mx.lo, _mm256_loadu_ps(s + p)), m.lo);
    mx.hi = _mm256_blendv_ps(mx.hi, _mm256_max_ps(mx.hi, _mm256_loadu_ps(s + p + 8)), m.hi);
  }
  const __m256 max_score = _mm256_set1_ps(reduce_max16(mx));
  V16 sum{_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t p = 0; p < n_keys; p += 16) {
    const V16 m = tail_mask(n_keys - p);
    const __m256 lo = _mm256_and_ps(m.lo, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + p), max_score)));
    const __m256 hi =
        _mm256_and_ps(m.hi, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + p + 8), max_score)));
    _mm256_storeu_ps(s + p, lo);
    _mm256_storeu_ps(s + p + 8, hi);
    sum.lo = _mm256_add_ps(sum.lo, lo);
    sum.hi = _mm256_add_ps(sum.hi, hi);
  }
  const float total = reduce_add16(sum);
  return total == 0.0f ? 0.0f : 1.0f / total;
}

void attend_group_invariant_avx2(int64_t head_dim, int64_t n_q, const float* q, int64_t q_stride,
                                 const uint16_t* keys, int64_t key_stride, const uint16_t* values,
                                 int64_t value_stride, int64_t n_keys, float scale, float* out,
                                 int64_t out_stride, float softcap) {
  const int64_t n_chunks = head_dim / 16;
  if (softcap > 0.0f) scale /= softcap;
  const int64_t n_pad = (n_keys + 15) / 16 * 16;
  thread_local std::vector<float> w, inv;
  w.resize(static_cast<size_t>(n_q * n_pad));
  inv.resize(static_cast<size_t>(n_q));
  for (int64_t p = 0; p < n_keys; ++p) {
    const uint16_t* k = keys + p * key_stride;
    for (int64_t h = 0; h < n_q; ++h) {
      w[static_cast<size_t>(h * n_pad + p)] = score(n_chunks, q + h * q_stride, k) * scale;
    }
  }
  if (softcap > 0.0f) softcap_scores(w.data(), n_q, n_pad, n_keys, softcap);
  for (int64_t h = 0; h < n_q; ++h) {
    inv[static_cast<size_t>(h)] = softmax_weights_avx2(n_keys, w.data() + h * n_pad);
  }
  // Weighted sums of the values, up to 2 heads x 32 elements per pass over the keys.
  const int64_t n_chunks8 = head_dim / 8;
  for (int64_t h0 = 0; h0 < n_q; h0 += 2) {
    const int64_t nh = std::min<int64_t>(2, n_q - h0);
    for (int64_t c0 = 0; c0 < n_chunks8; c0 += 4) {
      const int64_t nc = std::min<int64_t>(4, n_chunks8 - c0);
      kWeightedSums[nh - 1][nc - 1](n_keys, w.data() + h0 * n_pad, n_pad, inv.data() + h0,
                                    values + 8 * c0, value_stride, out + h0 * out_stride + 8 * c0,
                                    out_stride);
    }
  }
}

}  // namespace ferry::kernels::detail
