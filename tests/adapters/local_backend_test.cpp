// LocalBackend::send on an io_context with a collecting sink, on a small synthetic GGUF model
// (random weights, a real byte-level vocabulary and a ChatML template): OpenAI stream and body
// shapes, usage with cached tokens, logprobs, context overflow, overload and cancellation.
#include "adapters/local_backend.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "api/openai_parse.h"
#include "model_tools/model_tools.h"

namespace ferry::adapters {
namespace {

namespace asio = boost::asio;
using Json = nlohmann::json;

class CollectingSink : public StreamSink {
 public:
  asio::awaitable<bool> write(std::string_view bytes) override {
    writes.emplace_back(bytes);
    bool ok = true;
    if (on_write) ok = on_write(writes.size());
    co_return ok;
  }
  // The data of every SSE event written, parsed.
  std::vector<Json> events() const {
    std::vector<Json> out;
    std::string all;
    for (const auto& w : writes) all += w;
    size_t pos = 0;
    while (pos < all.size()) {
      const size_t end = all.find("\n\n", pos);
      EXPECT_NE(end, std::string::npos) << "an event without its blank line";
      if (end == std::string::npos) break;
      const std::string event = all.substr(pos, end - pos);
      EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
      EXPECT_NE(event.substr(6), "[DONE]");  // the gateway writes [DONE]
      out.push_back(Json::parse(event.substr(6)));
      pos = end + 2;
    }
    return out;
  }
  std::vector<std::string> writes;
  std::function<bool(size_t n_writes)> on_write;
};

class LocalBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() /
           ("ferry-local-backend-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    model_tools::SynthOptions o;
    o.n_embd = 128;
    o.n_layer = 2;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.n_ff = 256;
    o.n_ctx = 512;
    o.type = "Q8_0";
    o.seed = 5;
    ASSERT_TRUE(model_tools::write_synth_model(o, (dir_ / "tiny.gguf").string()).has_value());
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static config::BackendConfig config(int64_t max_sequences = 4, int64_t max_queue = 4) {
    config::BackendConfig c;
    c.name = "local";
    c.kind = "local";
    config::LocalEngineConfig l;
    l.model_path = (dir_ / "tiny.gguf").string();
    l.threads = 2;
    l.context_length = 512;
    l.max_sequences = max_sequences;
    l.max_queue = max_queue;
    c.local = l;
    return c;
  }

  void SetUp() override {
    auto b = LocalBackend::open(config());
    ASSERT_TRUE(b.has_value()) << b.error().message;
    backend_ = std::move(b).value();
  }

  static Result<BackendReply> run(LocalBackend& b, const BackendRequest& req, StreamSink* sink,
                                  CancelSignal& cancel) {
    asio::io_context ioc;
    std::optional<Result<BackendReply>> result;
    asio::co_spawn(
        ioc, [&]() -> asio::awaitable<void> { result.emplace(co_await b.send(req, sink, cancel)); },
        asio::detached);
    ioc.run();
    return std::move(*result);
  }

  Result<BackendReply> run(const BackendRequest& req, StreamSink* sink = nullptr) {
    CancelSignal cancel;
    return run(*backend_, req, sink, cancel);
  }

  static BackendRequest chat(Json body, bool stream = false, bool wants_usage = false) {
    body["model"] = "tiny";
    BackendRequest r;
    r.endpoint = Endpoint::kChatCompletions;
    r.stream = stream;
    r.client_wants_usage = wants_usage;
    if (stream) body["stream"] = true;
    if (stream) body["stream_options"] = {{"include_usage", true}};  // as the gateway forces
    r.body = body.dump();
    return r;
  }

  static Json hello(int max_tokens) {
    return {{"messages", {{{"role", "user"}, {"content", "Hello there, how are you?"}}}},
            {"max_tokens", max_tokens},
            {"temperature", 0},
            {"ignore_eos", true}};
  }

  static inline std::filesystem::path dir_;
  std::unique_ptr<LocalBackend> backend_;
};

TEST_F(LocalBackendTest, NonStreamingChatBody) {
  const BackendRequest req = chat(hello(8));
  auto reply = run(req);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  const Json body = Json::parse(reply->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["index"], 0);
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_TRUE(choice["message"]["content"].is_string());
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_TRUE(choice["logprobs"].is_null());
  const auto prompt = backend_->count_prompt(Endpoint::kChatCompletions, req.body);
  ASSERT_TRUE(prompt.has_value());
  EXPECT_GT(*prompt, 5);
  const Json& usage = body["usage"];
  EXPECT_EQ(usage["prompt_tokens"], *prompt);
  EXPECT_EQ(usage["completion_tokens"], 8);
  EXPECT_EQ(usage["total_tokens"], *prompt + 8);
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(reply->usage.prompt_tokens, *prompt);
  EXPECT_EQ(reply->usage.completion_tokens, 8);
  EXPECT_EQ(reply->finish_reason, "length");
  EXPECT_GE(reply->first_byte_us, 0);
}

TEST_F(LocalBackendTest, StreamingChatChunksAsOpenAiSendsThem) {
  auto whole = run(chat(hello(6)));
  ASSERT_TRUE(whole.has_value());
  const std::string want = Json::parse(whole->body)["choices"][0]["message"]["content"];

  CollectingSink sink;
  auto reply = run(chat(hello(6), /*stream=*/true, /*wants_usage=*/true), &sink);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  const auto events = sink.events();
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["choices"][0]["delta"], Json({{"role", "assistant"}, {"content", ""}}));
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const Json& e = events[i];
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_EQ(e["id"], events.front()["id"]);
    EXPECT_TRUE(e.contains("usage") && e["usage"].is_null());
    const Json& choice = e["choices"][0];
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    if (i + 2 < events.size()) {
      EXPECT_TRUE(choice["finish_reason"].is_null());
    }
  }
  EXPECT_EQ(text, want);
  const Json& last_choice = events[events.size() - 2]["choices"][0];
  EXPECT_EQ(last_choice["finish_reason"], "length");
  EXPECT_EQ(last_choice["delta"], Json::object());
  const Json& usage_chunk = events.back();
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 6);
  EXPECT_EQ(reply->usage.completion_tokens, 6);
  EXPECT_EQ(reply->finish_reason, "length");
  EXPECT_TRUE(reply->body.empty());

  // A client that did not ask for usage gets none, but the reply still carries it.
  CollectingSink quiet;
  auto r2 = run(chat(hello(6), true, /*wants_usage=*/false), &quiet);
  ASSERT_TRUE(r2.has_value());
  for (const Json& e : quiet.events()) {
    EXPECT_FALSE(e.contains("usage"));
    EXPECT_FALSE(e["choices"].empty());
  }
  EXPECT_EQ(r2->usage.completion_tokens, 6);
}

