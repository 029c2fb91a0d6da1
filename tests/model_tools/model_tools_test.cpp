// Synthetic models and requantization: real names and metadata per architecture, sane
// weights, the _M mixes, and a quantize -> read round trip.
#include "model_tools/model_tools.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "gguf/gguf_reader.h"
#include "local_engine/kernels/kernels.h"

namespace ferry::model_tools {
namespace {

using gguf::GgufFile;
using gguf::TensorInfo;
using gguf::Value;
using model_format::TensorType;

std::unique_ptr<GgufFile> build(const SynthOptions& o) {
  auto w = build_synth_model(o);
  EXPECT_TRUE(w) << (w ? "" : w.error().message);
  if (!w) return nullptr;
  const auto bytes = w->to_bytes();
  auto f = GgufFile::from_bytes(bytes.data(), bytes.size(), "synth");
  EXPECT_TRUE(f) << (f ? "" : f.error().message);
  return f ? std::move(*f) : nullptr;
}

std::vector<float> row_floats(const TensorInfo& t, int64_t row) {
  std::vector<float> out(static_cast<size_t>(t.shape[0]));
  const size_t rb = static_cast<size_t>(model_format::row_bytes(t.type, t.shape[0]).value());
  kernels::kernels_for(t.type)->to_float(t.data + static_cast<size_t>(row) * rb, out.data(),
                                         t.shape[0]);
  return out;
}

TEST(Synth, EachArchitectureHasItsNamesAndMetadata) {
  for (std::string arch : {"llama", "qwen2", "qwen3"}) {
    SynthOptions o;
    o.arch = arch;
    o.type = "Q8_0";
    auto f = build(o);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->architecture(), arch);
    EXPECT_EQ(f->get_uint(arch + ".embedding_length"), 256u);
    EXPECT_EQ(f->get_uint(arch + ".block_count"), 2u);
    EXPECT_EQ(f->get_uint(arch + ".attention.head_count"), 4u);
    EXPECT_EQ(f->get_uint(arch + ".attention.head_count_kv"), 2u);
    EXPECT_EQ(f->get_uint(arch + ".feed_forward_length"), 512u);
    EXPECT_TRUE(f->get_float(arch + ".rope.freq_base").has_value());
    EXPECT_TRUE(f->get_float(arch + ".attention.layer_norm_rms_epsilon").has_value());
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
    const Value* tokens = f->find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_GT(tokens->strings.size(), 256u);
    EXPECT_FALSE(f->find("tokenizer.ggml.merges")->strings.empty());
    EXPECT_TRUE(f->get_string("tokenizer.chat_template").has_value());
    const TensorInfo* emb = f->find_tensor("token_embd.weight");
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->shape,
              (std::vector<int64_t>{256, static_cast<int64_t>(tokens->strings.size())}));
    EXPECT_EQ(emb->type, TensorType::kQ8_0);
    EXPECT_EQ(f->find_tensor("blk.1.attn_norm.weight")->type, TensorType::kF32);
    EXPECT_EQ(f->find_tensor("blk.0.attn_k.weight")->shape, (std::vector<int64_t>{256, 128}));
    EXPECT_NE(f->find_tensor("output.weight"), nullptr);
    EXPECT_EQ(f->find_tensor("blk.0.attn_q.bias") != nullptr, arch == "qwen2");
    EXPECT_EQ(f->find_tensor("blk.0.attn_q_norm.weight") != nullptr, arch == "qwen3");
    if (arch == "qwen3") {
      EXPECT_EQ(f->get_uint("qwen3.attention.key_length"), 64u);
    }
  }
}

