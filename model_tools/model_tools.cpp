#include "model_tools/model_tools.h"

#include "model_tools/synth_internal.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "gguf/gguf_reader.h"
#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/thread_pool.h"

namespace ferry::model_tools {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;
using gguf::TensorInfo;
using gguf::Value;
using model_format::TensorType;

Error invalid(std::string message) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message));
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool fits(TensorType type, int64_t row_length) {
  return row_length % model_format::block_elems(type) == 0;
}

// Layer index from "blk.N.xxx", or -1.
int layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int v = 0;
  size_t i = 4;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) {
    v = v * 10 + (name[i] - '0');
  }
  return i > 4 ? v : -1;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// ---------------------------------------------------------------- built-in vocabulary

// GPT-2's byte-to-unicode mapping: printable bytes map to themselves, the rest to U+0100+.
std::vector<std::string> byte_symbols() {
  std::vector<int> cps(256, -1);
  for (int b = 0; b < 256; ++b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) cps[b] = b;
  }
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    if (cps[b] < 0) cps[b] = next++;
  }
  std::vector<std::string> out(256);
  for (int b = 0; b < 256; ++b) {
    const int cp = cps[b];
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out[b] = s;
  }
  return out;
}

constexpr std::string_view kTrainingText =
    "The quick brown fox jumps over the lazy dog. A small model answers cheap requests on the "
    "CPU, in the same process, with no server to run beside it. Hello, world! How are you "
    "today? I am fine, thank you. What is the capital of France? The capital of France is "
    "Paris. Write a short poem about the sea and the sky. Once upon a time there was a little "
    "girl who lived in a village near the forest. The user asked a question and the assistant "
    "gave an answer. This is a test of the tokenizer and the engine. Numbers: 0 1 2 3 4 5 6 7 "
    "8 9 10 42 100 2024. def main(): return print(\"hello\") if x == 1 else None";

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  std::vector<std::string> merges;
};

// A byte-level BPE vocabulary learned from kTrainingText: 256 byte tokens, `n_merges` merges,
// and ChatML special tokens.
Vocab builtin_vocab(int n_merges) {
  const auto sym = byte_symbols();
  Vocab v;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(sym[b]);
    v.types.push_back(1);
  }
  // Words as symbol sequences; a space joins the word that follows it (GPT-2 style).
  std::vector<std::vector<std::string>> words;
  std::vector<std::string> cur;
  for (char c : kTrainingText) {
    const auto b = static_cast<unsigned char>(c);
    if (c == ' ' && !cur.empty()) {
      words.push_back(cur);
      cur.clear();
    }
    cur.push_back(sym[b]);
  }
  if (!cur.empty()) words.push_back(cur);
  std::set<std::string> known(v.tokens.begin(), v.tokens.end());
  for (int m = 0; m < n_merges; ++m) {
    std::map<std::pair<std::string, std::string>, int> counts;
    for (const auto& w : words) {
      for (size_t i = 0; i + 1 < w.size(); ++i) ++counts[{w[i], w[i + 1]}];
    }
    std::pair<std::string, std::string> best;
    int best_count = 1;
    for (const auto& [pair, count] : counts) {
      if (count > best_count) {
        best = pair;
        best_count = count;
      }
    }
    if (best_count < 2) break;
    const std::string merged = best.first + best.second;
    v.merges.push_back(best.first + " " + best.second);
    if (known.insert(merged).second) {
      v.tokens.push_back(merged);
      v.types.push_back(1);
    }
    for (auto& w : words) {
      std::vector<std::string> out;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == best.first && w[i + 1] == best.second) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(w[i]);
        }
      }
      w = std::move(out);
    }
  }
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.emplace_back(special);
    v.types.push_back(3);  // control
  }
  return v;
}

constexpr std::string_view kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace

// ---------------------------------------------------------------- random tensors

std::vector<uint8_t> encode(TensorType type, const std::vector<float>& values, int64_t row_length) {
  const auto* k = kernels::kernels_for(type);
  const int64_t rows = static_cast<int64_t>(values.size()) / row_length;
  const size_t rb = static_cast<size_t>(model_format::row_bytes(type, row_length).value());
  std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    k->from_float(values.data() + r * row_length, out.data() + static_cast<size_t>(r) * rb,
                  row_length);
  }
  return out;
}