TEST_F(LocalBackendTest, CompletionsWithLogprobs) {
  BackendRequest req;
  req.endpoint = Endpoint::kCompletions;
  req.body = Json{{"model", "tiny"}, {"prompt", "Once upon a time"},
                  {"max_tokens", 5}, {"temperature", 0},
                  {"logprobs", 2},   {"ignore_eos", true}}
                 .dump();
  auto reply = run(req);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  const Json body = Json::parse(reply->body);
  EXPECT_EQ(body["object"], "text_completion");
  const Json& lp = body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u);
  ASSERT_EQ(lp["token_logprobs"].size(), 5u);
  ASSERT_EQ(lp["top_logprobs"].size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_LE(lp["top_logprobs"][i].size(), 2u);
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
  }

  req.stream = true;
  CollectingSink sink;
  auto streamed = run(req, &sink);
  ASSERT_TRUE(streamed.has_value());
  std::string text;
  for (const Json& e : sink.events()) {
    EXPECT_EQ(e["object"], "text_completion");
    if (!e["choices"].empty()) text += e["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, body["choices"][0]["text"]);
}

TEST_F(LocalBackendTest, ChatLogprobs) {
  Json body = hello(4);
  body["logprobs"] = true;
  body["top_logprobs"] = 2;
  auto reply = run(chat(body));
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  const Json parsed = Json::parse(reply->body);
  const Json& content = parsed["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  for (const Json& t : content) {
    EXPECT_TRUE(t["token"].is_string());
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_TRUE(t["bytes"].is_array());
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_EQ(t["top_logprobs"][0]["logprob"], t["logprob"]);  // greedy: the most likely one
  }
}

TEST_F(LocalBackendTest, SharedSystemPromptIsReportedAsCachedTokens) {
  std::string system;
  for (int i = 0; i < 8; ++i) system += "You are a careful assistant who answers briefly. ";
  Json body = hello(8);
  body["messages"] = {{{"role", "system"}, {"content", system}},
                      {{"role", "user"}, {"content", "Name a colour."}}};
  auto first = run(chat(body));
  ASSERT_TRUE(first.has_value()) << first.error().message;
  EXPECT_EQ(first->usage.cached_tokens, 0);
  auto second = run(chat(body));
  ASSERT_TRUE(second.has_value());
  EXPECT_GT(second->usage.cached_tokens, 100);
  EXPECT_LT(second->usage.cached_tokens, second->usage.prompt_tokens);
  const Json a = Json::parse(first->body), b = Json::parse(second->body);
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], second->usage.cached_tokens);
  EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
  EXPECT_GT(backend_->load().prefix_cache_hit_ratio, 0.0);
}

