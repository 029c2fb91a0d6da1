// Planner and Recorder: counting, facts, policy decisions, budget admission and ledger rows,
// without any
// network (backends are never called here; gateway/proxy.cpp runs the plans in integration tests).
#include "gateway/gateway.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "gateway/prompt_count.h"
#include "ledger/report.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::gateway {
namespace {

using nlohmann::json;

class FakeBackend final : public adapters::Backend {
 public:
  explicit FakeBackend(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  boost::asio::awaitable<Result<adapters::BackendReply>> send(const adapters::BackendRequest&,
                                                              adapters::StreamSink*,
                                                              adapters::CancelSignal&) override {
    co_return Error::make(ErrorCode::kInternal, "not used in unit tests");
  }

 private:
  std::string name_;
};

class PlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ferry-planner-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    gateway_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // Two HTTP backends, three models (unless a test sets models_); extra YAML is appended at
  // the top level.
  void start(const std::string& extra = "") {
    std::string yaml = R"(
backends:
  - { name: gpu, base_url: "http://127.0.0.1:9/v1" }
  - { name: other, base_url: "http://127.0.0.1:9/v1" }
)" + models_ + extra;
    auto cfg = config::load_config_text(yaml, write("ferry.yaml", yaml));
    ASSERT_TRUE(cfg) << cfg.error().message;
    cfg_ = std::make_unique<config::Config>(std::move(*cfg));
    std::map<std::string, adapters::Backend*> backends = {{"gpu", &gpu_}, {"other", &other_}};
    auto r = Gateway::create(*cfg_, backends);
    ASSERT_TRUE(r) << r.error().message;
    gateway_ = std::move(*r);
  }

  static ParsedRequest chat(const std::string& model, const std::string& text,
                            const std::string& extra = "") {
    std::string body = R"({"model":")" + model + R"(","messages":[{"role":"user","content":")" +
                       text + "\"}]" + extra + "}";
    auto p = parse_request(adapters::Endpoint::kChatCompletions, body);
    EXPECT_TRUE(p) << (p ? "" : p.error().message);
    return *p;
  }

  RequestContext context(std::string key = "k1", std::string team = "team-a") {
    RequestContext c;
    c.request_id = "req-" + std::to_string(++n_);
    c.principal = Principal{std::move(key), std::move(team), "proj", config::Role::kApp, {"gold"}};
    c.started_us = 1'780'000'000'000'000;  // 2026-05-28
    return c;
  }

  std::filesystem::path dir_;
  std::string models_ = R"(models:
  - { name: big, backend: gpu, upstream_model: big-upstream, tokenizer: cl100k_base, context_length: 100000 }
  - { name: tiny, backend: other, upstream_model: tiny-upstream, tokenizer: o200k_base, context_length: 40 }
  - { name: blind, backend: other, upstream_model: blind-upstream }
)";
  FakeBackend gpu_{"gpu"};
  FakeBackend other_{"other"};
  std::unique_ptr<config::Config> cfg_;
  std::unique_ptr<Gateway> gateway_;
  int n_ = 0;
};

TEST_F(PlannerTest, WithoutPolicyTheModelNameRoutesToItsBackendWithTheUpstreamName) {
  start();
  auto plan = gateway_->planner().plan(context(), chat("big", "hello there"));
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_FALSE(plan->refusal);
  ASSERT_EQ(plan->hops.size(), 1u);
  EXPECT_EQ(plan->hops[0].target->backend, &gpu_);
  EXPECT_EQ(json::parse(plan->hops[0].request.body)["model"], "big-upstream");
  // The count is the tokenizer's, with OpenAI's per-message accounting for cl100k_base.
  auto tok = tokenizer::load_tokenizer("cl100k_base");
  ASSERT_TRUE(tok);
  auto fmt = tokenizer::ChatFormatter::create(*tok);
  ASSERT_TRUE(fmt);
  auto expected = (*fmt)->count_json(R"({"messages":[{"role":"user","content":"hello there"}]})");
  ASSERT_TRUE(expected);
  const auto& count = plan->prompt_counts.at(plan->hops[0].target);
  EXPECT_EQ(count.tokens, static_cast<int64_t>(*expected));
  EXPECT_EQ(count.source, ledger::TokenSource::kTokenizer);
}

