// Embeddings in the local engine on a small random model: pooling and normalization against a
// scalar reference over the engine's own final-norm hidden states, the hidden states against the
// logits the engine projects from them, batched requests equal single ones (however the inputs
// are split over passes), chat decoding undisturbed by embeddings, embeddings' KV within the
// scheduler's KV budget beside chat sequences, and the refusals.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "local_engine/embeddings.h"
#include "local_engine/scheduler.h"
#include "tests/local_engine/test_model.h"

namespace ferry::engine {
namespace {

constexpr int64_t kCtx = 256;

TEST(Pooling, NamesFromTheGgufKey) {
  ModelConfig c;
  c.arch_name = "qwen3";
  for (auto [type, want] : {std::pair{-1, Pooling::kLast}, std::pair{1, Pooling::kMean},
                            std::pair{2, Pooling::kCls}, std::pair{3, Pooling::kLast}}) {
    c.pooling_type = type;
    auto p = pooling_for(c);
    ASSERT_TRUE(p.has_value()) << type;
    EXPECT_EQ(*p, want) << type;
  }
  for (int64_t bad : {0, 4, 7}) {
    c.pooling_type = bad;
    auto p = pooling_for(c);
    ASSERT_FALSE(p.has_value()) << bad;
    EXPECT_NE(p.error().message.find("qwen3.pooling_type"), std::string::npos);
  }
}

TEST(Pooling, AccumulatorKeepsWhatThePoolingReads) {
  PoolAccumulator mean(Pooling::kMean, 2), cls(Pooling::kCls, 2), last(Pooling::kLast, 2);
  EXPECT_TRUE(mean.wants(1, 3));
  EXPECT_TRUE(cls.wants(0, 3));
  EXPECT_FALSE(cls.wants(1, 3));
  EXPECT_TRUE(last.wants(2, 3));
  EXPECT_FALSE(last.wants(1, 3));
  const std::vector<std::vector<float>> rows = {{1, 2}, {3, -4}, {5, 0.5f}};
  for (const auto& r : rows) mean.add(r);
  const auto m = mean.result();
  EXPECT_FLOAT_EQ(m[0], 3.0f);
  EXPECT_FLOAT_EQ(m[1], (2.0f - 4.0f + 0.5f) / 3.0f);
}

TEST(Pooling, L2NormalizeGivesAUnitVectorAlongTheInput) {
  std::vector<float> v = {3, -4, 0};
  l2_normalize(v);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], -0.8f);
  EXPECT_FLOAT_EQ(v[2], 0.0f);
  std::vector<float> zero = {0, 0};
  l2_normalize(zero);
  EXPECT_EQ(zero, (std::vector<float>{0, 0}));
}

struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<EmbeddingResult>> done;
  Result<EmbeddingResult> wait() {
    std::unique_lock lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done.has_value(); }));
    if (!done) return Error::make(ErrorCode::kTimeout, "test: no answer");
    return std::move(*done);
  }
};

class EmbeddingsTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    src_ = testing::make_tiny_model(shape_, WeightType::kF16, 41);
    src_->set_int("llama.pooling_type", GetParam());
  }

  std::unique_ptr<Engine> engine() {
    auto model = Model::load(src_);
    EXPECT_TRUE(model.has_value());
    return std::make_unique<Engine>(std::move(model).value(),
                                    EngineOptions{2, kCtx, /*batch_invariant=*/true});
  }
  std::unique_ptr<Scheduler> scheduler(int64_t batch_tokens = 512) {
    SchedulerOptions o;
    o.embedding_batch_tokens = batch_tokens;
    return std::make_unique<Scheduler>(engine(), o, nullptr, std::vector<TokenId>{});
  }
  Pooling pooling() {
    ModelConfig c;
    c.pooling_type = GetParam();
    return pooling_for(c).value();
  }
  Result<EmbeddingResult> embed(Scheduler& s, std::vector<std::vector<TokenId>> inputs) {
    auto w = std::make_shared<Waiter>();
    EmbeddingRequest r;
    r.inputs = std::move(inputs);
    r.pooling = pooling();
    r.on_done = [w](Result<EmbeddingResult> res) {
      std::lock_guard lock(w->mu);
      w->done = std::move(res);
      w->cv.notify_all();
    };
    auto id = s.submit_embeddings(std::move(r));
    if (!id) return std::move(id).error();
    return w->wait();
  }
  static std::vector<TokenId> tokens(int64_t n, int seed) {
    std::vector<TokenId> t;
    for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<TokenId>((i * 7 + seed * 13) % 96));
    return t;
  }

  testing::TinyShape shape_;
  std::shared_ptr<testing::MemorySource> src_;
};

