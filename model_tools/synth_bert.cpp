// `ferry model synth --arch bert`: a BERT encoder (bge, MiniLM) with random weights, the
// tensor names and metadata llama.cpp's converter writes for BertModel, and a WordPiece
// vocabulary in GGUF's spelling ("▁" before word starts, continuations bare).
#include <cmath>
#include <functional>
#include <random>
#include <set>

#include "gguf/gguf_reader.h"
#include "model_tools/synth_internal.h"

namespace ferry::model_tools {
namespace {

using gguf::GgufWriter;
using gguf::Value;
using model_format::TensorType;

const std::string kWordStart = "\xE2\x96\x81";

// Words the built-in vocabulary holds whole; other words are cut into the pieces below.
constexpr std::string_view kWords =
    "a an and are as at be by can do for from has have he her his how i if in is it its me my "
    "no not of on or our she so that the their them there they this to up was we what when "
    "where which who why will with you your embedding embeddings vector vectors search query "
    "document documents sentence sentences model models text similar similarity meaning cat "
    "cats dog dogs sat mat weather today sunny rain city paris france capital question answer "
    "small large fast slow cheap server local engine token tokens hello world test";
constexpr std::string_view kPieces =
    "s es ed ing er ers ly tion tions ment ness able al ic ical ize ized ous ive est ful less "
    "ity un re in de pre ex";

struct BertVocab {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
};

// BERT's layout: [PAD] 0, [unused0..98], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, then
// characters (word starts and continuations), words and pieces; padded to n_vocab.
BertVocab builtin_bert_vocab(int64_t n_vocab) {
  BertVocab v;
  std::set<std::string> seen;
  const auto add = [&](std::string t, int64_t type) {
    if (!seen.insert(t).second) return;
    v.tokens.push_back(std::move(t));
    v.types.push_back(type);
  };
  add("[PAD]", 3);
  for (int i = 0; i < 99; ++i) add(kWordStart + "[unused" + std::to_string(i) + "]", 1);
  for (const char* s : {"[UNK]", "[CLS]", "[SEP]", "[MASK]"}) add(s, 3);
  for (int c = 0x21; c < 0x7F; ++c) {
    if (c >= 'A' && c <= 'Z') continue;  // the vocabulary is lowercase
    add(kWordStart + std::string(1, static_cast<char>(c)), 1);
    if (std::isalnum(c)) add(std::string(1, static_cast<char>(c)), 1);
  }
  const auto each_word = [](std::string_view list, const std::function<void(std::string)>& fn) {
    for (size_t pos = 0; pos < list.size();) {
      const size_t end = std::min(list.find(' ', pos), list.size());
      fn(std::string(list.substr(pos, end - pos)));
      pos = end + 1;
    }
  };
  each_word(kWords, [&](std::string w) { add(kWordStart + w, 1); });
  each_word(kPieces, [&](std::string p) { add(std::move(p), 1); });
  for (int64_t k = 99; static_cast<int64_t>(v.tokens.size()) < n_vocab; ++k)
    add(kWordStart + "[unused" + std::to_string(k) + "]", 1);
  return v;
}

Value u32(int64_t v) {
  return Value::u32(static_cast<uint32_t>(v));
}

// The vocabulary (built in, or copied from o.vocab_from's tokenizer.* keys); its size.
Result<int64_t> set_bert_vocab(GgufWriter& w, const SynthOptions& o) {
  if (!o.vocab_from.empty()) {
    auto src = gguf::GgufFile::open(o.vocab_from);
    if (!src) return src.error();
    if ((*src)->get_string("tokenizer.ggml.model").value_or("") != "bert")
      return Error::make(ErrorCode::kInvalidRequest,
                         o.vocab_from + ": not a WordPiece (tokenizer.ggml.model bert) vocabulary");
    for (const auto& [key, value] : (*src)->metadata()) {
      if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
    }
    const Value* tokens = (*src)->find("tokenizer.ggml.tokens");
    return static_cast<int64_t>(tokens ? tokens->strings.size() : 0);
  }
  BertVocab v = builtin_bert_vocab(o.n_vocab);
  const auto n = static_cast<int64_t>(v.tokens.size());
  w.set("tokenizer.ggml.model", Value::string("bert"));
  w.set("tokenizer.ggml.pre", Value::string("default"));
  w.set("tokenizer.ggml.tokens", Value::string_array(std::move(v.tokens)));
  w.set("tokenizer.ggml.token_type", Value::i32_array(std::move(v.types)));
  w.set("tokenizer.ggml.token_type_count", u32(2));
  w.set("tokenizer.ggml.bos_token_id", u32(101));  // [CLS], as the converter maps cls to bos
  w.set("tokenizer.ggml.eos_token_id", u32(102));  // [SEP]
  w.set("tokenizer.ggml.unknown_token_id", u32(100));
  w.set("tokenizer.ggml.seperator_token_id", u32(102));
  w.set("tokenizer.ggml.padding_token_id", u32(0));
  w.set("tokenizer.ggml.cls_token_id", u32(101));
  w.set("tokenizer.ggml.mask_token_id", u32(103));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
  w.set("tokenizer.ggml.add_eos_token", Value::boolean(true));
  return n;
}

void set_bert_hparams(GgufWriter& w, const SynthOptions& o, const QuantTarget& target) {
  const std::string a = o.arch;  // bert | nomic-bert
  w.set("general.architecture", Value::string(a));
  w.set("general.name", Value::string(o.name));
  w.set("general.file_type", u32(file_type_of(target)));
  w.set("general.quantization_version", u32(2));
  w.set(a + ".context_length", u32(o.n_ctx));
  w.set(a + ".embedding_length", u32(o.n_embd));
  w.set(a + ".feed_forward_length", u32(o.n_ff));
  w.set(a + ".block_count", u32(o.n_layer));
  w.set(a + ".attention.head_count", u32(o.n_head));
  w.set(a + ".attention.layer_norm_epsilon",
        Value::f32(static_cast<float>(o.rms_eps > 0 ? o.rms_eps : 1e-12)));
  w.set(a + ".attention.causal", Value::boolean(false));
  w.set(a + ".pooling_type", u32(o.pooling == "cls" ? 2 : 1));
  if (a == "nomic-bert") {
    w.set(a + ".rope.freq_base",
          Value::f32(static_cast<float>(o.rope_theta > 0 ? o.rope_theta : 1000)));
  }
}

Status add_bert_weights(GgufWriter& w, const SynthOptions& o, const QuantTarget& target,
                        int64_t n_vocab) {
  std::mt19937_64 rng(o.seed);
  const int n_layers = static_cast<int>(o.n_layer);
  const bool nomic = o.arch == "nomic-bert";
  const uint64_t n_tensors = (nomic ? 4 : 5) + static_cast<uint64_t>(n_layers) * (nomic ? 9 : 16);
  uint64_t made = 0;
  Status status;
  // ne0 = row length; ne1 = rows (0: a vector).
  const auto add = [&](const std::string& name, int64_t ne0, int64_t ne1, double mean,
                       double stddev) {
    if (!status) return;
    if (o.progress) o.progress(made++, n_tensors);
    std::normal_distribution<float> dist(static_cast<float>(mean), static_cast<float>(stddev));
    std::vector<float> values(static_cast<size_t>(ne0 * std::max<int64_t>(ne1, 1)));
    for (float& x : values) x = dist(rng);
    const int n_dims = ne1 > 0 ? 2 : 1;
    // choose_tensor_type keeps the position and token-type embeddings F32, as llama.cpp's
    // converter does (llama.cpp adds the type row to F32 activations, and refuses F16 there).
    const int layer = name.starts_with("blk.") ? std::stoi(name.substr(4)) : -1;
    const TensorType type = choose_tensor_type(target, name, ne0, n_dims, layer, n_layers);
    std::vector<int64_t> shape{ne0};
    if (ne1 > 0) shape.push_back(ne1);
    status = w.add_tensor(name, type, std::move(shape), encode(type, values, ne0));
  };
  const int64_t e = o.n_embd;
  const double in_scale = 1.0 / std::sqrt(static_cast<double>(e));
  add("token_embd.weight", e, n_vocab, 0.0, 1.0);
  add("token_types.weight", e, 2, 0.0, 0.1);
  if (!nomic) add("position_embd.weight", e, o.n_ctx, 0.0, 0.5);
  add("token_embd_norm.weight", e, 0, 1.0, 0.1);
  add("token_embd_norm.bias", e, 0, 0.0, 0.1);
  for (int i = 0; i < n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    if (nomic) {  // fused q/k/v, SwiGLU, no biases (as nomic-embed-text's converter writes)
      add(p + "attn_qkv.weight", e, 3 * e, 0.0, in_scale);
      add(p + "attn_output.weight", e, e, 0.0, in_scale);
    } else {
      for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"}) {
        add(p + m + ".weight", e, e, 0.0, in_scale);
        add(p + m + ".bias", e, 0, 0.0, 0.1);
      }
    }
    add(p + "attn_output_norm.weight", e, 0, 1.0, 0.1);
    add(p + "attn_output_norm.bias", e, 0, 0.0, 0.1);
    add(p + "ffn_up.weight", e, o.n_ff, 0.0, in_scale);
    if (nomic) add(p + "ffn_gate.weight", e, o.n_ff, 0.0, in_scale);
    if (!nomic) add(p + "ffn_up.bias", o.n_ff, 0, 0.0, 0.1);
    add(p + "ffn_down.weight", o.n_ff, e, 0.0, 0.5 / std::sqrt(static_cast<double>(o.n_ff)));
    if (!nomic) add(p + "ffn_down.bias", e, 0, 0.0, 0.1);
    add(p + "layer_output_norm.weight", e, 0, 1.0, 0.1);
    add(p + "layer_output_norm.bias", e, 0, 0.0, 0.1);
  }
  if (!status) return status.error();
  if (o.progress) o.progress(made, n_tensors);
  return {};
}

}  // namespace

