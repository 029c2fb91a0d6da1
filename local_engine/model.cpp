#include "local_engine/model.h"

#include <cmath>
#include <cstring>

#include "local_engine/tensor_loader.h"

namespace ferry::engine {
namespace {

struct ArchInfo {
  std::string_view name;
  Arch arch;
  RopeLayout rope_layout;
};
// Llama-converted files (llama, smollm3) carry Q/K rows permuted for the normal layout.
constexpr ArchInfo kArchs[] = {
    {"llama", Arch::kLlama, RopeLayout::kNormal}, {"qwen2", Arch::kQwen2, RopeLayout::kNeox},
    {"qwen3", Arch::kQwen3, RopeLayout::kNeox},   {"smollm3", Arch::kSmolLM3, RopeLayout::kNormal},
    {"gemma2", Arch::kGemma2, RopeLayout::kNeox}, {"gemma3", Arch::kGemma3, RopeLayout::kNeox},
    {"phi3", Arch::kPhi3, RopeLayout::kNeox},
};
constexpr std::string_view kSupported = "llama, qwen2, qwen3, smollm3, gemma2, gemma3, phi3";

Status read_arch(const ModelSource& source, ModelConfig& c) {
  const auto arch = source.get_string("general.architecture");
  if (!arch) return load_error("missing general.architecture");
  c.arch_name = *arch;
  for (const ArchInfo& info : kArchs) {
    if (info.name != *arch) continue;
    c.arch = info.arch;
    c.rope_layout = info.rope_layout;
    return {};
  }
  if (*arch == "bert" || *arch == "nomic-bert" || *arch == "jina-bert-v2" || *arch == "t5encoder") {
    return load_error("encoder architecture '" + *arch +
                      "' has no decoder forward pass (bert and nomic-bert serve /v1/embeddings "
                      "through engine::EncoderModel; jina-bert-v2, t5encoder: not yet)");
  }
  return load_error("unsupported architecture '" + *arch +
                    "' (supported: " + std::string(kSupported) + ")");
}

// Gemma 2 / 3's hyper-parameters as llama.cpp reads them (llama_model_gemma2 / gemma3's
// load_arch_hparams): the sliding window and its layer pattern, the sliding layers' RoPE, the
// soft-caps and the query scale (1 / sqrt(n_embd / n_head) for the 27B shapes, whose layer
// counts llama.cpp keys it on).
Status read_gemma(const ModelSource& source, const std::string& p, ModelConfig& c) {
  const bool gemma2 = c.arch == Arch::kGemma2;
  c.embd_scaled = true;
  c.post_norms = true;
  c.ffn_act = FfnAct::kGeluTanh;
  const auto window = source.get_int(p + "attention.sliding_window");
  if (gemma2) {
    c.n_swa = window.value_or(4096);
    c.rope_theta_swa = c.rope_theta;
    c.rope_freq_scale_swa = c.rope_freq_scale;
    c.attn_softcap =
        static_cast<float>(source.get_float(p + "attn_logit_softcapping").value_or(50.0));
    c.final_softcap =
        static_cast<float>(source.get_float(p + "final_logit_softcapping").value_or(30.0));
  } else {
    if (!window || *window <= 0) {
      return load_error(p +
                        "attention.sliding_window is absent: gemma3 without sliding layers "
                        "(llama.cpp's non-iswa graph) is not supported");
    }
    c.n_swa = *window;
    if (source.get_float(p + "final_logit_softcapping")) {
      return load_error(p +
                        "final_logit_softcapping is not supported on gemma3 with sliding "
                        "layers (llama.cpp ignores it there)");
    }
  }
  if (c.n_swa <= 0) return load_error(p + "attention.sliding_window must be positive");
  const std::string pattern = p + "attention.sliding_window_pattern";
  if (source.has_key(pattern) && !source.get_int(pattern)) {
    return load_error(pattern + " is not one integer (per-layer patterns are not supported)");
  }
  c.swa_period = source.get_int(pattern).value_or(gemma2 ? 2 : 6);
  if (c.swa_period < 0 || c.swa_period > 4096) {
    return load_error(p + "attention.sliding_window_pattern out of range");
  }
  c.rope_theta_swa =
      static_cast<float>(source.get_float(p + "rope.freq_base_swa").value_or(c.rope_theta_swa));
  if (!(c.rope_theta_swa > 0.0f)) return load_error("rope.freq_base_swa must be positive");
  if (!(c.attn_softcap >= 0.0f) || !(c.final_softcap >= 0.0f)) {
    return load_error("soft-capping values must not be negative");
  }
  const bool big = c.n_layer == (gemma2 ? 46 : 62);  // llama.cpp's LLM_TYPE_27B
  c.q_scale = 1.0f / std::sqrt(static_cast<float>(big ? c.n_embd / c.n_head : c.head_dim));
  return {};
}

Result<ModelConfig> read_config(const ModelSource& source) {
  ModelConfig c;
  if (Status s = read_arch(source, c); !s) return s.error();
  const std::string arch = c.arch_name;
  const std::string p = arch + ".";
  auto need = [&](const std::string& key, int64_t& out, int64_t max) -> Status {
    const auto v = source.get_int(p + key);
    if (!v) return load_error("missing " + p + key);
    if (*v <= 0 || *v > max) return load_error(p + key + " out of range: " + std::to_string(*v));
    out = *v;
    return {};
  };
  constexpr int64_t kMaxDim = int64_t{1} << 20;
  if (auto s = need("embedding_length", c.n_embd, kMaxDim); !s) return s.error();
  if (auto s = need("block_count", c.n_layer, 4096); !s) return s.error();
  if (auto s = need("feed_forward_length", c.n_ff, kMaxDim); !s) return s.error();
  if (auto s = need("attention.head_count", c.n_head, 4096); !s) return s.error();
  c.n_head_kv = source.get_int(p + "attention.head_count_kv").value_or(c.n_head);
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) {
    return load_error("attention.head_count_kv " + std::to_string(c.n_head_kv) +
                      " does not divide head_count " + std::to_string(c.n_head));
  }
  c.head_dim = source.get_int(p + "attention.key_length").value_or(c.n_embd / c.n_head);
  const int64_t value_length = source.get_int(p + "attention.value_length").value_or(c.head_dim);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > 4096 || value_length != c.head_dim) {
    return load_error("unsupported head size (key " + std::to_string(c.head_dim) + ", value " +
                      std::to_string(value_length) + ")");
  }
  c.pooling_type = source.get_int(p + "pooling_type").value_or(-1);
  c.n_ctx_train = source.get_int(p + "context_length").value_or(4096);
  if (c.n_ctx_train <= 0) return load_error("context_length must be positive");
  c.rope_dim = source.get_int(p + "rope.dimension_count").value_or(c.head_dim);
  if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    return load_error("rope.dimension_count out of range: " + std::to_string(c.rope_dim));
  }
  c.rms_eps = static_cast<float>(source.get_float(p + "attention.layer_norm_rms_epsilon")
                                     .value_or(p == "llama." || p == "smollm3." ? 1e-5 : 1e-6));
  if (!(c.rms_eps > 0.0f)) return load_error("layer_norm_rms_epsilon must be positive");
  c.rope_theta = static_cast<float>(source.get_float(p + "rope.freq_base").value_or(10000.0));
  if (!(c.rope_theta > 0.0f)) return load_error("rope.freq_base must be positive");
  const auto scaling_type = source.get_string(p + "rope.scaling.type");
  double factor = source.get_float(p + "rope.scaling.factor").value_or(0.0);
  if (factor == 0.0) factor = source.get_float(p + "rope.scale_linear").value_or(0.0);
  if (scaling_type && *scaling_type != "none" && *scaling_type != "linear") {
    return load_error("unsupported rope scaling '" + *scaling_type + "'");
  }
  if (factor > 0.0 && (!scaling_type || *scaling_type == "linear")) {
    c.rope_freq_scale = 1.0f / static_cast<float>(factor);  // in float, as llama.cpp does
  }
  // Read for every architecture by llama.cpp (hparams.rope_attn_factor, n_ctx_orig_yarn).
  c.rope_attn_factor =
      static_cast<float>(source.get_float(p + "rope.scaling.attn_factor").value_or(1.0));
  if (!(c.rope_attn_factor > 0.0f)) return load_error("rope.scaling.attn_factor must be positive");
  c.n_ctx_orig = source.get_int(p + "rope.scaling.original_context_length").value_or(c.n_ctx_train);
  if (c.n_ctx_orig <= 0) return load_error("rope.scaling.original_context_length must be positive");
  if (c.arch == Arch::kSmolLM3) c.no_rope_interval = 4;  // fixed in llama.cpp, no metadata key
  // phi3: queries scaled by 1 / sqrtf(head_dim) before attention. Its attention.sliding_window
  // is ignored, as llama.cpp does (it disables Phi's SWA).
  if (c.arch == Arch::kPhi3) c.q_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.arch == Arch::kGemma2 || c.arch == Arch::kGemma3) {
    if (Status s = read_gemma(source, p, c); !s) return s.error();
  }
  return c;
}

