// The serving scheduler on a small random model: batched output equals solo output, prefix-cache
// hits change nothing but the work done, cancellation and deadlines free the KV, a full queue
// refuses at once, long prompts are prefilled in chunks between decode steps, a consumer that
// does not read pauses its sequence at its max_unread bound without holding up the others.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "local_engine/scheduler.h"
#include "tests/local_engine/test_model.h"

namespace ferry::engine {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kCtx = 512;

// What one request produced, filled by its callbacks on the scheduler thread.
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TokenId> tokens;
  std::string text;
  std::vector<float> logprobs;
  std::vector<std::vector<TopLogprob>> tops;
  std::optional<Completion> done;

  Completion wait() {
    std::unique_lock lock(mu);
    const bool ok = cv.wait_for(lock, std::chrono::seconds(60), [&] { return done.has_value(); });
    EXPECT_TRUE(ok) << "request did not finish";
    return done.value_or(Completion{});
  }
};

class SchedulerTest : public ::testing::Test {
 protected:
  // F16 weights: activations are not quantized, so any difference in how a token's attention
  // was computed would show in the logits (with Q8_0 it is often rounded away).
  void SetUp() override { src_ = testing::make_tiny_model(shape_, WeightType::kF16, 33); }

  std::unique_ptr<Scheduler> make(SchedulerOptions options, std::vector<TokenId> eog = {}) {
    auto model = Model::load(src_);
    EXPECT_TRUE(model.has_value());
    auto engine = std::make_unique<Engine>(std::move(model).value(),
                                           EngineOptions{2, kCtx, /*batch_invariant=*/true});
    return std::make_unique<Scheduler>(std::move(engine), std::move(options), piece_,
                                       std::move(eog));
  }

  // Fills the callbacks of `request` so they record into the returned Outcome.
  static std::shared_ptr<Outcome> attach(GenerationRequest& request) {
    auto out = std::make_shared<Outcome>();
    auto user_token = std::move(request.on_token);
    request.on_token = [out, user_token](const TokenEvent& ev) {
      {
        std::lock_guard lock(out->mu);
        if (ev.token >= 0) {
          out->tokens.push_back(ev.token);
          out->logprobs.push_back(ev.logprob);
          out->tops.emplace_back(ev.top_logprobs.begin(), ev.top_logprobs.end());
        }
        out->text += ev.text;
      }
      if (user_token) user_token(ev);
    };
    request.on_done = [out](const Completion& c) {
      std::lock_guard lock(out->mu);
      out->done = c;
      out->cv.notify_all();
    };
    return out;
  }

  static std::shared_ptr<Outcome> submit(Scheduler& s, GenerationRequest request) {
    auto out = attach(request);
    auto id = s.submit(std::move(request));
    EXPECT_TRUE(id.has_value()) << (id ? "" : id.error().message);
    if (!id) {
      std::lock_guard lock(out->mu);
      out->done = Completion{};
    }
    return out;
  }