TEST_F(PlannerTest, WithoutPolicyThePlanCarriesTheTaskAndClaimedTagsButNoFacts) {
  start();
  RequestContext ctx = context();
  ctx.tags_header = "a, b";
  auto plan = gateway_->planner().plan(
      ctx, chat("big", "hi", R"(,"metadata":{"task_id":"t-meta","tags":"b, c"},"max_tokens":3)"));
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_FALSE(plan->refusal);
  EXPECT_EQ(plan->task_id, "t-meta");
  EXPECT_EQ(plan->claimed_tags, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(plan->requested_model, "big");
  EXPECT_TRUE(plan->rule_id.empty());
  EXPECT_TRUE(plan->facts_json.empty());  // only a policy's decision is recorded for replay
  EXPECT_TRUE(plan->headers.empty());
  EXPECT_EQ(plan->hops[0].name, "big");
  EXPECT_EQ(plan->hops[0].request.request_id, ctx.request_id);
  // The x-ferry-task header wins over metadata.task_id.
  ctx.task_header = "t-header";
  auto header =
      gateway_->planner().plan(ctx, chat("big", "hi", R"(,"metadata":{"task_id":"t-meta"})"));
  ASSERT_TRUE(header);
  EXPECT_EQ(header->task_id, "t-header");
}

TEST_F(PlannerTest, EveryPolicyTargetIsCountedAndTargetsCountingAlikeAgree) {
  models_ = R"(models:
  - { name: big, backend: gpu, upstream_model: big-upstream, tokenizer: cl100k_base }
  - { name: twin, backend: other, upstream_model: twin-upstream, tokenizer: cl100k_base }
  - { name: blind, backend: other, upstream_model: blind-upstream }
  - { name: blind2, backend: gpu, upstream_model: blind2-upstream }
)";
  std::string policy = write("policies.yaml", R"(
targets:
  one: big
  two: twin
  three: blind
  four: blind2
models: [auto]
default: { route: [one, two, three, four] }
)");
  start("policy: { file: " + policy + ", watch: false }\n");
  auto plan = gateway_->planner().plan(context(), chat("auto", "hello there, how are you?"));
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->hops.size(), 4u);
  ASSERT_EQ(plan->prompt_counts.size(), 4u);
  const PromptCount& big = plan->prompt_counts.at(plan->hops[0].target);
  const PromptCount& twin = plan->prompt_counts.at(plan->hops[1].target);
  const PromptCount& blind = plan->prompt_counts.at(plan->hops[2].target);
  const PromptCount& blind2 = plan->prompt_counts.at(plan->hops[3].target);
  EXPECT_EQ(big.source, ledger::TokenSource::kTokenizer);
  EXPECT_EQ(twin.source, ledger::TokenSource::kTokenizer);
  EXPECT_EQ(twin.tokens, big.tokens);
  EXPECT_EQ(blind.source, ledger::TokenSource::kEstimate);
  EXPECT_EQ(blind2.source, ledger::TokenSource::kEstimate);
  EXPECT_EQ(blind2.tokens, blind.tokens);
  EXPECT_NE(blind.tokens, big.tokens);
}

TEST(PromptCounters, ModelsWithTheSameTokenizerAndTemplateShareOneFormatter) {
  auto cfg = config::load_config_text(R"(
backends:
  - { name: gpu, base_url: "http://127.0.0.1:9/v1" }
models:
  - { name: a, backend: gpu, upstream_model: a, tokenizer: cl100k_base }
  - { name: b, backend: gpu, upstream_model: b, tokenizer: cl100k_base }
  - { name: c, backend: gpu, upstream_model: c, tokenizer: o200k_base }
)",
                                      "ferry.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  auto counters = load_prompt_counters(*cfg);
  ASSERT_TRUE(counters) << counters.error().message;
  const PromptCounter& a = counters->at("a");
  const PromptCounter& b = counters->at("b");
  const PromptCounter& c = counters->at("c");
  ASSERT_NE(a.chat, nullptr);
  ASSERT_NE(c.chat, nullptr);
  EXPECT_EQ(a.tokenizer, b.tokenizer);
  EXPECT_EQ(a.chat, b.chat);  // one formatter: the planner counts a chat for both once
  EXPECT_NE(a.chat, c.chat);
}

