// The Anthropic Messages parser, field by field: what each member becomes in the typed request,
// and the 400 each wrong value gets (Anthropic's path in the message).
#include "api/anthropic_parse.h"

#include <gtest/gtest.h>

#include <string>

#include "api/openai_render.h"
#include "tests/api/slack.h"

namespace ferry::api {
namespace {

struct Parsed {
  ChatRequest request;
  AnthropicParseInfo info;
};

Parsed parse_body(const std::string& body, bool count_tokens = false) {
  Parsed p;
  Status s = parse_anthropic_into(body, p.request, p.info, {.count_tokens = count_tokens});
  EXPECT_TRUE(s) << body << ": " << (s ? "" : s.error().message);
  return p;
}

// A request with `messages` and more members.
std::string body_with(const std::string& messages, const std::string& members = "") {
  return R"({"model":"m","max_tokens":16,"messages":)" + messages +
         (members.empty() ? "" : "," + members) + "}";
}

Parsed parse(const std::string& members) {
  return parse_body(body_with(R"([{"role":"user","content":"hi"}])", members));
}

Error error_of(const std::string& body) {
  ChatRequest r;
  AnthropicParseInfo info;
  Status s = parse_anthropic_into(body, r, info);
  EXPECT_FALSE(s) << body;
  return s ? Error{} : s.error();
}

Error member_error(const std::string& members) {
  return error_of(body_with(R"([{"role":"user","content":"hi"}])", members));
}

Error messages_error(const std::string& messages) {
  return error_of(body_with(messages));
}

void expect_400(const Error& e, const std::string& path) {
  EXPECT_EQ(e.code, ErrorCode::kInvalidRequest) << e.message;
  EXPECT_EQ(e.param, path) << e.message;
  EXPECT_TRUE(e.message.starts_with(path)) << e.message;
}

TEST(AnthropicParse, ModelMaxTokensAndAStringTurn) {
  Parsed p = parse("");
  EXPECT_EQ(p.request.model, "m");
  EXPECT_EQ(p.request.endpoint, Endpoint::kChatCompletions);
  EXPECT_EQ(p.request.limits.max_tokens, 16);
  ASSERT_EQ(p.request.messages.size(), 1u);
  EXPECT_EQ(p.request.messages[0].role, Role::kUser);
  EXPECT_EQ(p.request.messages[0].content.text, "hi");
  EXPECT_EQ(p.info.model_keys, 1);
  EXPECT_FALSE(p.info.native_only);
}

TEST(AnthropicParse, MaxTokensIsRequiredAndAPositiveInteger) {
  expect_400(error_of(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"),
             "max_tokens");
  for (const char* bad : {"0", "-1", "1.5", "\"16\"", "true", "4294967296"}) {
    std::string body = std::string(R"({"model":"m","max_tokens":)") + bad +
                       R"(,"messages":[{"role":"user","content":"hi"}]})";
    expect_400(error_of(body), "max_tokens");
  }
  // count_tokens takes no max_tokens.
  Parsed c = parse_body(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})", true);
  EXPECT_FALSE(c.request.limits.max_tokens);
  expect_400(error_of(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"x":1})"), "x");
}

TEST(AnthropicParse, ModelAndMessagesAreRequired) {
  expect_400(error_of(R"({"max_tokens":1,"messages":[{"role":"user","content":"hi"}]})"), "model");
  expect_400(error_of(R"({"model":5,"max_tokens":1,"messages":[{"role":"user","content":"hi"}]})"),
             "model");
  expect_400(error_of(R"({"model":"m","max_tokens":1})"), "messages");
  expect_400(messages_error("[]"), "messages");
  expect_400(messages_error("{}"), "messages");
  EXPECT_EQ(error_of("[1]").code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(error_of("{").code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(error_of("{\"model\":\"\xff\"}").code, ErrorCode::kInvalidRequest);
}

TEST(AnthropicParse, UnknownTopLevelMembersAreExtraInputs) {
  Error e = member_error(R"("frequency_penalty":1)");
  expect_400(e, "frequency_penalty");
  EXPECT_NE(e.message.find("Extra inputs are not permitted"), std::string::npos);
  expect_400(member_error(R"("temperature":0.5,"temperature":0.6)"), "temperature");
}

TEST(AnthropicParse, SystemAsStringOrTextBlocks) {
  Parsed s = parse(R"("system":"be brief")");
  ASSERT_EQ(s.request.messages.size(), 2u);
  EXPECT_EQ(s.request.messages[0].role, Role::kSystem);
  EXPECT_EQ(s.request.messages[0].content.text, "be brief");
  Parsed b = parse(
      R"("system":[{"type":"text","text":"one"},{"type":"text","text":"two","cache_control":{"type":"ephemeral"}}])");
  EXPECT_EQ(b.request.messages[0].content.text, "one\ntwo");
  expect_400(member_error(R"("system":5)"), "system");
  expect_400(member_error(R"("system":[{"type":"image","source":{}}])"), "system.0");
  expect_400(member_error(R"("system":[{"type":"text"}])"), "system.0.text");
  expect_400(member_error(R"("system":[{"type":"text","text":"a","x":1}])"), "system.0.x");
}

TEST(AnthropicParse, ConsecutiveTurnsOfOneRoleAreMerged) {
  Parsed p = parse_body(body_with(
      R"([{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"b"}]},{"role":"assistant","content":"c"},{"role":"assistant","content":"d"}])"));
  ASSERT_EQ(p.request.messages.size(), 2u);
  EXPECT_EQ(p.request.messages[0].content.text, "a\nb");
  EXPECT_EQ(p.request.messages[1].role, Role::kAssistant);
  EXPECT_EQ(p.request.messages[1].content.text, "c\nd");
}

// A system turn inside `messages` (Claude Code sends its context as one): a system message at
// its place, text only.
TEST(AnthropicParse, ASystemTurnInsideMessagesIsASystemMessageThere) {
  Parsed p = parse_body(body_with(
      R"([{"role":"user","content":"a"},{"role":"system","content":[{"type":"text","text":"ctx"},{"type":"text","text":"more"}]},{"role":"assistant","content":"b"}])"));
  ASSERT_EQ(p.request.messages.size(), 3u);
  EXPECT_EQ(p.request.messages[1].role, Role::kSystem);
  EXPECT_EQ(p.request.messages[1].content.text, "ctx\nmore");
  Parsed s =
      parse_body(body_with(R"([{"role":"user","content":"a"},{"role":"system","content":"c"}])"));
  ASSERT_EQ(s.request.messages.size(), 2u);
  EXPECT_EQ(s.request.messages[1].content.text, "c");
  expect_400(
      messages_error(
          R"([{"role":"user","content":"a"},{"role":"system","content":[{"type":"image","source":{}}]}])"),
      "messages.1.content.0");
}

TEST(AnthropicParse, RolesContentAndEmptiness) {
  expect_400(messages_error(R"([{"role":"robot","content":"x"}])"), "messages.0.role");
  expect_400(messages_error(R"([{"role":5,"content":"x"}])"), "messages.0.role");
  expect_400(messages_error(R"([{"role":"user"}])"), "messages.0.content");
  expect_400(messages_error(R"([{"role":"user","content":5}])"), "messages.0.content");
  expect_400(messages_error(R"([{"role":"user","content":""}])"), "messages.0.content");
  expect_400(messages_error(R"([{"role":"user","content":"a","name":"x"}])"), "messages.0.name");
  expect_400(messages_error(R"([5])"), "messages.0");
  // The final assistant turn (a prefill) may be empty.
  Parsed p =
      parse_body(body_with(R"([{"role":"user","content":"a"},{"role":"assistant","content":""}])"));
  EXPECT_EQ(p.request.messages.size(), 2u);
}

TEST(AnthropicParse, UnknownBlockTypesAreRefused) {
  Error e = messages_error(R"([{"role":"user","content":[{"type":"video","x":1}]}])");
  expect_400(e, "messages.0.content.0");
  EXPECT_NE(e.message.find("'video'"), std::string::npos);
  expect_400(messages_error(R"([{"role":"user","content":[{"text":"a"}]}])"),
             "messages.0.content.0.type");
  expect_400(messages_error(R"([{"role":"user","content":[5]}])"), "messages.0.content.0");
  // A user's tool_use, an assistant's tool_result: each in the other role's set.
  expect_400(
      messages_error(
          R"([{"role":"user","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}])"),
      "messages.0.content.0");
}

TEST(AnthropicParse, ToolUseAndToolResult) {
  Parsed p = parse_body(body_with(
      R"([{"role":"user","content":"weather?"},
          {"role":"assistant","content":[{"type":"text","text":"let me look"},
            {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
          {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},
            {"type":"text","text":"thanks"}]}])"));
  ASSERT_EQ(p.request.messages.size(), 4u);
  const Message& a = p.request.messages[1];
  EXPECT_EQ(a.content.text, "let me look");
  ASSERT_TRUE(a.tool_calls);
  ASSERT_EQ(a.tool_calls->size(), 1u);
  EXPECT_EQ((*a.tool_calls)[0].id, "toolu_1");
  EXPECT_EQ((*a.tool_calls)[0].name, "get_weather");
  EXPECT_EQ((*a.tool_calls)[0].arguments, R"({"city":"Paris"})");
  // The result first (OpenAI's order: tool messages right after the call), then the text.
  EXPECT_EQ(p.request.messages[2].role, Role::kTool);
  EXPECT_EQ(p.request.messages[2].tool_call_id, "toolu_1");
  EXPECT_EQ(p.request.messages[2].content.text, "sunny");
  EXPECT_EQ(p.request.messages[3].role, Role::kUser);
  EXPECT_EQ(p.request.messages[3].content.text, "thanks");
}

TEST(AnthropicParse, ToolResultBlocksAndIsError) {
  Parsed p = parse_body(body_with(
      R"([{"role":"user","content":"x"},
          {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},
          {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,
            "content":[{"type":"text","text":"no"},{"type":"text","text":"such file"}]}]}])"));
  ASSERT_EQ(p.request.messages.size(), 3u);
  EXPECT_EQ(p.request.messages[2].content.text, "Error: no\nsuch file");
  expect_400(
      messages_error(
          R"([{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":"yes"}]}])"),
      "messages.2.content.0.is_error");
}

