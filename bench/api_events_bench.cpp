// The translation cost of api/ (events.h): an OpenAI chat reply, as an OpenAI-compatible backend
// sends it, parsed into the typed event sequence and rendered for an Anthropic Messages, OpenAI
// Responses or OpenAI chat client; per stream chunk, per whole answer and per request. The
// reference in the same run is what the chat path does today with each chunk
// (adapters::inspect_stream_chunk: find usage, forward the bytes).
// Run: build/bench/ferry_api_events_bench
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "adapters/openai_wire.h"
#include "api/anthropic_render.h"
#include "api/openai_chat_parse.h"
#include "api/openai_chat_render.h"
#include "api/responses_render.h"

namespace {

using namespace ferry::api;

// A reply of `chunks` text chunks of a few tokens each, then the finish and usage chunks.
std::vector<std::string> chat_stream(int chunks) {
  auto chunk = [](const std::string& delta, const std::string& finish = "null") {
    return R"({"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1760000000,"model":"qwen2.5-7b-instruct","system_fingerprint":"fp_1","choices":[{"index":0,"delta":)" +
           delta + R"(,"logprobs":null,"finish_reason":)" + finish + "}]}";
  };
  std::vector<std::string> out = {chunk(R"({"role":"assistant","content":""})")};
  for (int i = 0; i < chunks; ++i) out.push_back(chunk(R"({"content":" the quick fox"})"));
  out.push_back(chunk("{}", "\"stop\""));
  out.push_back(
      R"({"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1760000000,"model":"qwen2.5-7b-instruct","choices":[],"usage":{"prompt_tokens":512,"completion_tokens":300,"total_tokens":812,"prompt_tokens_details":{"cached_tokens":256}}})");
  out.push_back("[DONE]");
  return out;
}

std::string chat_body() {
  std::string text;
  while (text.size() < 1200) text += "The quick brown fox jumps over the lazy dog. ";
  return R"({"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion","created":1760000000,"model":"qwen2.5-7b-instruct","choices":[{"index":0,"message":{"role":"assistant","content":")" +
         text +
         R"(","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"fox\",\"n\":3}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":512,"completion_tokens":300,"total_tokens":812}})";
}

// Renders whatever it is sent into one string, cleared per event (the bytes go to the socket).
template <typename Renderer>
class Sink final : public EventSink {
 public:
  explicit Sink(Renderer& r) : r_(r) {}
  void on_event(const Event& e) override {
    out.clear();
    r_.render(e, out);
    benchmark::DoNotOptimize(out.data());
  }
  std::string out;

 private:
  Renderer& r_;
};

// The chat path today: each chunk inspected for usage and forwarded.
void BM_ChunkChatPassThrough(benchmark::State& state) {
  auto datas = chat_stream(64);
  for (auto _ : state) {
    for (const auto& d : datas) {
      auto action = ferry::adapters::inspect_stream_chunk(d, true);
      benchmark::DoNotOptimize(action);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(datas.size()));
}
BENCHMARK(BM_ChunkChatPassThrough);

template <typename Renderer, typename Options>
void chunks_through(benchmark::State& state, Options options) {
  auto datas = chat_stream(64);
  for (auto _ : state) {
    ChatStreamParser parser;
    Renderer renderer(options);
    Sink<Renderer> sink(renderer);
    for (const auto& d : datas) {
      ferry::Status s = parser.feed(d, sink);
      benchmark::DoNotOptimize(s);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(datas.size()));
}
void BM_ChunkToAnthropic(benchmark::State& state) {
  chunks_through<AnthropicStreamRenderer>(state, AnthropicRenderOptions{});
}
void BM_ChunkToResponses(benchmark::State& state) {
  chunks_through<ResponsesStreamRenderer>(state, ResponsesRenderOptions{});
}
void BM_ChunkToChat(benchmark::State& state) {
  chunks_through<ChatStreamRenderer>(state, ChatRenderOptions{});
}
BENCHMARK(BM_ChunkToAnthropic);
BENCHMARK(BM_ChunkToResponses);
BENCHMARK(BM_ChunkToChat);

// A whole non-stream reply: parse the body, render it.
void BM_BodyChatPassThrough(benchmark::State& state) {
  std::string body = chat_body();
  for (auto _ : state) benchmark::DoNotOptimize(ferry::adapters::find_usage(body));
}
void BM_BodyToAnthropic(benchmark::State& state) {
  std::string body = chat_body();
  for (auto _ : state) {
    auto a = parse_chat_completion(body);
    benchmark::DoNotOptimize(render_anthropic_message(*a).body.data());
  }
}
void BM_BodyToResponses(benchmark::State& state) {
  std::string body = chat_body();
  for (auto _ : state) {
    auto a = parse_chat_completion(body);
    benchmark::DoNotOptimize(render_response(*a).body.data());
  }
}
void BM_BodyToChat(benchmark::State& state) {
  std::string body = chat_body();
  for (auto _ : state) {
    auto a = parse_chat_completion(body);
    benchmark::DoNotOptimize(render_chat_completion(*a).body.data());
  }
}
BENCHMARK(BM_BodyChatPassThrough);
BENCHMARK(BM_BodyToAnthropic);
BENCHMARK(BM_BodyToResponses);
BENCHMARK(BM_BodyToChat);

// Rendering alone, per event: the local engine's events (one token a delta) into each API.
template <typename Renderer, typename Options>
void render_events(benchmark::State& state, Options options) {
  Answer a;
  a.model = "local";
  a.blocks.push_back(Block{BlockKind::kText, std::string(64 * 4, 'x'), "", "", "", ""});
  a.usage = Usage{512, 64, 0, 0, true};
  int64_t events = 0;
  for (auto _ : state) {
    Renderer renderer(options);
    Sink<Renderer> sink(renderer);
    replay(a, sink, 4);
    events = 5 + 64;
  }
  state.SetItemsProcessed(state.iterations() * events);
}
void BM_EventsToAnthropic(benchmark::State& state) {
  render_events<AnthropicStreamRenderer>(state, AnthropicRenderOptions{});
}
void BM_EventsToResponses(benchmark::State& state) {
  render_events<ResponsesStreamRenderer>(state, ResponsesRenderOptions{});
}
void BM_EventsToChat(benchmark::State& state) {
  render_events<ChatStreamRenderer>(state, ChatRenderOptions{});
}
BENCHMARK(BM_EventsToAnthropic);
BENCHMARK(BM_EventsToResponses);
BENCHMARK(BM_EventsToChat);

}  // namespace

BENCHMARK_MAIN();
