// The engine's forward pass against the plain float reference in test_model.cpp, for each
// architecture and weight type, plus batching, multi-sequence and model-loading checks.
#include <gtest/gtest.h>

#include <cmath>

#include "local_engine/engine.h"
#include "tests/local_engine/test_model.h"

namespace ferry::engine {
namespace {

using testing::TinyShape;

std::unique_ptr<Engine> make_engine(std::shared_ptr<testing::MemorySource> src, int threads = 2,
                                    int64_t n_ctx = 64) {
  auto model = Model::load(src);
  EXPECT_TRUE(model.has_value()) << (model ? "" : model.error().message);
  if (!model) return nullptr;
  return std::make_unique<Engine>(std::move(model).value(), EngineOptions{threads, n_ctx});
}

// Runs the whole prompt as one batch with logits for every position.
std::vector<float> engine_logits(Engine& engine, const std::vector<int32_t>& tokens,
                                 SeqId seq = 0) {
  EXPECT_TRUE(engine.kv().seq_add(seq).has_value());
  std::vector<BatchEntry> batch;
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.push_back({seq, static_cast<int64_t>(i), tokens[i], true});
  }
  std::vector<float> logits;
  const Status s = engine.forward(batch, logits);
  EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().message);
  return logits;
}

// Largest absolute difference, relative to the reference's largest magnitude.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double max_diff = 0, max_ref = 1e-6;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - want[i])));
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(want[i])));
  }
  return max_diff / max_ref;
}

const std::vector<int32_t> kPrompt = {1, 17, 42, 5, 88, 63, 9, 30, 71, 3, 50, 12};

// The tiny shape of an architecture: smollm3 with a NoPE layer (the 4th), gemma with a window
// of 4 (shorter than kPrompt) on every other layer, a local RoPE base of its own and soft-caps
// small enough to bend random logits (gemma2, whose output is always tied).
TinyShape shape_for(const std::string& arch) {
  TinyShape shape;
  shape.arch = arch;
  if (arch == "smollm3") {
    shape.n_layer = 4;
    shape.no_rope_interval = 4;
  }
  if (arch == "gemma2" || arch == "gemma3") {
    shape.n_swa = 4;
    shape.swa_period = 2;
    shape.rope_theta = 1e6;
    shape.rope_theta_swa = 1e4;
    shape.rms_eps = 1e-6;
  }
  if (arch == "phi3") {  // partial rotary, LongRoPE (the long factors: contexts above 32)
    shape.rope_dim = 8;
    shape.longrope = true;
  }
  if (arch == "gemma3") shape.rope_linear_factor = 8.0;  // as Gemma 3 4B+: global layers only
  if (arch == "gemma2") {
    shape.tied_output = true;
    shape.attn_softcap = 2.0;
    shape.final_softcap = 3.0;
  }
  return shape;
}

// The shape widened so that its rows are whole 256-element super-blocks (the K-quants).
TinyShape with_super_blocks(TinyShape shape) {
  shape.n_embd = 256;
  shape.n_head = 8;
  shape.n_head_kv = 2;
  shape.head_dim = 32;
  shape.n_ff = 512;
  return shape;
}

struct Case {
  std::string arch;
  WeightType type;
  double tolerance;  // F16 KV cache; quantized weights also get quantized activations
};

class ForwardVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardVsReference, LogitsMatchThePlainFloatForwardPass) {
  const Case& c = GetParam();
  TinyShape shape = shape_for(c.arch);
  const bool k_quant =
      c.type == WeightType::kQ4_K || c.type == WeightType::kQ5_K || c.type == WeightType::kQ6_K;
  if (k_quant) shape = with_super_blocks(shape);
  auto src = testing::make_tiny_model(shape, c.type, 7);
  auto engine = make_engine(src);
  ASSERT_TRUE(engine);
  const auto want = testing::reference_logits(*src, shape, kPrompt);
  const auto got = engine_logits(*engine, kPrompt);
  EXPECT_LT(relative_error(got, want), c.tolerance)
      << c.arch << " " << kernels::tensor_type_name(c.type);
  // The same greedy choice at every position.
  const auto n_vocab = static_cast<size_t>(shape.n_vocab);
  for (size_t t = 0; t < kPrompt.size(); ++t) {
    auto argmax = [&](const std::vector<float>& v) {
      return std::max_element(v.begin() + t * n_vocab, v.begin() + (t + 1) * n_vocab) -
             (v.begin() + t * n_vocab);
    };
    const auto top = static_cast<size_t>(argmax(want));
    // Allow a tie-level difference only.
    EXPECT_NEAR(got[t * n_vocab + static_cast<size_t>(argmax(got))], got[t * n_vocab + top],
                c.tolerance * 4)
        << "position " << t;
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.arch + "_" + std::string(kernels::tensor_type_name(info.param.type));
}

INSTANTIATE_TEST_SUITE_P(
    Archs, ForwardVsReference,
    ::testing::Values(
        Case{"llama", WeightType::kF32, 2e-3}, Case{"llama", WeightType::kF16, 2e-3},
        Case{"llama", WeightType::kBF16, 2e-3}, Case{"llama", WeightType::kQ8_0, 3e-2},
        Case{"llama", WeightType::kQ4_0, 3e-2}, Case{"llama", WeightType::kQ5_0, 3e-2},
        Case{"llama", WeightType::kQ4_K, 3e-2}, Case{"llama", WeightType::kQ5_K, 3e-2},
        Case{"llama", WeightType::kQ6_K, 3e-2}, Case{"qwen2", WeightType::kF32, 2e-3},
        Case{"qwen2", WeightType::kF16, 2e-3}, Case{"qwen2", WeightType::kQ8_0, 3e-2},
        Case{"qwen2", WeightType::kQ4_K, 3e-2}, Case{"qwen3", WeightType::kF32, 2e-3},
        Case{"qwen3", WeightType::kF16, 2e-3}, Case{"qwen3", WeightType::kQ8_0, 3e-2},
        Case{"qwen3", WeightType::kQ6_K, 3e-2}, Case{"smollm3", WeightType::kF32, 2e-3},
        Case{"smollm3", WeightType::kQ8_0, 3e-2},
        // gemma's GELU is read from ggml's F16 table (about 1e-3 relative)
        Case{"gemma2", WeightType::kF32, 1e-2}, Case{"gemma2", WeightType::kF16, 1e-2},
        // tied Q8_0 output, soft-capped to +-3: the activations' quantization shows more
        Case{"gemma2", WeightType::kQ8_0, 6e-2}, Case{"gemma3", WeightType::kF32, 1e-2},
        Case{"gemma3", WeightType::kQ4_K, 4e-2}, Case{"phi3", WeightType::kF32, 2e-3},
        Case{"phi3", WeightType::kQ8_0, 3e-2}),
    case_name);

// A window actually masks: the same weights with a window of 4 and of 1000 give the same bits
// up to position 3 (nothing to mask yet) and different logits from position 4 on, in both
// attention forms (prefill of >= 64 entries: the tiled one).
TEST(SlidingWindow, MasksKeysOutsideTheWindowInBothForms) {
  for (const size_t n : {kPrompt.size(), size_t{80}}) {
    std::vector<int32_t> prompt;
    for (size_t i = 0; i < n; ++i) prompt.push_back(kPrompt[i % kPrompt.size()] + (i / 12) % 7);
    TinyShape narrow = shape_for("gemma3"), wide = narrow;
    wide.n_swa = 1000;
    auto narrow_engine = make_engine(testing::make_tiny_model(narrow, WeightType::kF32, 4), 2, 128);
    auto wide_engine = make_engine(testing::make_tiny_model(wide, WeightType::kF32, 4), 2, 128);
    ASSERT_TRUE(narrow_engine && wide_engine);
    const auto masked = engine_logits(*narrow_engine, prompt);
    const auto unmasked = engine_logits(*wide_engine, prompt);
    const auto v = static_cast<size_t>(narrow.n_vocab);
    const std::vector<float> head_masked(masked.begin(), masked.begin() + 4 * v);
    const std::vector<float> head_unmasked(unmasked.begin(), unmasked.begin() + 4 * v);
    EXPECT_EQ(head_masked, head_unmasked) << n;
    const std::vector<float> tail_masked(masked.begin() + 4 * v, masked.end());
    const std::vector<float> tail_unmasked(unmasked.begin() + 4 * v, unmasked.end());
    EXPECT_GT(relative_error(tail_masked, tail_unmasked), 1e-3) << n;
    // And the masked result is the reference's with the window.
    auto src = testing::make_tiny_model(narrow, WeightType::kF32, 4);
    EXPECT_LT(relative_error(masked, testing::reference_logits(*src, narrow, prompt)), 1e-2) << n;
  }
}

// A batch-invariant engine (what the local backend runs) of 2 threads and context 64.
std::unique_ptr<Engine> invariant_engine(const std::shared_ptr<testing::MemorySource>& src) {
  auto model = Model::load(src);
  EXPECT_TRUE(model.has_value()) << (model ? "" : model.error().message);
  return std::make_unique<Engine>(std::move(model).value(),
                                  EngineOptions{2, 64, /*batch_invariant=*/true});
}

// kPrompt's logits (sequence 0) computed in one batch with another sequence's 9 tokens (1),
// interleaved; empty when the forward fails.
std::vector<float> logits_beside_another(Engine& engine) {
  std::vector<float> logits;
  if (!engine.kv().seq_add(0).has_value() || !engine.kv().seq_add(1).has_value()) return logits;
  std::vector<BatchEntry> batch;
  const std::vector<int32_t> other = {9, 8, 7, 6, 5, 4, 3, 2, 1};
  for (size_t i = 0; i < kPrompt.size(); ++i) {
    batch.push_back({0, static_cast<int64_t>(i), kPrompt[i], true});
    if (i < other.size()) batch.push_back({1, static_cast<int64_t>(i), other[i], false});
  }
  if (!engine.forward(batch, logits).has_value()) logits.clear();
  return logits;
}

// The batch-invariant engine's packed Q5_0 products and Q4_K and Q6_K panels
// (kernels/packed.h, TypeKernels::pack_panels; AVX-512) against the reference forward, the
// llama.cpp-matching engine's products beside them, and the same bits alone and in a batch with
// another sequence.
TEST(BatchInvariant, PackedQ5_0AndQ4_KAndQ6_KPanelsMatchTheReference) {
  for (const WeightType type : {WeightType::kQ5_0, WeightType::kQ4_K, WeightType::kQ6_K}) {
    for (const std::string arch : {"llama", "qwen3"}) {
      SCOPED_TRACE(arch + " " + std::string(kernels::tensor_type_name(type)));
      TinyShape shape = shape_for(arch);
      if (type != WeightType::kQ5_0) shape = with_super_blocks(shape);
      auto src = testing::make_tiny_model(shape, type, 12);
      auto load = [&] { return invariant_engine(src); };
      auto invariant = load();
      const auto got = engine_logits(*invariant, kPrompt);
      EXPECT_LT(relative_error(got, testing::reference_logits(*src, shape, kPrompt)), 3e-2);
      auto lanes = make_engine(src);
      ASSERT_TRUE(lanes);
      // The engines differ beyond the products too (attention forms): Q8_0 files show the same
      // 1-2 % between them; a value misplaced in the packing shows far more.
      EXPECT_LT(relative_error(got, engine_logits(*lanes, kPrompt)), 3e-2);
      auto mixed = load();
      EXPECT_EQ(logits_beside_another(*mixed), got);
    }
  }
}

// The batch-invariant engine: a sequence's logits are the same bits alone and in a batch with
// another sequence, for every architecture (windows and soft-caps included).
TEST(BatchInvariant, NewArchitecturesGiveTheSameBitsAloneAndInABatch) {
  for (const std::string arch : {"smollm3", "gemma2", "gemma3", "phi3"}) {
    const TinyShape shape = shape_for(arch);
    auto src = testing::make_tiny_model(shape, WeightType::kQ8_0, 11);
    auto load = [&] { return invariant_engine(src); };
    auto alone = load();
    const auto want = engine_logits(*alone, kPrompt);
    // The invariant forms (windows and soft-caps in kernels/attend_invariant.h) are right too.
    EXPECT_LT(relative_error(want, testing::reference_logits(*src, shape, kPrompt)), 6e-2) << arch;
    auto mixed = load();
    EXPECT_EQ(logits_beside_another(*mixed), want) << arch;
  }
}

// The per-row steps between the products (norms, RoPE, the KV store, SwiGLU and GeGLU, the
// residual adds, the activations' quantization) shared out over the pool's threads give every
// row the bits one thread gives it: an engine of 2 threads that shares every job (threshold 0)
// against one of 1 thread, on batches of three interleaved sequences (a prompt batch, then a
// decode step of one token each), in both numerics, packed and plain products, post-norms
// (gemma2) and fused projections (phi3).
TEST(Forward, RowStepsSharedOverThreadsGiveTheBitsOfOneThread) {
  struct File {
    std::string arch;
    WeightType type;
  };
  for (const File& m : {File{"llama", WeightType::kQ5_0}, File{"llama", WeightType::kQ8_0},
                        File{"qwen3", WeightType::kQ6_K}, File{"gemma2", WeightType::kQ8_0},
                        File{"phi3", WeightType::kQ8_0}}) {
    for (const bool invariant : {true, false}) {
      SCOPED_TRACE(m.arch + " " + std::string(kernels::tensor_type_name(m.type)) +
                   (invariant ? " invariant" : " llama.cpp"));
      TinyShape shape = shape_for(m.arch);
      if (m.type == WeightType::kQ6_K) shape = with_super_blocks(shape);
      auto src = testing::make_tiny_model(shape, m.type, 13);
      auto run = [&](int threads, int64_t serial_work) {
        auto model = Model::load(src);
        EXPECT_TRUE(model.has_value());
        Engine engine(std::move(model).value(), EngineOptions{threads, 64, invariant, serial_work});
        std::vector<float> all;
        for (SeqId s = 0; s < 3; ++s) EXPECT_TRUE(engine.kv().seq_add(s).has_value());
        std::vector<BatchEntry> prompt;
        for (int64_t i = 0; i < 12; ++i) {
          for (SeqId s = 0; s < 3; ++s) {
            if (i < 12 - 3 * s) prompt.push_back({s, i, kPrompt[static_cast<size_t>(i)] + s, true});
          }
        }
        std::vector<float> logits;
        EXPECT_TRUE(engine.forward(prompt, logits).has_value());
        all = logits;
        const std::vector<BatchEntry> step = {{0, 12, 7, true}, {1, 9, 8, true}, {2, 6, 9, true}};
        EXPECT_TRUE(engine.forward(step, logits).has_value());
        all.insert(all.end(), logits.begin(), logits.end());
        return all;
      };
      const auto one = run(1, kernels::ThreadPool::kSerialWork);
      ASSERT_FALSE(one.empty());
      EXPECT_EQ(run(2, 0), one);
    }
  }
}

TEST(Forward, TiedOutputAndLlama3RopeFactors) {
  TinyShape shape;
  shape.tied_output = true;
  shape.llama3_rope_factors = true;
  shape.rope_theta = 500000.0;
  auto src = testing::make_tiny_model(shape, WeightType::kF32, 11);
  auto engine = make_engine(src);
  ASSERT_TRUE(engine);
  EXPECT_TRUE(engine->config().tied_output);
  const auto want = testing::reference_logits(*src, shape, kPrompt);
  EXPECT_LT(relative_error(engine_logits(*engine, kPrompt), want), 2e-3);
}

TEST(Forward, TokenByTokenEqualsOneBatch) {
  TinyShape shape;
  auto src = testing::make_tiny_model(shape, WeightType::kQ8_0, 3);
  auto engine = make_engine(src);
  ASSERT_TRUE(engine);
  const auto batched = engine_logits(*engine, kPrompt, 0);
  ASSERT_TRUE(engine->kv().seq_add(1).has_value());
  std::vector<float> stepped, logits;
  for (size_t i = 0; i < kPrompt.size(); ++i) {
    const BatchEntry e{1, static_cast<int64_t>(i), kPrompt[i], true};
    ASSERT_TRUE(engine->forward(std::span<const BatchEntry>(&e, 1), logits).has_value());
    stepped.insert(stepped.end(), logits.begin(), logits.end());
  }
  EXPECT_LT(relative_error(stepped, batched), 1e-4);
}

TEST(Forward, InterleavedSequencesInOneBatchMatchSeparateRuns) {
  TinyShape shape;
  auto src = testing::make_tiny_model(shape, WeightType::kF16, 5);
  auto engine = make_engine(src, 1);
  ASSERT_TRUE(engine);
  const std::vector<int32_t> a = {4, 8, 15, 16, 23, 42};
  const std::vector<int32_t> b = {7, 7, 9, 1};
  const auto want_a = testing::reference_logits(*src, shape, a);
  const auto want_b = testing::reference_logits(*src, shape, b);
  ASSERT_TRUE(engine->kv().seq_add(10).has_value());
  ASSERT_TRUE(engine->kv().seq_add(20).has_value());
  std::vector<BatchEntry> batch;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i < a.size()) batch.push_back({10, static_cast<int64_t>(i), a[i], i + 1 == a.size()});
    if (i < b.size()) batch.push_back({20, static_cast<int64_t>(i), b[i], i + 1 == b.size()});
  }
  std::vector<float> logits;
  ASSERT_TRUE(engine->forward(batch, logits).has_value());
  const auto n_vocab = static_cast<size_t>(shape.n_vocab);
  ASSERT_EQ(logits.size(), 2 * n_vocab);
  // b ends first in batch order.
  const std::vector<float> got_b(logits.begin(), logits.begin() + n_vocab);
  const std::vector<float> got_a(logits.begin() + n_vocab, logits.end());
  EXPECT_LT(relative_error(got_a, std::vector<float>(want_a.end() - n_vocab, want_a.end())), 2e-3);
  EXPECT_LT(relative_error(got_b, std::vector<float>(want_b.end() - n_vocab, want_b.end())), 2e-3);
  EXPECT_EQ(engine->kv().seq_len(10), 6);
  EXPECT_EQ(engine->kv().seq_len(20), 4);
}

