#include "local_engine/kernels/attend_invariant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels.h"

namespace ferry::kernels {

bool attend_invariant_supported(int64_t head_dim) {
  return active_isa() != Isa::kScalar && head_dim > 0 && head_dim % 16 == 0;
}

void attend_group_invariant(int64_t head_dim, int64_t n_q, const float* q, int64_t q_stride,
                            const uint16_t* keys, int64_t key_stride, const uint16_t* values,
                            int64_t value_stride, int64_t n_keys, float scale, float* out,
                            int64_t out_stride, float softcap) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() == Isa::kAvx512) {
    detail::attend_group_invariant_avx512(head_dim, n_q, q, q_stride, keys, key_stride, values,
                                          value_stride, n_keys, scale, out, out_stride, softcap);
  } else {
    detail::attend_group_invariant_avx2(head_dim, n_q, q, q_stride, keys, key_stride, values,
                                        value_stride, n_keys, scale, out, out_stride, softcap);
  }
#else
  detail::attend_group_invariant_ref(head_dim, n_q, q, q_stride, keys, key_stride, values,
                                     value_stride, n_keys, scale, out, out_stride, softcap);
#endif
}

float softmax_weights(int64_t n, float* s) {
#if defined(__x86_64__) || defined(__i386__)
  switch (active_isa()) {
    case Isa::kAvx512:
      return detail::softmax_weights_avx512(n, s);
    case Isa::kAvx2:
      return detail::softmax_weights_avx2(n, s);
    case Isa::kScalar:
      break;
  }
#endif
  return detail::softmax_weights_ref(n, s);
}

namespace detail {
namespace {

// The 16-lane reductions of the vector forms, in their order (attend_invariant_avx2.cpp).
float reduce_add16(const float* v) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = v[8 + i] + v[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[4 + i] + t3[i];
  return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

// exp512 of the AVX-512 form for one lane: ldexp rounds p * 2^n once, as vscalefps does.
float exp_lane(float x) {
  x = std::max(x, -88.0f);
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(-n, 0.693359375f, x);
  r = std::fma(-n, -2.12194440e-4f, r);
  float p = 1.0f / 720.0f;
  for (float c : {1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
    p = std::fma(p, r, c);
  return std::ldexp(p, static_cast<int>(n));
}

}  // namespace

float softmax_weights_ref(int64_t n, float* s) {
  const float mx = *std::max_element(s, s + n);
  float sum[16] = {};
  for (int64_t p = 0; p < n; ++p) {
    s[p] = exp_lane(s[p] - mx);
    sum[p % 16] += s[p];
  }
  std::fill(s + n, s + (n + 15) / 16 * 16, 0.0f);
  const float total = reduce_add16(sum);
  return total == 0.0f ? 0.0f : 1.0f / total;
}

void attend_group_invariant_ref(int64_t head_dim, int64_t n_q, const float* q, int64_t q_stride,
                                const uint16_t* keys, int64_t key_stride, const uint16_t* values,
                                int64_t value_stride, int64_t n_keys, float scale, float* out,
                                int64_t out_stride, float softcap) {
  const int64_t n_pad = (n_keys + 15) / 16 * 16;
  if (softcap > 0.0f) scale /= softcap;
  std::vector<float> s(static_cast<size_t>(n_pad));
  for (int64_t h = 0; h < n_q; ++h) {
    const float* qh = q + h * q_stride;
    std::fill(s.begin(), s.end(), 0.0f);
    for (int64_t p = 0; p < n_keys; ++p) {
      const uint16_t* k = keys + p * key_stride;
      float lanes[16];
      for (int l = 0; l < 16; ++l) lanes[l] = qh[l] * fp16_to_fp32(k[l]);
      for (int64_t c = 16; c < head_dim; c += 16) {
        for (int l = 0; l < 16; ++l)
          lanes[l] = std::fma(qh[c + l], fp16_to_fp32(k[c + l]), lanes[l]);
      }
      s[static_cast<size_t>(p)] = reduce_add16(lanes) * scale;
    }
    if (softcap > 0.0f) softcap_scores(s.data(), 1, n_pad, n_keys, softcap);
    const float inv = softmax_weights_ref(n_keys, s.data());
    for (int64_t d = 0; d < head_dim; ++d) {
      float acc = 0.0f;
      for (int64_t p = 0; p < n_keys; ++p) {
        acc = std::fma(s[static_cast<size_t>(p)], fp16_to_fp32(values[p * value_stride + d]), acc);
      }
      out[h * out_stride + d] = acc * inv;
    }
  }
}

void softcap_scores(float* w, int64_t n_rows, int64_t stride, int64_t n_keys, float softcap) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t p = 0; p < n_keys; ++p) {
      float& s = w[r * stride + p];
      s = softcap * std::tanh(s);
    }
  }
}

}  // namespace detail
}  // namespace ferry::kernels