std::optional<QuantTarget> parse_quant_target(std::string_view name) {
  const std::string u = upper(name);
  QuantTarget t;
  t.name = u;
  if (u == "Q4_K_M" || u == "Q5_K_M") {
    t.base = u == "Q4_K_M" ? TensorType::kQ4_K : TensorType::kQ5_K;
    t.mix_m = true;
    return t;
  }
  if (u == "Q4_K_S" || u == "Q5_K_S") {
    t.base = u == "Q4_K_S" ? TensorType::kQ4_K : TensorType::kQ5_K;
    return t;
  }
  const auto type = model_format::tensor_type_from_name(u);
  if (!type || !model_format::tensor_type_runs(*type)) return std::nullopt;
  t.base = *type;
  return t;
}

namespace {

bool is_block_type(TensorType type) {
  return model_format::block_elems(type) > 1;
}

// llama-quantize's fallback for a row length that is not a whole number of the type's blocks:
// the 256-element types step down to a 32-element type of about the same bits, and a row that
// still does not fit is stored as F16 (llama.cpp's tensor_type_fallback).
TensorType fallback_type(TensorType type, int64_t row_length) {
  if (fits(type, row_length)) return type;
  switch (type) {
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
      type = TensorType::kQ4_0;
      break;
    case TensorType::kQ4_K:
      type = TensorType::kQ5_0;
      break;
    case TensorType::kQ5_K:
      type = TensorType::kQ5_1;
      break;
    case TensorType::kQ6_K:
      type = TensorType::kQ8_0;
      break;
    case TensorType::kIQ4_XS:
      type = TensorType::kIQ4_NL;
      break;
    default:
      break;
  }
  return fits(type, row_length) ? type : TensorType::kF16;
}

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

}  // namespace

// The rules of llama.cpp's llama_tensor_get_type (src/llama-quant.cpp) for the mixes ferry
// writes, without an importance matrix; the counters it keeps per tensor kind (i_attention_wv,
// i_ffn_down) are the layer index for files with one such tensor per layer, in order.
TensorType choose_tensor_type(const QuantTarget& target, std::string_view name, int64_t row_length,
                              int n_dims, int layer, int n_layers, bool tied_output) {
  if (n_dims < 2) return TensorType::kF32;
  // BERT's position and token-type embeddings stay F32 (llama.cpp's converter and quantizer).
  if (name == "position_embd.weight" || name == "token_types.weight") return TensorType::kF32;
  TensorType type = target.base;
  if (!is_block_type(type)) return type;  // F32 / F16 / BF16: every matrix as it is
  const bool more_bits = n_layers > 0 && (layer < n_layers / 8 || layer >= 7 * n_layers / 8 ||
                                          (layer - n_layers / 8) % 3 == 2);
  const bool k_s = target.name == "Q4_K_S";
  if (name == "output.weight" || (tied_output && name == "token_embd.weight")) {
    if (!fits(type, row_length)) {
      type = TensorType::kQ8_0;
    } else if (type != TensorType::kQ8_0) {
      type = TensorType::kQ6_K;
    }
  } else if (contains(name, "attn_v.weight") || contains(name, "attn_qkv.weight")) {
    if (target.mix_m && more_bits) type = TensorType::kQ6_K;
    if (k_s && layer >= 0 && layer < 4) type = TensorType::kQ5_K;
  } else if (contains(name, "ffn_down")) {
    if (target.mix_m && more_bits) type = TensorType::kQ6_K;
    if (k_s && layer >= 0 && layer < n_layers / 8) type = TensorType::kQ5_K;
  }
  return fallback_type(type, row_length);
}

uint32_t file_type_of(const QuantTarget& target) {
  if (target.name == "Q4_K_M") return 15;
  if (target.name == "Q5_K_M") return 17;
  switch (target.base) {
    case TensorType::kF32:
      return 0;
    case TensorType::kF16:
      return 1;
    case TensorType::kQ4_0:
      return 2;
    case TensorType::kQ4_1:
      return 3;
    case TensorType::kQ8_0:
      return 7;
    case TensorType::kQ5_0:
      return 8;
    case TensorType::kQ5_1:
      return 9;
    case TensorType::kQ4_K:
      return 14;  // Q4_K_S
    case TensorType::kQ5_K:
      return 16;  // Q5_K_S
    case TensorType::kQ6_K:
      return 18;
    case TensorType::kBF16:
      return 32;
    default:
      return 0;
  }
}

