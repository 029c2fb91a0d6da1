// The request-side translation cost of the Responses front-end: a Responses body parsed into
// the typed request (api/responses_parse.h), and that value written as the OpenAI chat body a
// chat backend is sent (api/openai_render.h), against parsing the same conversation sent as
// chat (api/openai_parse.h) in the same run. The difference is what translation adds per
// request over the chat path (which splices the client's bytes instead of rendering them).
// Run: build/bench/ferry_responses_parse_bench
#include <benchmark/benchmark.h>

#include <string>

#include "api/openai_parse.h"
#include "api/openai_render.h"
#include "api/responses_parse.h"

namespace {

using namespace ferry::api;

std::string instructions() {
  std::string text;
  while (text.size() < 2000) text += "You are a careful coding agent. Run commands to check. ";
  return text;
}

const char* kParameters =
    R"({"type":"object","properties":{"cmd":{"type":"string","description":"Shell command"},"workdir":{"type":"string"}},"required":["cmd"],"additionalProperties":false})";

// A coding agent's third turn: instructions, a user message, a call and its output, and text.
std::string responses_body() {
  std::string tools;
  for (const char* name : {"exec_command", "write_stdin", "view_image"}) {
    tools += std::string(tools.empty() ? "" : ",") + R"({"type":"function","name":")" + name +
             R"(","description":"A tool","strict":false,"parameters":)" + kParameters + "}";
  }
  return R"({"model":"local","instructions":")" + instructions() +
         R"(","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"List the files and tell me which is largest."}]},)"
         R"({"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"ls -l\"}"},)"
         R"({"type":"function_call_output","call_id":"call_1","output":"total 8\n-rw-r--r-- 1 root root 4096 a.txt\n-rw-r--r-- 1 root root 12 b.txt"},)"
         R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":"a.txt is the largest."}]},)"
         R"({"type":"message","role":"user","content":[{"type":"input_text","text":"Thanks, now count the lines."}]}],)"
         R"("tools":[)" +
         tools +
         R"(],"tool_choice":"auto","parallel_tool_calls":true,"stream":true,"store":false,"max_output_tokens":512,"temperature":0.2,"prompt_cache_key":"019a0000-0000-7000-8000-000000000000"})";
}

// The same conversation as chat.
std::string chat_body() {
  std::string tools;
  for (const char* name : {"exec_command", "write_stdin", "view_image"}) {
    tools += std::string(tools.empty() ? "" : ",") + R"({"type":"function","function":{"name":")" +
             name + R"(","description":"A tool","strict":false,"parameters":)" + kParameters + "}}";
  }
  return R"({"model":"local","messages":[{"role":"system","content":")" + instructions() +
         R"("},{"role":"user","content":[{"type":"text","text":"List the files and tell me which is largest."}]},)"
         R"({"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"exec_command","arguments":"{\"cmd\":\"ls -l\"}"}}]},)"
         R"({"role":"tool","tool_call_id":"call_1","content":"total 8\n-rw-r--r-- 1 root root 4096 a.txt\n-rw-r--r-- 1 root root 12 b.txt"},)"
         R"({"role":"assistant","content":[{"type":"text","text":"a.txt is the largest."}]},)"
         R"({"role":"user","content":[{"type":"text","text":"Thanks, now count the lines."}]}],)"
         R"("tools":[)" +
         tools +
         R"(],"tool_choice":"auto","parallel_tool_calls":true,"stream":true,"max_tokens":512,"temperature":0.2})";
}

void BM_ChatParse(benchmark::State& state) {
  const std::string body = chat_body();
  for (auto _ : state) {
    auto r = parse_openai(Endpoint::kChatCompletions, body);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ChatParse);

void BM_ResponsesParse(benchmark::State& state) {
  const std::string body = responses_body();
  for (auto _ : state) {
    auto r = parse_responses(body);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ResponsesParse);

// Parse, then the chat body a chat backend is sent.
void BM_ResponsesParseAndRenderChat(benchmark::State& state) {
  const std::string body = responses_body();
  for (auto _ : state) {
    auto r = parse_responses(body);
    std::string upstream = render_openai(r->chat, "qwen2.5-7b-instruct");
    benchmark::DoNotOptimize(upstream.data());
  }
}
BENCHMARK(BM_ResponsesParseAndRenderChat);

}  // namespace

BENCHMARK_MAIN();