bool apply_bert_preset(std::string_view preset, SynthOptions& o) {
  if (preset != "bge-small" && preset != "all-minilm-l6") return false;
  const bool bge = preset == "bge-small";
  o.arch = "bert";
  o.n_embd = 384;
  o.n_layer = bge ? 12 : 6;
  o.n_head = 12;
  o.n_head_kv = 12;
  o.head_dim = 0;
  o.n_ff = 1536;
  o.n_ctx = 512;
  o.n_vocab = 30522;
  o.pooling = bge ? "cls" : "mean";
  o.name = bge ? "ferry-synth-bge-small" : "ferry-synth-all-minilm-l6";
  return true;
}

Result<GgufWriter> build_synth_bert(const SynthOptions& o) {
  const auto target = parse_quant_target(o.type);
  if (!target) return Error::make(ErrorCode::kInvalidRequest, "unknown type '" + o.type + "'");
  if (o.n_embd <= 0 || o.n_layer <= 0 || o.n_head <= 0 || o.n_ff <= 0 || o.n_ctx <= 0 ||
      o.n_embd % o.n_head != 0 || o.n_embd > (1 << 16) || o.n_ff > (1 << 18) || o.n_layer > 512 ||
      o.n_ctx > (1 << 16)) {
    return Error::make(ErrorCode::kInvalidRequest,
                       "bad shape: sizes must be positive and n_head divide n_embd");
  }
  if (o.pooling != "mean" && o.pooling != "cls") {
    return Error::make(ErrorCode::kInvalidRequest,
                       "--pooling must be mean or cls, got '" + o.pooling + "'");
  }
  GgufWriter w;
  set_bert_hparams(w, o, *target);
  auto n_vocab = set_bert_vocab(w, o);
  if (!n_vocab) return n_vocab.error();
  if (*n_vocab <= 103) {
    return Error::make(ErrorCode::kInvalidRequest,
                       "a bert vocabulary needs BERT's special tokens (ids 0..103)");
  }
  if (Status s = add_bert_weights(w, o, *target, *n_vocab); !s) return s.error();
  return w;
}

}  // namespace ferry::model_tools