TEST_F(LocalBackendTest, ContextOverflowNamesTheNumbers) {
  const BackendRequest req = chat(hello(10000));
  const auto prompt = backend_->count_prompt(Endpoint::kChatCompletions, req.body);
  ASSERT_TRUE(prompt.has_value());
  auto reply = run(req);
  ASSERT_FALSE(reply.has_value());
  EXPECT_EQ(reply.error().code, ErrorCode::kContextOverflow);
  EXPECT_EQ(reply.error().message, "this model's context is 512 tokens; the prompt is " +
                                       std::to_string(*prompt) + " tokens and max_tokens is 10000");
  EXPECT_EQ(backend_->context_length(), 512);
}

TEST_F(LocalBackendTest, HugeMaxTokensIsAContextOverflowNotAWrap) {
  for (int64_t max_tokens : {INT64_MAX, INT64_MAX - 3, int64_t{1} << 62, int64_t{513}}) {
    SCOPED_TRACE(max_tokens);
    Json body = hello(4);
    body["max_tokens"] = max_tokens;
    auto reply = run(chat(body));
    ASSERT_FALSE(reply.has_value());
    EXPECT_EQ(reply.error().code, ErrorCode::kContextOverflow);
  }
  Json body = hello(4);
  body["max_tokens"] = UINT64_MAX;  // 2^64 - 1 wrapped to -1 before
  EXPECT_EQ(run(chat(body)).error().param, "max_tokens");
  auto ok = run(chat(hello(3)));  // and it still serves
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(ok->usage.completion_tokens, 3);
}

TEST_F(LocalBackendTest, TokenIdsMustBeInTheVocabulary) {
  auto completion = [](Json prompt) {
    Json body = {{"model", "tiny"}, {"prompt", std::move(prompt)}, {"max_tokens", 2}};
    BackendRequest r;
    r.endpoint = Endpoint::kCompletions;
    r.body = body.dump();
    return r;
  };
  // 4294967301 = 2^32 + 5 was read as token 5.
  for (Json id : {Json(4294967301LL), Json(-1), Json(UINT64_MAX), Json(INT64_MIN), Json(1 << 20)}) {
    SCOPED_TRACE(id.dump());
    auto reply = run(completion(Json::array({1, id})));
    ASSERT_FALSE(reply.has_value());
    EXPECT_EQ(reply.error().param, "prompt");
    Json body = hello(2);
    body["logit_bias"] = {{id.dump(), 1}};
    auto biased = run(chat(body));
    ASSERT_FALSE(biased.has_value());
    EXPECT_EQ(biased.error().param, "logit_bias");
  }
  EXPECT_TRUE(run(completion(Json::array({1, 5}))).has_value());
  Json body = hello(2);
  body["logit_bias"] = {{"99999999999", 1}};  // wrapped to an int32 before
  EXPECT_EQ(run(chat(body)).error().param, "logit_bias");
  body["logit_bias"] = {{"5", 1}};
  EXPECT_TRUE(run(chat(body)).has_value());
}