TEST_F(PlannerTest, UnknownModelIsA404NamingTheModels) {
  start();
  auto plan = gateway_->planner().plan(context(), chat("nope", "x"));
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().code, ErrorCode::kNotFound);
  EXPECT_NE(plan.error().message.find("big, tiny, blind"), std::string::npos)
      << plan.error().message;
}

TEST_F(PlannerTest, PromptThatDoesNotFitTheContextIsRefusedWithTheNumbers) {
  start();
  auto plan =
      gateway_->planner().plan(context(), chat("tiny", "a few words here", R"(,"max_tokens":30)"));
  ASSERT_TRUE(plan);
  ASSERT_TRUE(plan->refusal);
  EXPECT_EQ(plan->refusal->code, ErrorCode::kContextOverflow);
  EXPECT_NE(plan->refusal->message.find("maximum context length is 40 tokens"), std::string::npos)
      << plan->refusal->message;
  // Without max_tokens the same prompt fits.
  auto ok = gateway_->planner().plan(context(), chat("tiny", "a few words here"));
  ASSERT_TRUE(ok);
  EXPECT_FALSE(ok->refusal);
}

TEST_F(PlannerTest, ModelWithoutTokenizerIsEstimated) {
  start();
  auto plan = gateway_->planner().plan(context(), chat("blind", "hello"));
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->prompt_counts.at(plan->hops[0].target).source, ledger::TokenSource::kEstimate);
}

constexpr const char* kPolicy = R"(
targets:
  large: big
  small: tiny
  other: blind
models: [auto, chat-large]
rules:
  - id: refuse-forbidden
    when: { claimed_tags: { in: [forbidden] } }
    reject: { status: 403, message: "not here" }
  - id: research
    when: { team: research }
    set: { max_tokens: { at_most: 5 }, temperature: { at_most: 0.5 } }
    route: [large, other]
    shadow: other
    tag: [research-tag]
  - id: short-local
    when: { prompt_tokens: { lte: 30 }, fits: small }
    route: [small, large]
default: { route: [large, other] }
)";

TEST_F(PlannerTest, PolicyAliasesAreTheModels) {
  std::string policy = write("policies.yaml", kPolicy);
  start("policy: { file: " + policy + ", watch: false }\n");
  json models = json::parse(gateway_->planner().models_json());
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["id"], "auto");
  auto plan =
      gateway_->planner().plan(context(), chat("big", "x"));  // a config model, not an alias
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.error().message.find("auto, chat-large"), std::string::npos);
}

TEST_F(PlannerTest, FirstMatchingRuleRoutesWithFallbacksAndHeaders) {
  std::string policy = write("policies.yaml", kPolicy);
  start("policy: { file: " + policy + ", watch: false }\n");
  auto plan = gateway_->planner().plan(context(), chat("auto", "short"));
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_FALSE(plan->refusal);
  EXPECT_EQ(plan->rule_id, "short-local");
  ASSERT_EQ(plan->hops.size(), 2u);
  EXPECT_EQ(plan->hops[0].name, "small");
  EXPECT_EQ(plan->hops[1].name, "large");
  EXPECT_EQ(json::parse(plan->hops[0].request.body)["model"], "tiny-upstream");
  EXPECT_EQ(json::parse(plan->hops[1].request.body)["model"], "big-upstream");
  bool has_rule = false;
  for (const auto& [k, v] : plan->headers)
    has_rule = has_rule || (k == "x-ferry-rule" && v == "short-local");
  EXPECT_TRUE(has_rule);
  // Facts were recorded for replay.
  json facts = json::parse(plan->facts_json);
  EXPECT_EQ(facts["team"], "team-a");
}