bool apply_synth_preset(std::string_view preset, SynthOptions& o) {
  if (apply_bert_preset(preset, o)) return true;
  if (preset == "tiny") {
    o = SynthOptions{.arch = o.arch, .type = o.type, .vocab_from = o.vocab_from, .seed = o.seed};
    return true;
  }
  if (preset == "smollm2-360m") {
    o.n_embd = 960;
    o.n_layer = 32;
    o.n_head = 15;
    o.n_head_kv = 5;
    o.head_dim = 64;
    o.n_ff = 2560;
    o.n_ctx = 8192;
    o.n_vocab = 49152;
    o.tied_output = true;
    o.rope_theta = 100000;
    o.name = "ferry-synth-smollm2-360m";
    return true;
  }
  return false;
}

namespace {

bool is_gemma(const SynthOptions& o) {
  return o.arch == "gemma2" || o.arch == "gemma3";
}

// Gemma's extra metadata, as convert_hf_to_gguf.py writes it: the window, the local layers'
// RoPE base (gemma3's rope_local_base_freq), gemma2's soft-caps.
void set_gemma_hparams(GgufWriter& w, const SynthOptions& o) {
  const std::string a = o.arch;
  const bool gemma2 = o.arch == "gemma2";
  const int64_t window = o.sliding_window > 0 ? o.sliding_window : (gemma2 ? 4096 : 512);
  w.set(a + ".attention.sliding_window", Value::u32(static_cast<uint32_t>(window)));
  if (gemma2) {
    w.set(a + ".attn_logit_softcapping", Value::f32(50.0f));
    w.set(a + ".final_logit_softcapping", Value::f32(30.0f));
  } else {
    w.set(a + ".rope.freq_base_swa", Value::f32(10000.0f));
  }
}

// Phi-3's extra metadata: the original context LongRoPE extends (the converter writes it always,
// the model's own when there are no factors), its attention factor, and sliding_window 0 (the
// converter writes the HF value; llama.cpp ignores it for phi3).
void set_phi3_hparams(GgufWriter& w, const SynthOptions& o) {
  const int64_t orig = o.longrope_orig_ctx > 0 ? o.longrope_orig_ctx : o.n_ctx;
  w.set("phi3.rope.scaling.original_context_length", Value::u32(static_cast<uint32_t>(orig)));
  w.set("phi3.attention.sliding_window", Value::u32(0));
  if (o.longrope_orig_ctx > 0) {
    const double scale = static_cast<double>(o.n_ctx) / static_cast<double>(orig);
    const double factor =
        scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(orig))) : 1.0;
    w.set("phi3.rope.scaling.attn_factor", Value::f32(static_cast<float>(factor)));
  }
}

// The architecture's hyperparameters as GGUF metadata.
void set_hparams(GgufWriter& w, const SynthOptions& o, const QuantTarget& target,
                 int64_t head_dim) {
  const bool llama_like = o.arch == "llama" || o.arch == "smollm3";
  const double theta =
      o.rope_theta > 0 ? o.rope_theta : (o.arch == "gemma2" || llama_like ? 1e4 : 1e6);
  const double eps = o.rms_eps > 0 ? o.rms_eps : (llama_like ? 1e-5 : 1e-6);
  const std::string a = o.arch;
  w.set("general.architecture", Value::string(a));
  w.set("general.name", Value::string(o.name));
  w.set("general.file_type", Value::u32(file_type_of(target)));
  w.set("general.quantization_version", Value::u32(2));
  w.set(a + ".context_length", Value::u32(static_cast<uint32_t>(o.n_ctx)));
  w.set(a + ".embedding_length", Value::u32(static_cast<uint32_t>(o.n_embd)));
  w.set(a + ".block_count", Value::u32(static_cast<uint32_t>(o.n_layer)));
  w.set(a + ".feed_forward_length", Value::u32(static_cast<uint32_t>(o.n_ff)));
  w.set(a + ".attention.head_count", Value::u32(static_cast<uint32_t>(o.n_head)));
  w.set(a + ".attention.head_count_kv", Value::u32(static_cast<uint32_t>(o.n_head_kv)));
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::f32(static_cast<float>(eps)));
  w.set(a + ".rope.freq_base", Value::f32(static_cast<float>(theta)));
  if (!is_gemma(o)) {  // the gemma converters leave it to llama.cpp (head_dim)
    const int64_t rope_dim = o.rope_dim > 0 ? o.rope_dim : head_dim;
    w.set(a + ".rope.dimension_count", Value::u32(static_cast<uint32_t>(rope_dim)));
  }
  if (o.arch == "qwen3" || is_gemma(o) || head_dim * o.n_head != o.n_embd) {
    w.set(a + ".attention.key_length", Value::u32(static_cast<uint32_t>(head_dim)));
    w.set(a + ".attention.value_length", Value::u32(static_cast<uint32_t>(head_dim)));
  }
  if (is_gemma(o)) set_gemma_hparams(w, o);
  if (o.arch == "phi3") set_phi3_hparams(w, o);
}