// One block's weights: attention (Qwen2's q/k/v biases, Qwen3's and Gemma 3's q/k norms, Gemma's
// post norms) and the gated FFN.
Status load_layer(TensorLoader& loader, const ModelConfig& c, int64_t i, LayerWeights& l) {
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const std::string b = "blk." + std::to_string(i) + ".";
  FERRY_LOAD(l.attn_norm, loader.get_f32(b + "attn_norm.weight", c.n_embd));
  const bool fused_qkv = c.arch == Arch::kPhi3 && loader.has(b + "attn_qkv.weight");
  if (fused_qkv) {
    FERRY_LOAD(l.wqkv, loader.get(b + "attn_qkv.weight", c.n_embd, q_dim + 2 * kv_dim));
  } else {
    FERRY_LOAD(l.wq, loader.get(b + "attn_q.weight", c.n_embd, q_dim));
    FERRY_LOAD(l.wk, loader.get(b + "attn_k.weight", c.n_embd, kv_dim));
    FERRY_LOAD(l.wv, loader.get(b + "attn_v.weight", c.n_embd, kv_dim));
  }
  FERRY_LOAD(l.wo, loader.get(b + "attn_output.weight", q_dim, c.n_embd));
  const bool bias_required = c.arch == Arch::kQwen2;
  FERRY_LOAD(l.bq, loader.get_f32(b + "attn_q.bias", q_dim, !bias_required));
  FERRY_LOAD(l.bk, loader.get_f32(b + "attn_k.bias", kv_dim, !bias_required));
  FERRY_LOAD(l.bv, loader.get_f32(b + "attn_v.bias", kv_dim, !bias_required));
  const bool qk_norm = c.arch == Arch::kQwen3 || c.arch == Arch::kGemma3;
  FERRY_LOAD(l.q_norm, loader.get_f32(b + "attn_q_norm.weight", c.head_dim, !qk_norm));
  FERRY_LOAD(l.k_norm, loader.get_f32(b + "attn_k_norm.weight", c.head_dim, !qk_norm));
  FERRY_LOAD(l.ffn_norm, loader.get_f32(b + "ffn_norm.weight", c.n_embd));
  if (c.post_norms) {
    FERRY_LOAD(l.attn_post_norm, loader.get_f32(b + "post_attention_norm.weight", c.n_embd));
    FERRY_LOAD(l.ffn_post_norm, loader.get_f32(b + "post_ffw_norm.weight", c.n_embd));
  }
  if (c.arch == Arch::kPhi3) {  // gate and up in one matrix, the gate's rows first
    FERRY_LOAD(l.w_up, loader.get(b + "ffn_up.weight", c.n_embd, 2 * c.n_ff));
  } else {
    FERRY_LOAD(l.w_gate, loader.get(b + "ffn_gate.weight", c.n_embd, c.n_ff));
    FERRY_LOAD(l.w_up, loader.get(b + "ffn_up.weight", c.n_embd, c.n_ff));
  }
  FERRY_LOAD(l.w_down, loader.get(b + "ffn_down.weight", c.n_ff, c.n_embd));
  return {};
}