  static GenerationRequest greedy(std::vector<TokenId> prompt, int64_t max_tokens) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    return r;
  }

  std::vector<TokenId> random_prompt(size_t n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<TokenId> pick(0, static_cast<TokenId>(shape_.n_vocab - 1));
    std::vector<TokenId> out(n);
    for (auto& t : out) t = pick(rng);
    return out;
  }

  void expect_batched_equal_solo();

  // What a request produced, for comparing runs with and without speculation.
  struct Produced {
    std::vector<TokenId> tokens;
    std::string text;
    std::vector<float> logprobs;
    std::vector<std::vector<TopLogprob>> tops;
    FinishReason finish = FinishReason::kLength;
    int64_t completion_tokens = 0;
    bool operator==(const Produced& o) const {
      auto same_tops = [&] {
        if (tops.size() != o.tops.size()) return false;
        for (size_t i = 0; i < tops.size(); ++i) {
          if (tops[i].size() != o.tops[i].size()) return false;
          for (size_t j = 0; j < tops[i].size(); ++j) {
            if (tops[i][j].token != o.tops[i][j].token ||
                tops[i][j].logprob != o.tops[i][j].logprob) {
              return false;
            }
          }
        }
        return true;
      };
      return tokens == o.tokens && text == o.text && logprobs == o.logprobs && same_tops() &&
             finish == o.finish && completion_tokens == o.completion_tokens;
    }
  };
  // Runs the requests on `s`, all submitted together or each after the previous ended.
  std::vector<Produced> run_requests(Scheduler& s, const std::vector<GenerationRequest>& requests,
                                     bool together) {
    std::vector<Produced> out(requests.size());
    std::vector<std::shared_ptr<Outcome>> outs;
    auto collect = [&](size_t i, const std::shared_ptr<Outcome>& o) {
      const Completion c = o->wait();
      EXPECT_FALSE(c.error.has_value()) << c.error->message;
      EXPECT_EQ(c.completion_tokens, static_cast<int64_t>(o->tokens.size()));
      out[i] = {o->tokens, o->text, o->logprobs, o->tops, c.finish, c.completion_tokens};
    };
    for (size_t i = 0; i < requests.size(); ++i) {
      outs.push_back(submit(s, requests[i]));
      if (!together) collect(i, outs.back());
    }
    if (together) {
      for (size_t i = 0; i < outs.size(); ++i) collect(i, outs[i]);
    }
    return out;
  }
  // Prompts that repeat spans of themselves (what prompt lookup drafts from), of many lengths.
  std::vector<GenerationRequest> repeating_requests(uint32_t seed) const {
    const int64_t max_tokens[12] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 24, 33, 60};
    const auto shared = random_prompt(32, seed);  // two whole prefix blocks, in every other one
    std::vector<GenerationRequest> out;
    for (size_t i = 0; i < 12; ++i) {
      const auto span = random_prompt(6 + 3 * i, seed + 1 + static_cast<uint32_t>(i));
      std::vector<TokenId> p = i % 2 == 0 ? shared : std::vector<TokenId>{};
      for (int rep = 0; rep < 3; ++rep) p.insert(p.end(), span.begin(), span.end());
      p.insert(p.end(), span.begin(), span.begin() + 4);
      GenerationRequest r = greedy(p, max_tokens[i]);
      r.top_logprobs = i % 3 == 0 ? 2 : 0;
      out.push_back(std::move(r));
    }
    return out;
  }
  void expect_speculation_changes_nothing(const std::vector<GenerationRequest>& requests);

  testing::TinyShape shape_;
  std::shared_ptr<testing::MemorySource> src_;
  TokenPieceFn piece_ = [](TokenId id) { return "<" + std::to_string(id) + ">"; };
};

// One gate a callback can block on until the test opens it.
struct Gate {
  std::promise<void> opened;
  std::shared_future<void> wait_for_open = opened.get_future().share();
  void open() { opened.set_value(); }
};

// Sixteen requests run one at a time, then all together: the same tokens and log-probabilities
// bit for bit.
void SchedulerTest::expect_batched_equal_solo() {
  // Lengths around the block size (16) and its multiples; half greedy, half seeded sampling.
  const size_t lengths[16] = {3, 7, 8, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 50, 63, 70};
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < 16; ++i) {
    GenerationRequest r = greedy(random_prompt(lengths[i], 100 + static_cast<uint32_t>(i)), 24);
    r.top_logprobs = 0;  // each token's log-probability: compared bit for bit
    if (i % 2 == 1) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = 7 + i;
    }
    requests.push_back(std::move(r));
  }
  SchedulerOptions options;
  options.prefix_cache = false;
  options.prefill_chunk = 32;
  std::vector<std::vector<TokenId>> solo;
  std::vector<std::vector<float>> solo_logprobs;
  {
    auto s = make(options);
    for (const auto& r : requests) {
      auto out = submit(*s, r);
      const Completion c = out->wait();
      EXPECT_FALSE(c.error.has_value());
      EXPECT_EQ(c.completion_tokens, 24);
      solo.push_back(out->tokens);
      solo_logprobs.push_back(out->logprobs);
    }
  }
  int64_t max_decode = 0;
  std::mutex steps_mu;
  options.on_step = [&](const StepStats& st) {
    std::lock_guard lock(steps_mu);
    max_decode = std::max(max_decode, st.decode_tokens);
  };
  auto s = make(options);
  std::vector<std::shared_ptr<Outcome>> outs;
  for (const auto& r : requests) outs.push_back(submit(*s, r));
  for (size_t i = 0; i < outs.size(); ++i) {
    const Completion c = outs[i]->wait();
    EXPECT_FALSE(c.error.has_value());
    EXPECT_EQ(outs[i]->tokens, solo[i]) << "request " << i << " (prompt of " << lengths[i] << ")";
    // Not just the same tokens: the same logits, bit for bit.
    EXPECT_EQ(outs[i]->logprobs, solo_logprobs[i]) << "request " << i;
  }
  std::lock_guard lock(steps_mu);
  EXPECT_GE(max_decode, 8) << "the requests did not run together";
}

TEST_F(SchedulerTest, SixteenBatchedSequencesMatchTheirSoloRuns) {
  expect_batched_equal_solo();
}