// The id of o.favor_token in a vocabulary's tokens (-1: none asked for).
Result<int64_t> favor_id(const SynthOptions& o, const std::vector<std::string>& tokens) {
  if (o.favor_token.empty()) return int64_t{-1};
  const auto it = std::find(tokens.begin(), tokens.end(), o.favor_token);
  if (it == tokens.end())
    return invalid("--favor: no token '" + o.favor_token + "' in the vocabulary");
  return static_cast<int64_t>(it - tokens.begin());
}

// The vocabulary: copied from another GGUF's tokenizer, or the built-in byte-level one padded
// to o.n_vocab with unused tokens. Its size; `favor` gets o.favor_token's id.
Result<int64_t> set_vocab(GgufWriter& w, const SynthOptions& o, int64_t& favor) {
  int64_t n_vocab = 0;
  if (!o.vocab_from.empty()) {
    auto src = GgufFile::open(o.vocab_from);
    if (!src) return src.error();
    for (const auto& [key, value] : (*src)->metadata()) {
      if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
    }
    const Value* tokens = (*src)->find("tokenizer.ggml.tokens");
    if (!tokens || tokens->strings.empty()) {
      return invalid(o.vocab_from + ": no tokenizer.ggml.tokens to copy");
    }
    n_vocab = static_cast<int64_t>(tokens->strings.size());
    auto id = favor_id(o, tokens->strings);
    if (!id) return id.error();
    favor = *id;
  } else {
    Vocab v = builtin_vocab(240);
    const auto n_real = static_cast<int64_t>(v.tokens.size());
    for (int64_t i = n_real; i < o.n_vocab; ++i) {
      v.tokens.push_back("<|unused_" + std::to_string(i - n_real) + "|>");
      v.types.push_back(5);  // unused
    }
    n_vocab = static_cast<int64_t>(v.tokens.size());
    auto id = favor_id(o, v.tokens);
    if (!id) return id.error();
    favor = *id;
    const auto eot = static_cast<uint32_t>(n_real - 3);
    w.set("tokenizer.ggml.model", Value::string("gpt2"));
    w.set("tokenizer.ggml.pre", Value::string("default"));
    w.set("tokenizer.ggml.tokens", Value::string_array(std::move(v.tokens)));
    w.set("tokenizer.ggml.token_type", Value::i32_array(std::move(v.types)));
    w.set("tokenizer.ggml.merges", Value::string_array(std::move(v.merges)));
    w.set("tokenizer.ggml.bos_token_id", Value::u32(eot));
    w.set("tokenizer.ggml.eos_token_id", Value::u32(eot + 2));  // <|im_end|>
    w.set("tokenizer.ggml.padding_token_id", Value::u32(eot));
    w.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
    w.set("tokenizer.chat_template", Value::string(std::string(kChatMlTemplate)));
  }
  if (o.n_vocab > 0 && o.n_vocab < n_vocab) {
    return invalid("--vocab " + std::to_string(o.n_vocab) + " is smaller than the vocabulary (" +
                   std::to_string(n_vocab) + ")");
  }
  w.set(o.arch + ".vocab_size", Value::u32(static_cast<uint32_t>(n_vocab)));
  return n_vocab;
}

// Makes one tensor: name, {ne0 (row length), ne1 (rows; 0: 1-D)}, the mean and deviation of
// its random values, and an edit of the values (row-major, rows of ne0) before encoding.
using EditFn = std::function<void(std::vector<float>&)>;
using AddFn =
    std::function<void(const std::string&, int64_t, int64_t, double, double, const EditFn&)>;

bool has_qk_norm(const SynthOptions& o) {
  return o.arch == "qwen3" || o.arch == "gemma3";
}