TEST(Forward, PrefixCopyAndTruncateReuseTheCache) {
  TinyShape shape;
  auto src = testing::make_tiny_model(shape, WeightType::kF32, 9);
  auto engine = make_engine(src);
  ASSERT_TRUE(engine);
  const auto full = engine_logits(*engine, kPrompt, 0);
  // A second sequence shares the first 8 positions, then computes the rest.
  ASSERT_TRUE(engine->kv().seq_copy(0, 1, 8).has_value());
  std::vector<BatchEntry> rest;
  for (size_t i = 8; i < kPrompt.size(); ++i) {
    rest.push_back({1, static_cast<int64_t>(i), kPrompt[i], true});
  }
  std::vector<float> logits;
  ASSERT_TRUE(engine->forward(rest, logits).has_value());
  const auto n_vocab = static_cast<size_t>(shape.n_vocab);
  EXPECT_LT(relative_error(logits, std::vector<float>(full.begin() + 8 * n_vocab, full.end())),
            1e-5);
  // Truncating and recomputing the last token gives the same logits again.
  engine->kv().seq_truncate(0, kPrompt.size() - 1);
  const BatchEntry last{0, static_cast<int64_t>(kPrompt.size() - 1), kPrompt.back(), true};
  ASSERT_TRUE(engine->forward(std::span<const BatchEntry>(&last, 1), logits).has_value());
  EXPECT_LT(relative_error(logits, std::vector<float>(full.end() - n_vocab, full.end())), 1e-5);
}