// The scalar reference: the engine's final-norm states of every position of one sequence (its
// single-sequence path), pooled and normalized in double.
std::vector<double> reference_embedding(Engine& e, const std::vector<TokenId>& toks,
                                        Pooling pooling) {
  (void)e.kv().seq_add(7);
  std::vector<BatchEntry> batch;
  for (size_t i = 0; i < toks.size(); ++i) {
    batch.push_back({7, static_cast<int64_t>(i), toks[i], true});
  }
  std::vector<float> hidden;
  EXPECT_TRUE(e.forward_hidden(batch, hidden).has_value());
  e.kv().seq_remove(7);
  const auto d = static_cast<size_t>(e.config().n_embd);
  const size_t n = toks.size();
  std::vector<double> v(d, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const bool take = pooling == Pooling::kMean || (pooling == Pooling::kCls && i == 0) ||
                      (pooling == Pooling::kLast && i == n - 1);
    if (!take) continue;
    for (size_t k = 0; k < d; ++k) v[k] += hidden[i * d + k];
  }
  double norm = 0;
  for (double x : v) norm += x * x;
  for (double& x : v) x /= std::sqrt(norm);
  return v;
}

TEST_P(EmbeddingsTest, EqualsPooledHiddenStatesOfTheSingleSequencePath) {
  auto e = engine();
  auto s = scheduler();
  for (int64_t n : {1, 5, 40}) {
    const auto toks = tokens(n, static_cast<int>(n));
    const auto ref = reference_embedding(*e, toks, pooling());
    auto got = embed(*s, {toks});
    ASSERT_TRUE(got.has_value()) << got.error().message;
    ASSERT_EQ(got->vectors.size(), 1u);
    ASSERT_EQ(got->vectors[0].size(), ref.size());
    double norm = 0;
    for (size_t k = 0; k < ref.size(); ++k) {
      // Float accumulation against double: well within 1e-5 on unit vectors.
      EXPECT_NEAR(got->vectors[0][k], ref[k], 1e-5) << "n=" << n << " k=" << k;
      norm += static_cast<double>(got->vectors[0][k]) * got->vectors[0][k];
    }
    EXPECT_NEAR(norm, 1.0, 1e-5);
    EXPECT_EQ(got->tokens, n);
  }
}

TEST_P(EmbeddingsTest, BatchOfInputsEqualsSingleRequestsHoweverSplit) {
  auto whole = scheduler();
  auto small = scheduler(/*batch_tokens=*/7);  // inputs split over many passes
  std::vector<std::vector<TokenId>> inputs;
  for (int i = 0; i < 5; ++i) inputs.push_back(tokens(3 + 9 * i, i));
  auto batch = embed(*whole, inputs);
  auto split = embed(*small, inputs);
  ASSERT_TRUE(batch.has_value());
  ASSERT_TRUE(split.has_value());
  ASSERT_EQ(batch->vectors.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto one = embed(*whole, {inputs[i]});
    ASSERT_TRUE(one.has_value());
    // Batch-invariant engine: the same floats, not just close ones.
    EXPECT_EQ(batch->vectors[i], one->vectors[0]) << i;
    EXPECT_EQ(split->vectors[i], one->vectors[0]) << i;
  }
}

TEST_P(EmbeddingsTest, ChatDecodingIsUndisturbed) {
  auto run = [&](bool with_embeddings) {
    auto s = scheduler(/*batch_tokens=*/16);
    auto w = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
    auto out = std::make_shared<std::vector<TokenId>>();
    auto finished = std::make_shared<bool>(false);
    GenerationRequest g;
    g.prompt = tokens(20, 3);
    g.max_tokens = 24;
    g.sampling.temperature = 0;
    g.stop_at_eog = false;
    g.on_token = [out](const TokenEvent& ev) {
      if (ev.token >= 0) out->push_back(ev.token);
    };
    g.on_done = [w, finished](const Completion&) {
      std::lock_guard lock(w->first);
      *finished = true;
      w->second.notify_all();
    };
    EXPECT_TRUE(s->submit(std::move(g)).has_value());
    if (with_embeddings) {
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(embed(*s, {tokens(50, i), tokens(9, i)}).has_value());
    }
    std::unique_lock lock(w->first);
    w->second.wait_for(lock, std::chrono::seconds(60), [&] { return *finished; });
    return *out;
  };
  const auto alone = run(false);
  EXPECT_EQ(alone.size(), 24u);
  EXPECT_EQ(run(true), alone);
}

