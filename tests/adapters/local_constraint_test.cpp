// The local engine's constraints, served: template tool formats detected by rendering (golden
// per family), the tool-call reader over every split of an output, and LocalBackend::send with
// response_format and tools on a random-weight model (so any valid output is the constraint's
// doing): OpenAI's body and chunk shapes, the stream parsing into the same api::Answer as the
// body, refusals that name the field and may fall back.
#include "adapters/local_constraint.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <thread>

#include <nlohmann/json.hpp>

#include "adapters/local_backend.h"
#include "api/openai_chat_parse.h"
#include "model_tools/model_tools.h"
#include "tests/adapters/tool_templates.h"
#include "tokenizer/tokenizer.h"

namespace ferry::adapters {
namespace {

namespace asio = boost::asio;
using Json = nlohmann::ordered_json;

// ---- template families ------------------------------------------------------------------------

class TemplateFamilyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() /
           ("ferry-local-constraint-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    model_tools::SynthOptions o;
    o.n_embd = 64;
    o.n_layer = 1;
    o.n_head = 2;
    o.n_head_kv = 1;
    o.n_ff = 128;
    o.n_ctx = 1024;
    o.type = "Q8_0";
    o.seed = 9;
    ASSERT_TRUE(model_tools::write_synth_model(o, (dir_ / "tiny.gguf").string()).has_value());
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static TemplateTools detect(const char* source) {
    auto tok = tokenizer::load_tokenizer((dir_ / "tiny.gguf").string());
    EXPECT_TRUE(tok.has_value());
    auto chat = tokenizer::ChatFormatter::create(tok.value(), source);
    EXPECT_TRUE(chat.has_value()) << chat.error().message;
    return detect_template_tools(*chat.value());
  }

  static inline std::filesystem::path dir_;
};

TEST_F(TemplateFamilyTest, EachFamilyIsDetectedByWhatItRenders) {
  const TemplateTools hermes = detect(test::kHermesTemplate);
  EXPECT_TRUE(hermes.renders_tools);
  EXPECT_EQ(hermes.format, ToolFormat::kHermes);
  const TemplateTools llama = detect(test::kLlama3Template);
  EXPECT_TRUE(llama.renders_tools);
  EXPECT_EQ(llama.format, ToolFormat::kLlama3Json);
  const TemplateTools mistral = detect(test::kMistralTemplate);
  EXPECT_TRUE(mistral.renders_tools);
  EXPECT_EQ(mistral.format, ToolFormat::kMistral);
  EXPECT_EQ(llama.arguments_key, "parameters");
  EXPECT_TRUE(llama.unsupported.empty());
  EXPECT_TRUE(mistral.unsupported.empty());
  const TemplateTools args = detect(test::kMistralArgsTemplate);
  EXPECT_EQ(args.format, ToolFormat::kMistral);
  EXPECT_NE(args.unsupported.find("[ARGS]"), std::string::npos);
  const TemplateTools qwen3 = detect(test::kQwen3ThinkingTemplate);
  EXPECT_EQ(qwen3.format, ToolFormat::kHermes);
  EXPECT_EQ(qwen3.think_begin, "<think>");
  EXPECT_EQ(qwen3.think_end, "</think>");
  EXPECT_TRUE(hermes.think_begin.empty());
  const TemplateTools generic = detect(test::kGenericToolsTemplate);
  EXPECT_TRUE(generic.renders_tools);
  EXPECT_EQ(generic.format, ToolFormat::kGeneric);
  EXPECT_FALSE(detect(test::kNoToolsTemplate).renders_tools);
}

// ---- the tool-call reader ---------------------------------------------------------------------

struct Read {
  std::string reasoning;
  std::string text;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  std::vector<std::string> ids;
};

Read read_all(const std::string& output, const std::vector<size_t>& cuts,
              const constrain::ToolCallSyntax& syntax = {}) {
  ToolCallParser parser(syntax, "seed");
  std::vector<ToolPiece> pieces;
  size_t at = 0;
  for (size_t cut : cuts) {
    parser.feed(std::string_view(output).substr(at, cut - at), pieces);
    at = cut;
  }
  parser.feed(std::string_view(output).substr(at), pieces);
  parser.finish(pieces);
  Read r;
  for (const ToolPiece& p : pieces) {
    switch (p.kind) {
      case ToolPiece::Kind::kReasoning:
        EXPECT_TRUE(r.calls.empty() && r.text.empty()) << "reasoning after the body";
        r.reasoning += p.text;
        break;
      case ToolPiece::Kind::kText:
        EXPECT_TRUE(r.calls.empty()) << "text after a call";
        r.text += p.text;
        break;
      case ToolPiece::Kind::kCallStart:
        EXPECT_EQ(p.index, static_cast<int>(r.calls.size()));
        r.calls.emplace_back(p.name, "");
        r.ids.push_back(p.id);
        break;
      case ToolPiece::Kind::kArguments:
        EXPECT_EQ(p.index + 1, static_cast<int>(r.calls.size()));
        r.calls.back().second += p.text;
        break;
    }
  }
  return r;
}

TEST(ToolCallParserTest, TextThenCallsInEverySplitReadTheSame) {
  const std::string out =
      "Let me <tool check. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"a}\\\"{\", \"n\": [1, {\"x\": 2}]}}\n</tool_call>\n<tool_call>{\"name\":"
      "\"f\",\"arguments\":{}}</tool_call>";
  const Read whole = read_all(out, {});
  EXPECT_EQ(whole.text, "Let me <tool check. ");
  ASSERT_EQ(whole.calls.size(), 2u);
  EXPECT_EQ(whole.calls[0].first, "get_weather");
  EXPECT_EQ(whole.calls[0].second, "{\"city\": \"a}\\\"{\", \"n\": [1, {\"x\": 2}]}");
  EXPECT_EQ(whole.calls[1].first, "f");
  EXPECT_EQ(whole.calls[1].second, "{}");
  EXPECT_NE(whole.ids[0], whole.ids[1]);
  EXPECT_EQ(whole.ids[0].rfind("call_", 0), 0u);
  for (size_t a = 1; a < out.size(); ++a) {
    for (size_t b = a; b < out.size(); b += 7) {
      const Read r = read_all(out, {a, b});
      EXPECT_EQ(r.text, whole.text) << a << "," << b;
      EXPECT_EQ(r.calls, whole.calls) << a << "," << b;
    }
  }
}

TEST(ToolCallParserTest, WhiteSpaceBeforeACallIsNoContentAndAMarkerPrefixAtTheEndIsText) {
  const Read only_call =
      read_all("\n <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", {1});
  EXPECT_EQ(only_call.text, "");
  ASSERT_EQ(only_call.calls.size(), 1u);
  const Read text = read_all("see <tool_c", {5});
  EXPECT_EQ(text.text, "see <tool_c");
  EXPECT_TRUE(text.calls.empty());
}

// Every split of an output reads as the whole does.
void expect_same_in_every_split(const std::string& out, const constrain::ToolCallSyntax& syn,
                                const Read& whole) {
  for (size_t a = 1; a < out.size(); ++a) {
    for (size_t b = a; b < out.size(); b += 5) {
      const Read r = read_all(out, {a, b}, syn);
      EXPECT_EQ(r.reasoning, whole.reasoning) << a << "," << b;
      EXPECT_EQ(r.text, whole.text) << a << "," << b;
      EXPECT_EQ(r.calls, whole.calls) << a << "," << b;
    }
  }
}

// `out` reads as one call of `name` with `args` and no text, however it is split.
void expect_one_call(const std::string& out, const constrain::ToolCallSyntax& syn, const char* name,
                     const char* args) {
  const Read one = read_all(out, {}, syn);
  EXPECT_EQ(one.text, "");
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(one.calls[0].first, name);
  EXPECT_EQ(one.calls[0].second, args);
  expect_same_in_every_split(out, syn, one);
}

TEST(ToolCallParserTest, MistralListAndLlamaBareCallsReadInEverySplit) {
  TemplateTools mistral;
  mistral.format = ToolFormat::kMistral;
  const auto list = tool_call_syntax(mistral, false);
  const std::string out =
      "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a],\\\"}\"}}, "
      "{\"name\":\"f\",\"arguments\":{}}]";
  const Read whole = read_all(out, {}, list);
  EXPECT_EQ(whole.text, "");
  ASSERT_EQ(whole.calls.size(), 2u);
  EXPECT_EQ(whole.calls[0].first, "get_weather");
  EXPECT_EQ(whole.calls[0].second, "{\"city\": \"a],\\\"}\"}");
  EXPECT_EQ(whole.calls[1].second, "{}");
  expect_same_in_every_split(out, list, whole);

  TemplateTools llama;
  llama.format = ToolFormat::kLlama3Json;
  llama.arguments_key = "parameters";
  const auto bare = tool_call_syntax(llama, false);
  expect_one_call(" {\"name\": \"get_time\", \"parameters\": {\"zone\": -3}}", bare, "get_time",
                  "{\"zone\": -3}");
  // Text that does not open with '{' is text, braces and all.
  const Read text = read_all("It is {sunny}.", {3}, bare);
  EXPECT_EQ(text.text, "It is {sunny}.");
  EXPECT_TRUE(text.calls.empty());
}

// Llama 3.1+ with <|python_tag|> in the vocabulary: the call may open with it, never shown.
TEST(ToolCallParserTest, LlamaPythonTagOpensTheCallAndIsNeverShown) {
  TemplateTools llama;
  llama.format = ToolFormat::kLlama3Json;
  llama.arguments_key = "parameters";
  llama.token_markers = {"<|python_tag|>"};
  const auto syn = tool_call_syntax(llama, false);
  EXPECT_EQ(syn.begin, "<|python_tag|>");
  expect_one_call("<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"zone\": 1}}", syn,
                  "get_time", "{\"zone\": 1}");
  const Read bare = read_all("{\"name\": \"f\", \"parameters\": {}}", {}, syn);
  ASSERT_EQ(bare.calls.size(), 1u);
  const Read text = read_all("It is <b>so</b>.", {2}, syn);
  EXPECT_EQ(text.text, "It is <b>so</b>.");
  EXPECT_TRUE(text.calls.empty());
}

TEST(ToolCallParserTest, AThinkBlockIsReasoningAndTheBodyFollowsIt) {
  TemplateTools qwen3;
  qwen3.format = ToolFormat::kHermes;
  qwen3.think_begin = "<think>";
  qwen3.think_end = "</think>";
  const auto syn = tool_call_syntax(qwen3, true);
  const std::string out =
      "<think>\nweather? </thin maybe <tool_call>\n</think>\n\n<tool_call>{\"name\": \"f\", "
      "\"arguments\": {}}</tool_call>";
  const Read whole = read_all(out, {}, syn);
  EXPECT_EQ(whole.reasoning, "\nweather? </thin maybe <tool_call>\n");
  EXPECT_EQ(whole.text, "");
  ASSERT_EQ(whole.calls.size(), 1u);
  expect_same_in_every_split(out, syn, whole);
  const Read plain = read_all("<thi is not a think block", {2}, syn);
  EXPECT_EQ(plain.reasoning, "");
  EXPECT_EQ(plain.text, "<thi is not a think block");
  EXPECT_TRUE(tool_call_syntax(qwen3, false).think_begin.empty());
}

// ---- served -----------------------------------------------------------------------------------

class CollectingSink : public StreamSink {
 public:
  asio::awaitable<bool> write(std::string_view bytes) override {
    all += bytes;
    co_return true;
  }
  void add_header(std::string_view name, std::string_view value) override {
    headers.emplace_back(name, value);
  }
  std::vector<std::string> data() const {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < all.size()) {
      const size_t end = all.find("\n\n", pos);
      if (end == std::string::npos) break;
      out.push_back(all.substr(pos + 6, end - pos - 6));
      pos = end + 2;
    }
    return out;
  }
  std::string all;
  std::vector<std::pair<std::string, std::string>> headers;
};