TEST_F(PlannerTest, LongPromptSkipsTheSmallTargetThatCannotFit) {
  std::string policy = write("policies.yaml", kPolicy);
  start("policy: { file: " + policy + ", watch: false }\n");
  std::string words;
  for (int i = 0; i < 60; ++i) words += "word ";
  auto plan = gateway_->planner().plan(context(), chat("auto", words));
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->rule_id, "default");
  EXPECT_EQ(plan->hops[0].name, "large");
}

TEST_F(PlannerTest, SetClampsParametersInTheUpstreamBodyAndShadowAndTags) {
  std::string policy = write("policies.yaml", kPolicy);
  start("policy: { file: " + policy + ", watch: false }\n");
  auto plan = gateway_->planner().plan(
      context("k9", "research"), chat("auto", "hi", R"(,"max_tokens":100,"temperature":1.5)"));
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->rule_id, "research");
  json body = json::parse(plan->hops[0].request.body);
  EXPECT_EQ(body["max_tokens"], 5);
  EXPECT_DOUBLE_EQ(body["temperature"].get<double>(), 0.5);
  ASSERT_TRUE(plan->shadow);
  EXPECT_EQ(plan->shadow->name, "other");
  EXPECT_EQ(plan->tags, std::vector<std::string>{"research-tag"});
}

TEST_F(PlannerTest, RejectIsARefusalWithTheRulesStatusAndClaimedTagsComeFromTheHeader) {
  std::string policy = write("policies.yaml", kPolicy);
  start("policy: { file: " + policy + ", watch: false }\n");
  RequestContext ctx = context();
  ctx.tags_header = "a, forbidden";
  auto plan = gateway_->planner().plan(ctx, chat("auto", "hi"));
  ASSERT_TRUE(plan);
  ASSERT_TRUE(plan->refusal);
  EXPECT_EQ(plan->refusal->code, ErrorCode::kForbidden);
  EXPECT_EQ(plan->refusal->message, "not here");
  EXPECT_EQ(plan->rule_id, "refuse-forbidden");
}

TEST_F(PlannerTest, ExplainShowsTheChosenRule) {
  std::string policy = write("policies.yaml", kPolicy);
  start("policy: { file: " + policy + ", watch: false }\n");
  auto text = gateway_->planner().explain(context(), chat("auto", "short"));
  ASSERT_TRUE(text) << text.error().message;
  json j = json::parse(*text);
  EXPECT_EQ(j["decision"]["rule"], "short-local") << *text;
}

// Waits for a durable callback.
struct Durable {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool ok = false;
  ledger::DurableCallback callback() {
    return [this](const Status& s) {
      std::lock_guard lock(mu);
      done = true;
      ok = static_cast<bool>(s);
      cv.notify_all();
    };
  }
  bool wait() {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; });
    return done && ok;
  }
};

std::string ledger_yaml(const std::string& db, const std::string& budget_amount) {
  return "ledger: { path: " + db +
         " }\n"
         "prices:\n"
         "  - { model: big, effective_from: 2026-01-01, input: 2.00, output: 10.00 }\n"
         "budgets:\n"
         "  - { name: team-a-daily, scope: team, match: team-a, amount: " +
         budget_amount + ", period: day, mode: hard }\n";
}

