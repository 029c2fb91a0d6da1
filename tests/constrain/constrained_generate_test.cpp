// Constrained generation in the engine: a synthesized model with random weights (its output
// unconstrained is noise) generates, greedy and sampled, through generate() and the serving
// Scheduler, with a Matcher in its SamplingParams; every completed output parses and meets the
// schema. Also: without a constraint the sampler picks exactly as before.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <future>
#include <mutex>

#include "constrain/schema.h"
#include "local_engine/engine.h"
#include "local_engine/generate.h"
#include "local_engine/gguf_source.h"
#include "local_engine/scheduler.h"
#include "tests/constrain/test_vocab.h"

namespace ferry::engine {
namespace {

constexpr const char* kSchema =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer","minimum":0,"maximum":99},"ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["x","yy"]},"maxItems":2}},"required":["name","age","ok","tags"],"additionalProperties":false})";

struct Loaded {
  const constrain::testing::TestVocab* tv = nullptr;
  std::shared_ptr<GgufSource> source;
  std::unique_ptr<Engine> engine;
  std::vector<TokenId> eog;
};

Loaded load_synth(bool batch_invariant = false) {
  Loaded l;
  l.tv = constrain::testing::test_vocab("synth");
  if (!l.tv) return l;
  auto src = GgufSource::open(l.tv->model_path);
  EXPECT_TRUE(src.has_value()) << (src ? "" : src.error().message);
  if (!src) return l;
  l.source = src.value();
  auto model = Model::load(l.source);
  EXPECT_TRUE(model.has_value()) << (model ? "" : model.error().message);
  if (!model) return l;
  l.engine =
      std::make_unique<Engine>(std::move(model).value(), EngineOptions{1, 1024, batch_invariant});
  l.eog = eog_tokens_from_source(*l.source);
  return l;
}

std::shared_ptr<constrain::Matcher> matcher_for(const Loaded& l, const std::string& schema) {
  constrain::CompileOptions o;
  o.max_string_chars = 16;
  auto g = constrain::compile_json_schema(schema, o);
  EXPECT_TRUE(g.has_value()) << (g ? "" : g.error().message);
  std::vector<constrain::TokenId> eos(l.eog.begin(), l.eog.end());
  const auto vocab = constrain::Vocabulary::build(*l.tv->tokenizer, eos);
  return std::make_shared<constrain::Matcher>(
      std::make_shared<const constrain::Grammar>(std::move(g).value()), vocab);
}

void expect_valid(const std::string& text) {
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
  ASSERT_TRUE(j.is_object()) << text;
  ASSERT_EQ(j.size(), 4u) << text;
  ASSERT_TRUE(j["name"].is_string()) << text;
  EXPECT_LE(j["name"].get<std::string>().size(), 8u * 4) << text;
  ASSERT_TRUE(j["age"].is_number_integer()) << text;
  EXPECT_GE(j["age"].get<int>(), 0);
  EXPECT_LE(j["age"].get<int>(), 99);
  ASSERT_TRUE(j["ok"].is_boolean()) << text;
  ASSERT_TRUE(j["tags"].is_array()) << text;
  EXPECT_LE(j["tags"].size(), 2u);
  for (const auto& t : j["tags"]) EXPECT_TRUE(t == "x" || t == "yy") << text;
}

TEST(ConstrainedGenerate, GreedyAndSampledOutputsMeetTheSchema) {
  Loaded l = load_synth();
  ASSERT_TRUE(l.engine) << "no synth model";
  const std::vector<tokenizer::TokenId> prompt_ids = l.tv->tokenizer->encode("Answer in JSON:");
  const std::vector<TokenId> prompt(prompt_ids.begin(), prompt_ids.end());
  const TokenPieceFn piece = [&](TokenId id) {
    return l.tv->tokenizer->token_bytes(static_cast<tokenizer::TokenId>(id));
  };
  SeqId seq = 0;
  for (const float temperature : {0.0f, 1.0f}) {
    for (std::uint64_t seed = 1; seed <= (temperature > 0 ? 4u : 1u); ++seed) {
      ASSERT_TRUE(l.engine->kv().seq_add(seq).has_value());
      GenerateOptions options;
      options.max_tokens = 600;
      options.eog_tokens = l.eog;
      options.sampling.temperature = temperature;
      options.sampling.seed = seed;
      options.sampling.constraint = matcher_for(l, kSchema);
      auto r = generate(*l.engine, seq, prompt, options, piece);
      ASSERT_TRUE(r.has_value()) << r.error().message;
      EXPECT_EQ(r->finish, FinishReason::kStop) << r->text;
      EXPECT_TRUE(options.sampling.constraint->ended());
      expect_valid(r->text);
      l.engine->kv().seq_remove(seq);
      ++seq;
    }
  }
}