class ConstrainedBackendTest : public TemplateFamilyTest {
 protected:
  static std::unique_ptr<LocalBackend> open(const char* chat_template, bool prefix_cache = true) {
    config::BackendConfig c;
    c.name = "local";
    c.kind = "local";
    config::LocalEngineConfig l;
    l.model_path = (dir_ / "tiny.gguf").string();
    l.threads = 1;
    l.context_length = 1024;
    if (chat_template != nullptr) l.chat_template = chat_template;
    l.prefix_cache = prefix_cache;
    c.local = l;
    auto b = LocalBackend::open(c);
    EXPECT_TRUE(b.has_value()) << b.error().message;
    return std::move(b).value();
  }

  // Sends `body` on `ioc` (not run here); the reply lands in `out`, then `done` runs.
  static void spawn(asio::io_context& ioc, LocalBackend& b, Json body,
                    std::optional<Result<BackendReply>>& out, CollectingSink* sink = nullptr,
                    std::function<void()> done = {}) {
    body["model"] = "tiny";
    auto r = std::make_shared<BackendRequest>();
    r->endpoint = Endpoint::kChatCompletions;
    r->stream = sink != nullptr;
    if (r->stream) body["stream"] = true;
    r->body = body.dump();
    asio::co_spawn(
        ioc,
        [&b, r, sink, &out, done = std::move(done)]() -> asio::awaitable<void> {
          CancelSignal cancel;
          out.emplace(co_await b.send(*r, sink, cancel));
          if (done) done();
        },
        asio::detached);
  }

