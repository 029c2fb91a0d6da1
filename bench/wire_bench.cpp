// Microbenchmarks of the gateway's per-request CPU work outside the network: parsing and
// validating an OpenAI request, rewriting it for the backend, routing it without a policy,
// finding usage in the answer, escaping JSON strings.
// Run: build/bench/ferry_wire_bench
// Instructions per call (load-independent): valgrind --tool=callgrind with a fixed iteration
// count, e.g. --benchmark_filter=BM_RouterPlanNoPolicy --benchmark_min_time=2000x.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>

#include "adapters/openai_wire.h"
#include "adapters/sse_parser.h"
#include "common/json_text.h"
#include "config/config.h"
#include "gateway/gateway.h"
#include "gateway/openai_request.h"

namespace {

std::string chat_body(size_t approx_bytes) {
  std::string content;
  while (content.size() < approx_bytes) {
    content += "Summarise the quarterly figures for the northern region, in three bullet points. ";
  }
  return R"({"model":"gpt-test","messages":[{"role":"system","content":"You are terse."},)"
         R"({"role":"user","content":")" +
         content +
         R"("}],"temperature":0.2,"max_tokens":256,)"
         R"("stream":false,"user":"u-123","metadata":{"task":"t-9"}})";
}

// The shape the gateway's end-to-end profile proxies: a system and a user message, 16 tokens.
// `model_last`: the key order of OpenAI's Python SDK (messages first).
std::string small_chat_body(const std::string& model, bool model_last = false) {
  std::string content;
  while (content.size() < 1200) content += "Tell me something short about the sea and ships. ";
  std::string messages =
      R"("messages":[{"role":"system","content":"You are a helpful assistant."},)"
      R"({"role":"user","content":")" +
      content + R"("}])";
  std::string model_member = R"("model":")" + model + "\"";
  return model_last ? "{" + messages + "," + model_member + R"(,"max_tokens":16})"
                    : "{" + model_member + "," + messages + R"(,"max_tokens":16})";
}

const std::string kAnswer =
    R"({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,)"
    R"("message":{"role":"assistant","content":"Three bullet points about the north."},)"
    R"("finish_reason":"stop"}],"usage":{"prompt_tokens":312,"completion_tokens":9,"total_tokens":321}})";

// As vLLM answers: usage with details and a trailing member after it.
const std::string kAnswerDetails =
    R"({"id":"chatcmpl-2","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,)"
    R"("message":{"role":"assistant","content":"Three bullet points about the north.",)"
    R"("tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],)"
    R"("usage":{"prompt_tokens":312,"total_tokens":321,"completion_tokens":9,)"
    R"("prompt_tokens_details":{"cached_tokens":128}},"prompt_logprobs":null})";

void BM_ParseRequest(benchmark::State& state) {
  std::string body = chat_body(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    auto r = ferry::gateway::parse_request(ferry::adapters::Endpoint::kChatCompletions, body);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ParseRequest)->Arg(1024)->Arg(2048);

// The body as the request reader hands it over (arg 1: kJsonReadSlack bytes of spare capacity,
// parsed in place) or without that slack (arg 0: copied into simdjson's padded buffer first).
// Each iteration copies the body into a fresh string either way, as a request brings one.
void BM_ParseRequestSlack(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)));
  const size_t slack = state.range(1) != 0 ? ferry::kJsonReadSlack : 0;
  for (auto _ : state) {
    std::string b;
    b.reserve(body.size() + slack);
    b = body;
    auto r =
        ferry::gateway::parse_request(ferry::adapters::Endpoint::kChatCompletions, std::move(b));
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ParseRequestSlack)->ArgsProduct({{1400, 100000}, {0, 1}});