TEST(ConstrainedGenerate, ATokenBudgetClosesTheDocumentWithinMaxTokens) {
  // Random weights, sampled, long strings allowed (maxLength 400): without the budget they run
  // past a small max_tokens inside a string; with it every output closes and validates.
  constexpr const char* kLong =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":400},"tags":{"type":"array","items":{"type":"string"},"minItems":2},"age":{"type":"integer"}},"required":["name","tags","age"],"additionalProperties":false})";
  Loaded l = load_synth();
  ASSERT_TRUE(l.engine) << "no synth model";
  const std::vector<tokenizer::TokenId> ids = l.tv->tokenizer->encode("Answer in JSON:");
  const std::vector<TokenId> prompt(ids.begin(), ids.end());
  const TokenPieceFn piece = [&](TokenId id) { return l.tv->tokenizer->token_bytes(id); };
  constrain::CompileOptions o;
  o.max_string_chars = 400;
  auto g = constrain::compile_json_schema(kLong, o);
  ASSERT_TRUE(g.has_value());
  const auto grammar = std::make_shared<const constrain::Grammar>(std::move(g).value());
  const auto vocab = constrain::Vocabulary::build(
      *l.tv->tokenizer, std::vector<constrain::TokenId>(l.eog.begin(), l.eog.end()));
  int cut_without = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    for (const bool budget : {false, true}) {
      const SeqId seq = static_cast<SeqId>(seed * 2 + (budget ? 1 : 0));
      ASSERT_TRUE(l.engine->kv().seq_add(seq).has_value());
      GenerateOptions options;
      options.max_tokens = 40;
      options.eog_tokens = l.eog;
      options.sampling.temperature = 1.0f;
      options.sampling.seed = seed;
      options.sampling.constraint = std::make_shared<constrain::Matcher>(grammar, vocab);
      if (budget) options.sampling.constraint->set_token_budget(40);
      auto r = generate(*l.engine, seq, prompt, options, piece);
      ASSERT_TRUE(r.has_value()) << r.error().message;
      l.engine->kv().seq_remove(seq);
      if (!budget) {
        cut_without += r->finish == FinishReason::kLength ? 1 : 0;
        continue;
      }
      EXPECT_EQ(r->finish, FinishReason::kStop) << r->text;
      EXPECT_LE(r->tokens.size(), 39u);  // and the end of generation: 40
      nlohmann::json j;
      ASSERT_NO_THROW(j = nlohmann::json::parse(r->text)) << r->text;
      EXPECT_TRUE(j["name"].is_string() && j["age"].is_number_integer()) << r->text;
      EXPECT_GE(j["tags"].size(), 2u) << r->text;
    }
  }
  EXPECT_GE(cut_without, 3);  // the control: the budget is what closes them
}

TEST(ConstrainedGenerate, WithoutAConstraintTheOutputIsNotJson) {
  // The control: the same model unconstrained writes noise, so the test above is the
  // constraint's doing.
  Loaded l = load_synth();
  ASSERT_TRUE(l.engine);
  ASSERT_TRUE(l.engine->kv().seq_add(0).has_value());
  const std::vector<tokenizer::TokenId> ids = l.tv->tokenizer->encode("Answer in JSON:");
  GenerateOptions options;
  options.max_tokens = 40;
  options.eog_tokens = l.eog;
  auto r = generate(*l.engine, 0, std::vector<TokenId>(ids.begin(), ids.end()), options,
                    [&](TokenId id) { return l.tv->tokenizer->token_bytes(id); });
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(nlohmann::json::accept(r->text)) << r->text;
}

TEST(ConstrainedGenerate, TheSchedulerAppliesTheConstraintPerSequence) {
  Loaded l = load_synth();
  ASSERT_TRUE(l.engine);
  const auto tok = l.tv->tokenizer;
  Scheduler scheduler(
      std::move(l.engine), SchedulerOptions{}, [tok](TokenId id) { return tok->token_bytes(id); },
      l.eog);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  constexpr int kRequests = 4;
  std::vector<std::string> texts(kRequests);
  std::vector<Completion> completions(kRequests);
  const std::vector<tokenizer::TokenId> ids = tok->encode("Give me JSON");
  for (int i = 0; i < kRequests; ++i) {
    GenerationRequest req;
    req.prompt.assign(ids.begin(), ids.end());
    req.max_tokens = 600;
    req.sampling.temperature = i == 0 ? 0.0f : 1.0f;
    req.sampling.seed = static_cast<std::uint64_t>(i);
    req.sampling.constraint = matcher_for(l, kSchema);
    req.on_token = [&, i](const TokenEvent& ev) { texts[i] += ev.text; };
    req.on_done = [&, i](const Completion& c) {
      std::lock_guard<std::mutex> lock(mu);
      completions[i] = c;
      ++done;
      cv.notify_all();
    };
    ASSERT_TRUE(scheduler.submit(std::move(req)).has_value());
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == kRequests; });
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_FALSE(completions[i].error.has_value()) << completions[i].error->message;
    EXPECT_EQ(completions[i].finish, FinishReason::kStop) << texts[i];
    expect_valid(texts[i]);
  }
}

