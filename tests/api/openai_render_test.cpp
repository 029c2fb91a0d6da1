// The renderer: typed request -> OpenAI JSON (round trips through the parser), a backend's
// body (model, overrides, usage), and the chat template's input.
#include "api/openai_render.h"

#include <gtest/gtest.h>

#include <string>

#include "api/openai_parse.h"

namespace ferry::api {
namespace {

ChatRequest parse(Endpoint endpoint, const std::string& body) {
  auto r = parse_openai(endpoint, body);
  EXPECT_TRUE(r) << body << ": " << r.error().message;
  return r ? std::move(r).value() : ChatRequest{};
}

// Every member the parser types, and some it keeps as sent.
constexpr const char* kRichChat = R"({
  "model": "m",
  "messages": [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "look"},
                                 {"type": "image_url", "image_url": {"url": "http://x"}}],
     "name": "ann"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
     "function": {"name": "get", "arguments": "{\"q\":1}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42", "x_note": [1, 2.5]}
  ],
  "tools": [{"type": "function", "function": {"name": "get", "description": "d",
             "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}}}}],
  "tool_choice": {"type": "function", "function": {"name": "get"}},
  "parallel_tool_calls": true,
  "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}}},
  "temperature": 0.25, "top_p": 0.5, "presence_penalty": 0.5, "frequency_penalty": -0.5,
  "seed": 42, "logit_bias": {"3": 1, "9": -2.5}, "stop": ["END"],
  "logprobs": true, "top_logprobs": 2, "max_completion_tokens": 64, "n": 2,
  "stream": true, "stream_options": {"include_usage": false},
  "user": "u", "metadata": {"task_id": "t", "tags": "a,b"},
  "min_p": 0.05, "top_k": 20, "ignore_eos": false,
  "chat_template_kwargs": {"enable_thinking": false}, "x_vendor": {"k": "v"}
})";

TEST(OpenAiRender, ChatRoundTripsThroughTheParser) {
  ChatRequest first = parse(Endpoint::kChatCompletions, kRichChat);
  const Json once = to_openai_json(first);
  ChatRequest second = parse(Endpoint::kChatCompletions, once.dump());
  EXPECT_EQ(to_openai_json(second), once);
  // Nothing the client sent is lost: the rendering is the body, members perhaps in another
  // order (compared as unordered JSON).
  EXPECT_EQ(nlohmann::json::parse(once.dump()), nlohmann::json::parse(kRichChat));
}

TEST(OpenAiRender, CompletionsRoundTrip) {
  for (const char* body :
       {R"({"model":"m","prompt":"hello","logprobs":3,"echo":false,"best_of":1,"suffix":"s"})",
        R"({"model":"m","prompt":["a",[1,2],5],"max_tokens":4,"stop":"x"})",
        R"({"model":"m","prompt":[],"top_logprobs":1})"}) {
    SCOPED_TRACE(body);
    ChatRequest first = parse(Endpoint::kCompletions, body);
    const Json once = to_openai_json(first);
    EXPECT_EQ(once, Json::parse(body));  // already in the renderer's order: the same JSON
    EXPECT_EQ(to_openai_json(parse(Endpoint::kCompletions, once.dump())), once);
  }
}

TEST(OpenAiRender, ABackendsBodyNamesItsModelAndAppliesOverrides) {
  ChatRequest r = parse(Endpoint::kChatCompletions, kRichChat);
  Overrides o;
  o.max_tokens = 7;
  o.temperature = 0.0;
  const Json body = Json::parse(render_openai(r, "org/up", o));
  EXPECT_EQ(body["model"], "org/up");
  EXPECT_EQ(body["max_completion_tokens"], 7);  // the name the client used
  EXPECT_FALSE(body.contains("max_tokens"));
  EXPECT_EQ(body["temperature"], 0.0);
  EXPECT_EQ(body["top_p"], 0.5);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);  // usage always comes back
  ChatRequest plain = parse(Endpoint::kChatCompletions,
                            R"({"model":"m","messages":[{"role":"user","content":"x"}]})");
  const Json p = Json::parse(render_openai(plain, "up", o));
  EXPECT_EQ(p["max_tokens"], 7);
  EXPECT_FALSE(p.contains("stream_options"));
}

// The template sees what it saw when it read the raw body: for a body in OpenAI's member order
// (as the SDKs send it), template_input is exactly that body's messages, tools and kwargs, so
// the prompt counts of routing and of the local engine are the same as before.
TEST(OpenAiRender, TemplateInputIsTheBodysMessagesToolsAndKwargs) {
  const char* body = R"({"model":"m",
    "messages":[{"role":"system","content":"s"},
                {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
                {"role":"assistant","content":"ok","tool_calls":[{"id":"1","type":"function",
                 "function":{"name":"f","arguments":"{}"}}]},
                {"role":"tool","content":"r","tool_call_id":"1"}],
    "tools":[{"type":"function","function":{"name":"f","description":"d",
              "parameters":{"type":"object","properties":{}}}}],
    "temperature":0,
    "chat_template_kwargs":{"enable_thinking":true}})";
  const Json raw = Json::parse(body);
  const Json input = template_input(parse(Endpoint::kChatCompletions, body));
  EXPECT_EQ(input["messages"].dump(), raw["messages"].dump());
  EXPECT_EQ(input["tools"].dump(), raw["tools"].dump());
  EXPECT_EQ(input["chat_template_kwargs"], raw["chat_template_kwargs"]);
  EXPECT_FALSE(input.contains("temperature"));
  const Json prompt =
      template_input(parse(Endpoint::kCompletions, R"({"model":"m","prompt":["a",[1]]})"));
  EXPECT_EQ(prompt, Json::parse(R"({"prompt":["a",[1]]})"));
}