TEST(Forward, RejectsBadBatchesWithoutTouchingTheCache) {
  TinyShape shape;
  auto src = testing::make_tiny_model(shape, WeightType::kF32, 1);
  auto engine = make_engine(src);
  ASSERT_TRUE(engine);
  ASSERT_TRUE(engine->kv().seq_add(0).has_value());
  std::vector<float> logits;
  const BatchEntry bad_token{0, 0, static_cast<int32_t>(shape.n_vocab), true};
  EXPECT_FALSE(engine->forward(std::span<const BatchEntry>(&bad_token, 1), logits).has_value());
  const BatchEntry gap{0, 3, 1, true};
  EXPECT_FALSE(engine->forward(std::span<const BatchEntry>(&gap, 1), logits).has_value());
  const BatchEntry unknown{5, 0, 1, true};
  EXPECT_FALSE(engine->forward(std::span<const BatchEntry>(&unknown, 1), logits).has_value());
  EXPECT_EQ(engine->kv().seq_len(0), 0);
  // A full context is an error, not a crash.
  std::vector<BatchEntry> many;
  for (int64_t i = 0; i <= engine->n_ctx(); ++i) many.push_back({0, i, 1, false});
  const Status s = engine->forward(many, logits);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kContextOverflow);
}

TEST(ModelLoad, RefusesUnsupportedArchitectureByName) {
  TinyShape shape;
  auto src = testing::make_tiny_model(shape, WeightType::kF32, 1);
  src->set_string("general.architecture", "gpt2");
  auto model = Model::load(src);
  ASSERT_FALSE(model.has_value());
  EXPECT_NE(model.error().message.find("gpt2"), std::string::npos);
}