  static Result<BackendReply> run(LocalBackend& b, Json body, CollectingSink* sink = nullptr) {
    asio::io_context ioc;
    std::optional<Result<BackendReply>> result;
    spawn(ioc, b, std::move(body), result, sink);
    ioc.run();
    return std::move(*result);
  }

  static Json ask(int max_tokens, uint64_t seed) {
    return {{"messages", Json::array({{{"role", "user"}, {"content", "What's the weather?"}}})},
            {"max_tokens", max_tokens},
            {"temperature", 1},
            {"seed", seed}};
  }

  static Json weather_tools() {
    return Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
      "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}}},
      {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
      "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 12}},
      "required": ["zone"], "additionalProperties": false}}}])");
  }

  static std::string header(const BackendReply& r, const std::string& name) {
    for (const auto& [n, v] : r.headers) {
      if (n == name) return v;
    }
    return "";
  }
};

void expect_valid_weather_call(const Json& call) {
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  const std::string name = call["function"]["name"];
  const Json args = Json::parse(call["function"]["arguments"].get<std::string>());
  if (name == "get_weather") {
    ASSERT_EQ(args.size(), 2u) << args.dump();
    EXPECT_TRUE(args["city"].is_string());
    EXPECT_LE(args["city"].get<std::string>().size(), 48u);
    EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << args.dump();
  } else {
    ASSERT_EQ(name, "get_time");
    ASSERT_EQ(args.size(), 1u) << args.dump();
    ASSERT_TRUE(args["zone"].is_number_integer());
    EXPECT_GE(args["zone"].get<int>(), -12);
    EXPECT_LE(args["zone"].get<int>(), 12);
  }
}

