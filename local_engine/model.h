// A decoder-only transformer as read from a ModelSource: hyper-parameters (ModelConfig) and
// weight views (llama, qwen2, qwen3, smollm3, gemma2, gemma3, phi3). Immutable after load; safe
// to share between threads.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "local_engine/model_source.h"
#include "local_engine/weights.h"

namespace ferry::engine {

enum class Arch { kLlama, kQwen2, kQwen3, kSmolLM3, kGemma2, kGemma3, kPhi3 };

// The gated feed-forward's activation: silu(gate) * up, or gelu(gate) * up with GELU's tanh
// approximation as ggml computes it (kernels::geglu_row).
enum class FfnAct { kSilu, kGeluTanh };

// How RoPE pairs dimensions: kNormal rotates (x[2i], x[2i+1]) (llama, whose GGUF Q/K rows are
// permuted for it); kNeox rotates (x[i], x[i + dim/2]) (qwen2, qwen3).
enum class RopeLayout { kNormal, kNeox };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // attention.key_length (== value_length), default n_embd / n_head
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  int64_t rope_dim = 0;  // rotated dimensions per head (<= head_dim)
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
  // rope.scaling.attn_factor: cos and sin multiplied by it (phi3's LongRoPE writes one).
  float rope_attn_factor = 1.0f;
  // rope.scaling.original_context_length: LongRoPE's long factors apply to contexts above it.
  int64_t n_ctx_orig = 0;
  RopeLayout rope_layout = RopeLayout::kNormal;
  bool tied_output = false;
  // <arch>.pooling_type as the GGUF says (llama.cpp's numbering: 0 none, 1 mean, 2 cls,
  // 3 last, 4 rank); -1 when absent. Embeddings read it (local_engine/embeddings.h).
  int64_t pooling_type = -1;

  // Sliding-window attention (gemma2, gemma3): on a sliding layer a query at position q sees
  // the keys at p with q - p < n_swa (llama.cpp's LLAMA_SWA_TYPE_STANDARD); layer il slides
  // when il % swa_period < swa_period - 1 (every swa_period-th layer is global). n_swa == 0:
  // every layer is global. Sliding layers rotate with their own base and scale.
  int64_t n_swa = 0;
  int64_t swa_period = 0;
  float rope_theta_swa = 10000.0f;
  float rope_freq_scale_swa = 1.0f;
  // smollm3: layer il skips RoPE when (il + 1) % no_rope_interval == 0; 0: every layer rotates.
  int64_t no_rope_interval = 0;
  // gemma: embeddings multiplied by sqrtf(n_embd); queries multiplied by q_scale after RoPE and
  // attention then unscaled (0: no such step, attention scaled by 1 / sqrt(head_dim)); scores
  // soft-capped as cap * tanh(s / cap) (0: none); logits likewise.
  bool embd_scaled = false;
  float q_scale = 0.0f;
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // gemma: RMSNorms after attention and after the feed-forward (LayerWeights post norms).
  bool post_norms = false;
  FfnAct ffn_act = FfnAct::kSilu;

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  bool is_swa(int64_t layer) const {
    return n_swa > 0 && (swa_period == 0 || layer % swa_period < swa_period - 1);
  }
  bool uses_rope(int64_t layer) const {
    return no_rope_interval == 0 || (layer + 1) % no_rope_interval != 0;
  }
  // The first position a query at `pos` attends on `layer` (0 on global layers).
  int64_t first_key(int64_t layer, int64_t pos) const {
    return is_swa(layer) ? std::max<int64_t>(0, pos - n_swa + 1) : 0;
  }
};

struct LayerWeights {
  WeightView attn_norm;       // (n_embd)
  WeightView wq, wk, wv;      // (q_dim | kv_dim, n_embd); rows == 0 when fused
  WeightView wqkv;            // phi3's fused (q_dim + 2 kv_dim, n_embd); rows == 0 when apart
  WeightView bq, bk, bv;      // qwen2 biases (q_dim | kv_dim); rows == 0 when absent
  WeightView q_norm, k_norm;  // qwen3, gemma3 per-head RMSNorm (head_dim); rows == 0 if absent
  WeightView wo;              // (n_embd, q_dim)
  WeightView attn_post_norm;  // gemma (n_embd); rows == 0 when absent
  WeightView ffn_norm;        // (n_embd)
  WeightView w_gate, w_up;    // (n_ff, n_embd); phi3: no gate, up (2 n_ff, n_embd) = [gate; up]
  WeightView w_down;          // (n_embd, n_ff)
  WeightView ffn_post_norm;   // gemma (n_embd); rows == 0 when absent
};

class Model {
 public:
  // Reads and checks the hyper-parameters and every tensor's type and shape. The source must
  // outlive the model (views point into it).
  static Result<std::unique_ptr<Model>> load(std::shared_ptr<const ModelSource> source);

  const ModelConfig& config() const { return config_; }
  const ModelSource& source() const { return *source_; }

  WeightView token_embd;                 // (n_vocab, n_embd)
  WeightView output_norm;                // (n_embd)
  WeightView output;                     // (n_vocab, n_embd); token_embd when tied
  std::vector<float> rope_inv_freq;      // (rope_dim / 2): theta^(-2i/d) * freq_scale / factor_i
  std::vector<float> rope_freq_factors;  // (rope_dim / 2) from rope_freqs.weight; empty when none
  // LongRoPE (phi3): rope_factors_short / _long.weight, (rope_dim / 2) each; empty when none.
  // The engine picks the long ones when its context exceeds config().n_ctx_orig, as llama.cpp.
  std::vector<float> rope_factors_short, rope_factors_long;
  std::vector<LayerWeights> layers;

 private:
  std::shared_ptr<const ModelSource> source_;
  ModelConfig config_;
};

}  // namespace ferry::engine
