// The OpenAI parser, field by field: what each member becomes in the typed request, and what
// is kept as sent.
#include "api/openai_parse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/openai_render.h"
#include "tests/api/slack.h"

namespace ferry::api {
namespace {

ChatRequest chat(const std::string& members) {
  auto r = parse_openai(Endpoint::kChatCompletions,
                        R"({"model":"m","messages":[{"role":"user","content":"hi"}])" +
                            (members.empty() ? "" : "," + members) + "}");
  EXPECT_TRUE(r) << members << ": " << r.error().message;
  return r ? std::move(r).value() : ChatRequest{};
}

ChatRequest with_messages(const std::string& messages) {
  auto r = parse_openai(Endpoint::kChatCompletions, R"({"model":"m","messages":)" + messages + "}");
  EXPECT_TRUE(r) << messages << ": " << r.error().message;
  return r ? std::move(r).value() : ChatRequest{};
}

ChatRequest completion(const std::string& prompt, const std::string& members = "") {
  auto r = parse_openai(Endpoint::kCompletions, R"({"model":"m","prompt":)" + prompt +
                                                    (members.empty() ? "" : "," + members) + "}");
  EXPECT_TRUE(r) << prompt << ": " << r.error().message;
  return r ? std::move(r).value() : ChatRequest{};
}

Error chat_error(const std::string& members) {
  auto r =
      parse_openai(Endpoint::kChatCompletions,
                   R"({"model":"m","messages":[{"role":"user","content":"hi"}],)" + members + "}");
  EXPECT_FALSE(r) << members;
  return r ? Error{} : r.error();
}

TEST(OpenAiParse, ModelAndEndpoint) {
  ChatRequest r = chat("");
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.chat());
  EXPECT_EQ(completion(R"("x")").endpoint, Endpoint::kCompletions);
  auto missing = parse_openai(Endpoint::kChatCompletions, R"({"messages":[]})");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().param, "model");
  EXPECT_EQ(missing.error().message, "'model' is required");
}

TEST(OpenAiParse, MessageRolesAndTextContent) {
  ChatRequest r = with_messages(
      R"([{"role":"system","content":"s"},{"role":"developer","content":"d"},
          {"role":"user","content":"u"},{"role":"assistant","content":"a"},
          {"role":"tool","content":"t","tool_call_id":"c1"},{"role":"function","content":"f",
          "name":"fn"}])");
  ASSERT_EQ(r.messages.size(), 6u);
  const Role roles[] = {Role::kSystem,    Role::kDeveloper, Role::kUser,
                        Role::kAssistant, Role::kTool,      Role::kFunction};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(r.messages[i].role, roles[i]) << i;
    EXPECT_EQ(r.messages[i].content.form, Content::Form::kText);
  }
  EXPECT_EQ(r.messages[2].content.text, "u");
  EXPECT_EQ(r.messages[4].tool_call_id, "c1");
  EXPECT_EQ(r.messages[5].name, "fn");
  auto bad = parse_openai(Endpoint::kChatCompletions,
                          R"({"model":"m","messages":[{"role":"robot","content":"x"}]})");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().param, "messages[0].role");
}

TEST(OpenAiParse, ContentParts) {
  ChatRequest r = with_messages(
      R"([{"role":"user","content":[{"type":"text","text":"look"},
          {"type":"image_url","image_url":{"url":"http://x/y.png","detail":"low"}}]}])");
  const Content& c = r.messages[0].content;
  ASSERT_EQ(c.form, Content::Form::kParts);
  ASSERT_EQ(c.parts.size(), 2u);
  EXPECT_EQ(c.parts[0].type, "text");
  EXPECT_EQ(c.parts[0].text, "look");
  EXPECT_EQ(c.parts[1].type, "image_url");
  EXPECT_EQ(c.parts[1].extra["image_url"]["detail"], "low");
  // A part without a type is not typed: the content is kept as sent.
  ChatRequest odd = with_messages(R"([{"role":"user","content":["bare string"]}])");
  EXPECT_EQ(odd.messages[0].content.form, Content::Form::kAbsent);
  EXPECT_EQ(odd.messages[0].extra["content"], Json::array({"bare string"}));
  auto bad = parse_openai(Endpoint::kChatCompletions,
                          R"({"model":"m","messages":[{"role":"user","content":5}]})");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().param, "messages[0].content");
}