uint64_t tensors_per_layer(const SynthOptions& o) {
  return 9 + (o.arch == "qwen2" ? 3 : 0) + (has_qk_norm(o) ? 2 : 0) + (is_gemma(o) ? 2 : 0) -
         (o.arch == "phi3" ? 3 : 0);
}

// Layer i's tensors as the architecture's converter names them: qwen2's biases, qwen3's and
// gemma3's head norms, gemma's post norms, phi3's fused attn_qkv and [gate; up].
void add_layer(const AddFn& add, const SynthOptions& o, int i, int64_t head_dim) {
  const int64_t q_dim = o.n_head * head_dim, kv_dim = o.n_head_kv * head_dim;
  const double in_scale = 1.0 / std::sqrt(static_cast<double>(o.n_embd));
  const bool phi3 = o.arch == "phi3";
  const std::string p = "blk." + std::to_string(i) + ".";
  add(p + "attn_norm.weight", o.n_embd, 0, 1.0, 0.1, {});
  if (phi3) {
    add(p + "attn_qkv.weight", o.n_embd, q_dim + 2 * kv_dim, 0.0, in_scale, {});
  } else {
    add(p + "attn_q.weight", o.n_embd, q_dim, 0.0, in_scale, {});
    add(p + "attn_k.weight", o.n_embd, kv_dim, 0.0, in_scale, {});
    add(p + "attn_v.weight", o.n_embd, kv_dim, 0.0, in_scale, {});
  }
  if (o.arch == "qwen2") {
    add(p + "attn_q.bias", q_dim, 0, 0.0, 0.1, {});
    add(p + "attn_k.bias", kv_dim, 0, 0.0, 0.1, {});
    add(p + "attn_v.bias", kv_dim, 0, 0.0, 0.1, {});
  }
  if (has_qk_norm(o)) {
    add(p + "attn_q_norm.weight", head_dim, 0, 1.0, 0.1, {});
    add(p + "attn_k_norm.weight", head_dim, 0, 1.0, 0.1, {});
  }
  add(p + "attn_output.weight", q_dim, o.n_embd, 0.0, 0.5 / std::sqrt(static_cast<double>(q_dim)),
      {});
  if (is_gemma(o)) add(p + "post_attention_norm.weight", o.n_embd, 0, 1.0, 0.1, {});
  add(p + "ffn_norm.weight", o.n_embd, 0, 1.0, 0.1, {});
  if (phi3) {  // gate and up fused, the gate's rows first
    add(p + "ffn_up.weight", o.n_embd, 2 * o.n_ff, 0.0, in_scale, {});
  } else {
    add(p + "ffn_gate.weight", o.n_embd, o.n_ff, 0.0, in_scale, {});
    add(p + "ffn_up.weight", o.n_embd, o.n_ff, 0.0, in_scale, {});
  }
  add(p + "ffn_down.weight", o.n_ff, o.n_embd, 0.0, 0.5 / std::sqrt(static_cast<double>(o.n_ff)),
      {});
  if (is_gemma(o)) add(p + "post_ffw_norm.weight", o.n_embd, 0, 1.0, 0.1, {});
}

// LongRoPE's per-frequency factors (phi3): >= 1 and growing, to 8 (long) and 1.5 (short).
void add_longrope(const AddFn& add, const SynthOptions& o, int64_t head_dim) {
  const int64_t n_freq = (o.rope_dim > 0 ? o.rope_dim : head_dim) / 2;
  auto ramp = [n_freq](double top) {
    return [n_freq, top](std::vector<float>& v) {
      const auto steps = static_cast<double>(std::max<int64_t>(n_freq - 1, 1));
      for (int64_t i = 0; i < n_freq; ++i) {
        v[static_cast<size_t>(i)] =
            static_cast<float>(1.0 + (top - 1.0) * static_cast<double>(i) / steps);
      }
    };
  };
  add("rope_factors_long.weight", n_freq, 0, 1.0, 0.1, ramp(8.0));
  add("rope_factors_short.weight", n_freq, 0, 1.0, 0.1, ramp(1.5));
}