// The newer architectures' tensors and metadata as llama.cpp's converter writes them.
TEST(Synth, SmolLM3GemmaAndPhi3WriteTheConvertersNamesAndMetadata) {
  SynthOptions o;
  o.type = "F16";
  o.arch = "smollm3";
  auto smol = build(o);
  ASSERT_NE(smol, nullptr);
  EXPECT_EQ(smol->architecture(), "smollm3");
  EXPECT_EQ(smol->get_uint("smollm3.rope.dimension_count"), 64u);
  EXPECT_NE(smol->find_tensor("blk.1.ffn_gate.weight"), nullptr);

  for (std::string arch : {"gemma2", "gemma3"}) {
    o = SynthOptions{};
    o.arch = arch;
    o.tied_output = true;
    auto f = build(o);
    ASSERT_NE(f, nullptr) << arch;
    EXPECT_EQ(f->get_uint(arch + ".attention.sliding_window"), arch == "gemma2" ? 4096u : 512u);
    EXPECT_EQ(f->get_uint(arch + ".attention.key_length"), 64u);
    EXPECT_EQ(f->find(arch + ".rope.dimension_count"), nullptr);  // left to llama.cpp
    EXPECT_EQ(f->find(arch + ".attention.sliding_window_pattern"), nullptr);
    EXPECT_NE(f->find_tensor("blk.1.post_attention_norm.weight"), nullptr);
    EXPECT_NE(f->find_tensor("blk.1.post_ffw_norm.weight"), nullptr);
    EXPECT_EQ(f->find_tensor("blk.0.attn_q_norm.weight") != nullptr, arch == "gemma3");
    EXPECT_EQ(f->get_float(arch + ".final_logit_softcapping").has_value(), arch == "gemma2");
    EXPECT_EQ(f->get_float(arch + ".rope.freq_base_swa").has_value(), arch == "gemma3");
    EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  }

  o = SynthOptions{};
  o.arch = "phi3";
  o.n_ctx = 512;
  o.rope_dim = 32;
  o.longrope_orig_ctx = 128;
  auto phi = build(o);
  ASSERT_NE(phi, nullptr);
  EXPECT_EQ(phi->find_tensor("blk.0.attn_qkv.weight")->shape, (std::vector<int64_t>{256, 512}));
  EXPECT_EQ(phi->find_tensor("blk.0.ffn_up.weight")->shape, (std::vector<int64_t>{256, 1024}));
  EXPECT_EQ(phi->find_tensor("blk.0.ffn_gate.weight"), nullptr);
  EXPECT_EQ(phi->find_tensor("rope_factors_long.weight")->shape, (std::vector<int64_t>{16}));
  EXPECT_NE(phi->find_tensor("rope_factors_short.weight"), nullptr);
  EXPECT_EQ(phi->get_uint("phi3.rope.dimension_count"), 32u);
  EXPECT_EQ(phi->get_uint("phi3.rope.scaling.original_context_length"), 128u);
  // sqrt(1 + ln(512 / 128) / ln(128)), the converter's LongRoPE attention factor
  EXPECT_NEAR(*phi->get_float("phi3.rope.scaling.attn_factor"),
              std::sqrt(1.0 + std::log(4.0) / std::log(128.0)), 1e-6);
}

TEST(Synth, WeightsAreSaneAndSeeded) {
  SynthOptions o;
  o.type = "F32";
  auto a = build(o);
  auto b = build(o);
  o.seed = 2;
  auto c = build(o);
  const auto ra = row_floats(*a->find_tensor("blk.0.ffn_up.weight"), 3);
  EXPECT_EQ(ra, row_floats(*b->find_tensor("blk.0.ffn_up.weight"), 3));
  EXPECT_NE(ra, row_floats(*c->find_tensor("blk.0.ffn_up.weight"), 3));
  double sq = 0;
  for (float v : ra) {
    ASSERT_TRUE(std::isfinite(v));
    sq += v * v;
  }
  const double rms = std::sqrt(sq / static_cast<double>(ra.size()));
  EXPECT_NEAR(rms, 1.0 / 16.0, 0.02);  // 1 / sqrt(n_embd)
}

TEST(Synth, RefusesBadRequests) {
  SynthOptions o;
  o.arch = "gpt2";
  EXPECT_FALSE(build_synth_model(o));
  o = SynthOptions{};
  o.type = "IQ2_XXS";  // a type ferry does not run
  EXPECT_FALSE(build_synth_model(o));
  o = SynthOptions{};
  o.n_head_kv = 3;
  EXPECT_FALSE(build_synth_model(o));
  o = SynthOptions{};
  o.vocab_from = "/nonexistent.gguf";
  EXPECT_FALSE(build_synth_model(o));
  o = SynthOptions{};
  o.arch = "gemma2";  // always tied in llama.cpp
  EXPECT_FALSE(build_synth_model(o));
  o = SynthOptions{};
  o.longrope_orig_ctx = 128;  // LongRoPE is phi3's
  EXPECT_FALSE(build_synth_model(o));
  o = SynthOptions{};
  o.rope_dim = 65;
  EXPECT_FALSE(build_synth_model(o));
}