// LongRoPE: an engine whose context fits the original one uses the short factors, a longer one
// the long factors (llama.cpp's choice by n_ctx_seq); both match the reference.
TEST(LongRope, FactorsFollowTheEngineContext) {
  TinyShape shape = shape_for("phi3");
  auto src = testing::make_tiny_model(shape, WeightType::kF32, 6);
  std::vector<std::vector<float>> got;
  for (const int64_t n_ctx : {int64_t{32}, int64_t{64}}) {
    auto engine = make_engine(src, 2, n_ctx);
    ASSERT_TRUE(engine);
    got.push_back(engine_logits(*engine, kPrompt));
    shape.engine_ctx = n_ctx;
    EXPECT_LT(relative_error(got.back(), testing::reference_logits(*src, shape, kPrompt)), 2e-3)
        << n_ctx;
  }
  EXPECT_GT(relative_error(got[0], got[1]), 1e-3);
}

// What changes the numerics and is not implemented is refused by name.
TEST(ModelLoad, RefusesGemmaVariantsItCannotRun) {
  auto refused = [](const std::shared_ptr<testing::MemorySource>& src, const std::string& text) {
    auto model = Model::load(src);
    ASSERT_FALSE(model.has_value()) << text;
    EXPECT_NE(model.error().message.find(text), std::string::npos) << model.error().message;
  };
  TinyShape gemma3 = shape_for("gemma3");
  TinyShape global_only = gemma3;
  global_only.n_swa = 0;
  refused(testing::make_tiny_model(global_only, WeightType::kF32, 1),
          "gemma3.attention.sliding_window is absent");
  TinyShape capped = gemma3;
  capped.final_softcap = 30.0;
  refused(testing::make_tiny_model(capped, WeightType::kF32, 1), "gemma3.final_logit_softcapping");
  TinyShape untied = shape_for("gemma2");
  untied.tied_output = false;
  refused(testing::make_tiny_model(untied, WeightType::kF32, 1), "gemma2 with an output.weight");
  auto per_layer = testing::make_tiny_model(gemma3, WeightType::kF32, 1);
  per_layer->remove_key("gemma3.attention.sliding_window_pattern");
  per_layer->set_strings("gemma3.attention.sliding_window_pattern", {"true", "false"});
  refused(per_layer, "sliding_window_pattern is not one integer");
  auto no_post_norm = testing::make_tiny_model(gemma3, WeightType::kF32, 1);
  no_post_norm->remove_tensor("blk.0.post_ffw_norm.weight");
  refused(no_post_norm, "blk.0.post_ffw_norm.weight");
}

