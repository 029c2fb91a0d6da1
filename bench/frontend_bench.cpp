// The translation cost of a front-end: one request of an agent-sized conversation (system,
// three turns, a tool call and its result, a tool) and its streamed answer of 34 upstream chunks,
// through what ferry does per request on the I/O loop, apart from sockets:
// - chat: the OpenAI body parsed (gateway::parse_request) and spliced for the backend
//   (upstream_body); the upstream's SSE bytes, one chunk per read, through the HTTP backend's
//   relay (adapters::StreamRelay: framing, each chunk checked as JSON, usage and finish reason
//   taken, the model renamed) and kept by the client's sink as gateway's ChunkedSink keeps them;
// - messages: the same conversation as Anthropic Messages parsed (the Messages front-end's
//   parser), rendered as OpenAI chat for the backend (api::render_openai), the same relay on a
//   translated hop (usage asked for, no rename), its writes translated to Anthropic events by
//   gateway::TranslatingSink (then its end and finish) and sent to the client's sink, which
//   keeps nothing (the translator keeps the backend's bytes: gateway/proxy's set_capture);
// - responses: the same for an OpenAI Responses request and its response.* events; stored: with
//   `store: true`, the final response object kept and made ready for the response store.
// The per-request difference (messages - chat) is the translation cost (issue 16: <= 5 us).
// Run: build/bench/ferry_frontend_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "adapters/openai_wire.h"
#include "adapters/stream_relay.h"
#include "api/openai_render.h"
#include "gateway/frontend.h"
#include "gateway/openai_request.h"
#include "gateway/responses_front.h"
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

std::string responses_request(bool store = false) {
  return R"({"model":"coder","max_output_tokens":1024,"stream":true,"store":)" +
         std::string(store ? "true" : "false") + R"(,"temperature":0.2,"instructions":")" +
         long_text() +
         R"(","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Find the bug in main.cpp"}]},)"
         R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":"Let me read it."}]},)"
         R"({"type":"function_call","call_id":"toolu_1","name":"read_file","arguments":"{\"path\":\"main.cpp\"}"},)"
         R"({"type":"function_call_output","call_id":"toolu_1","output":")" +
         long_text() +
         R"("},{"type":"message","role":"user","content":[{"type":"input_text","text":"Fix it please"}]}],)"
         R"("tools":[{"type":"function","name":"read_file","description":"Reads a file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}]})";
}

// The upstream's bytes as the backend sends them, one SSE event per read (a token at a time),
// ending with [DONE].
std::vector<std::string> upstream_frames() {
  std::vector<std::string> frames;
  for (const std::string& c : upstream_chunks()) frames.push_back("data: " + c + "\n\n");
  frames.emplace_back("data: [DONE]\n\n");
  return frames;
}

// The client's side: gateway's ChunkedSink keeps every byte it sends (for counting an answer
// without usage); the socket write is left out.
class ClientSink final : public adapters::StreamSink {
 public:
  boost::asio::awaitable<bool> write(std::string_view bytes) override {
    captured.append(bytes);
    co_return true;
  }
  std::string captured;
};

// The HTTP backend's hop, as adapters/http_backend reads a stream: each read's bytes through the
// relay, then what it gathered written to the sink (`send`: the client's sink, or a translator
// whose translation goes to the client's sink).
template <typename Send>
void relay_stream(const std::vector<std::string>& frames, const adapters::BackendRequest& request,
                  const std::string& quoted_model, adapters::StreamSink& sink, Send&& send) {
  adapters::BackendReply reply;
  adapters::StreamRelay relay{request, quoted_model, reply, &sink, adapters::SseParser(),
                              {},      false};
  for (const std::string& f : frames) {
    if (relay.feed(f)) std::abort();
    if (!relay.to_client.empty()) send(relay.to_client);
    relay.to_client.clear();
  }
  benchmark::DoNotOptimize(reply.usage.completion_tokens);
}