// Q8_0 and Q5_0 weights take the packed serial-order products on AVX-512 (kernels/packed.h),
// the lane-order ones elsewhere: either way a sequence's logits do not depend on its batch.
TEST_F(SchedulerTest, SixteenBatchedSequencesMatchTheirSoloRunsWithQ8_0Weights) {
  src_ = testing::make_tiny_model(shape_, WeightType::kQ8_0, 33);
  expect_batched_equal_solo();
}
TEST_F(SchedulerTest, SixteenBatchedSequencesMatchTheirSoloRunsWithQ5_0Weights) {
  src_ = testing::make_tiny_model(shape_, WeightType::kQ5_0, 35);
  expect_batched_equal_solo();
}

TEST_F(SchedulerTest, PrefixCacheHitGivesTheSameOutputAndCountsCachedTokens) {
  SchedulerOptions options;  // prefill_chunk 256: a whole prompt fits one step
  auto cached = make(options);
  options.prefix_cache = false;
  auto uncached = make(options);

  const auto x = random_prompt(100, 1);
  std::vector<TokenId> y(x.begin(), x.begin() + 64);  // shares 4 blocks with x
  for (TokenId t : random_prompt(21, 2)) y.push_back(t);
  const std::vector<TokenId> z(x.begin(), x.begin() + 96);  // a whole number of blocks

  auto request = [](const std::vector<TokenId>& p) {
    GenerationRequest r = greedy(p, 16);
    r.top_logprobs = 0;
    return r;
  };
  auto want = [&](const std::vector<TokenId>& p) {
    auto out = submit(*uncached, request(p));
    EXPECT_EQ(out->wait().cached_tokens, 0);
    return std::pair{out->tokens, out->logprobs};
  };
  struct Case {
    const std::vector<TokenId>* prompt;
    int64_t cached;
  };
  // x fills the cache; x again reuses 96 of its 100 tokens; y its 64 shared ones; z (96 tokens)
  // all but its last block.
  const Case cases[] = {{&x, 0}, {&x, 96}, {&y, 64}, {&z, 80}, {&z, 80}};
  for (const Case& c : cases) {
    auto out = submit(*cached, request(*c.prompt));
    const Completion done = out->wait();
    EXPECT_FALSE(done.error.has_value());
    EXPECT_EQ(done.prompt_tokens, static_cast<int64_t>(c.prompt->size()));
    EXPECT_EQ(done.cached_tokens, c.cached);
    const auto [tokens, logprobs] = want(*c.prompt);
    EXPECT_EQ(out->tokens, tokens);
    EXPECT_EQ(out->logprobs, logprobs);  // bit for bit
  }
  const LoadSnapshot load = cached->load();
  EXPECT_EQ(load.cached_tokens_total, 96 + 64 + 80 + 80);
  EXPECT_EQ(load.prompt_tokens_total, 100 + 100 + 85 + 96 + 96);
  EXPECT_NEAR(load.prefix_cache_hit_ratio, 320.0 / 477.0, 1e-9);
  EXPECT_GT(load.prefix_cache_bytes, 0);
  EXPECT_EQ(load.kv_bytes_used, load.prefix_cache_bytes);  // nothing running
}

TEST_F(SchedulerTest, PrefixCacheStaysWithinTheBudget) {
  SchedulerOptions options;
  auto probe = make(options);
  // Room for one running sequence (64 positions) and two cached prefixes (64 each).
  options.kv_budget_bytes = probe->kv_bytes_per_token() * (64 + 2 * 64 + 10);
  probe.reset();
  auto s = make(options);
  for (uint32_t i = 0; i < 6; ++i) {
    auto out = submit(*s, greedy(random_prompt(40, 50 + i), 8));
    EXPECT_FALSE(out->wait().error.has_value());
    const LoadSnapshot load = s->load();
    EXPECT_LE(load.kv_bytes_used, load.kv_budget_bytes);
    EXPECT_LE(load.prefix_cache_entries, 2);
  }
  EXPECT_EQ(s->load().prefix_cache_entries, 2);
}