// Batch-invariant serving with masks: each sequence's tokens (two constrained by different
// schemas, one free) are the same alone and batched with the others, so the batched sampler
// applies each sequence's own mask to its own logits, and the forward pass is invariant.
TEST(ConstrainedGenerate, BatchInvariantModeGivesTheSameConstrainedOutputAloneAndBatched) {
  const char* kOther =
      R"({"type":"object","properties":{"k":{"enum":["a","b"]},"n":{"type":"number"}},"required":["k","n"]})";
  const auto tok = constrain::testing::test_vocab("synth")->tokenizer;
  const std::vector<tokenizer::TokenId> ids = tok->encode("Give me JSON");
  struct Out {
    std::vector<TokenId> tokens;
    std::string text;
    Completion done;
  };
  // Runs the requests in one scheduler, all submitted at once; returns each one's output and
  // the most sequences one decode step held.
  const auto run = [&](const std::vector<int>& which, int64_t& max_batch) {
    Loaded l = load_synth(/*batch_invariant=*/true);
    EXPECT_TRUE(l.engine);
    SchedulerOptions options;
    options.prefix_cache = false;
    std::mutex mu;
    std::condition_variable cv;
    max_batch = 0;
    options.on_step = [&](const StepStats& st) {
      std::lock_guard<std::mutex> lock(mu);
      max_batch = std::max(max_batch, st.decode_tokens);
    };
    Scheduler scheduler(
        std::move(l.engine), options, [tok](TokenId id) { return tok->token_bytes(id); }, l.eog);
    std::vector<Out> outs(which.size());
    std::size_t done = 0;
    // The first sequence's first token waits until every request is in, so the others join it
    // in the scheduler's next step whatever the threads' timing (a busy machine used to finish
    // it alone before the next was submitted).
    std::promise<void> submitted;
    const std::shared_future<void> all_in = submitted.get_future().share();
    for (std::size_t k = 0; k < which.size(); ++k) {
      const int i = which[k];
      GenerationRequest req;
      req.prompt.assign(ids.begin(), ids.end());
      req.max_tokens = 200;
      req.sampling.temperature = 1.0f;
      req.sampling.seed = 40 + static_cast<std::uint64_t>(i);
      if (i < 2) {
        auto m = matcher_for(l, i == 0 ? kSchema : kOther);
        m->set_token_budget(200);  // the document closes within max_tokens
        req.sampling.constraint = std::move(m);
      }
      req.on_token = [&, k, all_in](const TokenEvent& ev) {
        if (k == 0) all_in.wait();
        if (ev.token >= 0) outs[k].tokens.push_back(ev.token);
        outs[k].text += ev.text;
      };
      req.on_done = [&, k](const Completion& c) {
        std::lock_guard<std::mutex> lock(mu);
        outs[k].done = c;
        ++done;
        cv.notify_all();
      };
      EXPECT_TRUE(scheduler.submit(std::move(req)).has_value());
    }
    submitted.set_value();
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == which.size(); });
    return outs;
  };
  int64_t solo_batch = 0;
  std::vector<Out> solo;
  for (int i = 0; i < 3; ++i) solo.push_back(run({i}, solo_batch)[0]);
  int64_t batch = 0;
  const std::vector<Out> together = run({0, 1, 2}, batch);
  EXPECT_GE(batch, 2);  // the sequences did decode together
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(together[i].done.error.has_value());
    EXPECT_GE(solo[i].tokens.size(), 8u) << "sequence " << i;  // a document, not one token
    EXPECT_EQ(together[i].tokens, solo[i].tokens) << "sequence " << i;
  }
  expect_valid(together[0].text);
  const nlohmann::json other = nlohmann::json::parse(together[1].text, nullptr, false);
  EXPECT_TRUE(other.is_object()) << together[1].text;
}

TEST(ConstrainedGenerate, ADeadConstraintIsAnErrorNotAnUnconstrainedToken) {
  Loaded l = load_synth();
  ASSERT_TRUE(l.engine);
  ASSERT_TRUE(l.engine->kv().seq_add(0).has_value());
  // A vocabulary without any token: nothing can ever be allowed.
  auto g = constrain::compile_json_schema(R"({"type":"string"})");
  ASSERT_TRUE(g.has_value());
  const auto vocab = constrain::Vocabulary::build(*l.tv->tokenizer, {});
  auto m = std::make_shared<constrain::Matcher>(
      std::make_shared<const constrain::Grammar>(std::move(g).value()), vocab);
  GenerateOptions options;
  options.max_tokens = 5;
  options.sampling.constraint = m;
  options.sampling.logit_bias[0] = 0;  // (keeps the bias path in play)
  // Ban every token the matcher allows: then nothing is left to pick.
  std::vector<std::uint64_t> mask;
  m->fill_mask(mask);
  for (std::size_t id = 0; id < vocab->size(); ++id) {
    if ((mask[id / 64] >> (id % 64)) & 1u)
      options.sampling.logit_bias[static_cast<int32_t>(id)] = -INFINITY;
  }
  const std::vector<tokenizer::TokenId> ids = l.tv->tokenizer->encode("x");
  auto r = generate(*l.engine, 0, std::vector<TokenId>(ids.begin(), ids.end()), options, {});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("constraint"), std::string::npos);
}

}  // namespace
}  // namespace ferry::engine