TEST(AnthropicParse, AToolResultNeedsAnEarlierToolUse) {
  Error e = messages_error(
      R"([{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_x","content":"r"}]}])");
  expect_400(e, "messages.0.content.0");
  EXPECT_NE(e.message.find("toolu_x"), std::string::npos);
  expect_400(
      messages_error(
          R"([{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":[]}]}])"),
      "messages.1.content.0.input");
  expect_400(
      messages_error(
          R"([{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}},{"type":"tool_use","id":"t","name":"f","input":{}}]}])"),
      "messages.1.content.1.id");
}

TEST(AnthropicParse, ThinkingBlocksBecomeReasoningContent) {
  Parsed p = parse_body(body_with(
      R"([{"role":"user","content":"x"},
          {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"sig"},
            {"type":"redacted_thinking","data":"opaque"},{"type":"text","text":"y"}]},
          {"role":"user","content":"z"}])"));
  const Message& a = p.request.messages[1];
  EXPECT_EQ(a.content.text, "y");
  ASSERT_TRUE(a.extra.is_object());
  EXPECT_EQ(a.extra["reasoning_content"], "hmm");
  expect_400(
      messages_error(
          R"([{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"thinking"}]}])"),
      "messages.1.content.0.thinking");
}

TEST(AnthropicParse, ImagesAndServerToolsAreNativeOnly) {
  Parsed img = parse_body(body_with(
      R"([{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"text","text":"what is it"}]}])"));
  ASSERT_TRUE(img.info.native_only);
  EXPECT_EQ(img.info.native_only->param, "messages.0.content.0");
  EXPECT_EQ(img.info.native_only->code, ErrorCode::kInvalidRequest);
  Parsed server = parse(R"("tools":[{"type":"web_search_20250305","name":"web_search"}])");
  ASSERT_TRUE(server.info.native_only);
  EXPECT_EQ(server.info.native_only->param, "tools.0.type");
  EXPECT_TRUE(server.request.has_tools());
  Parsed bash = parse(R"("tools":[{"type":"bash_20250124","name":"bash"}])");
  EXPECT_TRUE(bash.info.native_only);
}