TEST_F(SchedulerTest, CancelStopsWithinOneStepAndFreesTheKv) {
  SchedulerOptions options;
  options.prefix_cache = false;
  auto s = make(options);
  std::atomic<RequestId> id{0};
  GenerationRequest r = greedy(random_prompt(10, 3), 400);
  int seen = 0;
  r.on_token = [&](const TokenEvent&) {
    // Cancelled from inside its own callback at the 5th token. The scheduler thread waits here
    // for submit's id to be stored: a fast model (drafts kept whole) could otherwise run past
    // any bound before the test thread gets to store it.
    if (++seen != 5) return;
    while (id.load() == 0) std::this_thread::yield();
    s->cancel(id.load());
  };
  auto out = attach(r);
  auto submitted = s->submit(std::move(r));
  ASSERT_TRUE(submitted.has_value());
  id = submitted.value();
  const Completion c = out->wait();
  ASSERT_TRUE(c.error.has_value());
  EXPECT_EQ(c.error->code, ErrorCode::kCancelled);
  EXPECT_EQ(c.completion_tokens, seen) << "tokens were generated after the cancel";
  // The step of the 5th token may still emit the drafted tokens kept after it, no more.
  EXPECT_LE(c.completion_tokens, 5 + options.speculative.max_draft);
  const LoadSnapshot load = s->load();
  EXPECT_EQ(load.active_sequences, 0);
  EXPECT_EQ(load.kv_bytes_used, 0);
  EXPECT_EQ(load.sequences_cancelled, 1);
}

TEST_F(SchedulerTest, FullQueueRefusesAtOnceWithRetryAfter) {
  SchedulerOptions options;
  options.max_sequences = 1;
  options.max_queue = 1;
  auto s = make(options);
  Gate first_token, release;
  GenerationRequest a = greedy(random_prompt(10, 4), 400);
  bool blocked = false;
  a.on_token = [&](const TokenEvent&) {
    if (blocked) return;
    blocked = true;
    first_token.open();
    release.wait_for_open.wait();  // holds the scheduler thread: a stays running
  };
  auto out_a = attach(a);
  auto id_a = s->submit(std::move(a));
  ASSERT_TRUE(id_a.has_value());
  first_token.wait_for_open.wait();
  auto out_b = submit(*s, greedy(random_prompt(10, 5), 4));  // waits for the slot
  auto refused = s->submit(greedy(random_prompt(10, 6), 4));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnavailable);
  EXPECT_GE(refused.error().retry_after_s, 1);
  EXPECT_EQ(s->load().queue_depth, 1);
  s->cancel(id_a.value());
  release.open();
  const Completion a_done = out_a->wait();
  ASSERT_TRUE(a_done.error.has_value());
  EXPECT_EQ(a_done.error->code, ErrorCode::kCancelled);
  const Completion b = out_b->wait();
  EXPECT_FALSE(b.error.has_value());
  EXPECT_EQ(b.completion_tokens, 4);
}

