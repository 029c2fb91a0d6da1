// Microbenchmarks of the gateway's per-request CPU work outside the network: parsing and
// validating an OpenAI request, rewriting it for the backend, finding usage in the answer.
// Run: build/bench/ferry_wire_bench
#include <benchmark/benchmark.h>

#include <string>

#include "adapters/openai_wire.h"
#include "gateway/openai_request.h"

namespace {

std::string chat_body(size_t approx_bytes) {
  std::string content;
  while (content.size() < approx_bytes) {
    content += "Summarise the quarterly figures for the northern region, in three bullet points. ";
  }
  return R"({"model":"gpt-test","messages":[{"role":"system","content":"You are terse."},)"
         R"({"role":"user","content":")" + content + R"("}],"temperature":0.2,"max_tokens":256,)"
         R"("stream":false,"user":"u-123","metadata":{"task":"t-9"}})";
}

const std::string kAnswer =
    R"({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,)"
    R"("message":{"role":"assistant","content":"Three bullet points about the north."},)"
    R"("finish_reason":"stop"}],"usage":{"prompt_tokens":312,"completion_tokens":9,"total_tokens":321}})";

void BM_ParseRequest(benchmark::State& state) {
  std::string body = chat_body(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    auto r = ferry::gateway::parse_request(ferry::adapters::Endpoint::kChatCompletions, body);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ParseRequest)->Arg(1024)->Arg(2048);

void BM_UpstreamBody(benchmark::State& state) {
  std::string body = chat_body(static_cast<size_t>(state.range(0)));
  auto r = ferry::gateway::parse_request(ferry::adapters::Endpoint::kChatCompletions, body);
  for (auto _ : state) {
    auto out = ferry::gateway::upstream_body(*r, "org/upstream-model");
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_UpstreamBody)->Arg(1024)->Arg(2048);

void BM_FindUsage(benchmark::State& state) {
  for (auto _ : state) {
    auto u = ferry::adapters::find_usage(kAnswer);
    benchmark::DoNotOptimize(u);
  }
}
BENCHMARK(BM_FindUsage);

}  // namespace

BENCHMARK_MAIN();