TEST(AnthropicParse, CustomTools) {
  Parsed p = parse(
      R"("tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object","properties":{"city":{"type":"string"}}},"cache_control":{"type":"ephemeral"}},{"type":"custom","name":"g","input_schema":{"type":"object"}}])");
  ASSERT_TRUE(p.request.tools);
  ASSERT_EQ(p.request.tools->size(), 2u);
  EXPECT_EQ((*p.request.tools)[0].name, "get_weather");
  EXPECT_EQ((*p.request.tools)[0].description, "d");
  EXPECT_EQ(Json::parse((*p.request.tools)[0].parameters)["properties"]["city"]["type"], "string");
  EXPECT_TRUE(p.request.has_tools());
  EXPECT_FALSE(p.info.native_only);
  expect_400(member_error(R"("tools":{})"), "tools");
  expect_400(member_error(R"("tools":[{"name":"f"}])"), "tools.0.input_schema");
  expect_400(member_error(R"("tools":[{"name":"f","input_schema":[]}])"), "tools.0.input_schema");
  expect_400(member_error(R"("tools":[{"input_schema":{}}])"), "tools.0.name");
  expect_400(member_error(R"("tools":[{"name":"f","input_schema":{},"strict":true}])"),
             "tools.0.strict");
  expect_400(member_error(R"("tools":[{"type":"function","name":"f","input_schema":{}}])"),
             "tools.0");
  EXPECT_EQ(
      member_error(R"("tools":[{"name":"f","input_schema":{}},{"name":"f","input_schema":{}}])")
          .param,
      "tools");
}