// llama.cpp repacks Q4_0, Q4_K and IQ4_NL matrices of a multiple of 8 rows on AVX2, and Q2_K ones
// on AVX-512 (all but the token embedding, which it also reads by row), into 8-row interleaved
// blocks, whose kernels sum each output in one accumulator; IQ4_XS matrices of a multiple of 8
// rows go through its IQ panel gemm, the same order, in batches of 8 tokens or more. Use the
// same float order for them (kernels::DotOrder). The CPU decides, not FERRY_ISA: llama.cpp on
// this CPU is what the scalar and AVX2 tables are checked against.
void mark_repacked(WeightView& w) {
  if (w.rows % 8 != 0) return;
  const bool repacked_type =
      w.type == WeightType::kQ4_0 || w.type == WeightType::kQ4_K || w.type == WeightType::kIQ4_NL ||
      (w.type == WeightType::kQ2_K && kernels::detect_isa() == kernels::Isa::kAvx512);
  if (repacked_type) w.order = kernels::DotOrder::kSerial;
  if (w.type == WeightType::kIQ4_XS) w.order = kernels::DotOrder::kSerialFrom8;
}

// A (rope_dim / 2) float vector of positive RoPE factors, empty when the tensor is absent.
Status load_factors(TensorLoader& loader, const std::string& name, int64_t n,
                    std::vector<float>& out) {
  WeightView view;
  FERRY_LOAD(view, loader.get_f32(name, n, true));
  if (view.data == nullptr) return {};
  out.resize(static_cast<size_t>(n));
  std::memcpy(out.data(), view.data, out.size() * sizeof(float));
  for (float f : out) {
    if (!(f > 0.0f)) return load_error(name + " has a non-positive factor");
  }
  return {};
}