TEST_F(LocalBackendTest, LogprobsTypesFollowOpenAi) {
  for (Json v : {Json("yes"), Json(3), Json(1.0)}) {
    SCOPED_TRACE(v.dump());
    Json body = hello(2);
    body["logprobs"] = v;
    EXPECT_EQ(run(chat(body)).error().param, "logprobs");
  }
  for (Json v : {Json(6), Json(-1), Json("3"), Json(true)}) {
    SCOPED_TRACE(v.dump());
    Json body = {{"model", "tiny"}, {"prompt", "hi"}, {"max_tokens", 2}, {"logprobs", v}};
    BackendRequest r;
    r.endpoint = Endpoint::kCompletions;
    r.body = body.dump();
    EXPECT_EQ(run(r).error().param, "logprobs");
  }
}

TEST_F(LocalBackendTest, BadParametersAreInvalidRequests) {
  Json body = hello(4);
  body["n"] = 0;
  EXPECT_EQ(run(chat(body)).error().param, "n");
  body["n"] = 129;
  EXPECT_EQ(run(chat(body)).error().param, "n");
  body = hello(4);
  body["temperature"] = "hot";
  EXPECT_EQ(run(chat(body)).error().param, "temperature");
  BackendRequest req = chat(hello(4));
  req.body = "{not json";
  EXPECT_EQ(run(req).error().code, ErrorCode::kInvalidRequest);
}

TEST_F(LocalBackendTest, ClientThatGoesAwayCancelsTheSequence) {
  CollectingSink sink;
  sink.on_write = [](size_t n) { return n < 3; };  // the third write finds the client gone
  auto reply = run(chat(hello(400), true, true), &sink);
  ASSERT_FALSE(reply.has_value());
  EXPECT_EQ(reply.error().code, ErrorCode::kCancelled);
  engine::LoadSnapshot load = backend_->load();
  EXPECT_EQ(load.sequences_cancelled, 1);

  // The gateway's CancelSignal does the same.
  CollectingSink sink2;
  CancelSignal cancel;
  sink2.on_write = [&](size_t n) {
    if (n == 2) cancel.cancel();
    return true;
  };
  reply = run(*backend_, chat(hello(400), true, true), &sink2, cancel);
  ASSERT_FALSE(reply.has_value());
  EXPECT_EQ(reply.error().code, ErrorCode::kCancelled);
  load = backend_->load();
  EXPECT_EQ(load.sequences_cancelled, 2);
  EXPECT_EQ(load.kv_bytes_used, load.prefix_cache_bytes);
}

TEST_F(LocalBackendTest, FullQueueIsUnavailableWithRetryAfter) {
  auto opened = LocalBackend::open(config(/*max_sequences=*/1, /*max_queue=*/0));
  ASSERT_TRUE(opened.has_value());
  LocalBackend& b = *opened.value();
  asio::io_context ioc;
  CancelSignal cancel_first, cancel_second;
  std::optional<Result<BackendReply>> first, second;
  const BackendRequest long_req = chat(hello(400));
  const BackendRequest short_req = chat(hello(4));
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        first.emplace(co_await b.send(long_req, nullptr, cancel_first));
      },
      asio::detached);
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        second.emplace(co_await b.send(short_req, nullptr, cancel_second));
        cancel_first.cancel();  // done with the first one
      },
      asio::detached);
  ioc.run();
  ASSERT_TRUE(second.has_value());
  ASSERT_FALSE(second->has_value());
  EXPECT_EQ(second->error().code, ErrorCode::kUnavailable);
  EXPECT_GE(second->error().retry_after_s, 1);
  ASSERT_TRUE(first.has_value());
  ASSERT_FALSE(first->has_value());
  EXPECT_EQ(first->error().code, ErrorCode::kCancelled);
}