// Random weights for every tensor of the architecture, each in the type the target picks for it.
Status add_weights(GgufWriter& w, const SynthOptions& o, const QuantTarget& target,
                   int64_t head_dim, int64_t n_vocab, int64_t favor) {
  std::mt19937_64 rng(o.seed);
  auto normal = [&](int64_t count, double mean, double stddev) {
    std::normal_distribution<float> dist(static_cast<float>(mean), static_cast<float>(stddev));
    std::vector<float> v(static_cast<size_t>(count));
    for (auto& x : v) x = dist(rng);
    return v;
  };
  const int n_layers = static_cast<int>(o.n_layer);
  Status status;
  const uint64_t n_tensors = 2 + static_cast<uint64_t>(n_layers) * tensors_per_layer(o) +
                             (o.tied_output ? 0 : 1) + (o.longrope_orig_ctx > 0 ? 2 : 0);
  uint64_t made = 0;
  // shape = {ne0 (row length), ne1 (rows)}; 1-D when rows == 0.
  // `edit` may change the values (row-major, rows of ne0) before they are encoded.
  const AddFn add = [&](const std::string& name, int64_t ne0, int64_t ne1, double mean,
                        double stddev, const EditFn& edit) {
    if (!status) return;
    if (o.progress) o.progress(made, n_tensors);
    ++made;
    const int n_dims = ne1 > 0 ? 2 : 1;
    auto values = normal(ne0 * std::max<int64_t>(ne1, 1), mean, stddev);
    if (edit) edit(values);
    const TensorType type =
        choose_tensor_type(target, name, ne0, n_dims, layer_of(name), n_layers, o.tied_output);
    std::vector<int64_t> shape{ne0};
    if (ne1 > 0) shape.push_back(ne1);
    status = w.add_tensor(name, type, std::move(shape), encode(type, values, ne0));
  };
  const double in_scale = 1.0 / std::sqrt(static_cast<double>(o.n_embd));
  // The favored token: dimension 0 of every embedding carries a constant that survives the
  // layers' random updates and the final norm, and only that token's output row reads it (the
  // other rows' dimension 0 is zero), so its logit stands far above the others' everywhere.
  const auto embd = static_cast<size_t>(o.n_embd);
  auto favor_embd = [&](std::vector<float>& v) {
    for (size_t i = 0; i < v.size(); i += embd) v[i] += 8.0F;
  };
  auto favor_output = [&](std::vector<float>& v) {
    for (size_t i = 0, row = 0; i < v.size(); i += embd, ++row) {
      v[i] = static_cast<int64_t>(row) == favor ? 4.0F : 0.0F;
    }
  };
  const bool favoring = favor >= 0;
  add("token_embd.weight", o.n_embd, n_vocab, 0.0, 1.0,
      favoring ? std::function<void(std::vector<float>&)>(favor_embd) : nullptr);
  for (int i = 0; i < n_layers; ++i) add_layer(add, o, i, head_dim);
  add("output_norm.weight", o.n_embd, 0, 1.0, 0.1, {});
  if (o.longrope_orig_ctx > 0) add_longrope(add, o, head_dim);
  if (!o.tied_output) {
    add("output.weight", o.n_embd, n_vocab, 0.0, 2.0 * in_scale,
        favoring ? std::function<void(std::vector<float>&)>(favor_output) : nullptr);
  }
  if (!status) return status.error();
  if (o.progress) o.progress(made, n_tensors);
  return {};
}

}  // namespace

Result<GgufWriter> build_synth_model(const SynthOptions& o) {
  if (o.arch == "bert" || o.arch == "nomic-bert") return build_synth_bert(o);
  if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3" && o.arch != "smollm3" &&
      o.arch != "phi3" && !is_gemma(o)) {
    return invalid("unsupported architecture '" + o.arch +
                   "' (llama, qwen2, qwen3, smollm3, gemma2, gemma3, phi3, bert, nomic-bert)");
  }
  if (o.rope_dim < 0 || o.rope_dim % 2 != 0 || (o.rope_dim > 0 && is_gemma(o))) {
    return invalid("--rope-dim must be even (and is not written for gemma)");
  }
  if (o.longrope_orig_ctx != 0 && (o.arch != "phi3" || o.longrope_orig_ctx < 0)) {
    return invalid("LongRoPE factors are for phi3, with a positive original context");
  }
  if (o.arch == "gemma2" && !o.tied_output) {
    return invalid("gemma2 ties its output to the token embedding: pass --tied");
  }
  if (o.sliding_window < 0) return invalid("the sliding window must not be negative");
  const auto target = parse_quant_target(o.type);
  if (!target) return invalid("unknown or unsupported type '" + o.type + "'");
  const int64_t head_dim = o.head_dim > 0 ? o.head_dim : (o.n_head > 0 ? o.n_embd / o.n_head : 0);
  if (o.n_embd <= 0 || o.n_layer <= 0 || o.n_head <= 0 || o.n_head_kv <= 0 || o.n_ff <= 0 ||
      head_dim <= 0 || o.n_ctx <= 0 || o.n_head % o.n_head_kv != 0 || o.n_embd > (1 << 16) ||
      o.n_ff > (1 << 18) || o.n_layer > 512 || head_dim % 2 != 0 || o.rope_dim > head_dim) {
    return invalid(
        "bad shape: sizes must be positive, n_head a multiple of n_head_kv, "
        "head_dim even");
  }
  if (!o.favor_token.empty() && o.tied_output) {
    return invalid("--favor needs an untied output (its row reads what no embedding row may)");
  }
  GgufWriter w;
  set_hparams(w, o, *target, head_dim);
  int64_t favor = -1;
  auto n_vocab = set_vocab(w, o, favor);
  if (!n_vocab) return n_vocab.error();
  if (Status s = add_weights(w, o, *target, head_dim, *n_vocab, favor); !s) return s.error();
  return w;
}