TEST_F(ConstrainedBackendTest, RequiredToolCallsAreDeclaredFunctionsWithValidArguments) {
  auto backend = open(test::kHermesTemplate);
  int with_calls = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Json body = ask(200, seed);
    body["tools"] = weather_tools();
    body["tool_choice"] = "required";
    auto reply = run(*backend, body);
    ASSERT_TRUE(reply.has_value()) << reply.error().message;
    EXPECT_EQ(header(*reply, "x-ferry-constraint"), "tools");
    EXPECT_EQ(reply->constraint, "tools");
    EXPECT_EQ(reply->constraint_hash.size(), 64u);
    const Json choice = Json::parse(reply->body)["choices"][0];
    if (choice["finish_reason"] == "length") continue;  // a truncated call is allowed
    ++with_calls;
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    EXPECT_TRUE(choice["message"]["content"].is_null());
    ASSERT_GE(choice["message"]["tool_calls"].size(), 1u);
    for (const Json& call : choice["message"]["tool_calls"]) expect_valid_weather_call(call);
  }
  EXPECT_GT(with_calls, 0);
}

// Llama 3.1 JSON and Mistral [TOOL_CALLS] templates: calls in OpenAI's shape, never markers.
TEST_F(ConstrainedBackendTest, LlamaAndMistralTemplatesGetCallsInTheirOwnFormat) {
  for (const char* tmpl : {test::kLlama3Template, test::kMistralTemplate}) {
    auto backend = open(tmpl);
    int with_calls = 0;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      Json body = ask(120, seed);
      body["tools"] = weather_tools();
      body["tool_choice"] =
          seed % 2 == 0 ? Json("required")
                        : Json{{"type", "function"}, {"function", {{"name", "get_weather"}}}};
      auto reply = run(*backend, body);
      ASSERT_TRUE(reply.has_value()) << reply.error().message;
      const Json choice = Json::parse(reply->body)["choices"][0];
      ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice.dump();
      ++with_calls;
      EXPECT_TRUE(choice["message"]["content"].is_null()) << choice.dump();
      for (const Json& call : choice["message"]["tool_calls"]) expect_valid_weather_call(call);
      if (tmpl == test::kLlama3Template) {
        EXPECT_EQ(choice["message"]["tool_calls"].size(), 1u);
      }
    }
    EXPECT_EQ(with_calls, 4);
    // auto: text or a call, and text never carries a raw call.
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      Json body = ask(40, seed);
      body["tools"] = weather_tools();
      auto reply = run(*backend, body);
      ASSERT_TRUE(reply.has_value()) << reply.error().message;
      const Json m = Json::parse(reply->body)["choices"][0]["message"];
      if (m.contains("tool_calls")) {
        for (const Json& call : m["tool_calls"]) expect_valid_weather_call(call);
      } else {
        EXPECT_EQ(m["content"].get<std::string>().find("[TOOL_CALLS]"), std::string::npos);
      }
    }
  }
}