// RoPE inverse frequencies, with Llama 3's per-frequency factors when the file carries them,
// and LongRoPE's short and long factors (phi3).
Status load_rope(TensorLoader& loader, const ModelConfig& c, Model& model) {
  const int64_t n_freq = c.rope_dim / 2;
  if (Status s =
          load_factors(loader, "rope_factors_short.weight", n_freq, model.rope_factors_short);
      !s) {
    return s;
  }
  if (Status s = load_factors(loader, "rope_factors_long.weight", n_freq, model.rope_factors_long);
      !s) {
    return s;
  }
  if (model.rope_factors_short.empty() != model.rope_factors_long.empty()) {
    return load_error("LongRoPE needs both rope_factors_short.weight and rope_factors_long.weight");
  }
  WeightView factors;
  FERRY_LOAD(factors, loader.get_f32("rope_freqs.weight", n_freq, true));
  model.rope_inv_freq.resize(static_cast<size_t>(n_freq));
  for (int64_t i = 0; i < n_freq; ++i) {
    double inv = std::pow(static_cast<double>(c.rope_theta),
                          -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dim));
    inv *= c.rope_freq_scale;
    if (factors.data != nullptr) {
      float f;
      std::memcpy(&f, factors.row(0) + i * sizeof(float), sizeof(f));
      if (!(f > 0.0f)) return load_error("rope_freqs.weight has a non-positive factor");
      inv /= f;
      model.rope_freq_factors.push_back(f);
    }
    model.rope_inv_freq[static_cast<size_t>(i)] = static_cast<float>(inv);
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Model>> Model::load(std::shared_ptr<const ModelSource> source) {
  if (!source) return load_error("no source");
  auto config = read_config(*source);
  if (!config) return std::move(config).error();
  auto model = std::unique_ptr<Model>(new Model());
  model->source_ = std::move(source);
  ModelConfig& c = model->config_;
  c = std::move(config).value();
  const ModelSource& src = *model->source_;

  const SourceTensor* embd = src.tensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() < 2) return load_error("missing token_embd.weight");
  c.n_vocab = embd->dims[1];
  if (c.n_vocab <= 0 || c.n_vocab > (int64_t{1} << 24)) return load_error("bad vocabulary size");

  TensorLoader loader(src);
  FERRY_LOAD(model->token_embd, loader.get("token_embd.weight", c.n_embd, c.n_vocab));
  FERRY_LOAD(model->output_norm, loader.get_f32("output_norm.weight", c.n_embd));
  if (c.arch == Arch::kGemma2 && src.tensor("output.weight") != nullptr) {
    return load_error(
        "gemma2 with an output.weight is not supported (llama.cpp ignores it and "
        "projects with token_embd.weight)");
  }
  FERRY_LOAD(model->output, loader.get("output.weight", c.n_embd, c.n_vocab, true));
  if (model->output.data == nullptr) {
    model->output = model->token_embd;
    c.tied_output = true;
  }
  model->layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    if (Status s = load_layer(loader, c, i, model->layers[static_cast<size_t>(i)]); !s) {
      return s.error();
    }
  }
  for (LayerWeights& l : model->layers) {
    for (WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      mark_repacked(*w);
    }
  }
  if (!c.tied_output) mark_repacked(model->output);
  if (Status s = load_rope(loader, c, *model); !s) return s.error();
  return model;
}
#undef FERRY_LOAD

}  // namespace ferry::engine
