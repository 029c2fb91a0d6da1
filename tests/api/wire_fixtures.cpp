// Writes rendered answers for the SDK conformance check (tests/conformance/wire_sdks/): for each
// case, the typed answer (<case>.answer.json, the truth) and what the Anthropic and Responses
// renderers make of it, as a body (<case>.<api>.json: {"status", "body"}) and as a stream
// (<case>.<api>.sse). Usage: ferry_api_wire_fixtures OUT_DIR
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "api/anthropic_render.h"
#include "api/openai_chat_parse.h"
#include "api/responses_render.h"
#include "tests/api/event_log.h"

namespace ferry::api {
namespace {

using nlohmann::json;

struct Case {
  std::string name;
  Answer answer;
  size_t fragment = 0;  // bytes per delta
};

Block text(std::string t) {
  return Block{BlockKind::kText, std::move(t), "", "", "", ""};
}
Block thinking(std::string t, std::string sig) {
  return Block{BlockKind::kThinking, std::move(t), std::move(sig), "", "", ""};
}
Block call(std::string id, std::string name, std::string args) {
  return Block{BlockKind::kToolCall, "", "", std::move(id), std::move(name), std::move(args)};
}

Answer answer(std::vector<Block> blocks, FinishReason finish, Usage usage) {
  Answer a;
  a.model = "fixture-model";
  a.created = 1760000000;
  a.blocks = std::move(blocks);
  a.finish = finish;
  a.usage = usage;
  return a;
}

// A chat completion stream from an OpenAI-compatible backend (vLLM style: reasoning_content,
// parallel calls with split arguments), parsed into the typed answer: the path a GPU backend's
// reply takes to an Anthropic or Responses client.
Answer from_chat_stream() {
  auto chunk = [](const std::string& delta, const std::string& finish = "null") {
    return R"({"id":"chatcmpl-up","object":"chat.completion.chunk","created":1760000001,"model":"up","choices":[{"index":0,"delta":)" +
           delta + R"(,"finish_reason":)" + finish + "}]}";
  };
  std::vector<std::string> datas = {
      chunk(R"({"role":"assistant","content":""})"),
      chunk(R"({"reasoning_content":"Two lookups "})"),
      chunk(R"({"reasoning_content":"needed."})"),
      chunk(
          R"({"tool_calls":[{"index":0,"id":"call_up0","type":"function","function":{"name":"weather","arguments":"{\"ci"}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"ty\":\"Oslo\"}"}}]})"),
      chunk(
          R"({"tool_calls":[{"index":1,"id":"call_up1","type":"function","function":{"name":"clock","arguments":""}}]})"),
      chunk(R"({"tool_calls":[{"index":1,"function":{"arguments":"{\"tz\":"}}]})"),
      chunk(R"({"tool_calls":[{"index":1,"function":{"arguments":"\"CET\"}"}}]})"),
      chunk("{}", "\"tool_calls\""),
      R"({"id":"chatcmpl-up","object":"chat.completion.chunk","created":1760000001,"model":"up","choices":[],"usage":{"prompt_tokens":64,"completion_tokens":31,"total_tokens":95,"prompt_tokens_details":{"cached_tokens":16},"completion_tokens_details":{"reasoning_tokens":9}}})",
      "[DONE]"};
  ChatStreamParser parser;
  AnswerBuilder builder;
  for (const std::string& d : datas) {
    if (Status s = parser.feed(d, builder); !s) throw std::runtime_error(s.error().message);
  }
  Answer a = builder.take();
  a.model = "fixture-model";
  return a;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"text",
                 answer({text("Hello, world! \"quoted\", a tab\t, é, 日本, 𝄞, and a\nnew line.")},
                        FinishReason::kStop, Usage{12, 9, 0, 0, true}),
                 5});
  out.push_back({"tools",
                 answer({text("I'll check both."),
                         call("call_a1", "get_weather", R"({"city":"Paris","unit":"celsius"})"),
                         call("", "get_time", R"({"zone":"Europe/Paris","format":{"h24":true}})")},
                        FinishReason::kToolCalls, Usage{80, 40, 32, 0, true}),
                 3});
  out.push_back({"thinking",
                 answer({thinking("First, 2 + 2 is 4.", "c2lnLWZpeHR1cmU="), text("4")},
                        FinishReason::kStop, Usage{20, 15, 0, 11, true}),
                 4});
  out.push_back({"length",
                 answer({text("This answer was cut off at the li")}, FinishReason::kLength,
                        Usage{10, 16, 0, 0, true}),
                 6});
  out.push_back(
      {"stop_sequence",
       answer({text("Count: 1, 2, 3")}, FinishReason::kStopSequence, Usage{7, 8, 0, 0, true}), 4});
  out.back().answer.stop_sequence = "\n\n###";
  Answer failed = answer({text("This starts well but")}, FinishReason::kError, {});
  failed.error = Error::make(ErrorCode::kUnavailable, "the backend went away mid-answer");
  out.push_back({"error_mid_stream", failed, 5});
  out.push_back({"from_chat_stream", from_chat_stream(), 0});
  return out;
}