TEST(OpenAiParse, ToolCallsAndNullContent) {
  ChatRequest r = with_messages(
      R"([{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
          "function":{"name":"get","arguments":"{\"a\":1}"}}]},
          {"role":"tool","tool_call_id":"c1","content":"42"}])");
  const Message& a = r.messages[0];
  EXPECT_EQ(a.content.form, Content::Form::kAbsent);
  ASSERT_TRUE(a.extra.contains("content"));  // null is kept as sent
  EXPECT_TRUE(a.extra["content"].is_null());
  ASSERT_TRUE(a.tool_calls);
  ASSERT_EQ(a.tool_calls->size(), 1u);
  EXPECT_EQ((*a.tool_calls)[0].id, "c1");
  EXPECT_EQ((*a.tool_calls)[0].name, "get");
  EXPECT_EQ((*a.tool_calls)[0].arguments, R"({"a":1})");
  EXPECT_EQ(r.messages[1].tool_call_id, "c1");
  // Arguments that are not JSON text: not typed, kept as sent.
  ChatRequest odd = with_messages(
      R"([{"role":"assistant","tool_calls":[{"id":"c","type":"function",
          "function":{"name":"get","arguments":{"a":1}}}]}])");
  EXPECT_FALSE(odd.messages[0].tool_calls);
  EXPECT_TRUE(odd.messages[0].extra.contains("tool_calls"));
}

TEST(OpenAiParse, UnknownMessageMembersAreKept) {
  ChatRequest r =
      with_messages(R"([{"role":"assistant","content":"x","reasoning_content":"think"}])");
  EXPECT_EQ(r.messages[0].extra["reasoning_content"], "think");
}

TEST(OpenAiParse, PromptForms) {
  ChatRequest text = completion(R"("once")");
  EXPECT_FALSE(text.prompt.array);
  ASSERT_EQ(text.prompt.items.size(), 1u);
  EXPECT_EQ(text.prompt.items[0].text, "once");
  ChatRequest mixed = completion(R"(["a",[1,2],7])");
  EXPECT_TRUE(mixed.prompt.array);
  ASSERT_EQ(mixed.prompt.items.size(), 3u);
  EXPECT_EQ(mixed.prompt.items[0].kind, PromptItem::Kind::kText);
  EXPECT_EQ(mixed.prompt.items[1].kind, PromptItem::Kind::kTokenIds);
  EXPECT_EQ(mixed.prompt.items[1].tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(mixed.prompt.items[2].kind, PromptItem::Kind::kTokenId);
  EXPECT_EQ(mixed.prompt.items[2].tokens, (std::vector<int32_t>{7}));
  auto bad = parse_openai(Endpoint::kCompletions, R"({"model":"m","prompt":[4294967301]})");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().param, "prompt");
}

