// A decoder-only transformer as read from a ModelSource: hyper-parameters (ModelConfig) and
// weight views (llama, qwen2, qwen3). Immutable after load; safe to share between threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "local_engine/model_source.h"
#include "local_engine/weights.h"

namespace ferry::engine {

enum class Arch { kLlama, kQwen2, kQwen3 };

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
  RopeLayout rope_layout = RopeLayout::kNormal;
  bool tied_output = false;
  // <arch>.pooling_type as the GGUF says (llama.cpp's numbering: 0 none, 1 mean, 2 cls,
  // 3 last, 4 rank); -1 when absent. Embeddings read it (local_engine/embeddings.h).
  int64_t pooling_type = -1;

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
};

struct LayerWeights {
  WeightView attn_norm;       // (n_embd)
  WeightView wq, wk, wv;      // (q_dim | kv_dim, n_embd)
  WeightView bq, bk, bv;      // qwen2 biases (q_dim | kv_dim); rows == 0 when absent
  WeightView q_norm, k_norm;  // qwen3 per-head RMSNorm (head_dim); rows == 0 when absent
  WeightView wo;              // (n_embd, q_dim)
  WeightView ffn_norm;        // (n_embd)
  WeightView w_gate, w_up;    // (n_ff, n_embd)
  WeightView w_down;          // (n_embd, n_ff)
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
  std::vector<LayerWeights> layers;

 private:
  std::shared_ptr<const ModelSource> source_;
  ModelConfig config_;
};

}  // namespace ferry::engine