TEST(OpenAiRender, ToolsKeptAsSentReachTheTemplate) {
  const Json input = template_input(parse(
      Endpoint::kChatCompletions,
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"custom"}]})"));
  EXPECT_EQ(input["tools"], Json::parse(R"([{"type":"custom"}])"));
}

// Equal including each value's type (nlohmann's == calls 5 and 5u equal; a template's `tojson`
// and type tests may not) and each object's member order.
void expect_same_tree(const Json& got, const Json& want, const std::string& path) {
  ASSERT_EQ(got.type(), want.type()) << path << ": " << got.dump() << " vs " << want.dump();
  if (got.is_object()) {
    ASSERT_EQ(got.size(), want.size()) << path;
    auto w = want.begin();
    for (auto g = got.begin(); g != got.end(); ++g, ++w) {
      ASSERT_EQ(g.key(), w.key()) << path;
      expect_same_tree(g.value(), w.value(), path + "." + g.key());
    }
  } else if (got.is_array()) {
    ASSERT_EQ(got.size(), want.size()) << path;
    for (size_t i = 0; i < got.size(); ++i) {
      expect_same_tree(got[i], want[i], path + "[" + std::to_string(i) + "]");
    }
  } else {
    EXPECT_EQ(got.dump(), want.dump()) << path;
    EXPECT_EQ(got, want) << path;
  }
}

// template_input builds its tree directly; template_input_by_text is its definition (written as
// text and parsed). The two agree on every request, so prompt counts are the same either way.
TEST(TemplateInput, TheDirectTreeIsTheTextsTree) {
  std::vector<ChatRequest> requests;
  requests.push_back(parse(Endpoint::kChatCompletions, kRichChat));
  requests.push_back(parse(Endpoint::kChatCompletions, R"({"model":"m",
    "messages":[{"role":"developer","content":"d","x":{"n":-3,"u":18446744073709551615,
                 "f":1.5,"e":1e300,"b":false,"z":null,"a":[0,-0.0,"\u00e9\ud83d\ude00"]}},
                {"role":"user","content":[]},
                {"role":"assistant","tool_calls":[{"id":"1","type":"function","function":
                 {"name":"f","arguments":"{\"a\":[1,2]}","x_fn":7}}]},
                {"role":"function","name":"f","content":"ctl \u0001 \t \" \\ end"}],
    "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",
              "properties":{"n":{"type":"integer","minimum":0,"maximum":10}}},"strict":true,
              "x_fn":[1]},"x_tool":{"k":2}}],
    "chat_template_kwargs":{"enable_thinking":false,"depth":2}})"));
  requests.push_back(parse(Endpoint::kChatCompletions,
                           R"({"model":"m","messages":[{"role":"user","content":"x"}],
                               "tools":[{"type":"custom","n":3}]})"));
  requests.push_back(parse(Endpoint::kCompletions, R"({"model":"m","prompt":["a",[1,2],3]})"));
  requests.push_back(parse(Endpoint::kCompletions, R"({"model":"m","prompt":"one"})"));
  // Made by code, not parsed: bytes that are not UTF-8 (the text writer turns each into
  // U+FFFD), integers kept signed, a NaN (written as null), in every place a string can be.
  ChatRequest made;
  made.endpoint = Endpoint::kChatCompletions;
  Message m;
  m.role = Role::kAssistant;
  m.content.form = Content::Form::kParts;
  m.content.parts.push_back({"text", "ok \xff\xfe end", Json::object({{"k\xc3", 5}})});
  m.content.parts.push_back({"image_url", "", Json::object({{"image_url", "u\x80"}})});
  m.name = "n\xe2\x82";
  m.tool_calls = std::vector<ToolCall>{{"id\xc0", "function", "f\xf5", "{\"a\":\"\xff\"}", {}}};
  m.tool_call_id = "t\xed\xa0\x80";  // a surrogate: not well-formed
  m.extra = Json::object({{"n", 12}, {"neg", -1}, {"nan", std::nan("")}, {"s", "\xbf"}});
  made.messages.push_back(m);
  Tool t;
  t.name = "f\xff";
  t.description = "d\xfe";
  t.parameters = R"({"minimum":3,"enum":["a",4,-2,1.5]})";  // JSON text, as a parser keeps it
  made.tools = std::vector<Tool>{t};
  made.extra = Json::object({{"chat_template_kwargs", Json::object({{"x", 1}})}});
  requests.push_back(made);
  ChatRequest prompt_made;
  prompt_made.endpoint = Endpoint::kCompletions;
  prompt_made.prompt.array = true;
  prompt_made.prompt.items.push_back({PromptItem::Kind::kText, "p\xff", {}});
  prompt_made.prompt.items.push_back({PromptItem::Kind::kTokenId, "", {9}});
  requests.push_back(prompt_made);
  ChatRequest empty_prompt;
  empty_prompt.endpoint = Endpoint::kCompletions;
  requests.push_back(empty_prompt);

  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    expect_same_tree(template_input(requests[i]), template_input_by_text(requests[i]), "$");
  }
  // The cases above reach what they mean to: a string that was not UTF-8 reads U+FFFD.
  const Json made_input = template_input(made);
  EXPECT_EQ(made_input["messages"][0]["name"], "n\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_TRUE(made_input["messages"][0]["nan"].is_null());
  EXPECT_TRUE(made_input["messages"][0]["n"].is_number_unsigned());
}

}  // namespace
}  // namespace ferry::api