json answer_json(const Answer& a) {
  json blocks = json::array();
  for (const Block& b : a.blocks) {
    const char* kind = b.kind == BlockKind::kText       ? "text"
                       : b.kind == BlockKind::kThinking ? "thinking"
                                                        : "tool_call";
    blocks.push_back({{"kind", kind},
                      {"text", b.text},
                      {"signature", b.signature},
                      {"call_id", b.call_id},
                      {"name", b.name},
                      {"arguments", b.arguments}});
  }
  json j = {{"model", a.model},
            {"blocks", blocks},
            {"finish", finish_reason_name(a.finish)},
            {"stop_sequence", a.stop_sequence},
            {"usage",
             {{"prompt_tokens", a.usage.prompt_tokens},
              {"completion_tokens", a.usage.completion_tokens},
              {"cached_tokens", a.usage.cached_tokens},
              {"reasoning_tokens", a.usage.reasoning_tokens}}}};
  if (a.error)
    j["error"] = {{"code", error_code_name(a.error->code)}, {"message", a.error->message}};
  return j;
}

void write(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

template <typename Renderer, typename Options>
std::string render_stream(const Answer& a, size_t fragment, Options options) {
  Renderer r(std::move(options));
  RenderSink<Renderer> sink(r);
  // The prompt count is known at the start (ferry counts it before the backend runs).
  Usage start = a.usage;
  start.completion_tokens = 0;
  start.reasoning_tokens = 0;
  replay(a, sink, fragment, start);
  return sink.out;
}

}  // namespace

int run(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  json index = json::array();
  for (const Case& c : cases()) {
    index.push_back(c.name);
    write(dir / (c.name + ".answer.json"), answer_json(c.answer).dump(2));
    WireBody m = render_anthropic_message(c.answer);
    write(dir / (c.name + ".anthropic.json"),
          json{{"status", m.status}, {"body", json::parse(m.body)}}.dump());
    write(dir / (c.name + ".anthropic.sse"),
          render_stream<AnthropicStreamRenderer>(c.answer, c.fragment, AnthropicRenderOptions{}));
    WireBody r = render_response(c.answer);
    write(dir / (c.name + ".responses.json"),
          json{{"status", r.status}, {"body", json::parse(r.body)}}.dump());
    write(dir / (c.name + ".responses.sse"),
          render_stream<ResponsesStreamRenderer>(c.answer, c.fragment, ResponsesRenderOptions{}));
  }
  write(dir / "cases.json", index.dump());
  return 0;
}

}  // namespace ferry::api

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: ferry_api_wire_fixtures OUT_DIR\n";
    return 2;
  }
  try {
    return ferry::api::run(argv[1]);
  } catch (const std::exception& e) {
    std::cerr << "ferry_api_wire_fixtures: " << e.what() << "\n";
    return 1;
  }
}