// Qwen3 thinking: a think block may come first; its text is reasoning_content (counted as
// reasoning tokens), the calls after it as ever. enable_thinking false: no think block.
// A think block's reasoning, if the answer has one (only when thinking is on): apart from the
// content, without its end marker, counted as reasoning tokens in the body and the reply. 1 when
// there was one.
int expect_reasoning(const Json& j, const BackendReply& reply, bool thinking_on) {
  const Json& message = j["choices"][0]["message"];
  const int64_t reasoning = j["usage"]["completion_tokens_details"]["reasoning_tokens"];
  EXPECT_EQ(reply.usage.reasoning_tokens, reasoning);
  if (!message.contains("reasoning_content")) {
    EXPECT_EQ(reasoning, 0);
    return 0;
  }
  EXPECT_TRUE(thinking_on) << "a think block with thinking off";
  const std::string r = message["reasoning_content"];
  EXPECT_EQ(r.find("</think>"), std::string::npos) << r;
  EXPECT_GT(reasoning, 0);
  EXPECT_LT(reasoning, j["usage"]["completion_tokens"].get<int64_t>());
  return 1;
}

TEST_F(ConstrainedBackendTest, AThinkBlockIsReasoningContentBeforeTheCalls) {
  auto backend = open(test::kQwen3ThinkingTemplate);
  int thought = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    Json body = ask(160, seed);
    body["tools"] = weather_tools();
    body["tool_choice"] = "required";
    if (seed > 8) body["chat_template_kwargs"] = {{"enable_thinking", false}};
    auto reply = run(*backend, body);
    ASSERT_TRUE(reply.has_value()) << reply.error().message;
    const Json j = Json::parse(reply->body);
    const Json choice = j["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice.dump();
    for (const Json& call : choice["message"]["tool_calls"]) expect_valid_weather_call(call);
    thought += expect_reasoning(j, *reply, seed <= 8);
  }
  EXPECT_GT(thought, 0);
}

TEST_F(ConstrainedBackendTest, AThinkBlockBeforeAJsonSchemaIsReasoningAndTheContentValidates) {
  // Qwen3 thinking template + response_format: the think block stays free, the schema holds
  // after it; reasoning_content apart, counted as reasoning tokens.
  auto backend = open(test::kQwen3ThinkingTemplate);
  const Json schema = Json::parse(R"({"type": "object", "properties": {"city": {"type": "string",
    "maxLength": 12}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["city", "n"], "additionalProperties": false})");
  int thought = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    Json body = ask(160, seed);
    body["response_format"] = {
        {"type", "json_schema"},
        {"json_schema", {{"name", "place"}, {"strict", true}, {"schema", schema}}}};
    if (seed > 7) body["chat_template_kwargs"] = {{"enable_thinking", false}};
    auto reply = run(*backend, body);
    ASSERT_TRUE(reply.has_value()) << reply.error().message;
    EXPECT_EQ(header(*reply, "x-ferry-constraint"), "json_schema");
    const Json j = Json::parse(reply->body);
    const Json choice = j["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "stop") << choice.dump();
    const std::string content = choice["message"]["content"];
    const Json doc = Json::parse(content);  // the content alone is the document
    ASSERT_EQ(doc.size(), 2u) << content;
    EXPECT_LE(doc["city"].get<std::string>().size(), 48u);
    EXPECT_GE(doc["n"].get<int>(), 0);
    EXPECT_LE(doc["n"].get<int>(), 9);
    thought += expect_reasoning(j, *reply, seed <= 7);
  }
  EXPECT_GT(thought, 0);
}