TEST_F(SchedulerTest, DeadlineEndsRunningAndQueuedRequests) {
  SchedulerOptions options;
  options.prefix_cache = false;
  auto s = make(options);
  GenerationRequest slow = greedy(random_prompt(10, 7), 400);
  slow.deadline = Clock::now() + std::chrono::milliseconds(30);
  slow.on_token = [](const TokenEvent&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  auto out = submit(*s, std::move(slow));
  const Completion c = out->wait();
  ASSERT_TRUE(c.error.has_value());
  EXPECT_EQ(c.error->code, ErrorCode::kTimeout);
  EXPECT_LT(c.completion_tokens, 300);

  GenerationRequest late = greedy(random_prompt(10, 8), 4);
  late.deadline = Clock::now() - std::chrono::milliseconds(1);
  auto out_late = submit(*s, std::move(late));
  const Completion l = out_late->wait();
  ASSERT_TRUE(l.error.has_value());
  EXPECT_EQ(l.error->code, ErrorCode::kTimeout);
  EXPECT_EQ(l.completion_tokens, 0);
  const LoadSnapshot load = s->load();
  EXPECT_EQ(load.kv_bytes_used, 0);
  EXPECT_EQ(load.sequences_cancelled, 2);
}

// Waits (bounded) until `done` holds; false when it did not.
template <typename F>
bool eventually(F done) {
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A consumer that reads nothing: its sequence stops at the bound while another one runs to the
// end; read slowly afterwards, it resumes and produces exactly what an unthrottled run does.
TEST_F(SchedulerTest, UnreadTokensPauseTheSequenceUntilTheConsumerReads) {
  constexpr int64_t kBound = 4;
  constexpr int64_t kTokens = 40;
  SchedulerOptions options;
  options.prefix_cache = false;
  const auto prompt_a = random_prompt(20, 30);
  const auto prompt_b = random_prompt(24, 31);
  std::vector<TokenId> reference;
  {
    auto s = make(options);
    auto out = submit(*s, greedy(prompt_a, kTokens));
    EXPECT_FALSE(out->wait().error.has_value());
    reference = out->tokens;
  }
  ASSERT_EQ(static_cast<int64_t>(reference.size()), kTokens);

  auto s = make(options);
  std::atomic<int64_t> acked{0};
  std::atomic<int64_t> delivered{0};
  std::atomic<int64_t> most_unread{0};  // the largest delivered - acknowledged seen
  GenerationRequest a = greedy(prompt_a, kTokens);
  a.max_unread = kBound;
  a.on_token = [&](const TokenEvent&) {
    const int64_t gap = ++delivered - acked.load();
    if (gap > most_unread.load()) most_unread = gap;
  };
  auto out_a = attach(a);
  auto id_a = s->submit(std::move(a));
  ASSERT_TRUE(id_a.has_value());
  auto out_b = submit(*s, greedy(prompt_b, kTokens));

  // b runs its 40 steps while a, unread, stays at its bound.
  const Completion b = out_b->wait();
  EXPECT_FALSE(b.error.has_value());
  EXPECT_EQ(b.completion_tokens, kTokens);
  ASSERT_TRUE(eventually([&] { return s->load().paused_sequences == 1; }));
  EXPECT_EQ(delivered.load(), kBound);
  EXPECT_EQ(s->load().active_sequences, 1);
  {
    std::lock_guard lock(out_a->mu);
    EXPECT_FALSE(out_a->done.has_value());
    EXPECT_EQ(static_cast<int64_t>(out_a->tokens.size()), kBound);
  }

  // Read two events at a time, whenever there are some.
  while (true) {
    {
      std::lock_guard lock(out_a->mu);
      if (out_a->done) break;
    }
    const int64_t unread = delivered.load() - acked.load();
    if (unread < 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    acked += 2;
    s->consumed(id_a.value(), 2);
  }
  const Completion a_done = out_a->wait();
  EXPECT_FALSE(a_done.error.has_value());
  EXPECT_EQ(a_done.completion_tokens, kTokens);
  EXPECT_EQ(out_a->tokens, reference);
  EXPECT_LE(most_unread.load(), kBound);
  EXPECT_EQ(s->load().paused_sequences, 0);
}

// A paused sequence still ends when cancelled, or at its deadline, and frees its KV.
TEST_F(SchedulerTest, PausedSequenceStillEndsOnCancelAndDeadline) {
  SchedulerOptions options;
  options.prefix_cache = false;
  auto s = make(options);
  GenerationRequest a = greedy(random_prompt(10, 32), 200);
  a.max_unread = 2;
  auto out_a = attach(a);
  auto id_a = s->submit(std::move(a));
  ASSERT_TRUE(id_a.has_value());
  ASSERT_TRUE(eventually([&] { return s->load().paused_sequences == 1; }));
  s->cancel(id_a.value());
  Completion c = out_a->wait();
  ASSERT_TRUE(c.error.has_value());
  EXPECT_EQ(c.error->code, ErrorCode::kCancelled);
  EXPECT_EQ(c.completion_tokens, 2);

  // Paused with every other sequence idle: the deadline still ends it.
  GenerationRequest late = greedy(random_prompt(10, 33), 200);
  late.max_unread = 3;
  late.deadline = Clock::now() + std::chrono::milliseconds(300);
  auto out_late = submit(*s, std::move(late));
  c = out_late->wait();
  ASSERT_TRUE(c.error.has_value());
  EXPECT_EQ(c.error->code, ErrorCode::kTimeout);
  EXPECT_LE(c.completion_tokens, 3);
  const LoadSnapshot load = s->load();
  EXPECT_EQ(load.active_sequences, 0);
  EXPECT_EQ(load.paused_sequences, 0);
  EXPECT_EQ(load.kv_bytes_used, 0);
  EXPECT_EQ(load.sequences_cancelled, 2);
}

TEST_F(SchedulerTest, LongPromptIsPrefilledInChunksBetweenDecodeSteps) {
  SchedulerOptions options;
  options.prefix_cache = false;
  options.prefill_chunk = 32;
  std::mutex steps_mu;
  std::vector<StepStats> steps;
  options.on_step = [&](const StepStats& st) {
    std::lock_guard lock(steps_mu);
    steps.push_back(st);
  };
  auto s = make(options);
  Gate first_token, b_submitted;
  GenerationRequest a = greedy(random_prompt(5, 9), 300);
  bool once = false;
  a.on_token = [&](const TokenEvent&) {
    if (once) return;
    once = true;
    first_token.open();
    b_submitted.wait_for_open.wait();
  };
  auto out_a = attach(a);
  auto id_a = s->submit(std::move(a));
  ASSERT_TRUE(id_a.has_value());
  first_token.wait_for_open.wait();
  auto out_b = submit(*s, greedy(random_prompt(256, 10), 4));
  b_submitted.open();
  EXPECT_FALSE(out_b->wait().error.has_value());
  s->cancel(id_a.value());
  out_a->wait();
  std::lock_guard lock(steps_mu);
  int64_t mixed = 0;
  for (const StepStats& st : steps) {
    EXPECT_LE(st.prefill_tokens, 32);
    if (st.prefill_tokens > 0 && st.decode_tokens > 0) ++mixed;
  }
  // b's 256 prompt tokens took 8 steps, each also decoding a.
  EXPECT_EQ(mixed, 8);
}

TEST_F(SchedulerTest, StopStringsEogAndLogprobs) {
  auto s = make(SchedulerOptions{});
  GenerationRequest r = greedy(random_prompt(12, 11), 12);
  r.top_logprobs = 3;
  auto out = submit(*s, r);
  ASSERT_FALSE(out->wait().error.has_value());
  const std::vector<TokenId> tokens = out->tokens;
  ASSERT_EQ(tokens.size(), 12u);
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    text += piece_(tokens[i]);
    EXPECT_LE(out->logprobs[i], 0.0f);
    ASSERT_EQ(out->tops[i].size(), 3u);
    EXPECT_EQ(out->tops[i][0].token, tokens[i]);  // greedy picks the most likely token
    EXPECT_FLOAT_EQ(out->tops[i][0].logprob, out->logprobs[i]);
    EXPECT_GE(out->tops[i][0].logprob, out->tops[i][1].logprob);
    EXPECT_GE(out->tops[i][1].logprob, out->tops[i][2].logprob);
  }
  EXPECT_EQ(out->text, text);

  // A stop string: the text of the 4th token (or of its first occurrence).
  const size_t first =
      static_cast<size_t>(std::find(tokens.begin(), tokens.end(), tokens[3]) - tokens.begin());
  GenerationRequest stop = greedy(r.prompt, 12);
  stop.stop = {piece_(tokens[3])};
  auto out_stop = submit(*s, stop);
  Completion c = out_stop->wait();
  EXPECT_EQ(c.finish, FinishReason::kStop);
  EXPECT_EQ(c.completion_tokens, static_cast<int64_t>(first + 1));
  std::string before;
  for (size_t i = 0; i < first; ++i) before += piece_(tokens[i]);
  EXPECT_EQ(out_stop->text, before);

  // An end-of-generation token ends the output without being part of it.
  auto eog_sched = make(SchedulerOptions{}, {tokens[3]});
  auto out_eog = submit(*eog_sched, greedy(r.prompt, 12));
  c = out_eog->wait();
  EXPECT_EQ(c.finish, FinishReason::kStop);
  EXPECT_EQ(c.completion_tokens, static_cast<int64_t>(first));
  EXPECT_EQ(out_eog->tokens, std::vector<TokenId>(tokens.begin(), tokens.begin() + first));
}

// The same requests with drafts and without: solo without, all together with (other sequences
// batched alongside), and again together (prompt prefixes now from the prefix cache). Drafts were
// verified, some kept and some not, and nothing the client sees changed.
void SchedulerTest::expect_speculation_changes_nothing(
    const std::vector<GenerationRequest>& requests) {
  SchedulerOptions off;
  off.speculative.enabled = false;
  off.prefill_chunk = 64;
  std::vector<Produced> want;
  {
    auto s = make(off);
    want = run_requests(*s, requests, /*together=*/false);
    EXPECT_EQ(s->load().spec_drafted_total, 0);
  }
  SchedulerOptions on = off;
  on.speculative = SpeculativeOptions{};  // the default: on, 8 drafted tokens, suffix of 2+
  ASSERT_TRUE(on.speculative.enabled);
  on.speculative.cost_gate = false;  // drafts whatever this machine's timings say
  int64_t max_decode = 0, steps_with_drafts = 0;
  std::mutex mu;
  on.on_step = [&](const StepStats& st) {
    std::lock_guard lock(mu);
    max_decode = std::max(max_decode, st.decode_tokens);
    steps_with_drafts += st.draft_tokens > 0 ? 1 : 0;
  };
  auto s = make(on);
  for (int round = 0; round < 2; ++round) {
    const std::vector<Produced> got = run_requests(*s, requests, /*together=*/true);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_TRUE(got[i] == want[i])
          << "round " << round << ", request " << i << ": " << got[i].tokens.size() << " tokens vs "
          << want[i].tokens.size();
    }
  }
  const LoadSnapshot load = s->load();
  EXPECT_GT(load.cached_tokens_total, 0) << "no prefix-cache hit";
  EXPECT_GT(load.spec_accepted_total, 0) << "no drafted token was kept";
  EXPECT_LT(load.spec_accepted_total, load.spec_drafted_total) << "no drafted token was rejected";
  std::lock_guard lock(mu);
  EXPECT_GE(max_decode, 4) << "the requests did not run together";
  EXPECT_GT(steps_with_drafts, 0);
}

TEST_F(SchedulerTest, SpeculationGivesTheSameGreedyOutput) {
  expect_speculation_changes_nothing(repeating_requests(400));
  // Q8_0 and Q5_0: the packed products (AVX-512) take a step's drafted rows together.
  src_ = testing::make_tiny_model(shape_, WeightType::kQ8_0, 34);
  expect_speculation_changes_nothing(repeating_requests(500));
  src_ = testing::make_tiny_model(shape_, WeightType::kQ5_0, 36);
  expect_speculation_changes_nothing(repeating_requests(600));
}

// A think budget is the sequence's own (the sampler's): alone or batched, with drafts or without,
// from a prefix-cache hit or not, the output is the same, and each request's closing tokens come
// at its budget (or earlier, when the model began them).
TEST_F(SchedulerTest, ThinkBudgetClosesAtTheBudgetAloneBatchedAndSpeculating) {
  auto requests = repeating_requests(800);
  const std::vector<TokenId> close = {3, 5};
  for (size_t i = 0; i < requests.size(); ++i) {
    ThinkBudget& t = requests[i].sampling.think;
    t.close = close;
    t.max_tokens = static_cast<int64_t>(i % 4);
    t.open_at_start = true;
  }
  expect_speculation_changes_nothing(requests);
  SchedulerOptions off;
  off.speculative.enabled = false;
  auto s = make(off);
  const std::vector<Produced> got = run_requests(*s, requests, /*together=*/true);
  int checked = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto budget = static_cast<size_t>(i % 4);
    const std::vector<TokenId>& t = got[i].tokens;
    if (t.size() < budget + close.size()) continue;
    const auto at = std::search(t.begin(), t.end(), close.begin(), close.end());
    ASSERT_NE(at, t.end()) << "request " << i;
    EXPECT_LE(static_cast<size_t>(at - t.begin()), budget) << "request " << i;
    ++checked;
  }
  EXPECT_GE(checked, 6);
}