TEST(Synth, PresetAndPaddedVocabulary) {
  SynthOptions o;
  ASSERT_TRUE(apply_synth_preset("smollm2-360m", o));
  EXPECT_EQ(o.n_embd, 960);
  EXPECT_EQ(o.n_vocab, 49152);
  EXPECT_FALSE(apply_synth_preset("nope", o));
  SynthOptions small;
  small.n_vocab = 1000;
  small.tied_output = true;
  auto f = build(small);
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->strings.size(), 1000u);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
}

TEST(Synth, VocabularyFromSharedFile) {
  const char* shared = std::getenv("FERRY_SHARED_DIR");
  const std::string path =
      std::string(shared ? shared : "../shared") + "/models/llama-2-tiny-random.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto src = GgufFile::open(path);
  ASSERT_TRUE(src);
  SynthOptions o;
  o.vocab_from = path;
  auto f = build(o);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->strings,
            (*src)->find("tokenizer.ggml.tokens")->strings);
  EXPECT_EQ(f->find_tensor("token_embd.weight")->shape[1],
            static_cast<int64_t>((*src)->find("tokenizer.ggml.tokens")->strings.size()));
}

TEST(Quantize, MixesChooseTypesPerTensor) {
  const auto m = parse_quant_target("q4_k_m");
  ASSERT_TRUE(m);
  EXPECT_EQ(choose_tensor_type(*m, "output.weight", 256, 2, -1, 8), TensorType::kQ6_K);
  EXPECT_EQ(choose_tensor_type(*m, "blk.0.attn_v.weight", 256, 2, 0, 8), TensorType::kQ6_K);
  EXPECT_EQ(choose_tensor_type(*m, "blk.1.attn_v.weight", 256, 2, 1, 8), TensorType::kQ4_K);
  EXPECT_EQ(choose_tensor_type(*m, "blk.3.ffn_down.weight", 256, 2, 3, 8), TensorType::kQ6_K);
  EXPECT_EQ(choose_tensor_type(*m, "blk.7.ffn_down.weight", 256, 2, 7, 8), TensorType::kQ6_K);
  EXPECT_EQ(choose_tensor_type(*m, "blk.2.attn_q.weight", 256, 2, 2, 8), TensorType::kQ4_K);
  // Rows that are not whole 256-blocks fall back as llama-quantize does: Q4_K -> Q5_0,
  // Q6_K -> Q8_0; rows that are not whole 32-blocks to F16.
  EXPECT_EQ(choose_tensor_type(*m, "blk.2.attn_q.weight", 960, 2, 2, 8), TensorType::kQ5_0);
  EXPECT_EQ(choose_tensor_type(*m, "blk.0.attn_v.weight", 960, 2, 0, 8), TensorType::kQ8_0);
  EXPECT_EQ(choose_tensor_type(*m, "output.weight", 896, 2, -1, 8), TensorType::kQ8_0);
  EXPECT_EQ(choose_tensor_type(*m, "blk.2.attn_q.weight", 100, 2, 2, 8), TensorType::kF16);
  EXPECT_EQ(choose_tensor_type(*m, "blk.2.attn_norm.weight", 256, 1, 2, 8), TensorType::kF32);
  // A tied token embedding is quantized as the output; an untied one as any matrix.
  EXPECT_EQ(choose_tensor_type(*m, "token_embd.weight", 256, 2, -1, 8, true), TensorType::kQ6_K);
  EXPECT_EQ(choose_tensor_type(*m, "token_embd.weight", 256, 2, -1, 8, false), TensorType::kQ4_K);
  EXPECT_EQ(choose_tensor_type(*m, "token_embd.weight", 896, 2, -1, 8, false), TensorType::kQ5_0);
  const auto m5 = parse_quant_target("Q5_K_M");
  EXPECT_EQ(choose_tensor_type(*m5, "blk.2.attn_q.weight", 896, 2, 2, 8), TensorType::kQ5_1);
  EXPECT_EQ(choose_tensor_type(*m5, "blk.2.attn_v.weight", 896, 2, 2, 8), TensorType::kQ5_1);
  EXPECT_EQ(choose_tensor_type(*m5, "blk.7.ffn_down.weight", 4864, 2, 7, 8), TensorType::kQ6_K);
  // Q4_0 / Q6_K / Q8_0: one type, the output as Q6_K except under Q8_0.
  const auto q4 = parse_quant_target("Q4_0"), q6 = parse_quant_target("Q6_K"),
             q8 = parse_quant_target("Q8_0");
  EXPECT_EQ(choose_tensor_type(*q4, "output.weight", 512, 2, -1, 8), TensorType::kQ6_K);
  EXPECT_EQ(choose_tensor_type(*q4, "output.weight", 896, 2, -1, 8), TensorType::kQ8_0);
  EXPECT_EQ(choose_tensor_type(*q4, "blk.0.attn_v.weight", 896, 2, 0, 8), TensorType::kQ4_0);
  EXPECT_EQ(choose_tensor_type(*q6, "blk.0.ffn_up.weight", 896, 2, 0, 8), TensorType::kQ8_0);
  EXPECT_EQ(choose_tensor_type(*q8, "output.weight", 896, 2, -1, 8), TensorType::kQ8_0);
  EXPECT_EQ(choose_tensor_type(*q8, "blk.0.ffn_up.weight", 100, 2, 0, 8), TensorType::kF16);
  // Q4_K_S: attn_v of layers 0-3 and ffn_down of the first eighth get Q5_K.
  const auto ks = parse_quant_target("Q4_K_S");
  EXPECT_EQ(choose_tensor_type(*ks, "blk.3.attn_v.weight", 512, 2, 3, 16), TensorType::kQ5_K);
  EXPECT_EQ(choose_tensor_type(*ks, "blk.4.attn_v.weight", 512, 2, 4, 16), TensorType::kQ4_K);
  EXPECT_EQ(choose_tensor_type(*ks, "blk.1.ffn_down.weight", 512, 2, 1, 16), TensorType::kQ5_K);
  EXPECT_EQ(choose_tensor_type(*ks, "blk.2.ffn_down.weight", 512, 2, 2, 16), TensorType::kQ4_K);
  EXPECT_FALSE(parse_quant_target("Q3_K_M"));   // a mix ferry does not write
  EXPECT_FALSE(parse_quant_target("IQ2_XXS"));  // a type it does not run
  EXPECT_EQ(parse_quant_target("bf16")->base, TensorType::kBF16);
  EXPECT_EQ(parse_quant_target("q5_0")->base, TensorType::kQ5_0);
}