TEST_F(ConstrainedBackendTest, NamedChoiceCallsThatFunctionOnly) {
  auto backend = open(test::kGenericToolsTemplate);
  Json body = ask(200, 3);
  body["tools"] = weather_tools();
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  body["parallel_tool_calls"] = false;
  auto reply = run(*backend, body);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  const Json choice = Json::parse(reply->body)["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice.dump();
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_time");
  expect_valid_weather_call(choice["message"]["tool_calls"][0]);
}

// What the gateway does for Anthropic and Responses clients: the chunks, through
// api::ChatStreamParser, give the same Answer as the body (same seed, same output).
TEST_F(ConstrainedBackendTest, ToolCallStreamParsesIntoTheSameAnswerAsTheBody) {
  auto backend = open(test::kHermesTemplate);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Json body = ask(160, seed);
    body["tools"] = weather_tools();
    body["tool_choice"] = "required";
    auto whole = run(*backend, body);
    ASSERT_TRUE(whole.has_value()) << whole.error().message;
    auto from_body = api::parse_chat_completion(whole->body);
    ASSERT_TRUE(from_body.has_value()) << from_body.error().message;

    CollectingSink sink;
    auto streamed = run(*backend, body, &sink);
    ASSERT_TRUE(streamed.has_value()) << streamed.error().message;
    ASSERT_EQ(sink.headers.size(), 1u);
    EXPECT_EQ(sink.headers[0].second, "tools");
    EXPECT_EQ(sink.all.find("<tool_call>"), std::string::npos) << "a raw marker was streamed";
    api::ChatStreamParser parser;
    api::AnswerBuilder builder;
    for (const std::string& d : sink.data()) ASSERT_TRUE(parser.feed(d, builder)) << d;
    ASSERT_TRUE(parser.feed("[DONE]", builder));
    ASSERT_FALSE(builder.violation()) << builder.violation()->message;
    const api::Answer& a = builder.answer();
    const api::Answer& b = from_body.value();
    EXPECT_EQ(a.finish, b.finish);
    ASSERT_EQ(a.blocks.size(), b.blocks.size());
    for (size_t i = 0; i < a.blocks.size(); ++i) {
      EXPECT_EQ(a.blocks[i].kind, b.blocks[i].kind);
      EXPECT_EQ(a.blocks[i].text, b.blocks[i].text);
      EXPECT_EQ(a.blocks[i].name, b.blocks[i].name);
      EXPECT_EQ(a.blocks[i].arguments, b.blocks[i].arguments);
    }
  }
}

TEST_F(ConstrainedBackendTest, JsonSchemaOutputsParseAndTruncationIsLength) {
  auto backend = open(nullptr);
  const Json schema = Json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0,
      "maximum": 150}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
      "required": ["name", "age", "tags"], "additionalProperties": false})");
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    Json body = ask(120, seed);
    body["response_format"] = {
        {"type", "json_schema"},
        {"json_schema", {{"name", "p"}, {"strict", true}, {"schema", schema}}}};
    body["n"] = 2;
    auto reply = run(*backend, body);
    ASSERT_TRUE(reply.has_value()) << reply.error().message;
    EXPECT_EQ(header(*reply, "x-ferry-constraint"), "json_schema");
    for (const Json& choice : Json::parse(reply->body)["choices"]) {
      if (choice["finish_reason"] == "length") continue;
      EXPECT_EQ(choice["finish_reason"], "stop");
      const Json v = Json::parse(choice["message"]["content"].get<std::string>());
      ASSERT_EQ(v.size(), 3u) << v.dump();
      EXPECT_LE(v["name"].get<std::string>().size(), 40u);
      EXPECT_GE(v["age"].get<int>(), 0);
      EXPECT_LE(v["age"].get<int>(), 150);
      EXPECT_LE(v["tags"].size(), 3u);
    }
  }
  // max_tokens 3 fits the shortest object and the end of generation: it closes in time.
  Json fits = ask(3, 1);
  fits["response_format"] = {{"type", "json_object"}};
  auto closed = run(*backend, fits);
  ASSERT_TRUE(closed.has_value()) << closed.error().message;
  const Json done = Json::parse(closed->body)["choices"][0];
  EXPECT_EQ(done["finish_reason"], "stop") << done.dump();
  EXPECT_TRUE(Json::parse(done["message"]["content"].get<std::string>()).is_object());
  // 2 is below it: cut, with every token on the way to the end (no white space first).
  Json cut = ask(2, 1);
  cut["response_format"] = {{"type", "json_object"}};
  auto reply = run(*backend, cut);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  EXPECT_EQ(header(*reply, "x-ferry-constraint"), "json_object");
  const Json choice = Json::parse(reply->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  const std::string text = choice["message"]["content"];
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text[0], '{') << text;
}