// With a seed, sampling draws the same tokens: each emitted token is the sampler's draw from the
// logits that follow the tokens before it, with or without drafts (penalties and top-k/top-p
// included), so the distribution is unchanged too.
TEST_F(SchedulerTest, SpeculationGivesTheSameSeededSamples) {
  auto requests = repeating_requests(600);
  for (size_t i = 0; i < requests.size(); ++i) {
    SamplingParams& sp = requests[i].sampling;
    sp.temperature = i % 2 == 0 ? 0.7f : 0.3f;
    sp.top_k = i % 3 == 0 ? 20 : 0;
    sp.top_p = 0.95f;
    sp.frequency_penalty = i % 4 == 1 ? 0.2f : 0.0f;
    sp.seed = 90 + i;
  }
  expect_speculation_changes_nothing(requests);
}

// Stop strings and max_tokens end a request inside a step's kept draft, the text held back for
// a stop string is never shown, and the counts are the tokens emitted.
TEST_F(SchedulerTest, SpeculationKeepsStopStringsAndLengths) {
  SchedulerOptions off;
  off.speculative.enabled = false;
  auto plain = make(off);
  std::vector<GenerationRequest> requests = repeating_requests(700);
  std::vector<GenerationRequest> stopped;
  const std::vector<Produced> base = run_requests(*plain, requests, false);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (base[i].tokens.size() < 6) continue;
    GenerationRequest r = requests[i];
    // The text of two tokens in a row from the middle: a stop string that spans tokens.
    const size_t k = base[i].tokens.size() / 2;
    r.stop = {piece_(base[i].tokens[k]) + piece_(base[i].tokens[k + 1])};
    stopped.push_back(std::move(r));
  }
  ASSERT_GE(stopped.size(), 4u);
  const std::vector<Produced> want = run_requests(*plain, stopped, false);
  SchedulerOptions on;
  on.speculative.cost_gate = false;
  auto spec = make(on);
  const std::vector<Produced> got = run_requests(*spec, stopped, true);
  for (size_t i = 0; i < stopped.size(); ++i) {
    EXPECT_TRUE(got[i] == want[i]) << "request " << i;
    EXPECT_EQ(got[i].finish, FinishReason::kStop) << "request " << i;
    EXPECT_EQ(got[i].text.find(stopped[i].stop[0]), std::string::npos);
  }
  EXPECT_GT(spec->load().spec_accepted_total, 0);
}