TEST(Quantize, RequantizesEveryMatrixAndKeepsTheRest) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ferry_quant_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  SynthOptions o;
  o.arch = "qwen2";
  o.type = "F16";
  ASSERT_TRUE(write_synth_model(o, (dir / "f16.gguf").string()));
  for (std::string target : {"Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "BF16"}) {
    const std::string out = (dir / (target + ".gguf")).string();
    const auto t = parse_quant_target(target);
    ASSERT_TRUE(t);
    ASSERT_TRUE(quantize_model((dir / "f16.gguf").string(), out, *t, nullptr)) << target;
    auto in = GgufFile::open((dir / "f16.gguf").string());
    auto q = GgufFile::open(out);
    ASSERT_TRUE(q) << q.error().message;
    EXPECT_EQ((*q)->tensors().size(), (*in)->tensors().size());
    EXPECT_EQ((*q)->get_string("tokenizer.chat_template"),
              (*in)->get_string("tokenizer.chat_template"));
    for (const auto& ti : (*in)->tensors()) {
      const TensorInfo* tq = (*q)->find_tensor(ti.name);
      ASSERT_NE(tq, nullptr);
      EXPECT_EQ(tq->shape, ti.shape);
      if (ti.shape.size() == 1) {
        EXPECT_EQ(tq->type, TensorType::kF32);
        continue;
      }
      EXPECT_EQ(tq->type,
                choose_tensor_type(*t, ti.name, ti.shape[0], 2,
                                   ti.name.rfind("blk.", 0) == 0 ? ti.name[4] - '0' : -1, 2))
          << target << " " << ti.name;
      const auto a = row_floats(ti, 1), b = row_floats(*tq, 1);
      double err = 0, sq = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        err += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
        sq += static_cast<double>(a[i]) * a[i];
      }
      EXPECT_LT(std::sqrt(err / sq), 0.2) << target << " " << ti.name;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::model_tools
