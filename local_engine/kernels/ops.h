// Forward-pass operations other than matrix products (RMS norm, RoPE, attention over an F16
// KV cache, SwiGLU), written to the numerics of llama.cpp's CPU backend (ggml's AVX-512 build):
// the same operation order, the same roundings, the same exp approximation. Activation
// quantization amplifies any last-bit difference between two engines into a different model
// output, so matching llama.cpp token for token needs these, not merely accurate versions.
// Every function here gives the same bits on every ISA (scalar, AVX2, AVX-512); stateless and
// thread-safe.
#pragma once

#include <cstdint>

namespace ferry::kernels {

// out[i] = x[i] * (1 / sqrt(mean(x^2) + eps)) * w[i]; the mean of squares summed in double,
// element by element, as ggml_rms_norm does. out may alias x.
void rms_norm_row(int64_t n, const float* x, const float* w, float eps, float* out);
// rms_norm_row of `rows` rows of n (x and out row-major), the same bits row by row: up to 8 rows'
// sums advance together, so their chains of dependent additions overlap (a batch's norm costs
// about one row's). out may alias x.
void rms_norm_rows(int64_t rows, int64_t n, const float* x, const float* w, float eps, float* out);

// The (cos, sin) pairs of RoPE at one position: cache[2i] = cos(theta_i), cache[2i+1] =
// sin(theta_i) for i < n_dims / 2, with theta_0 = pos and theta_{i+1} = theta_i * theta_scale
// (theta_scale = powf(base, -2 / n_dims)), each divided by freq_factors[i] when given and
// multiplied by freq_scale; cos and sin then multiplied by mscale (llama.cpp's attention factor,
// e.g. LongRoPE's).
void rope_cache(int64_t pos, int64_t n_dims, float theta_scale, float freq_scale,
                const float* freq_factors, float* cache, float mscale = 1.0f);
// The theta_scale of rope_cache for a frequency base: powf(base, -2.0f / n_dims).
float rope_theta_scale(float freq_base, int64_t n_dims);
// Rotates the first n_dims elements of each of n_heads heads (head_dim apart) in place:
// pairs (2i, 2i+1) when !neox, (i, i + n_dims/2) when neox.
void rope_apply(const float* cache, int64_t n_dims, bool neox, int64_t n_heads, int64_t head_dim,
                float* heads);

// out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)) with ggml's exp approximation on
// whole groups of 16 and libm's expf on the rest. out may alias gate.
void swiglu_row(int64_t n, const float* gate, const float* up, float* out);

// The index of the first largest of x[0..n) (n > 0) as std::max_element gives it: NaNs never
// win, except a NaN at 0, which nothing after it can replace. (Greedy sampling over a vocabulary.)
int64_t argmax_row(int64_t n, const float* x);

// out[i] = gelu(gate[i]) * up[i] as ggml_vec_geglu_f32 computes it: gate <= -10 gives 0,
// gate >= 10 gives gate * up, otherwise gelu is read from a table of F16 results indexed by the
// gate rounded to F16 (GELU's tanh approximation, 0.5x(1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))),
// computed in float and rounded to F16). out may alias gate.
void geglu_row(int64_t n, const float* gate, const float* up, float* out);

// x[i] = cap * tanhf(x[i] * (1 / cap)), as ggml's scale, tanh, scale (gemma's final logits).
void softcap_row(int64_t n, float cap, float* x);

// One query head against the F16 cache of one KV head, as ggml's flash attention does for
// small batches: the query rounded to F16, scores s_p = (k_p . q) * scale for positions
// 0..n_keys-1 in order, an online softmax with expf, and the weighted sum of values kept in
// F16 after every update; out[0..head_dim) = that sum / the sum of weights. With softcap > 0,
// s_p = softcap * tanhf((k_p . q) * (scale / softcap)) (ggml's logit soft-capping). Masked
// keys (a sliding window) are left out by the caller: llama.cpp skips them.
void attend_head_f16(int64_t head_dim, const float* q, const uint16_t* keys, int64_t key_stride,
                     const uint16_t* values, int64_t value_stride, int64_t n_keys, float scale,
                     float* out, float softcap = 0.0f);

// The same for batches of 64 queries or more, as ggml's tiled flash attention computes it:
// keys in tiles of 64 positions; per tile the scores as fused multiply-add chains over the head
// dimension (F32 query against the keys, here transposed: element d of key p at
// keys_t[d * kt_stride + p]), the tile's softmax with ggml's exp approximation, and the values
// (F32, row p at values + p * value_stride) accumulated in F32 with one fused multiply-add per
// key. head_dim must be a multiple of 16 (attend_tiled_ok).
void attend_head_tiled(int64_t head_dim, const float* q, const float* keys_t, int64_t kt_stride,
                       const float* values, int64_t value_stride, int64_t n_keys, float scale,
                       float* out);
// attend_head_tiled for several query rows against the same keys and values (the heads of a
// GQA group, several positions): each row gets exactly attend_head_tiled's result, the tiles
// read once for all of them.
struct TiledRow {
  const float* q;         // head_dim floats
  int64_t n_keys;         // positions first_key..n_keys-1 attended
  float* out;             // head_dim floats
  int64_t first_key = 0;  // a sliding window's start: earlier keys are masked (-inf scores)
};
// softcap > 0: scores soft-capped as in attend_head_f16; a row's keys before its first_key get
// -inf scores (and a tile holding none of its keys leaves it unchanged), as ggml's mask does.
void attend_rows_tiled(int64_t head_dim, int64_t n_rows, const TiledRow* rows, const float* keys_t,
                       int64_t kt_stride, const float* values, int64_t value_stride, float scale,
                       float softcap = 0.0f);
// Whether llama.cpp would use the tiled form: batches of >= 64 queries, head_dim % 16 == 0.
inline bool attend_tiled_ok(int64_t n_queries, int64_t head_dim) {
  return n_queries >= 64 && head_dim % 16 == 0;
}

// ggml_vec_dot_f16 (AVX-512 build): n F16 products summed in 4 x 16 float lanes with FMA, the
// lanes reduced in a fixed tree, the tail (n % 64) added in double.
float dot_f16_f16(int64_t n, const uint16_t* x, const uint16_t* y);

namespace detail {
// Scalar references (always available; the active-ISA versions above must equal them).
float dot_f16_f16_ref(int64_t n, const uint16_t* x, const uint16_t* y);
void rope_apply_ref(const float* cache, int64_t n_dims, bool neox, int64_t n_heads,
                    int64_t head_dim, float* heads);
void swiglu_row_ref(int64_t n, const float* gate, const float* up, float* out);
int64_t argmax_row_ref(int64_t n, const float* x);
void attend_head_tiled_ref(int64_t head_dim, const float* q, const float* keys_t, int64_t kt_stride,
                           const float* values, int64_t value_stride, int64_t n_keys, float scale,
                           float* out, int64_t first_key = 0, float softcap = 0.0f);
void attend_head_f16_ref(int64_t head_dim, const float* q, const uint16_t* keys, int64_t key_stride,
                         const uint16_t* values, int64_t value_stride, int64_t n_keys, float scale,
                         float* out, float softcap = 0.0f);
}  // namespace detail

}  // namespace ferry::kernels