TEST_P(EmbeddingsTest, RefusesWhatItCannotEmbed) {
  auto s = scheduler();
  auto empty = embed(*s, {});
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidRequest);
  auto hollow = embed(*s, {{1, 2}, {}});
  ASSERT_FALSE(hollow.has_value());
  EXPECT_EQ(hollow.error().param, "input");
  auto bad = embed(*s, {{1, 96}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("96"), std::string::npos);
  auto longer = embed(*s, {tokens(kCtx + 1, 1)});
  ASSERT_FALSE(longer.has_value());
  EXPECT_EQ(longer.error().code, ErrorCode::kContextOverflow);
  EXPECT_NE(longer.error().message.find(std::to_string(kCtx + 1)), std::string::npos);
  // And it keeps serving.
  EXPECT_TRUE(embed(*s, {tokens(4, 2)}).has_value());
}

// A chat sequence held at its max_unread bound (one token out, not acknowledged) keeps its KV
// reservation while embeddings run beside it; released, it decodes to the end.
struct HeldChat {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TokenId> out;
  bool finished = false;
  std::atomic<bool> released{false};
  RequestId id = 0;
  Scheduler* s = nullptr;

  bool wait(const std::function<bool()>& pred) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), pred);
  }
  void release() {
    released = true;
    s->consumed(id, 1);
  }
};

std::shared_ptr<HeldChat> start_held_chat(Scheduler& s, std::vector<TokenId> prompt,
                                          int64_t max_tokens) {
  auto h = std::make_shared<HeldChat>();
  h->s = &s;
  GenerationRequest g;
  g.prompt = std::move(prompt);
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0;
  g.stop_at_eog = false;
  g.max_unread = 1;
  g.on_token = [h](const TokenEvent& ev) {
    {
      std::lock_guard lock(h->mu);
      if (ev.token >= 0) h->out.push_back(ev.token);
    }
    h->cv.notify_all();
    if (h->released) h->s->consumed(h->id, 1);  // on the scheduler thread, outside its lock
  };
  g.on_done = [h](const Completion&) {
    std::lock_guard lock(h->mu);
    h->finished = true;
    h->cv.notify_all();
  };
  std::unique_lock lock(h->mu);  // id set before on_token can read it
  auto id = s.submit(std::move(g));
  EXPECT_TRUE(id.has_value());
  if (id) h->id = *id;
  lock.unlock();
  EXPECT_TRUE(h->wait([&] { return !h->out.empty(); }));
  return h;
}