// With the cost gate (the default): drafts only where this machine's timings say they pay;
// whatever it decides, the output is the same.
TEST_F(SchedulerTest, SpeculationWithTheCostGateGivesTheSameOutput) {
  SchedulerOptions off;
  off.speculative.enabled = false;
  auto plain = make(off);
  auto gated = make(SchedulerOptions{});
  const auto requests = repeating_requests(1000);
  const auto want = run_requests(*plain, requests, false);
  const auto got = run_requests(*gated, requests, true);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_TRUE(got[i] == want[i]) << "request " << i;
}

// An engine with llama.cpp's numerics picks kernels by batch shape, so a verified draft could
// change the output: there the scheduler never drafts.
TEST_F(SchedulerTest, NoSpeculationWithoutBatchInvariantNumerics) {
  auto model = Model::load(src_);
  ASSERT_TRUE(model.has_value());
  auto engine = std::make_unique<Engine>(std::move(model).value(),
                                         EngineOptions{2, kCtx, /*batch_invariant=*/false});
  Scheduler s(std::move(engine), SchedulerOptions{}, piece_, {});
  run_requests(s, repeating_requests(800), true);
  EXPECT_EQ(s.load().spec_drafted_total, 0);
}

// Cancelled while drafting: the request ends within a step and its KV is freed.
TEST_F(SchedulerTest, SpeculatingSequenceCancelsAndFreesItsKv) {
  SchedulerOptions o;
  o.prefix_cache = false;
  o.speculative.cost_gate = false;
  auto s = make(o);
  GenerationRequest r = repeating_requests(900).back();
  r.max_tokens = 300;
  Gate gate;
  std::atomic<int> seen{0};
  r.on_token = [&](const TokenEvent&) {
    if (++seen == 20) gate.wait_for_open.wait();
  };
  auto out = attach(r);
  auto id = s->submit(std::move(r));
  ASSERT_TRUE(id.has_value());
  while (seen < 20) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s->cancel(*id);
  gate.open();
  const Completion c = out->wait();
  ASSERT_TRUE(c.error.has_value());
  EXPECT_EQ(c.error->code, ErrorCode::kCancelled);
  EXPECT_LT(c.completion_tokens, 300);
  EXPECT_EQ(c.completion_tokens, static_cast<int64_t>(out->tokens.size()));
  for (int i = 0; i < 1000 && s->load().kv_bytes_used != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(s->load().kv_bytes_used, 0);
  EXPECT_GT(s->load().spec_drafted_total, 0);
}

TEST_F(SchedulerTest, RefusesRequestsThatCannotFit) {
  auto s = make(SchedulerOptions{});
  auto overflow = s->submit(greedy(random_prompt(500, 12), 100));
  ASSERT_FALSE(overflow.has_value());
  EXPECT_EQ(overflow.error().code, ErrorCode::kContextOverflow);
  EXPECT_EQ(overflow.error().message,
            "this model's context is 512 tokens; the prompt is 500 tokens and max_tokens is 100");
  EXPECT_EQ(s->submit(greedy({}, 4)).error().code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(s->submit(greedy({1, 2}, 0)).error().code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(s->submit(greedy({1, 1000}, 4)).error().code, ErrorCode::kInvalidRequest);
  // Exactly the context is fine, and ends by length.
  auto out = submit(*s, greedy(random_prompt(500, 13), 12));
  const Completion c = out->wait();
  EXPECT_FALSE(c.error.has_value());
  EXPECT_EQ(c.finish, FinishReason::kLength);
  EXPECT_EQ(c.completion_tokens, 12);
}

TEST_F(SchedulerTest, HugeMaxTokensIsRefusedNotWrapped) {
  // prompt + max_tokens overflows int64 for these: the check must not pass by wrapping, and the
  // KV reservation must not wrap to a small size while generation runs to the context.
  auto s = make(SchedulerOptions{});
  for (int64_t max_tokens : {INT64_MAX, INT64_MAX - 1, INT64_MAX - 9, int64_t{1} << 62,
                             (int64_t{1} << 53) + 1, int64_t{513}}) {
    SCOPED_TRACE(max_tokens);
    auto refused = s->submit(greedy(random_prompt(10, 14), max_tokens));
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, ErrorCode::kContextOverflow);
  }
  EXPECT_EQ(s->submit(greedy({1, 2}, INT64_MIN)).error().code, ErrorCode::kInvalidRequest);
  // The scheduler still serves: a request that fits runs to its max_tokens.
  auto out = submit(*s, greedy(random_prompt(10, 15), 6));
  const Completion c = out->wait();
  EXPECT_FALSE(c.error.has_value());
  EXPECT_EQ(c.completion_tokens, 6);
}

}  // namespace
}  // namespace ferry::engine