TEST(ModelLoad, RefusesMissingTensorsAndWrongShapes) {
  TinyShape shape;
  auto src = testing::make_tiny_model(shape, WeightType::kF32, 1);
  src->remove_tensor("blk.1.ffn_up.weight");
  auto model = Model::load(src);
  ASSERT_FALSE(model.has_value());
  EXPECT_NE(model.error().message.find("blk.1.ffn_up.weight"), std::string::npos);

  auto src2 = testing::make_tiny_model(shape, WeightType::kF32, 1);
  src2->add_tensor("blk.0.attn_k.weight", WeightType::kF32, shape.n_embd, 8,
                   std::vector<float>(static_cast<size_t>(shape.n_embd * 8), 0.0f));
  auto model2 = Model::load(src2);
  ASSERT_FALSE(model2.has_value());
  EXPECT_NE(model2.error().message.find("shape"), std::string::npos);

  auto src3 = testing::make_tiny_model(shape, WeightType::kF32, 1);
  src3->set_int("llama.attention.head_count_kv", 3);
  EXPECT_FALSE(Model::load(src3).has_value());

  TinyShape qwen;
  qwen.arch = "qwen2";
  auto src4 = testing::make_tiny_model(qwen, WeightType::kF32, 1);
  src4->remove_tensor("blk.0.attn_q.bias");
  EXPECT_FALSE(Model::load(src4).has_value());
}

}  // namespace
}  // namespace ferry::engine