TEST_F(ConstrainedBackendTest, CompilationRunsOffTheIoThreadWhichKeepsServingMeanwhile) {
  // The schema's compilation is held (its observer waits) until the I/O thread (this one) has
  // answered a whole other request, started only once the compilation began. Compiling on the
  // I/O thread would block that request: no answer within the wait, and the same thread id.
  auto backend = open(nullptr);
  asio::io_context ioc;
  const std::thread::id io_thread = std::this_thread::get_id();
  std::thread::id compiled_on;
  std::promise<void> served;
  std::future<void> served_future = served.get_future();
  bool held_until_served = false;
  std::optional<Result<BackendReply>> plain;
  std::optional<Result<BackendReply>> schema;
  backend->grammar_cache().observe_compiles([&](std::string_view key) {
    if (key.rfind("json_schema\n", 0) != 0) return;  // json_object, prepared at load
    compiled_on = std::this_thread::get_id();
    spawn(ioc, *backend, ask(4, 1), plain, nullptr, [&] { served.set_value(); });
    held_until_served =
        served_future.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  });
  Json body = ask(40, 1);
  body["response_format"] = {
      {"type", "json_schema"},
      {"json_schema",
       {{"name", "held"},
        {"schema", Json::parse(R"({"type": "object", "properties": {"held": {"type":
          "boolean"}}, "required": ["held"], "additionalProperties": false})")}}}};
  spawn(ioc, *backend, body, schema);
  ioc.run();
  EXPECT_NE(compiled_on, std::thread::id{});
  EXPECT_NE(compiled_on, io_thread);
  EXPECT_TRUE(held_until_served);
  ASSERT_TRUE(plain.has_value() && plain->has_value());
  ASSERT_TRUE(schema.has_value() && schema->has_value()) << (*schema).error().message;
  const Json choice = Json::parse((*schema)->body)["choices"][0];
  if (choice["finish_reason"] == "stop") {
    EXPECT_TRUE(Json::parse(choice["message"]["content"].get<std::string>())["held"].is_boolean());
  }
}

TEST_F(ConstrainedBackendTest, AContextGoneWhileItsSchemaCompilesIsNeverTouchedAgain) {
  // A server stopping: the request's context is destroyed (its frame with it) while the schema
  // still compiles on the pool. When the compilation then ends, the pool must not reach into
  // that context (a channel of it, or the last reference to one: that read freed memory and hung
  // the pool thread one run in ~1,000), and the backend goes on serving other contexts.
  auto backend = open(nullptr);
  std::promise<void> compiling;
  std::future<void> compiling_future = compiling.get_future();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  backend->grammar_cache().observe_compiles([&](std::string_view key) {
    if (key.rfind("json_schema\n", 0) != 0) return;
    compiling.set_value();
    released.wait();
  });
  Json body = ask(20, 1);
  body["response_format"] = {
      {"type", "json_schema"},
      {"json_schema",
       {{"name", "gone"},
        {"schema", Json::parse(R"({"type": "object", "properties": {"gone": {"type":
          "boolean"}}, "required": ["gone"], "additionalProperties": false})")}}}};
  std::optional<Result<BackendReply>> abandoned;
  {
    asio::io_context ioc;
    spawn(ioc, *backend, body, abandoned);
    while (compiling_future.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      ioc.run_one_for(std::chrono::milliseconds(10));
    }
  }  // the context, and the request's frame, are gone; the compilation goes on
  EXPECT_FALSE(abandoned.has_value());
  release.set_value();
  backend->grammar_cache().observe_compiles(nullptr);
  // The same schema again (compiled or taken from the cache) and a plain request, each on a
  // context of its own.
  auto again = run(*backend, body);
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(header(*again, "x-ferry-constraint"), "json_schema");
  auto plain = run(*backend, ask(4, 2));
  ASSERT_TRUE(plain.has_value()) << plain.error().message;
}

TEST_F(ConstrainedBackendTest, PrefixCacheHitsGiveTheSameConstrainedOutputs) {
  // A long system prompt (several prefix blocks), seeded sampling at temperature 1: the same
  // constrained request on a backend without the prefix cache, then twice on one with it (the
  // second reuses the prompt's KV) gives the same tokens.
  auto cached = open(test::kHermesTemplate, true);
  auto uncached = open(test::kHermesTemplate, false);
  std::string system = "You answer with the weather of the city the user names.";
  for (int i = 0; i < 2; ++i) system += " Keep units consistent and name the city as given.";
  const auto with_system = [&](Json body) {
    body["messages"].insert(body["messages"].begin(),
                            Json::object({{"role", "system"}, {"content", system}}));
    return body;
  };
  Json schema_body = with_system(ask(60, 3));
  schema_body["response_format"] = {
      {"type", "json_schema"},
      {"json_schema",
       {{"name", "w"},
        {"schema", Json::parse(R"({"type": "object", "properties": {"city": {"type": "string",
          "maxLength": 10}, "celsius": {"type": "integer", "minimum": -50, "maximum": 50}},
          "required": ["city", "celsius"], "additionalProperties": false})")}}}};
  Json tools_body = with_system(ask(80, 4));
  tools_body["tools"] = weather_tools();
  tools_body["tool_choice"] = "required";
  Json object_body = with_system(ask(40, 5));
  object_body["response_format"] = {{"type", "json_object"}};
  // What a choice says, without the call ids (random per reply).
  const auto said = [](const Json& choice) {
    Json out = {{"finish_reason", choice["finish_reason"]},
                {"content", choice["message"]["content"]}};
    for (const Json& call : choice["message"].value("tool_calls", Json::array()))
      out["calls"].push_back(call["function"]);
    return out;
  };
  for (const Json& body : {schema_body, tools_body, object_body}) {
    auto alone = run(*uncached, body);
    auto first = run(*cached, body);
    auto hit = run(*cached, body);
    ASSERT_TRUE(alone.has_value()) << alone.error().message;
    ASSERT_TRUE(first.has_value()) << first.error().message;
    ASSERT_TRUE(hit.has_value()) << hit.error().message;
    const Json a = Json::parse(alone->body);
    const Json f = Json::parse(first->body);
    const Json h = Json::parse(hit->body);
    EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_GE(h["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 64) << h.dump();
    EXPECT_EQ(said(f["choices"][0]), said(a["choices"][0]));
    EXPECT_EQ(said(h["choices"][0]), said(a["choices"][0]));
    const Json what = said(a["choices"][0]);
    EXPECT_TRUE(what.contains("calls") || !what["content"].get<std::string>().empty()) << a.dump();
  }
}

TEST_F(ConstrainedBackendTest, WhatTheEngineCannotHonourIsA400ThatMayFallBack) {
  auto plain = open(nullptr);  // the synth model's ChatML: ignores tools
  struct Case {
    Json extra;
    std::string param;
    std::string says;
  };
  const Json not_schema = {{"type", "json_schema"},
                           {"json_schema", {{"name", "x"}, {"schema", Json::parse(R"({"type":
      "object", "properties": {"a": {"not": {"type": "string"}}}})")}}}};
  const Case cases[] = {
      {{{"tools", weather_tools()}}, "tools", "ignores 'tools'"},
      {{{"tools", weather_tools()}, {"tool_choice", "required"}}, "tools", "ignores 'tools'"},
      {{{"response_format", not_schema}}, "response_format", "'not' at '#/properties/a'"},
      {{{"response_format", {{"type", "json_object"}}}, {"stop", "}"}}, "stop", "stop string"},
      {{{"response_format", {{"type", "json_object"}}}, {"ignore_eos", true}}, "ignore_eos", ""},
  };
  for (const Case& c : cases) {
    Json body = ask(20, 1);
    for (const auto& [k, v] : c.extra.items()) body[k] = v;
    auto reply = run(*plain, body);
    ASSERT_FALSE(reply.has_value()) << body.dump();
    EXPECT_EQ(reply.error().code, ErrorCode::kInvalidRequest);
    EXPECT_EQ(reply.error().param, c.param) << reply.error().message;
    EXPECT_EQ(reply.error().type_code, kUnsupportedByTarget) << reply.error().message;
    EXPECT_NE(reply.error().message.find(c.says), std::string::npos) << reply.error().message;
  }
  auto args = open(test::kMistralArgsTemplate);
  Json body = ask(20, 1);
  body["tools"] = weather_tools();
  auto reply = run(*args, body);
  ASSERT_FALSE(reply.has_value());
  EXPECT_EQ(reply.error().type_code, kUnsupportedByTarget);
  EXPECT_NE(reply.error().message.find("[ARGS]"), std::string::npos) << reply.error().message;
  // tool_choice none on a template without tools: plain text, no constraint.
  body = ask(5, 1);
  body["tools"] = weather_tools();
  body["tool_choice"] = "none";
  auto none = run(*plain, body);
  ASSERT_TRUE(none.has_value()) << none.error().message;
  EXPECT_EQ(header(*none, "x-ferry-constraint"), "none");
}

}  // namespace
}  // namespace ferry::adapters