TEST_F(PlannerTest, SettleRecordsTheRowWithBackendUsageBeforeTheCallback) {
  std::string db = (dir_ / "ledger.db").string();
  start(ledger_yaml(db, "100"));
  RequestContext ctx = context();
  ctx.task_header = "task-77";
  // max_tokens 100: a backend's 100 completion tokens are plausible (more would not be).
  auto plan = gateway_->planner().plan(ctx, chat("big", "hello", R"(,"max_tokens":100)"));
  ASSERT_TRUE(plan);
  ASSERT_FALSE(plan->refusal);
  AttemptOutcome a;
  a.hop = &plan->hops[0];
  a.ok = true;
  a.http_status = 200;
  a.usage.prompt_tokens = 1000;
  a.usage.completion_tokens = 100;
  a.started_us = ctx.started_us;
  a.ended_us = ctx.started_us + 1000;
  Durable d;
  std::string id = gateway_->recorder().settle(ctx, *plan, {a}, d.callback());
  EXPECT_FALSE(id.empty());
  ASSERT_TRUE(d.wait());
  ledger::ReportQuery q;
  q.by = {ledger::ReportBy::kTask};
  auto report = ledger::run_report(db, q);
  ASSERT_TRUE(report) << report.error().message;
  ASSERT_EQ(report->rows.size(), 1u);
  EXPECT_EQ(report->rows[0].group[0], "task-77");
  EXPECT_EQ(report->rows[0].input_tokens, 1000);
  EXPECT_EQ(report->rows[0].output_tokens, 100);
  // 1000 * 2.00 / 1M + 100 * 10.00 / 1M = 0.002 + 0.001
  EXPECT_EQ(report->rows[0].total.micros(), 3000);
}

TEST_F(PlannerTest, MissingUsageIsCountedWithTheTokenizer) {
  std::string db = (dir_ / "ledger.db").string();
  start(ledger_yaml(db, "100"));
  RequestContext ctx = context();
  auto plan = gateway_->planner().plan(ctx, chat("big", "hello"));
  ASSERT_TRUE(plan);
  AttemptOutcome a;
  a.hop = &plan->hops[0];
  a.ok = false;
  a.sent_to_client = true;  // a stream cut short after some text
  a.error = Error::make(ErrorCode::kBackendError, "cut");
  a.http_status = 200;
  extract_answer_text(
      "data: {\"choices\":[{\"delta\":{\"content\":\"Hello wor\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"ld, again\"}}]}\n\n",
      true, a.generated_text, a.reasoning_text);
  EXPECT_EQ(a.generated_text, "Hello world, again");
  Durable d;
  gateway_->recorder().settle(ctx, *plan, {a}, d.callback());
  ASSERT_TRUE(d.wait());
  ledger::ReportQuery q;
  q.by = {ledger::ReportBy::kTarget};
  auto report = ledger::run_report(db, q);
  ASSERT_TRUE(report);
  ASSERT_EQ(report->rows.size(), 1u);
  auto tok = tokenizer::load_tokenizer("cl100k_base");
  EXPECT_EQ(report->rows[0].output_tokens,
            static_cast<int64_t>((*tok)->count("Hello world, again")));
  EXPECT_EQ(report->rows[0].input_tokens, plan->prompt_counts.at(plan->hops[0].target).tokens);
}

TEST_F(PlannerTest, HardBudgetRefusesPastTheWorstCase) {
  std::string db = (dir_ / "ledger.db").string();
  // Worst case of one request: ~8 prompt tokens at 2.00/M + 1000 output at 10.00/M ≈ 0.01.
  start(ledger_yaml(db, "0.025"));
  std::vector<Plan> admitted;
  int refused = 0;
  for (int i = 0; i < 5; ++i) {
    auto plan = gateway_->planner().plan(context(), chat("big", "hello", R"(,"max_tokens":1000)"));
    ASSERT_TRUE(plan);
    if (plan->refusal) {
      EXPECT_EQ(plan->refusal->code, ErrorCode::kRateLimited);
      EXPECT_NE(plan->refusal->message.find("team-a-daily"), std::string::npos)
          << plan->refusal->message;
      ++refused;
    } else {
      admitted.push_back(std::move(*plan));
    }
  }
  EXPECT_EQ(admitted.size(), 2u);
  EXPECT_EQ(refused, 3);
  // Another team's requests are not limited by team-a's budget.
  auto other = gateway_->planner().plan(context("k2", "team-b"),
                                        chat("big", "hello", R"(,"max_tokens":1000)"));
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->refusal);
}

}  // namespace
}  // namespace ferry::gateway