// Embeddings' KV is charged to the scheduler's KV budget beside chat sequences: with a chat
// sequence holding most of a small budget, embeddings inputs start one at a time as their KV
// fits (the most KV ever allocated stays within the budget), or wait until the sequence ends;
// an input the whole budget cannot hold is refused with the numbers. Both answers stay exact.
TEST_P(EmbeddingsTest, EmbeddingsKvIsChargedToTheKvBudgetBesideChat) {
  const auto bytes_per_token = scheduler()->kv_bytes_per_token();
  const int64_t budget = 192 * bytes_per_token;
  auto make = [&] {
    SchedulerOptions o;
    o.kv_budget_bytes = budget;
    return std::make_unique<Scheduler>(engine(), o, nullptr, std::vector<TokenId>{});
  };
  const std::vector<std::vector<TokenId>> inputs = {tokens(60, 1), tokens(60, 2), tokens(60, 3)};
  auto alone = make();
  auto want = embed(*alone, inputs);
  ASSERT_TRUE(want.has_value()) << want.error().message;
  auto chat_alone = start_held_chat(*alone, tokens(20, 5), 100);
  chat_alone->release();
  ASSERT_TRUE(chat_alone->wait([&] { return chat_alone->finished; }));

  {  // room for one input (64 positions) beside a chat reservation of 120: one at a time
    auto s = make();
    auto chat = start_held_chat(*s, tokens(20, 5), 100);
    auto got = embed(*s, inputs);
    ASSERT_TRUE(got.has_value()) << got.error().message;
    EXPECT_EQ(got->vectors, want->vectors);
    const LoadSnapshot load = s->load();
    EXPECT_GT(load.kv_bytes_peak, 120 * bytes_per_token);  // the chat's and an input's
    EXPECT_LE(load.kv_bytes_peak, load.kv_budget_bytes);
    EXPECT_EQ(load.kv_bytes_embeddings, 0);
    chat->release();
    ASSERT_TRUE(chat->wait([&] { return chat->finished; }));
    EXPECT_EQ(chat->out, chat_alone->out);
  }
  {  // a chat reservation of 150 leaves no room for an input: it waits for the chat to end
    auto s = make();
    auto chat = start_held_chat(*s, tokens(20, 5), 130);
    auto w = std::make_shared<Waiter>();
    EmbeddingRequest r;
    r.inputs = inputs;
    r.pooling = pooling();
    r.on_done = [w](Result<EmbeddingResult> res) {
      std::lock_guard lock(w->mu);
      w->done = std::move(res);
      w->cv.notify_all();
    };
    ASSERT_TRUE(s->submit_embeddings(std::move(r)).has_value());
    {
      std::unique_lock lock(w->mu);
      // Not a timing assertion: with the chat held, the input can never start.
      EXPECT_FALSE(w->cv.wait_for(lock, std::chrono::milliseconds(300),
                                  [&] { return w->done.has_value(); }));
    }
    chat->release();
    auto got = w->wait();
    ASSERT_TRUE(got.has_value()) << got.error().message;
    EXPECT_EQ(got->vectors, want->vectors);
    EXPECT_LE(s->load().kv_bytes_peak, budget);
    ASSERT_TRUE(chat->wait([&] { return chat->finished; }));
  }
  {  // an input whose KV is more than the whole budget: refused, and serving goes on
    auto s = make();
    auto big = embed(*s, {tokens(4, 1), tokens(200, 1)});
    ASSERT_FALSE(big.has_value());
    EXPECT_EQ(big.error().code, ErrorCode::kContextOverflow);
    EXPECT_EQ(big.error().param, "input");
    EXPECT_NE(big.error().message.find("input 1 (200 tokens)"), std::string::npos)
        << big.error().message;
    EXPECT_NE(big.error().message.find("budget"), std::string::npos);
    EXPECT_TRUE(embed(*s, {tokens(4, 2)}).has_value());
  }
}

INSTANTIATE_TEST_SUITE_P(Poolings, EmbeddingsTest, ::testing::Values(-1, 1, 2),
                         [](const auto& info) {
                           return info.param == 1   ? std::string("mean")
                                  : info.param == 2 ? std::string("cls")
                                                    : std::string("last_default");
                         });

// forward_hidden returns the states forward() projects: W_out * hidden gives its logits.
TEST(EngineHidden, ProjectsToTheLogits) {
  testing::TinyShape shape;
  auto src = testing::make_tiny_model(shape, WeightType::kF32, 5);
  auto model = Model::load(src);
  ASSERT_TRUE(model.has_value());
  Engine e(std::move(model).value(), EngineOptions{2, kCtx, true});
  std::vector<TokenId> toks = {3, 1, 4, 1, 5};
  std::vector<BatchEntry> batch;
  for (size_t i = 0; i < toks.size(); ++i) {
    batch.push_back({0, static_cast<int64_t>(i), toks[i], i + 1 == toks.size()});
  }
  ASSERT_TRUE(e.kv().seq_add(0).has_value());
  std::vector<float> logits, hidden;
  ASSERT_TRUE(e.forward(batch, logits).has_value());
  ASSERT_TRUE(e.kv().seq_add(1).has_value());
  for (auto& b : batch) b.seq = 1;
  ASSERT_TRUE(e.forward_hidden(batch, hidden).has_value());
  ASSERT_EQ(hidden.size(), static_cast<size_t>(shape.n_embd));
  const auto& w = src->floats("output.weight");
  for (int64_t v = 0; v < shape.n_vocab; ++v) {
    double dot = 0;
    for (int64_t k = 0; k < shape.n_embd; ++k) dot += w[v * shape.n_embd + k] * hidden[k];
    EXPECT_NEAR(logits[static_cast<size_t>(v)], dot, 1e-3 * (1 + std::abs(dot))) << v;
  }
}

}  // namespace
}  // namespace ferry::engine
