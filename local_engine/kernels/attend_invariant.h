// Attention for the batch-invariant engine (BatchForms::kInvariant) on AVX2 and AVX-512 (the
// two bit-identical, and equal to a scalar reference kept for tests): the query heads
// that share one KV head against that head's F16 cache, each query on its own (its result
// depends on its query, the keys and values and nothing else), computed in F32 in two passes
// (all scores, then softmax weights and the weighted sum of values) with vector exps, instead
// of llama.cpp's key-by-key online softmax with F16 accumulation (ops.h, attend_head_f16). Pure
// functions; thread-safe.
#pragma once

#include <cstdint>

namespace ferry::kernels {

// True when the active ISA has attend_group_invariant (AVX2 or AVX-512) and head_dim fits it
// (a multiple of 16); elsewhere the invariant engine keeps attend_head_f16.
bool attend_invariant_supported(int64_t head_dim);

// For h < n_q: out[h * out_stride + d] = sum_p softmax_p(s_hp) * value_p[d], with
// s_hp = (q[h * q_stride ..] . key_p) * scale, key_p at keys + p * key_stride and value_p at
// values + p * value_stride (F16), p < n_keys. The order of every sum is fixed by head_dim and
// n_keys alone. Requires attend_invariant_supported(head_dim). softcap > 0: s_hp = softcap *
// tanhf((q . key_p) * (scale / softcap)). A sliding window is the caller's: keys and values
// start at the window's first position.
void attend_group_invariant(int64_t head_dim, int64_t n_q, const float* q, int64_t q_stride,
                            const uint16_t* keys, int64_t key_stride, const uint16_t* values,
                            int64_t value_stride, int64_t n_keys, float scale, float* out,
                            int64_t out_stride, float softcap = 0.0f);

// The softmax's unnormalised weights of n >= 1 scores, in place, with attend_group_invariant's
// exp (vector on AVX-512 and AVX2, the same bits lane by lane in scalar code elsewhere):
// s[p] = e^(s[p] - max s) for p < n, and s[n, round_up(n, 16)) set to 0 (the caller leaves room
// for them). Returns 1 / (the weights' sum), 0 when the sum is 0; the sum is taken in 16 lanes
// (key p in lane p % 16) and reduced as _mm512_reduce_add_ps does, so the result depends on n and
// the scores alone. Used by the bert encoder's bidirectional attention.
float softmax_weights(int64_t n, float* s);

namespace detail {
float softmax_weights_avx512(int64_t n, float* s);
float softmax_weights_avx2(int64_t n, float* s);
float softmax_weights_ref(int64_t n, float* s);
void attend_group_invariant_avx512(int64_t head_dim, int64_t n_q, const float* q, int64_t q_stride,
                                   const uint16_t* keys, int64_t key_stride, const uint16_t* values,
                                   int64_t value_stride, int64_t n_keys, float scale, float* out,
                                   int64_t out_stride, float softcap = 0.0f);
void attend_group_invariant_avx2(int64_t head_dim, int64_t n_q, const float* q, int64_t q_stride,
                                 const uint16_t* keys, int64_t key_stride, const uint16_t* values,
                                 int64_t value_stride, int64_t n_keys, float scale, float* out,
                                 int64_t out_stride, float softcap = 0.0f);
// The same sums in the same order, lane by lane in scalar code (std::fma where the vector forms
// fuse): what the vector forms are tested against.
void attend_group_invariant_ref(int64_t head_dim, int64_t n_q, const float* q, int64_t q_stride,
                                const uint16_t* keys, int64_t key_stride, const uint16_t* values,
                                int64_t value_stride, int64_t n_keys, float scale, float* out,
                                int64_t out_stride, float softcap = 0.0f);
// Soft-caps the scores in place: w[r * stride + p] = softcap * tanhf(w[...]) for r < n_rows,
// p < n_keys (every form's step between scores and softmax).
void softcap_scores(float* w, int64_t n_rows, int64_t stride, int64_t n_keys, float softcap);
}  // namespace detail

}  // namespace ferry::kernels