Status write_synth_model(const SynthOptions& options, const std::string& out_path) {
  auto w = build_synth_model(options);
  if (!w) return w.error();
  return w->write_file(out_path);
}

Status quantize_model(const std::string& in_path, const std::string& out_path,
                      const QuantTarget& target, kernels::ThreadPool* pool,
                      const std::function<void(uint64_t done, uint64_t total)>& progress) {
  auto in = GgufFile::open(in_path);
  if (!in) return in.error();
  const GgufFile& src = **in;
  const std::string arch(src.architecture());
  const int n_layers = static_cast<int>(src.get_uint(arch + ".block_count").value_or(0));
  GgufWriter w;
  for (const auto& [key, value] : src.metadata()) w.set(key, value);
  w.set("general.file_type", Value::u32(file_type_of(target)));
  w.set("general.quantization_version", Value::u32(2));
  uint64_t bytes_in = 0;
  uint64_t bytes_done = 0;
  bool tied = true;  // as llama.cpp: the token embedding is the output unless output.weight exists
  for (const TensorInfo& t : src.tensors()) {
    bytes_in += t.n_bytes;
    if (t.name == "output.weight") tied = false;
  }
  for (const TensorInfo& t : src.tensors()) {
    if (progress) progress(bytes_done, bytes_in);
    bytes_done += t.n_bytes;
    const int n_dims = static_cast<int>(t.shape.size());
    const bool matrix = n_dims >= 2 && ends_with(t.name, ".weight");
    const TensorType type = matrix ? choose_tensor_type(target, t.name, t.shape[0], n_dims,
                                                        layer_of(t.name), n_layers, tied)
                                   : t.type;
    std::vector<uint8_t> bytes;
    if (type == t.type) {
      bytes.assign(t.data, t.data + t.n_bytes);
    } else {
      const auto* from = kernels::kernels_for(t.type);
      const auto* to = kernels::kernels_for(type);
      if (!from) {
        return invalid(in_path + ": tensor '" + t.name + "' has type " +
                       std::string(model_format::tensor_type_name(t.type)) +
                       ", which ferry cannot read");
      }
      const int64_t ne0 = t.shape[0];
      const int64_t rows = ne0 == 0 ? 0 : static_cast<int64_t>(t.n_elements) / ne0;
      const size_t in_rb = static_cast<size_t>(model_format::row_bytes(t.type, ne0).value());
      const size_t out_rb = static_cast<size_t>(model_format::row_bytes(type, ne0).value());
      bytes.resize(out_rb * static_cast<size_t>(rows));
      auto work = [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(ne0));
        for (int64_t r = begin; r < end; ++r) {
          from->to_float(t.data + static_cast<size_t>(r) * in_rb, row.data(), ne0);
          to->from_float(row.data(), bytes.data() + static_cast<size_t>(r) * out_rb, ne0);
        }
      };
      if (pool) {
        pool->parallel_for(rows, 8, work);
      } else {
        work(0, rows);
      }
    }
    if (Status s = w.add_tensor(t.name, type, t.shape, std::move(bytes)); !s) return s;
  }
  if (progress) progress(bytes_done, bytes_in);
  return w.write_file(out_path);
}

}  // namespace ferry::model_tools
