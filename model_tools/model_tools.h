// Model-level tools over GGUF files: synthetic models of the supported architectures (random
// weights of sane scale, real tensor names and metadata as llama.cpp's converter writes them, a
// real vocabulary) and requantization
// with the Q4_K_M / Q5_K_M mixes. Used by `ferry model synth/quantize`, tests and benchmarks.
// Stateless functions; safe to call from several threads on different files.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "gguf/gguf_writer.h"
#include "model_format/tensor_type.h"

namespace ferry::kernels {
class ThreadPool;
}

namespace ferry::model_tools {

// What a model is quantized to: one tensor type for every matrix, or a named mix.
struct QuantTarget {
  std::string name;                                                // "Q8_0", "Q4_K_M", "F16", ...
  model_format::TensorType base = model_format::TensorType::kF16;  // most matrices
  bool mix_m = false;  // the _M mix (Q6_K on the sensitive ones)
};
// Parses a type ferry runs ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
// "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS": that type for every matrix, with
// llama-quantize's output rule) or a mix ("Q4_K_M", "Q5_K_M", "Q4_K_S", "Q5_K_S"),
// case-insensitive.
std::optional<QuantTarget> parse_quant_target(std::string_view name);

// The type a tensor gets under `target`, as llama-quantize (llama_tensor_get_type) picks it for
// that mix without an importance matrix. 1-D tensors (norms, biases) stay F32; F32 / F16 / BF16
// targets convert every matrix. For the block types: output.weight (and token_embd.weight when
// `tied_output`, no output.weight) -> Q6_K unless the target is Q8_0 (Q8_0 when its row is not
// whole blocks of the target); _M mixes: attn_v / attn_qkv and ffn_down -> Q6_K on the first and
// last eighth of the layers and every third layer between; Q4_K_S: attn_v of layers 0-3 and
// ffn_down of the first eighth -> Q5_K. A row that is not a whole number of the chosen type's
// blocks falls back as llama-quantize does: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
// Q2_K / Q3_K -> Q4_0, IQ4_XS -> IQ4_NL, then F16.
model_format::TensorType choose_tensor_type(const QuantTarget& target, std::string_view name,
                                            int64_t row_length, int n_dims, int layer, int n_layers,
                                            bool tied_output = false);
// llama.cpp's general.file_type number for a target (informational metadata).
uint32_t file_type_of(const QuantTarget& target);

struct SynthOptions {
  // llama | qwen2 | qwen3 | smollm3 | gemma2 | gemma3 | phi3 | bert | nomic-bert (encoders)
  std::string arch = "llama";
  int64_t n_embd = 256;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t head_dim = 0;  // 0: n_embd / n_head
  int64_t n_ff = 512;
  int64_t n_ctx = 512;
  int64_t n_vocab = 0;           // 0: the vocabulary's size; larger pads with unused tokens
  double rope_theta = 0;         // 0: 10000 for llama, 1000000 for qwen2/qwen3
  double rms_eps = 0;            // 0: 1e-5 for llama, 1e-6 for qwen2/qwen3; bert: LayerNorm 1e-12
  std::string pooling = "mean";  // bert: mean | cls (bert.pooling_type 1 | 2)
  bool tied_output = false;      // no output.weight: the token embedding is reused (gemma2: always)
  // gemma2 / gemma3: attention.sliding_window (0: 4096 for gemma2, 512 for gemma3, their real
  // models' windows); every sliding_window_pattern-th layer is global (gemma2 2, gemma3 6, not
  // written: llama.cpp's defaults, as the converter leaves them).
  int64_t sliding_window = 0;
  // rope.dimension_count: rotated dimensions per head (0: head_dim; less is partial rotary).
  int64_t rope_dim = 0;
  // phi3: > 0 makes a LongRoPE model extended from this original context to n_ctx (short and
  // long factors, rope.scaling.attn_factor), as the converter writes Phi-3 128k models.
  int64_t longrope_orig_ctx = 0;
  std::string type = "F16";  // a QuantTarget name
  std::string vocab_from;    // copy tokenizer.* metadata from this GGUF file
  // A token (its text in the vocabulary) the model prefers at every position, far above the
  // others: every token embedding gets a constant in dimension 0 and only this token's output
  // row reads it. For an agent's tests on random weights: "<tool_call>" makes a model whose
  // constrained answers open a tool call under tool_choice auto. Needs an untied output.
  std::string favor_token;
  uint64_t seed = 1;
  std::string name = "ferry-synth";
  // Called after each tensor is made with (tensors made, tensors in all); may be empty.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Named shapes for benchmarks: "smollm2-360m" (hidden 960, 32 layers, 15 heads, 5 kv heads,
// ffn 2560, vocab 49152, tied), "tiny" (the defaults); encoders (arch bert, 512 positions,
// vocab 30522): "bge-small" (hidden 384, 12 layers, 12 heads, ffn 1536, cls pooling) and
// "all-minilm-l6" (the same with 6 layers, mean pooling). Returns false for an unknown name.
bool apply_synth_preset(std::string_view preset, SynthOptions& options);

// Builds the model in memory (weights deterministic in the seed) / writes it to a file.
Result<gguf::GgufWriter> build_synth_model(const SynthOptions& options);
Status write_synth_model(const SynthOptions& options, const std::string& out_path);

// Requantizes every matrix of `in_path` to `target` (from any type ferry runs), copying the
// metadata and the 1-D tensors; sets general.file_type. pool may be null (one thread).
// `progress`, when given, is called after each tensor with (input bytes done, input bytes).
Status quantize_model(const std::string& in_path, const std::string& out_path,
                      const QuantTarget& target, kernels::ThreadPool* pool,
                      const std::function<void(uint64_t done, uint64_t total)>& progress = {});

}  // namespace ferry::model_tools