// The gateway's path: the request parsed once at the edge, counted at routing (exact_prompt),
// and both handed to send(). send() parses nothing (its body is not even JSON here, and the
// thread's parse count does not move) and runs the tokens routing counted: a prompt of other
// tokens is billed at its own length, not the messages' re-tokenized count.
TEST_F(LocalBackendTest, RunsTheTypedRequestWithTheTokensRoutingCounted) {
  BackendRequest req = chat(hello(3));
  auto typed = api::parse_openai(Endpoint::kChatCompletions, req.body);
  ASSERT_TRUE(typed.has_value()) << typed.error().message;
  req.typed = std::make_shared<const api::ChatRequest>(std::move(typed).value());
  std::shared_ptr<const PromptTokens> counted = backend_->exact_prompt(*req.typed);
  ASSERT_NE(counted, nullptr);
  EXPECT_EQ(static_cast<int64_t>(counted->ids.size()),
            *backend_->count_prompt(Endpoint::kChatCompletions, req.body));
  req.body = "{not json";

  req.prompt = counted;
  uint64_t parses = api::parses_on_this_thread();
  auto reply = run(req);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  EXPECT_EQ(api::parses_on_this_thread(), parses);
  EXPECT_EQ(reply->usage.prompt_tokens, static_cast<int64_t>(counted->ids.size()));
  EXPECT_EQ(reply->usage.completion_tokens, 3);

  auto other = std::make_shared<PromptTokens>();
  other->ids.assign(counted->ids.begin(), counted->ids.begin() + 2);
  ASSERT_LT(other->ids.size(), counted->ids.size());
  req.prompt = other;
  parses = api::parses_on_this_thread();
  reply = run(req);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  EXPECT_EQ(api::parses_on_this_thread(), parses);
  EXPECT_EQ(reply->usage.prompt_tokens, 2);
}

// A routing rule's `set` reaches the engine through BackendRequest::overrides.
TEST_F(LocalBackendTest, RuleOverridesApplyToTheTypedRequest) {
  BackendRequest req = chat(hello(8));
  auto typed = api::parse_openai(Endpoint::kChatCompletions, req.body);
  ASSERT_TRUE(typed.has_value());
  req.typed = std::make_shared<const api::ChatRequest>(std::move(typed).value());
  req.overrides.max_tokens = 2;
  auto reply = run(req);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  EXPECT_EQ(reply->usage.completion_tokens, 2);
}

// What the engine cannot honour, or an extension out of range, is refused, never ignored.
TEST_F(LocalBackendTest, UnsupportedParametersAreRefused) {
  const std::pair<const char*, Json> cases[] = {{"echo", true},
                                                {"best_of", 2},
                                                {"min_p", 2},
                                                {"top_k", "many"},
                                                {"repetition_penalty", 0},
                                                {"ignore_eos", "yes"},
                                                {"top_logprobs", 2}};
  for (const auto& [key, value] : cases) {
    SCOPED_TRACE(key);
    Json body = hello(2);
    body[key] = value;
    BackendRequest req = chat(body);
    if (std::string(key) == "echo" || std::string(key) == "best_of") {
      Json c = {{"model", "tiny"}, {"prompt", "hi"}, {"max_tokens", 2}, {key, value}};
      req.endpoint = Endpoint::kCompletions;
      req.body = c.dump();
    }
    auto reply = run(req);
    ASSERT_FALSE(reply.has_value());
    EXPECT_EQ(reply.error().code, ErrorCode::kInvalidRequest);
    EXPECT_EQ(reply.error().param, key);
  }
}

// The ferry_local_* families are rendered from this snapshot by gateway/metrics.h (its test
// checks the text); here the snapshot itself.
TEST_F(LocalBackendTest, LoadSnapshotAfterARequest) {
  ASSERT_TRUE(run(chat(hello(3))).has_value());
  engine::LoadSnapshot load = backend_->load();
  EXPECT_EQ(load.queue_depth, 0);
  EXPECT_GT(load.kv_budget_bytes, 0);
  EXPECT_EQ(load.requests_completed, 1);
}

}  // namespace
}  // namespace ferry::adapters