void BM_RequestChat(benchmark::State& state) {
  const std::string body = chat_request();
  const auto frames = upstream_frames();
  adapters::BackendRequest hop;  // a backend that speaks chat: the client's model name kept
  hop.stream = true;
  hop.reply_model = "coder";
  const std::string quoted = adapters::quote_model(hop.reply_model);
  const gateway::FrontEnd& fe = gateway::frontend(api::Endpoint::kChatCompletions);
  for (auto _ : state) {
    auto parsed = gateway::parse_request(api::Endpoint::kChatCompletions, body);
    std::string upstream = gateway::upstream_body(*parsed, "qwen2.5-coder");
    benchmark::DoNotOptimize(upstream.data());
    ClientSink client;
    relay_stream(frames, hop, quoted, client,
                 [&](std::string_view bytes) { client.captured.append(bytes); });
    client.captured.append(fe.stream_done);
    benchmark::DoNotOptimize(client.captured.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RequestChat);

// A request of another API on a chat backend: parsed, rendered as chat, and its answer translated.
void translated_request(benchmark::State& state, api::Endpoint api, const std::string& body) {
  const auto frames = upstream_frames();
  adapters::BackendRequest hop;  // a translated hop (gateway/planner's make_hop)
  hop.stream = true;
  hop.client_wants_usage = true;
  const std::string quoted;  // its renderer names the model: no rename in the relay
  const gateway::FrontEnd& fe = gateway::frontend(api);
  for (auto _ : state) {
    auto parsed = fe.parse(body, {}, false);
    if (!parsed) std::abort();
    std::string upstream = api::render_openai(*parsed->typed, "qwen2.5-coder");
    benchmark::DoNotOptimize(upstream.data());
    ClientSink client;
    gateway::FinalResponse final_response;
    gateway::RenderContext context{"req-1", parsed->model, 1512};
    context.responses = parsed->responses.get();
    // As gateway/proxy's render_context: a response to be stored keeps its final object.
    if (context.responses != nullptr && context.responses->store) {
      context.final_response = &final_response;
    }
    gateway::TranslatingSink sink(client, fe, context);
    size_t sent = 0;  // the client's sink does not capture on a translated hop
    relay_stream(frames, hop, quoted, sink,
                 [&](std::string_view bytes) { sent += sink.translate(bytes).size(); });
    sink.end_upstream();
    sent += sink.finish(std::nullopt).size();
    benchmark::DoNotOptimize(sent);
    if (context.final_response != nullptr) {  // as gateway/proxy's store_response, before the put
      auto kept = gateway::response_to_store(*context.responses, final_response, "key-1");
      if (!kept) std::abort();
      benchmark::DoNotOptimize(kept->output.data());
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_RequestMessagesTranslated(benchmark::State& state) {
  translated_request(state, api::Endpoint::kMessages, messages_request());
}
BENCHMARK(BM_RequestMessagesTranslated);

void BM_RequestResponsesTranslated(benchmark::State& state) {
  translated_request(state, api::Endpoint::kResponses, responses_request());
}
BENCHMARK(BM_RequestResponsesTranslated);

// The same with `store: true` (OpenAI's default): the final response object kept and what the
// response store is handed (gateway/responses_front's response_to_store).
void BM_RequestResponsesStored(benchmark::State& state) {
  translated_request(state, api::Endpoint::kResponses, responses_request(true));
}
BENCHMARK(BM_RequestResponsesStored);

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

// A front-end's request parsed into the typed request and rendered as OpenAI chat.
void parse_and_render_openai(benchmark::State& state, api::Endpoint api, const std::string& body) {
  const gateway::FrontEnd& fe = gateway::frontend(api);
  for (auto _ : state) {
    auto parsed = fe.parse(body, {}, false);
    std::string upstream = api::render_openai(*parsed->typed, "qwen2.5-coder");
    benchmark::DoNotOptimize(upstream.data());
  }
}

void BM_ParseMessagesRenderOpenAI(benchmark::State& state) {
  parse_and_render_openai(state, api::Endpoint::kMessages, messages_request());
}
BENCHMARK(BM_ParseMessagesRenderOpenAI);

void BM_ParseResponsesRenderOpenAI(benchmark::State& state) {
  parse_and_render_openai(state, api::Endpoint::kResponses, responses_request());
}
BENCHMARK(BM_ParseResponsesRenderOpenAI);

}  // namespace

BENCHMARK_MAIN();
