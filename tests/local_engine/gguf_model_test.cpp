// End to end through GGUF: synthetic models written by ferry_gguf's synth (every architecture
// and the types people download), read back by GgufSource, run by the engine, and compared
// with the plain float reference on the same weights dequantized.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "local_engine/engine.h"
#include "local_engine/generate.h"
#include "local_engine/gguf_source.h"
#include "local_engine/kernels/matmul.h"
#include "model_tools/model_tools.h"
#include "tests/local_engine/test_model.h"

namespace ferry::engine {
namespace {

std::shared_ptr<GgufSource> synth_source(const model_tools::SynthOptions& options) {
  auto writer = model_tools::build_synth_model(options);
  EXPECT_TRUE(writer.has_value()) << (writer ? "" : writer.error().message);
  if (!writer) return nullptr;
  const std::vector<uint8_t> bytes = writer->to_bytes();
  auto file = gguf::GgufFile::from_bytes(bytes.data(), bytes.size(), "synth.gguf");
  EXPECT_TRUE(file.has_value()) << (file ? "" : file.error().message);
  if (!file) return nullptr;
  return std::make_shared<GgufSource>(std::move(file).value());
}

// The same model with every tensor dequantized to F32, for the reference forward pass.
std::shared_ptr<testing::MemorySource> dequantized_copy(const GgufSource& src,
                                                        testing::TinyShape& shape) {
  auto out = std::make_shared<testing::MemorySource>();
  for (const gguf::TensorInfo& t : src.file().tensors()) {
    const int64_t cols = t.ne(0), rows = t.shape.size() > 1 ? t.ne(1) : 0;
    const auto view = kernels::make_matrix_view(t.type, std::max<int64_t>(rows, 1), cols, t.data);
    std::vector<float> values(static_cast<size_t>(cols * std::max<int64_t>(rows, 1)));
    for (int64_t r = 0; r < std::max<int64_t>(rows, 1); ++r) {
      kernels::dequantize_row(view, r, values.data() + r * cols);
    }
    out->add_tensor(t.name, WeightType::kF32, cols, rows, values);
  }
  const std::string a = *src.get_string("general.architecture");
  shape.arch = a;
  shape.n_embd = *src.get_int(a + ".embedding_length");
  shape.n_layer = *src.get_int(a + ".block_count");
  shape.n_head = *src.get_int(a + ".attention.head_count");
  shape.n_head_kv = *src.get_int(a + ".attention.head_count_kv");
  shape.head_dim = src.get_int(a + ".attention.key_length").value_or(shape.n_embd / shape.n_head);
  shape.n_ff = *src.get_int(a + ".feed_forward_length");
  shape.n_vocab = src.tensor("token_embd.weight")->dims[1];
  shape.rope_theta = src.get_float(a + ".rope.freq_base").value_or(10000.0);
  shape.rms_eps = *src.get_float(a + ".attention.layer_norm_rms_epsilon");
  shape.tied_output = src.tensor("output.weight") == nullptr;
  if (a == "smollm3") shape.no_rope_interval = 4;
  shape.rope_dim = src.get_int(a + ".rope.dimension_count").value_or(0);
  // LongRoPE's (phi3), which the reference reads.
  const std::string orig = a + ".rope.scaling.original_context_length";
  if (auto v = src.get_int(orig)) out->set_int(orig, *v);
  const std::string factor = a + ".rope.scaling.attn_factor";
  if (auto v = src.get_float(factor)) out->set_float(factor, *v);
  shape.engine_ctx = 64;  // the engines below
  if (a == "gemma2" || a == "gemma3") {
    shape.n_swa = *src.get_int(a + ".attention.sliding_window");
    shape.swa_period = a == "gemma2" ? 2 : 6;
    shape.rope_theta_swa = src.get_float(a + ".rope.freq_base_swa").value_or(shape.rope_theta);
    shape.attn_softcap = src.get_float(a + ".attn_logit_softcapping").value_or(0.0);
    shape.final_softcap = src.get_float(a + ".final_logit_softcapping").value_or(0.0);
  }
  return out;
}

struct Case {
  std::string arch;
  std::string type;
  double tolerance;  // relative to the largest reference logit
};

class SynthVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(SynthVsReference, EngineOnGgufMatchesTheReference) {
  const Case& c = GetParam();
  model_tools::SynthOptions options;
  options.arch = c.arch;
  options.n_embd = 256;
  options.n_layer = 2;
  options.n_head = 4;
  options.n_head_kv = 2;
  options.n_ff = 512;
  options.n_ctx = 128;
  options.n_vocab = 0;
  options.type = c.type;
  options.seed = 5;
  if (c.arch == "smollm3") options.n_layer = 4;  // the 4th layer without RoPE
  if (c.arch == "gemma2" || c.arch == "gemma3") {
    options.n_layer = c.arch == "gemma3" ? 6 : 2;  // one global layer
    options.sliding_window = 4;                    // shorter than the prompt
    options.tied_output = c.arch == "gemma2";
  }
  if (c.arch == "phi3") {  // partial rotary; LongRoPE's long factors (64 > 32)
    options.rope_dim = 32;
    options.longrope_orig_ctx = 32;
  }
  auto src = synth_source(options);
  ASSERT_TRUE(src);
  testing::TinyShape shape;
  auto ref_src = dequantized_copy(*src, shape);
  auto model = Model::load(src);
  ASSERT_TRUE(model.has_value()) << model.error().message;
  Engine engine(std::move(model).value(), EngineOptions{2, 64});
  const std::vector<int32_t> prompt = {1, 40, 7, 300, 12, 99, 5, 250};
  for (int32_t t : prompt) ASSERT_LT(t, shape.n_vocab);
  ASSERT_TRUE(engine.kv().seq_add(0).has_value());
  std::vector<BatchEntry> batch;
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.push_back({0, static_cast<int64_t>(i), prompt[i], true});
  }
  std::vector<float> got;
  ASSERT_TRUE(engine.forward(batch, got).has_value());
  const auto want = testing::reference_logits(*ref_src, shape, prompt);
  ASSERT_EQ(got.size(), want.size());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - want[i])));
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(want[i])));
  }
  EXPECT_LT(max_diff / max_ref, c.tolerance) << c.arch << " " << c.type;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.arch + "_" + info.param.type;
}

