// The generation loop on a small random model: determinism, EOG, stop strings, max tokens,
// cancellation and prefix reuse.
#include <gtest/gtest.h>

#include "local_engine/generate.h"
#include "tests/local_engine/test_model.h"

namespace ferry::engine {
namespace {

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = testing::make_tiny_model(shape_, WeightType::kQ8_0, 21);
    auto model = Model::load(src_);
    ASSERT_TRUE(model.has_value());
    engine_ = std::make_unique<Engine>(std::move(model).value(), EngineOptions{2, 128});
  }
  Result<GenerateResult> run(SeqId seq, const GenerateOptions& options,
                             const TokenCallback& cb = {}) {
    if (!engine_->kv().seq_exists(seq)) {
      EXPECT_TRUE(engine_->kv().seq_add(seq).has_value());
    }
    return generate(*engine_, seq, prompt_, options, piece_, cb);
  }

  testing::TinyShape shape_;
  std::shared_ptr<testing::MemorySource> src_;
  std::unique_ptr<Engine> engine_;
  std::vector<TokenId> prompt_ = {1, 5, 9, 14, 3};
  // Each token spells "<id>" so text and tokens can be compared.
  TokenPieceFn piece_ = [](TokenId id) { return "<" + std::to_string(id) + ">"; };
};

TEST_F(GenerateTest, GreedyMatchesArgmaxOfTheReference) {
  GenerateOptions o;
  o.max_tokens = 6;
  auto r = run(0, o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->tokens.size(), 6u);
  EXPECT_EQ(r->finish, FinishReason::kLength);
  std::vector<int32_t> context(prompt_.begin(), prompt_.end());
  for (TokenId t : r->tokens) {
    const auto logits = testing::reference_logits(*src_, shape_, context);
    const auto last = logits.end() - shape_.n_vocab;
    EXPECT_EQ(std::max_element(last, logits.end()) - last, t);
    context.push_back(t);
  }
  std::string text;
  for (TokenId t : r->tokens) text += piece_(t);
  EXPECT_EQ(r->text, text);
}

TEST_F(GenerateTest, SameSeedSameOutput) {
  GenerateOptions o;
  o.max_tokens = 20;
  o.sampling.temperature = 1.2f;
  o.sampling.seed = 99;
  auto a = run(0, o);
  auto b = run(1, o);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->tokens, b->tokens);
  o.sampling.seed = 100;
  auto c = run(2, o);
  ASSERT_TRUE(c.has_value());
  EXPECT_NE(a->tokens, c->tokens);
}

TEST_F(GenerateTest, EndOfGenerationTokenStopsAndIsNotEmitted) {
  GenerateOptions o;
  o.max_tokens = 8;
  auto first = run(0, o);
  ASSERT_TRUE(first.has_value());
  o.eog_tokens = {first->tokens[2]};
  auto r = run(1, o);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->finish, FinishReason::kStop);
  EXPECT_EQ(r->tokens, std::vector<TokenId>(first->tokens.begin(), first->tokens.begin() + 2));
}

TEST_F(GenerateTest, StopStringEndsTheTextAtItsStart) {
  GenerateOptions o;
  o.max_tokens = 8;
  auto first = run(0, o);
  ASSERT_TRUE(first.has_value());
  o.stop = {std::to_string(first->tokens[3]) + ">"};
  std::string streamed;
  auto r = run(1, o, [&](TokenId, std::string_view text) {
    streamed += text;
    return true;
  });
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->finish, FinishReason::kStop);
  // The text ends just before the stop string (its "<" stays: it is not part of the stop).
  std::string want;
  for (int i = 0; i < 3; ++i) want += piece_(first->tokens[static_cast<size_t>(i)]);
  want += "<";
  EXPECT_EQ(r->text, want);
  EXPECT_EQ(streamed, want);
}

TEST_F(GenerateTest, CallbackCanCancel) {
  GenerateOptions o;
  o.max_tokens = 50;
  int calls = 0;
  auto r = run(0, o, [&](TokenId, std::string_view) { return ++calls < 3; });
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->finish, FinishReason::kCancelled);
  EXPECT_EQ(r->tokens.size(), 3u);
}

TEST_F(GenerateTest, CachedPrefixIsReused) {
  GenerateOptions o;
  o.max_tokens = 5;
  auto a = run(0, o);
  ASSERT_TRUE(a.has_value());
  // Sequence 0 now holds the prompt and the generated tokens; a new prompt sharing the first
  // positions recomputes only the rest and gives the same result as a fresh sequence.
  engine_->kv().seq_truncate(0, 3);
  auto b = run(0, o);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->n_prompt, 2);
  EXPECT_EQ(a->tokens, b->tokens);
}

TEST_F(GenerateTest, OverlongPromptIsAContextError) {
  prompt_.assign(200, 1);
  GenerateOptions o;
  auto r = run(0, o);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kContextOverflow);
}

TEST(EogTokens, FromMetadataAndTokenTexts) {
  testing::TinyShape shape;
  auto src = testing::make_tiny_model(shape, WeightType::kF32, 1);
  EXPECT_EQ(eog_tokens_from_source(*src), std::vector<TokenId>{2});
}

}  // namespace
}  // namespace ferry::engine