TEST(OpenAiParse, Tools) {
  ChatRequest r = chat(
      R"("tools":[{"type":"function","function":{"name":"get","description":"d",
         "parameters":{"type":"object","properties":{"q":{"type":"string"}}},"strict":true}}])");
  ASSERT_TRUE(r.tools);
  ASSERT_EQ(r.tools->size(), 1u);
  const Tool& t = (*r.tools)[0];
  EXPECT_EQ(t.name, "get");
  EXPECT_EQ(t.description, "d");
  EXPECT_EQ(Json::parse(t.parameters)["properties"]["q"]["type"], "string");
  EXPECT_EQ(t.strict, true);
  EXPECT_TRUE(r.has_tools());
  // The schema is kept as compact JSON text: the members in the client's order, a key sent twice
  // where it first stands with its last value, strings escaped and numbers written as
  // nlohmann::json::dump() writes them (what a backend and a grammar are given).
  ChatRequest spaced = chat(R"("tools":[{"type":"function","function":{"name":"f",
      "parameters": { "type" : "object", "required":["a"], "properties" : {"a": {"type":"string",
      "pattern":"^\\d+\u0022\u00e9$", "maximum": 1.50, "minimum": -3, "default": 1e2}},
      "type": "object", "x": [true, null, {}]}}}])");
  ASSERT_TRUE(spaced.tools);
  EXPECT_EQ((*spaced.tools)[0].parameters,
            R"({"type":"object","required":["a"],"properties":{"a":{"type":"string",)"
            R"("pattern":"^\\d+\"é$","maximum":1.5,"minimum":-3,"default":100.0}},)"
            R"("x":[true,null,{}]})");
  // Another kind of tool: kept as sent, still a tools request.
  ChatRequest other = chat(R"("tools":[{"type":"web_search"}])");
  EXPECT_FALSE(other.tools);
  EXPECT_EQ(other.extra["tools"][0]["type"], "web_search");
  EXPECT_TRUE(other.has_tools());
  EXPECT_EQ(chat_error(R"("tools":{})").param, "tools");
  EXPECT_TRUE(chat(R"("functions":[{"name":"f"}])").has_tools());
}

TEST(OpenAiParse, ToolChoiceAndParallelCalls) {
  using Mode = ToolChoice::Mode;
  EXPECT_EQ(chat(R"("tool_choice":"auto")").tool_choice->mode, Mode::kAuto);
  EXPECT_EQ(chat(R"("tool_choice":"none")").tool_choice->mode, Mode::kNone);
  EXPECT_EQ(chat(R"("tool_choice":"required")").tool_choice->mode, Mode::kRequired);
  ChatRequest named = chat(R"("tool_choice":{"type":"function","function":{"name":"get"}})");
  EXPECT_EQ(named.tool_choice->mode, Mode::kFunction);
  EXPECT_EQ(named.tool_choice->name, "get");
  ChatRequest odd = chat(R"("tool_choice":"sometimes")");
  EXPECT_FALSE(odd.tool_choice);
  EXPECT_EQ(odd.extra["tool_choice"], "sometimes");
  EXPECT_EQ(chat(R"("parallel_tool_calls":false)").parallel_tool_calls, false);
}

TEST(OpenAiParse, ResponseFormat) {
  ChatRequest r =
      chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{}}})");
  ASSERT_TRUE(r.response_format);
  EXPECT_EQ(r.response_format->type, "json_schema");
  EXPECT_EQ(r.response_format->json_schema["name"], "n");
  EXPECT_TRUE(r.has_response_format());
  EXPECT_EQ(chat(R"("response_format":{"type":"json_object"})").response_format->type,
            "json_object");
  EXPECT_EQ(chat_error(R"("response_format":"json")").param, "response_format");
}

