// The translation cost of a front-end: one request of an agent-sized conversation (system,
// three turns, a tool call and its result, a tool) and its streamed answer of 32 chunks, through
// what ferry does per request on the I/O loop, apart from sockets:
// - chat: the OpenAI body parsed (gateway::parse_request), spliced for the backend
//   (upstream_body), and each upstream chunk relayed (adapters::inspect_stream_chunk, the model
//   renamed) as adapters/http_backend does;
// - messages: the same conversation as Anthropic Messages parsed (the Messages front-end's
//   parser), rendered as OpenAI chat for the backend (api::render_openai), the same relay, and
//   the chunks translated to Anthropic events by gateway::TranslatingSink, then its finish.
// The per-request difference (messages - chat) is the translation cost (issue 16: <= 5 us).
// Run: build/bench/ferry_frontend_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "adapters/openai_wire.h"
#include "api/openai_render.h"
#include "gateway/frontend.h"
#include "gateway/openai_request.h"
#include "gateway/translate_sink.h"

namespace {

using namespace ferry;

constexpr int kChunks = 32;

std::string long_text() {
  std::string text;
  while (text.size() < 2000) text += "The quick brown fox jumps over the lazy dog. ";
  return text;
}

std::string chat_request() {
  return R"({"model":"coder","max_tokens":1024,"stream":true,"temperature":0.2,"messages":[)"
         R"({"role":"system","content":")" +
         long_text() +
         R"("},{"role":"user","content":"Find the bug in main.cpp"},)"
         R"({"role":"assistant","content":"Let me read it.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"main.cpp\"}"}}]},)"
         R"({"role":"tool","tool_call_id":"toolu_1","content":")" +
         long_text() +
         R"("},{"role":"user","content":"Fix it please"}],)"
         R"("tools":[{"type":"function","function":{"name":"read_file","description":"Reads a file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]})";
}

std::string messages_request() {
  return R"({"model":"coder","max_tokens":1024,"stream":true,"temperature":0.2,"system":")" +
         long_text() +
         R"(","messages":[{"role":"user","content":"Find the bug in main.cpp"},)"
         R"({"role":"assistant","content":[{"type":"text","text":"Let me read it."},{"type":"tool_use","id":"toolu_1","name":"read_file","input":{"path":"main.cpp"}}]},)"
         R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":")" +
         long_text() +
         R"("},{"type":"text","text":"Fix it please"}]}],)"
         R"("tools":[{"name":"read_file","description":"Reads a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}]})";
}

// The upstream's stream: a role chunk, text chunks, the finish and the usage chunk.
std::vector<std::string> upstream_chunks() {
  auto chunk = [](const std::string& delta, const std::string& finish = "null") {
    return R"({"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1760000000,"model":"qwen2.5-coder","choices":[{"index":0,"delta":)" +
           delta + R"(,"logprobs":null,"finish_reason":)" + finish + "}]}";
  };
  std::vector<std::string> out = {chunk(R"({"role":"assistant","content":""})")};
  for (int i = 0; i < kChunks; ++i) out.push_back(chunk(R"({"content":" the fix is"})"));
  out.push_back(chunk("{}", "\"stop\""));
  out.push_back(
      R"({"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1760000000,"model":"qwen2.5-coder","choices":[],"usage":{"prompt_tokens":1512,"completion_tokens":96,"total_tokens":1608}})");
  return out;
}

// What adapters/http_backend's relay does with one chunk: usage, the model renamed (not for a
// translated hop: its renderer names the model; `quoted_model` empty), the SSE frame. Returns
// the frame.
std::string relay(std::string_view data, const std::string& quoted_model, bool wants_usage) {
  adapters::ChunkAction action = adapters::inspect_stream_chunk(data, wants_usage);
  std::string_view current = action.rewritten ? std::string_view(*action.rewritten) : data;
  if (!quoted_model.empty()) {
    if (auto renamed = adapters::with_quoted_model(current, quoted_model)) {
      action.rewritten = std::move(renamed);
    }
  }
  std::string frame = "data: ";
  frame.append(action.rewritten ? std::string_view(*action.rewritten) : data);
  frame.append("\n\n");
  return frame;
}

// The client's side: bytes written nowhere.
class NullSink final : public adapters::StreamSink {
 public:
  boost::asio::awaitable<bool> write(std::string_view) override { co_return true; }
};

void BM_RequestChat(benchmark::State& state) {
  const std::string body = chat_request();
  const auto chunks = upstream_chunks();
  const std::string quoted = adapters::quote_model("coder");
  for (auto _ : state) {
    auto parsed = gateway::parse_request(api::Endpoint::kChatCompletions, body);
    std::string upstream = gateway::upstream_body(*parsed, "qwen2.5-coder");
    benchmark::DoNotOptimize(upstream.data());
    for (const auto& c : chunks) {
      std::string frame = relay(c, quoted, false);
      benchmark::DoNotOptimize(frame.data());
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RequestChat);

void BM_RequestMessagesTranslated(benchmark::State& state) {
  const std::string body = messages_request();
  const auto chunks = upstream_chunks();
  const std::string quoted;  // a translated hop: the model is not renamed in the relay
  const gateway::FrontEnd& fe = gateway::frontend(api::Endpoint::kMessages);
  NullSink client;
  for (auto _ : state) {
    auto parsed = fe.parse(body, {}, false);
    std::string upstream = api::render_openai(*parsed->typed, "qwen2.5-coder");
    benchmark::DoNotOptimize(upstream.data());
    gateway::RenderContext context{"req-1", parsed->model, 1512};
    gateway::TranslatingSink sink(client, fe, context);
    for (const auto& c : chunks) {
      std::string frame = relay(c, quoted, true);
      std::string_view out = sink.translate(frame);
      benchmark::DoNotOptimize(out.data());
    }
    std::string tail = sink.finish(std::nullopt);
    benchmark::DoNotOptimize(tail.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RequestMessagesTranslated);

// The parts alone: the request side, and the answer side per chunk.
void BM_ParseChat(benchmark::State& state) {
  const std::string body = chat_request();
  for (auto _ : state) {
    auto parsed = gateway::parse_request(api::Endpoint::kChatCompletions, body);
    std::string upstream = gateway::upstream_body(*parsed, "qwen2.5-coder");
    benchmark::DoNotOptimize(upstream.data());
  }
}
BENCHMARK(BM_ParseChat);

void BM_ParseMessagesRenderOpenAI(benchmark::State& state) {
  const std::string body = messages_request();
  const gateway::FrontEnd& fe = gateway::frontend(api::Endpoint::kMessages);
  for (auto _ : state) {
    auto parsed = fe.parse(body, {}, false);
    std::string upstream = api::render_openai(*parsed->typed, "qwen2.5-coder");
    benchmark::DoNotOptimize(upstream.data());
  }
}
BENCHMARK(BM_ParseMessagesRenderOpenAI);

}  // namespace

BENCHMARK_MAIN();