TEST(AnthropicParse, ToolChoice) {
  const std::string tools = R"("tools":[{"name":"f","input_schema":{"type":"object"}}],)";
  auto choice = [&](const std::string& c) { return parse(tools + R"("tool_choice":)" + c); };
  EXPECT_EQ(choice(R"({"type":"auto"})").request.tool_choice->mode, ToolChoice::Mode::kAuto);
  EXPECT_EQ(choice(R"({"type":"any"})").request.tool_choice->mode, ToolChoice::Mode::kRequired);
  EXPECT_EQ(choice(R"({"type":"none"})").request.tool_choice->mode, ToolChoice::Mode::kNone);
  Parsed named = choice(R"({"type":"tool","name":"f","disable_parallel_tool_use":true})");
  EXPECT_EQ(named.request.tool_choice->mode, ToolChoice::Mode::kFunction);
  EXPECT_EQ(named.request.tool_choice->name, "f");
  EXPECT_EQ(named.request.parallel_tool_calls, false);
  EXPECT_FALSE(choice(R"({"type":"auto"})").request.parallel_tool_calls);
  expect_400(member_error(tools + R"("tool_choice":{"type":"tool","name":"g"})"),
             "tool_choice.name");
  expect_400(member_error(tools + R"("tool_choice":{"type":"tool"})"), "tool_choice.name");
  expect_400(member_error(tools + R"("tool_choice":{"type":"required"})"), "tool_choice");
  expect_400(member_error(tools + R"("tool_choice":"auto")"), "tool_choice");
  expect_400(member_error(R"("tool_choice":{"type":"any"})"), "tool_choice");
  expect_400(member_error(tools + R"("tool_choice":{"type":"auto","disable_parallel_tool_use":1})"),
             "tool_choice.disable_parallel_tool_use");
}

TEST(AnthropicParse, SamplingAndStops) {
  Parsed p = parse(
      R"("temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["\n\nHuman:","END"],"stream":true)");
  EXPECT_EQ(p.request.sampling.temperature, 0.5);
  EXPECT_EQ(p.request.sampling.top_p, 0.9);
  EXPECT_EQ(p.request.sampling.top_k, 40);
  ASSERT_TRUE(p.request.sampling.stop);
  EXPECT_EQ(*p.request.sampling.stop, (std::vector<std::string>{"\n\nHuman:", "END"}));
  EXPECT_TRUE(p.request.streams());
  // Anthropic's temperature is 0..1 (OpenAI's 0..2).
  expect_400(member_error(R"("temperature":1.5)"), "temperature");
  expect_400(member_error(R"("temperature":"1")"), "temperature");
  expect_400(member_error(R"("top_p":-0.1)"), "top_p");
  expect_400(member_error(R"("top_k":-1)"), "top_k");
  expect_400(member_error(R"("top_k":1.5)"), "top_k");
  expect_400(member_error(R"("stop_sequences":"END")"), "stop_sequences");
  expect_400(member_error(R"("stop_sequences":[1])"), "stop_sequences.0");
  expect_400(member_error(R"("stream":"yes")"), "stream");
}