TEST(OpenAiParse, Sampling) {
  ChatRequest r = chat(
      R"("temperature":0.5,"top_p":0.9,"presence_penalty":-1,"frequency_penalty":1.5,
         "seed":-7,"logit_bias":{"5":-100,"12":3.5},"stop":["a","b"])");
  const Sampling& s = r.sampling;
  EXPECT_EQ(s.temperature, 0.5);
  EXPECT_EQ(s.top_p, 0.9);
  EXPECT_EQ(s.presence_penalty, -1);
  EXPECT_EQ(s.frequency_penalty, 1.5);
  EXPECT_EQ(s.seed, -7);
  ASSERT_TRUE(s.logit_bias);
  EXPECT_EQ(*s.logit_bias, (std::vector<std::pair<int32_t, double>>{{5, -100}, {12, 3.5}}));
  EXPECT_EQ(*s.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(s.stop_is_array);
  ChatRequest one = chat(R"("stop":"x")");
  EXPECT_EQ(*one.sampling.stop, (std::vector<std::string>{"x"}));
  EXPECT_FALSE(one.sampling.stop_is_array);
  EXPECT_EQ(chat_error(R"("temperature":3)").message,
            "'temperature' must be between 0.0 and 2.0, got 3.0");
  EXPECT_EQ(chat_error(R"("top_p":"x")").param, "top_p");
  EXPECT_EQ(chat_error(R"("presence_penalty":2.5)").param, "presence_penalty");
  EXPECT_EQ(chat_error(R"("seed":1.5)").param, "seed");
  EXPECT_EQ(chat_error(R"("logit_bias":{"-1":1})").param, "logit_bias");
  EXPECT_EQ(chat_error(R"("stop":[1])").param, "stop");
}

TEST(OpenAiParse, Logprobs) {
  ChatRequest r = chat(R"("logprobs":true,"top_logprobs":3)");
  EXPECT_EQ(r.logprobs.logprobs, true);
  EXPECT_EQ(r.logprobs.top_logprobs, 3);
  ChatRequest c = completion(R"("x")", R"("logprobs":2)");
  EXPECT_EQ(c.logprobs.logprobs, true);
  EXPECT_EQ(c.logprobs.top_logprobs, 2);
  EXPECT_EQ(chat_error(R"("logprobs":1)").param, "logprobs");
  EXPECT_EQ(chat_error(R"("top_logprobs":21)").param, "top_logprobs");
  // OpenAI refuses top_logprobs without logprobs; HTTP backends get it unchecked (as before),
  // the local engine refuses it.
  ChatRequest alone = chat(R"("top_logprobs":2)");
  ASSERT_TRUE(alone.extension_error);
  EXPECT_EQ(alone.extension_error->param, "top_logprobs");
}

TEST(OpenAiParse, Limits) {
  ChatRequest r = chat(R"("max_tokens":5,"max_completion_tokens":9,"n":3)");
  EXPECT_EQ(r.limits.max_tokens, 5);
  EXPECT_EQ(r.limits.max_completion_tokens, 9);
  EXPECT_EQ(r.limits.effective_max_tokens(), 9);  // the newer name wins
  EXPECT_EQ(r.limits.choices(), 3);
  EXPECT_EQ(chat("").limits.effective_max_tokens(), -1);
  EXPECT_EQ(chat("").limits.choices(), 1);
  ChatRequest c = completion(R"("x")", R"("echo":true,"best_of":3)");
  EXPECT_EQ(c.limits.echo, true);
  EXPECT_EQ(c.limits.best_of, 3);
  EXPECT_EQ(chat_error(R"("max_tokens":2147483648)").param, "max_tokens");
  EXPECT_EQ(chat_error(R"("n":129)").param, "n");
  // A backend's own parse takes any int64 and checks it against its context.
  auto wide = parse_openai(Endpoint::kChatCompletions,
                           R"({"model":"m","messages":[{"role":"user","content":"x"}],
                               "max_tokens":9223372036854775807})",
                           {.max_tokens_limit = INT64_MAX});
  ASSERT_TRUE(wide) << wide.error().message;
  EXPECT_EQ(wide->limits.max_tokens, INT64_MAX);
}

TEST(OpenAiParse, StreamAndStreamOptions) {
  ChatRequest r = chat(R"("stream":true,"stream_options":{"include_usage":true,"x":1})");
  EXPECT_TRUE(r.streams());
  ASSERT_TRUE(r.stream_options);
  EXPECT_EQ(r.stream_options->include_usage, true);
  EXPECT_EQ(r.stream_options->extra["x"], 1);
  EXPECT_FALSE(chat("").streams());
  EXPECT_EQ(chat_error(R"("stream_options":{"include_usage":1})").param,
            "stream_options.include_usage");
}

TEST(OpenAiParse, Metadata) {
  ChatRequest r = chat(R"("user":"u1","metadata":{"task_id":"t9","tags":"a, b","other":"o"})");
  EXPECT_EQ(r.metadata.user, "u1");
  EXPECT_EQ(r.metadata.task_id, "t9");
  EXPECT_EQ(r.metadata.tags, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.metadata.metadata["other"], "o");
  EXPECT_EQ(chat_error(R"("metadata":{"task_id":5})").param, "metadata.task_id");
  EXPECT_EQ(chat_error(R"("user":"a","user":"b")").param, "user");  // read once, so once only
}

