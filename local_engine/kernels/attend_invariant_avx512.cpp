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

// _mm512_reduce_add_ps of 16 vectors at once: lane j of the result is a[j] reduced in GCC's
// order (halves, quarters, then (0 + 2) and (1 + 3), then their sum), the same additions on the
// same pairs, so the same bits as 16 separate reductions, in 15 vector additions.
inline __m512 reduce_add16(const __m512 a[16]) {
  __m512 s1[8], s2[4], s3[2];
  for (int m = 0; m < 8; ++m) {  // lanes 0-7: a[2m]'s halves summed; 8-15: a[2m + 1]'s
    s1[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44),
                          _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE));
  }
  for (int m = 0; m < 4; ++m) {  // quarter l: a[4m + l]'s quarters summed
    s2[m] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * m], s1[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_f32x4(s1[2 * m], s1[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  for (int m = 0; m < 2; ++m) {  // per quarter l: (0 + 2), (1 + 3) of a[8m + l], then a[8m + 4 + l]
    s3[m] = _mm512_add_ps(_mm512_shuffle_ps(s2[2 * m], s2[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm512_shuffle_ps(s2[2 * m], s2[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Element e of quarter l: a[4e + l]'s total; put a[j] in lane j.
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i to_key = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(to_key, sums);
}

// The scores of keys [p0, p0 + 16) for every query head: each one fused multiply-add chain over
// the head's 16-element chunks, as the key-by-key loop has it, the keys widened once for all
// heads.
void scores16(int64_t n_chunks, int64_t n_q, const float* q, int64_t q_stride, const uint16_t* keys,
              int64_t key_stride, float scale, float* w, int64_t w_stride) {
  alignas(64) float kf[16 * 256];  // 16 keys of at most 256 elements
  for (int j = 0; j < 16; ++j) {
    for (int64_t c = 0; c < n_chunks; ++c) {
      _mm512_store_ps(kf + j * 256 + 16 * c, load_f16x16(keys + j * key_stride + 16 * c));
    }
  }
  for (int64_t h = 0; h < n_q; ++h) {
    const float* qh = q + h * q_stride;
    __m512 acc[16];
    const __m512 q0 = _mm512_loadu_ps(qh);
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_mul_ps(q0, _mm512_load_ps(kf + j * 256));
    for (int64_t c = 1; c < n_chunks; ++c) {
      const __m512 qc = _mm512_loadu_ps(qh + 16 * c);
      for (int j = 0; j < 16; ++j) {
        acc[j] = _mm512_fmadd_ps(qc, _mm512_load_ps(kf + j * 256 + 16 * c), acc[j]);
      }
    }
    _mm512_storeu_ps(w + h * w_stride, _mm512_mul_ps(reduce_add16(acc), _mm512_set1_ps(scale)));
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
  // Scores: 16 keys at a time, then the rest key by key (the same bits either way).
  int64_t p_begin = 0;
  if (head_dim <= 256) {
    for (; p_begin + 16 <= n_keys; p_begin += 16) {
      scores16(n_chunks, n_q, q, q_stride, keys + p_begin * key_stride, key_stride, scale,
               w.data() + p_begin, n_pad);
    }
  }
  for (int64_t p = p_begin; p < n_keys; ++p) {
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