TEST(AnthropicParse, MetadataUserId) {
  Parsed p = parse(R"("metadata":{"user_id":"u-1"})");
  EXPECT_EQ(p.request.metadata.user, "u-1");
  expect_400(member_error(R"("metadata":{"task":"x"})"), "metadata.task");
  expect_400(member_error(R"("metadata":{"user_id":5})"), "metadata.user_id");
  expect_400(member_error(R"("metadata":[])"), "metadata");
}

TEST(AnthropicParse, ThinkingConfigBecomesTemplateKwargs) {
  std::string body =
      R"({"model":"m","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":2048},"messages":[{"role":"user","content":"hi"}]})";
  Parsed p = parse_body(body);
  EXPECT_EQ(p.request.extra["chat_template_kwargs"]["enable_thinking"], true);
  Parsed off = parse(R"("thinking":{"type":"disabled"})");
  EXPECT_EQ(off.request.extra["chat_template_kwargs"]["enable_thinking"], false);
  expect_400(member_error(R"("thinking":{"type":"enabled","budget_tokens":100})"),
             "thinking.budget_tokens");
  // The budget must be below max_tokens (16 here).
  expect_400(member_error(R"("thinking":{"type":"enabled","budget_tokens":2048})"), "max_tokens");
  expect_400(member_error(R"("thinking":{"type":"on"})"), "thinking");
  Parsed adaptive = parse(R"("thinking":{"type":"adaptive"})");
  EXPECT_EQ(adaptive.request.extra["chat_template_kwargs"]["enable_thinking"], true);
}

TEST(AnthropicParse, ServerHintsAreAcceptedNotTranslated) {
  // What Claude Code sends beside the conversation: hints about the server's own work.
  Parsed p = parse(
      R"("context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]},"output_config":{"effort":"high"})");
  EXPECT_FALSE(p.info.native_only);
  EXPECT_FALSE(p.request.extra.contains("output_config"));
  expect_400(member_error(R"("output_config":"high")"), "output_config");
  Parsed mcp = parse(R"("mcp_servers":[])");
  EXPECT_TRUE(mcp.info.native_only);
}

TEST(AnthropicParse, TranslatesToOpenAIChat) {
  Parsed p = parse_body(body_with(
      R"([{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}])",
      R"("system":"s","tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},"stop_sequences":["Z"])"));
  Json j = Json::parse(render_openai(p.request, "up"));
  EXPECT_EQ(j["model"], "up");
  EXPECT_EQ(j["max_tokens"], 16);
  EXPECT_EQ(j["messages"][0]["role"], "system");
  EXPECT_EQ(j["messages"][2]["tool_calls"][0]["function"]["arguments"], R"({"a":1})");
  EXPECT_EQ(j["messages"][3]["role"], "tool");
  EXPECT_EQ(j["messages"][3]["tool_call_id"], "t1");
  EXPECT_EQ(j["tools"][0]["function"]["name"], "f");
  EXPECT_EQ(j["tool_choice"], "required");
  EXPECT_EQ(j["stop"][0], "Z");
}

// A body parsed where it is (the request reader's slack) is read to its last byte and no
// further: the verdict and the request are those of the same body copied first.
TEST(AnthropicParse, ABodyParsedInPlaceReadsOnlyItsBytes) {
  const std::string whole =
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})";
  for (size_t cut : {whole.size(), whole.size() - 1, whole.size() - 3, whole.size() - 8}) {
    const std::string body = whole.substr(0, cut);
    ChatRequest copied;
    AnthropicParseInfo copied_info;
    Status want = parse_anthropic_into(body, copied, copied_info);
    for (const std::string junk : testing::kSlackJunk) {
      const std::string in_place = testing::with_slack(body, junk);
      AnthropicParseOptions options;
      options.readable_past_end = testing::slack_of(in_place);
      ChatRequest parsed;
      AnthropicParseInfo info;
      Status got = parse_anthropic_into(in_place, parsed, info, options);
      ASSERT_EQ(static_cast<bool>(got), static_cast<bool>(want)) << body << " + " << junk;
      if (!want) {
        EXPECT_EQ(got.error().message, want.error().message);
      } else {
        EXPECT_EQ(render_openai(parsed, "m"), render_openai(copied, "m"));
      }
    }
  }
}

}  // namespace
}  // namespace ferry::api