INSTANTIATE_TEST_SUITE_P(
    Types, SynthVsReference,
    ::testing::Values(
        Case{"llama", "F32", 3e-3}, Case{"llama", "F16", 3e-3}, Case{"llama", "BF16", 3e-3},
        Case{"llama", "Q8_0", 2e-2}, Case{"llama", "Q4_0", 2e-2}, Case{"llama", "Q4_K_M", 2e-2},
        Case{"llama", "Q5_K_M", 2e-2}, Case{"llama", "Q6_K", 2e-2}, Case{"qwen2", "F16", 3e-3},
        Case{"qwen2", "Q8_0", 2e-2}, Case{"qwen2", "Q4_K_M", 2e-2}, Case{"qwen3", "F16", 3e-3},
        Case{"qwen3", "Q8_0", 2e-2}, Case{"qwen3", "Q5_K_M", 2e-2}, Case{"smollm3", "F16", 3e-3},
        Case{"smollm3", "Q4_K_M", 2e-2}, Case{"gemma2", "F16", 1e-2}, Case{"gemma2", "Q8_0", 6e-2},
        Case{"gemma3", "F16", 1e-2}, Case{"gemma3", "Q4_K_M", 4e-2}, Case{"phi3", "F16", 3e-3},
        Case{"phi3", "Q5_K_M", 2e-2}),
    case_name);

// `favor_token`: the favored token is the most likely one after every position, in the agent
// runners' shape (one layer of width 64) and the default one; without it, it is not.
TEST(Synth, AFavoredTokenIsTheMostLikelyEverywhere) {
  for (const int64_t embd : {64, 256}) {
    for (const bool favoring : {true, false}) {
      model_tools::SynthOptions options;
      options.arch = "qwen2";
      options.n_embd = embd;
      options.n_layer = embd == 64 ? 1 : 2;
      options.n_head = 2;
      options.n_head_kv = 1;
      options.n_ff = 2 * embd;
      options.n_ctx = 128;
      options.favor_token = favoring ? "<|im_end|>" : "";
      auto src = synth_source(options);
      ASSERT_TRUE(src);
      const auto& tokens = src->file().find("tokenizer.ggml.tokens")->strings;
      const auto favored = static_cast<int64_t>(
          std::find(tokens.begin(), tokens.end(), "<|im_end|>") - tokens.begin());
      auto model = Model::load(src);
      ASSERT_TRUE(model.has_value()) << model.error().message;
      const int64_t n_vocab = (*model)->config().n_vocab;
      Engine engine(std::move(model).value(), EngineOptions{2, 128});
      ASSERT_TRUE(engine.kv().seq_add(0).has_value());
      std::vector<BatchEntry> batch;
      for (int64_t i = 0; i < 60; ++i) {
        batch.push_back({0, i, static_cast<int32_t>((i * 37 + 11) % n_vocab), true});
      }
      std::vector<float> logits;
      ASSERT_TRUE(engine.forward(batch, logits).has_value());
      int64_t favored_first = 0;
      for (size_t row = 0; row < batch.size(); ++row) {
        const float* l = logits.data() + row * static_cast<size_t>(n_vocab);
        favored_first += std::max_element(l, l + n_vocab) - l == favored;
      }
      if (favoring) {
        EXPECT_EQ(favored_first, 60) << embd;
      } else {
        EXPECT_LT(favored_first, 5) << embd;
      }
    }
  }
  model_tools::SynthOptions tied;
  tied.favor_token = "<|im_end|>";
  tied.tied_output = true;
  EXPECT_FALSE(model_tools::build_synth_model(tied).has_value());
  model_tools::SynthOptions unknown;
  unknown.favor_token = "<no such token>";
  auto refused = model_tools::build_synth_model(unknown);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("<no such token>"), std::string::npos);
}

TEST(SharedModel, ThirdPartyTinyLlamaRunsWhenPresent) {
  const char* dir = std::getenv("FERRY_SHARED_DIR");
  const std::string path =
      std::string(dir ? dir : "../shared") + "/models/llama-2-tiny-random.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto src = GgufSource::open(path);
  ASSERT_TRUE(src.has_value()) << src.error().message;
  auto model = Model::load(src.value());
  ASSERT_TRUE(model.has_value()) << model.error().message;
  Engine engine(std::move(model).value(), EngineOptions{2, 64});
  ASSERT_TRUE(engine.kv().seq_add(0).has_value());
  GenerateOptions options;
  options.max_tokens = 8;
  const std::vector<TokenId> prompt = {1, 450, 4996, 17354};
  auto a = generate(engine, 0, prompt, options, {});
  ASSERT_TRUE(a.has_value()) << a.error().message;
  EXPECT_EQ(a->tokens.size(), 8u);
  // Deterministic: the same greedy run again on a fresh sequence.
  ASSERT_TRUE(engine.kv().seq_add(1).has_value());
  auto b = generate(engine, 1, prompt, options, {});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(a->tokens, b->tokens);
}

}  // namespace
}  // namespace ferry::engine