void BM_ParseRequestSmallChat(benchmark::State& state) {
  std::string body = small_chat_body("m");
  for (auto _ : state) {
    auto r = ferry::gateway::parse_request(ferry::adapters::Endpoint::kChatCompletions, body);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ParseRequestSmallChat);

void BM_UpstreamBody(benchmark::State& state) {
  std::string body = chat_body(static_cast<size_t>(state.range(0)));
  auto r = ferry::gateway::parse_request(ferry::adapters::Endpoint::kChatCompletions, body);
  for (auto _ : state) {
    auto out = ferry::gateway::upstream_body(*r, "org/upstream-model");
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_UpstreamBody)->Arg(1024)->Arg(2048);

// Arg: 0 = model first, 1 = model after the messages; 2 = model first, streamed.
void BM_UpstreamBodySmallChat(benchmark::State& state) {
  std::string body = small_chat_body("m", state.range(0) == 1);
  if (state.range(0) == 2) body.insert(body.size() - 1, R"(,"stream":true)");
  auto r = ferry::gateway::parse_request(ferry::adapters::Endpoint::kChatCompletions, body);
  for (auto _ : state) {
    auto out = ferry::gateway::upstream_body(*r, "org/upstream-model");
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_UpstreamBodySmallChat)->Arg(0)->Arg(1)->Arg(2);

// A backend that is never called: routing only asks it for load facts and exact counts.
class IdleBackend final : public ferry::adapters::Backend {
 public:
  const std::string& name() const override { return name_; }
  boost::asio::awaitable<ferry::Result<ferry::adapters::BackendReply>> send(
      const ferry::adapters::BackendRequest&, ferry::adapters::StreamSink*,
      ferry::adapters::CancelSignal&) override {
    co_return ferry::Error::make(ferry::ErrorCode::kInternal, "not called by the benchmark");
  }

 private:
  std::string name_ = "gpu";
};

// Planner::plan for a model routed straight to an HTTP backend: no policy, no ledger, no
// tokenizer (prompt counts are estimates), as `ferry serve` with a plain model list.
void BM_RouterPlanNoPolicy(benchmark::State& state) {
  const std::string yaml = R"(
backends:
  - { name: gpu, base_url: "http://127.0.0.1:9/v1" }
models:
  - { name: m, backend: gpu, upstream_model: org/upstream-model }
)";
  auto cfg = ferry::config::load_config_text(yaml, "/tmp/ferry-wire-bench.yaml");
  if (!cfg) {
    state.SkipWithError(cfg.error().message.c_str());
    return;
  }
  IdleBackend backend;
  std::map<std::string, ferry::adapters::Backend*> backends = {{"gpu", &backend}};
  auto gateway = ferry::gateway::Gateway::create(*cfg, backends);
  if (!gateway) {
    state.SkipWithError(gateway.error().message.c_str());
    return;
  }
  auto request = ferry::gateway::parse_request(ferry::adapters::Endpoint::kChatCompletions,
                                               small_chat_body("m"));
  ferry::gateway::RequestContext ctx;
  ctx.request_id = "0123456789abcdef01234567";  // as long as the server's ids
  ctx.principal.key_id = "key-1";
  ctx.principal.team = "team-a";
  ctx.started_us = 1'780'000'000'000'000;
  for (auto _ : state) {
    auto plan = (*gateway)->planner().plan(ctx, *request);
    benchmark::DoNotOptimize(plan);
  }
}
BENCHMARK(BM_RouterPlanNoPolicy);

void BM_FindUsage(benchmark::State& state) {
  for (auto _ : state) {
    auto u = ferry::adapters::find_usage(kAnswer);
    benchmark::DoNotOptimize(u);
  }
}
BENCHMARK(BM_FindUsage);

void BM_FindUsageDetails(benchmark::State& state) {
  for (auto _ : state) {
    auto u = ferry::adapters::find_usage(kAnswerDetails);
    benchmark::DoNotOptimize(u);
  }
}
BENCHMARK(BM_FindUsageDetails);

// One token of a streamed answer, as vLLM sends it: inspected for usage on every chunk.
void BM_InspectStreamChunk(benchmark::State& state) {
  const std::string chunk =
      R"({"id":"chatcmpl-3","object":"chat.completion.chunk","created":1,"model":"m",)"
      R"("choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]})";
  for (auto _ : state) {
    auto a = ferry::adapters::inspect_stream_chunk(chunk, /*client_wants_usage=*/false);
    benchmark::DoNotOptimize(a);
  }
}
BENCHMARK(BM_InspectStreamChunk);

// The check every streamed event gets before it is forwarded: simdjson's validating parse.
void BM_ValidateStreamChunk(benchmark::State& state) {
  const std::string chunk =
      R"({"id":"chatcmpl-3","object":"chat.completion.chunk","created":1,"model":"m",)"
      R"("choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]})";
  for (auto _ : state) {
    bool ok = ferry::adapters::is_json_object(chunk);
    benchmark::DoNotOptimize(ok);
  }
}
BENCHMARK(BM_ValidateStreamChunk);

// The one JSON string escaper (common/json_text): a ledger tag (arg 0), and 1 KiB of text with
// quotes, line breaks and multi-byte characters (arg 1).
void BM_AppendJsonString(benchmark::State& state) {
  std::string text = "team-research";
  if (state.range(0) == 1) {
    text.clear();
    while (text.size() < 1024) text += "The fox said \"hi\"\n and caf\xc3\xa9 \xe2\x82\xac costs. ";
  }
  std::string out;
  for (auto _ : state) {
    out.clear();
    ferry::append_json_string(out, text);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
}
BENCHMARK(BM_AppendJsonString)->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