TEST(OpenAiParse, ExtensionsAreTypedAndTheirProblemsDeferred) {
  ChatRequest r = chat(R"("min_p":0.1,"top_k":40,"repetition_penalty":1.1,"ignore_eos":true)");
  EXPECT_EQ(r.sampling.min_p, 0.1);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.1);
  EXPECT_EQ(r.sampling.ignore_eos, true);
  EXPECT_FALSE(r.extension_error);
  for (const char* member : {R"("min_p":2)", R"("top_k":"many")", R"("repetition_penalty":0)",
                             R"("ignore_eos":"yes")"}) {
    SCOPED_TRACE(member);
    ChatRequest bad = chat(member);  // accepted: passed through to HTTP backends as before
    ASSERT_TRUE(bad.extension_error);
    EXPECT_EQ(bad.extension_error->code, ErrorCode::kInvalidRequest);
    EXPECT_FALSE(bad.extension_error->param.empty());
    EXPECT_TRUE(bad.extra.contains(bad.extension_error->param));  // kept as sent
  }
}

TEST(OpenAiParse, UnknownMembersAreKeptInOrder) {
  ChatRequest r = chat(R"("zeta":1,"alpha":{"k":[true,null]},"chat_template_kwargs":{"x":2})");
  ASSERT_TRUE(r.extra.is_object());
  std::vector<std::string> keys;
  for (auto it = r.extra.begin(); it != r.extra.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"zeta", "alpha", "chat_template_kwargs"}));
  EXPECT_EQ(r.extra["alpha"]["k"][0], true);
}

TEST(OpenAiParse, CountsItsParses) {
  const uint64_t before = parses_on_this_thread();
  (void)chat("");
  (void)parse_openai(Endpoint::kChatCompletions, "{not json");
  EXPECT_EQ(parses_on_this_thread(), before + 2);
}

// A body parsed where it is (readable_past_end: its string's spare capacity, the request
// reader's slack) is read to its last byte and no further: whatever lies in the slack never
// changes the verdict or the request, which are those of the same body copied first.
TEST(OpenAiParse, ABodyParsedInPlaceReadsOnlyItsBytes) {
  const std::vector<std::string> bodies = {
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":1})",
      R"({"model":"m","messages":[{"role":"user","content":"hi"}])",  // unterminated object
      R"({"model":"m","messages":[{"role":"user","content":"hi)",     // ends inside a string
      R"({"model":"m","messages":[],"n":1)",                          // ... inside a number
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xc3",  // cut UTF-8
  };
  for (const std::string& body : bodies) {
    ChatRequest copied;
    Status want = parse_openai_into(Endpoint::kChatCompletions, body, copied);
    for (const std::string junk : testing::kSlackJunk) {
      const std::string in_place = testing::with_slack(body, junk);
      ParseOptions options;
      options.readable_past_end = testing::slack_of(in_place);
      ASSERT_GE(options.readable_past_end, kJsonReadSlack);
      ChatRequest parsed;
      Status got = parse_openai_into(Endpoint::kChatCompletions, in_place, parsed, options);
      ASSERT_EQ(static_cast<bool>(got), static_cast<bool>(want)) << body << " + " << junk;
      if (!want) {
        EXPECT_EQ(got.error().message, want.error().message) << body << " + " << junk;
        continue;
      }
      EXPECT_EQ(render_openai(parsed, "m"), render_openai(copied, "m")) << body << " + " << junk;
    }
  }
}

TEST(OpenAiParse, TokenIdKeys) {
  EXPECT_EQ(parse_token_id_key("0"), 0);
  EXPECT_EQ(parse_token_id_key("2147483647"), INT32_MAX);
  EXPECT_FALSE(parse_token_id_key("2147483648"));
  EXPECT_FALSE(parse_token_id_key("-1"));
  EXPECT_FALSE(parse_token_id_key(" 1"));
  EXPECT_FALSE(parse_token_id_key(""));
}

}  // namespace
}  // namespace ferry::api
