// The Responses parser, field by field: what each member becomes in the typed chat request, and
// the 400 (OpenAI's words, code and param path) for each wrong type and value.
#include "api/responses_parse.h"

#include <gtest/gtest.h>

#include <string>

#include "api/dom_value.h"
#include "api/openai_render.h"
#include "tests/api/slack.h"

namespace ferry::api {
namespace {

ResponsesRequest ok(const std::string& members, const std::string& input = R"("hi")") {
  auto r = parse_responses(R"({"model":"m","input":)" + input +
                           (members.empty() ? "" : "," + members) + "}");
  EXPECT_TRUE(r) << members << ": " << r.error().message;
  return r ? std::move(r).value() : ResponsesRequest{};
}

ResponsesRequest items(const std::string& input) {
  return ok("", input);
}

Error bad(const std::string& members, const std::string& input = R"("hi")") {
  auto r = parse_responses(R"({"model":"m","input":)" + input +
                           (members.empty() ? "" : "," + members) + "}");
  EXPECT_FALSE(r) << members << " " << input;
  return r ? Error{} : r.error();
}

Error bad_input(const std::string& input) {
  return bad("", input);
}

TEST(ResponsesParse, StringInputIsOneUserMessage) {
  auto r = ok("");
  ASSERT_EQ(r.chat.messages.size(), 1u);
  EXPECT_EQ(r.chat.messages[0].role, Role::kUser);
  EXPECT_EQ(r.chat.messages[0].content.text, "hi");
  EXPECT_EQ(r.chat.model, "m");
  EXPECT_EQ(r.chat.endpoint, Endpoint::kChatCompletions);
  EXPECT_TRUE(r.store);  // OpenAI's default
  EXPECT_EQ(r.input_items, R"([{"type":"message","role":"user","content":"hi"}])");
}

TEST(ResponsesParse, InstructionsAreTheFirstSystemMessage) {
  auto r = ok(R"("instructions":"be brief")");
  ASSERT_EQ(r.chat.messages.size(), 2u);
  EXPECT_EQ(r.chat.messages[0].role, Role::kSystem);
  EXPECT_EQ(r.chat.messages[0].content.text, "be brief");
  EXPECT_EQ(r.echo.instructions, R"("be brief")");
  EXPECT_EQ(Json::parse(r.input_items).size(), 1u);  // not an input item
  EXPECT_EQ(bad(R"("instructions":5)").code, ErrorCode::kInvalidRequest);
}

TEST(ResponsesParse, MessageItemsWithRolesAndParts) {
  auto r = items(R"([{"role":"developer","content":"rules"},
    {"type":"message","role":"user","content":[{"type":"input_text","text":"a"},
                                               {"type":"input_text","text":"b"}]},
    {"type":"message","role":"assistant","id":"msg_1","status":"completed",
     "content":[{"type":"output_text","text":"c","annotations":[]}]},
    {"role":"system","content":"sys"}])");
  ASSERT_EQ(r.chat.messages.size(), 4u);
  EXPECT_EQ(r.chat.messages[0].role, Role::kDeveloper);
  EXPECT_EQ(r.chat.messages[1].role, Role::kUser);
  ASSERT_EQ(r.chat.messages[1].content.parts.size(), 2u);
  EXPECT_EQ(r.chat.messages[1].content.parts[1].type, "text");
  EXPECT_EQ(r.chat.messages[1].content.parts[1].text, "b");
  EXPECT_EQ(r.chat.messages[2].role, Role::kAssistant);
  EXPECT_EQ(r.chat.messages[2].content.parts[0].text, "c");
  EXPECT_EQ(r.chat.messages[3].role, Role::kSystem);
  EXPECT_EQ(Json::parse(r.input_items).size(), 4u);
}

TEST(ResponsesParse, MessageErrorsNameThePath) {
  Error e = bad_input(R"([{"role":"robot","content":"x"}])");
  EXPECT_EQ(e.param, "input[0].role");
  EXPECT_EQ(e.type_code, "invalid_value");
  EXPECT_NE(e.message.find("'robot'"), std::string::npos);
  e = bad_input(R"([{"role":"user"}])");
  EXPECT_EQ(e.param, "input[0].content");
  EXPECT_EQ(e.type_code, "missing_required_parameter");
  e = bad_input(R"([{"role":"user","content":7}])");
  EXPECT_EQ(e.param, "input[0].content");
  EXPECT_EQ(e.type_code, "invalid_type");
  e = bad_input(R"([{"role":"user","content":[{"type":"input_text"}]}])");
  EXPECT_EQ(e.param, "input[0].content[0].text");
  e = bad_input(R"([{"role":"user","content":[{"type":"output_text","text":"x"}]}])");
  EXPECT_EQ(e.param, "input[0].content[0].type");  // output_text is the assistant's
  e = bad_input(R"([{"role":"user","content":[{"type":"sticker","text":"x"}]}])");
  EXPECT_EQ(e.param, "input[0].content[0].type");
  e = bad_input(R"([{"role":"user","content":"x","colour":"red"}])");
  EXPECT_EQ(e.param, "input[0].colour");
  EXPECT_EQ(e.type_code, "unknown_parameter");
  e = bad_input(R"(["just a string"])");
  EXPECT_EQ(e.param, "input[0]");
  EXPECT_EQ(e.type_code, "invalid_type");
}

TEST(ResponsesParse, EmptyOrMissingInputIsRefused) {
  EXPECT_EQ(bad_input(R"("")").type_code, "empty_string");
  EXPECT_EQ(bad_input("[]").type_code, "empty_array");
  EXPECT_EQ(bad_input("{}").type_code, "invalid_type");
  EXPECT_EQ(bad_input("3").param, "input");
  auto r = parse_responses(R"({"model":"m"})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().param, "input");
  EXPECT_EQ(r.error().type_code, "missing_required_parameter");
  r = parse_responses(R"({"input":"hi"})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().param, "model");
}

TEST(ResponsesParse, BodyErrors) {
  EXPECT_EQ(parse_responses("[1]").error().code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(parse_responses("{").error().type_code, "invalid_json");
  EXPECT_EQ(parse_responses("{\"model\":\"\xff\"}").error().type_code, "invalid_json");
  Error e = bad(R"("frobnicate":true)");
  EXPECT_EQ(e.param, "frobnicate");
  EXPECT_EQ(e.type_code, "unknown_parameter");
  e = bad(R"("temperature":1,"temperature":2)");
  EXPECT_EQ(e.param, "temperature");  // a duplicate: which one a backend reads is not known
}

TEST(ResponsesParse, FunctionCallsJoinOneAssistantMessage) {
  auto r = items(R"([{"role":"user","content":"weather?"},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"checking"}]},
    {"type":"function_call","call_id":"call_a","name":"get","arguments":"{\"c\":1}","id":"fc_1"},
    {"type":"function_call","call_id":"call_b","name":"get","arguments":"{}"},
    {"type":"function_call_output","call_id":"call_a","output":"sunny"},
    {"type":"function_call_output","call_id":"call_b","output":[{"type":"input_text","text":"rain"}]}])");
  ASSERT_EQ(r.chat.messages.size(), 4u);
  const Message& assistant = r.chat.messages[1];
  EXPECT_EQ(assistant.role, Role::kAssistant);
  EXPECT_EQ(assistant.content.parts[0].text, "checking");
  ASSERT_TRUE(assistant.tool_calls);
  ASSERT_EQ(assistant.tool_calls->size(), 2u);
  EXPECT_EQ((*assistant.tool_calls)[0].id, "call_a");
  EXPECT_EQ((*assistant.tool_calls)[0].name, "get");
  EXPECT_EQ((*assistant.tool_calls)[0].arguments, R"({"c":1})");
  EXPECT_EQ(r.chat.messages[2].role, Role::kTool);
  EXPECT_EQ(r.chat.messages[2].tool_call_id, "call_a");
  EXPECT_EQ(r.chat.messages[2].content.text, "sunny");
  EXPECT_EQ(r.chat.messages[3].content.parts[0].text, "rain");
}

TEST(ResponsesParse, AFunctionCallAfterAUserMessageOpensAnAssistantMessage) {
  auto r = items(R"([{"role":"user","content":"x"},
    {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}])");
  ASSERT_EQ(r.chat.messages.size(), 2u);
  EXPECT_EQ(r.chat.messages[1].role, Role::kAssistant);
  EXPECT_EQ(r.chat.messages[1].content.form, Content::Form::kAbsent);
  // The chat body a backend is sent: an assistant message with tool_calls, then the tool.
  Json chat = to_openai_json(r.chat);
  EXPECT_EQ(chat["messages"][1]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(chat["messages"][1]["tool_calls"][0]["id"], "c1");
}

TEST(ResponsesParse, FunctionCallErrors) {
  Error e = bad_input(R"([{"type":"function_call","name":"f","arguments":"{}"}])");
  EXPECT_EQ(e.param, "input[0].call_id");
  EXPECT_EQ(e.type_code, "missing_required_parameter");
  e = bad_input(R"([{"type":"function_call","call_id":"c","name":"f","arguments":{}}])");
  EXPECT_EQ(e.param, "input[0].arguments");
  EXPECT_EQ(e.type_code, "invalid_type");
  e = bad_input(R"([{"type":"function_call_output","call_id":"c"}])");
  EXPECT_EQ(e.param, "input[0].output");
}

// Codex sends outputs of its own tools with no call (its goal's objective): a name, a namespace,
// no call_id. Chat has no tool result without a call: it becomes the call and its result.
TEST(ResponsesParse, AnOutputWithANameAndNoCallBecomesTheCallAndItsResult) {
  auto r = items(R"([{"role":"user","content":"x"},
    {"type":"function_call","call_id":"c1","name":"create_goal","arguments":"{}"},
    {"type":"function_call_output","call_id":"c1","output":"{\"goal\":1}"},
    {"type":"function_call_output","id":"fco_2","name":"goal_objective","namespace":"agent",
     "output":"cat notes.txt"},
    {"type":"function_call_output","name":"plain","output":"y"}])");
  ASSERT_EQ(r.chat.messages.size(), 7u);
  EXPECT_EQ(r.chat.messages[2].tool_call_id, "c1");
  const Message& injected = r.chat.messages[3];
  EXPECT_EQ(injected.role, Role::kAssistant);
  ASSERT_TRUE(injected.tool_calls);
  ASSERT_EQ(injected.tool_calls->size(), 1u);
  EXPECT_EQ(injected.tool_calls->at(0).id, "fco_2");
  EXPECT_EQ(injected.tool_calls->at(0).name, "agent__goal_objective");
  EXPECT_EQ(injected.tool_calls->at(0).arguments, "{}");
  EXPECT_EQ(r.chat.messages[4].role, Role::kTool);
  EXPECT_EQ(r.chat.messages[4].tool_call_id, "fco_2");
  EXPECT_EQ(r.chat.messages[4].content.text, "cat notes.txt");
  // No id and no namespace: the name alone, an id made from its place.
  EXPECT_EQ(r.chat.messages[5].tool_calls->at(0).name, "plain");
  EXPECT_EQ(r.chat.messages[6].tool_call_id, r.chat.messages[5].tool_calls->at(0).id);
  EXPECT_FALSE(r.chat.messages[6].tool_call_id.value_or("").empty());
  // Neither a call_id nor a name: the call_id is missing, as before.
  Error e = bad_input(R"([{"type":"function_call_output","output":"r"}])");
  EXPECT_EQ(e.param, "input[0].call_id");
  EXPECT_EQ(e.type_code, "missing_required_parameter");
  e = bad_input(R"([{"type":"function_call_output","name":3,"output":"r"}])");
  EXPECT_EQ(e.param, "input[0].name");
  EXPECT_EQ(e.type_code, "invalid_type");
}

TEST(ResponsesParse, AnOutputWithoutItsCallIsRefused) {
  Error e = bad_input(R"([{"role":"user","content":"x"},
    {"type":"function_call_output","call_id":"call_zz","output":"r"}])");
  EXPECT_EQ(e.message, "No tool call found for function call output with call_id call_zz.");
  EXPECT_EQ(e.param, "input");
  // An output before its call does not match either.
  e = bad_input(R"([{"type":"function_call_output","call_id":"c","output":"r"},
    {"type":"function_call","call_id":"c","name":"f","arguments":"{}"}])");
  EXPECT_EQ(e.param, "input");
}

TEST(ResponsesParse, WithAPreviousResponseTheCallsMayBeStored) {
  auto r = ok(R"("previous_response_id":"resp_abc")",
              R"([{"type":"function_call_output","call_id":"call_1","output":"42"}])");
  EXPECT_EQ(r.previous_response_id, "resp_abc");
  EXPECT_EQ(r.echo.previous_response_id, "resp_abc");
  ResponsesRequest copy = r;
  // The stored history has the call: the output matches it.
  ASSERT_TRUE(continue_from(r, R"([{"type":"message","role":"user","content":"q"},
    {"type":"function_call","call_id":"call_1","name":"f","arguments":"{}","status":"completed"}])"));
  ASSERT_EQ(r.chat.messages.size(), 3u);
  EXPECT_EQ(r.chat.messages[0].content.text, "q");
  EXPECT_EQ(r.chat.messages[1].tool_calls->at(0).id, "call_1");
  EXPECT_EQ(r.chat.messages[2].role, Role::kTool);
  EXPECT_EQ(r.history_messages, 2u);
  // A history without it: the 400.
  Status s = continue_from(copy, R"([{"type":"message","role":"user","content":"q"}])");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("call_1"), std::string::npos);
}

TEST(ResponsesParse, TheNewInstructionsStayFirstBeforeAStoredHistory) {
  auto r = ok(R"("instructions":"new","previous_response_id":"resp_1")");
  ASSERT_TRUE(continue_from(r, R"([{"role":"user","content":"old"},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]}])"));
  ASSERT_EQ(r.chat.messages.size(), 4u);
  EXPECT_EQ(r.chat.messages[0].content.text, "new");
  EXPECT_EQ(r.chat.messages[1].content.text, "old");
  EXPECT_EQ(r.chat.messages[3].content.text, "hi");
}

TEST(ResponsesParse, PreviousResponseIdIsChecked) {
  EXPECT_EQ(bad(R"("previous_response_id":"resp x")").param, "previous_response_id");
  EXPECT_EQ(bad(R"("previous_response_id":"")").param, "previous_response_id");
  EXPECT_EQ(bad(R"("previous_response_id":5)").type_code, "invalid_type");
}

TEST(ResponsesParse, ReasoningItemsAreCheckedAndDropped) {
  auto r = items(R"([{"role":"user","content":"x"},
    {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"t"}],
     "encrypted_content":null},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"y"}]}])");
  ASSERT_EQ(r.chat.messages.size(), 2u);
  EXPECT_EQ(r.chat.messages[1].role, Role::kAssistant);
  EXPECT_EQ(Json::parse(r.input_items).size(), 3u);  // kept as sent for a stored response
  EXPECT_EQ(bad_input(R"([{"type":"reasoning","id":"rs","summary":"x"}])").param,
            "input[0].summary");
  EXPECT_EQ(bad_input(R"([{"type":"reasoning","id":"rs"}])").type_code,
            "missing_required_parameter");
}

TEST(ResponsesParse, UnknownAndBuiltinItemTypes) {
  Error e = bad_input(R"([{"type":"hologram"}])");
  EXPECT_EQ(e.param, "input[0].type");
  EXPECT_EQ(e.type_code, "invalid_value");
  EXPECT_EQ(bad_input(R"([{"content":"no role, no type"}])").param, "input[0].type");
  EXPECT_EQ(bad_input(R"([{"type":"item_reference","id":"msg_1"}])").type_code,
            "unsupported_parameter");
  // A built-in tool's item parses, and waits for a native backend.
  auto r = items(R"([{"role":"user","content":"x"},{"type":"web_search_call","id":"ws_1"}])");
  ASSERT_TRUE(r.needs_native);
  EXPECT_EQ(r.needs_native->param, "input[1]");
}

TEST(ResponsesParse, ImagesNeedANativeBackend) {
  auto r = items(R"([{"role":"user","content":[{"type":"input_text","text":"what is it"},
    {"type":"input_image","image_url":"https://x/y.png"}]}])");
  ASSERT_TRUE(r.needs_native);
  EXPECT_EQ(r.needs_native->param, "input[0].content[1]");
  EXPECT_EQ(r.needs_native->code, ErrorCode::kInvalidRequest);
  EXPECT_NE(r.needs_native->message.find("input_image"), std::string::npos);
}

TEST(ResponsesParse, FunctionToolsAreFlat) {
  auto r = ok(R"("tools":[{"type":"function","name":"get_weather","description":"d",
    "parameters":{"type":"object","properties":{"c":{"type":"string"}}},"strict":true}])");
  ASSERT_TRUE(r.chat.tools);
  ASSERT_EQ(r.chat.tools->size(), 1u);
  const Tool& t = (*r.chat.tools)[0];
  EXPECT_EQ(t.name, "get_weather");
  EXPECT_EQ(t.description, "d");
  EXPECT_EQ(Json::parse(t.parameters)["properties"]["c"]["type"], "string");
  EXPECT_EQ(t.strict, true);
  EXPECT_TRUE(r.chat.has_tools());
  // Chat's nested shape for a chat backend.
  Json chat = to_openai_json(r.chat);
  EXPECT_EQ(chat["tools"][0]["function"]["name"], "get_weather");
  EXPECT_NE(r.echo.tools.find("get_weather"), std::string::npos);
  // The echo: the tools as sent, compact, members in the client's order, each schema as its kept
  // text (what the backend is sent).
  const std::string tools =
      R"([ {"description":"d \u00e9","type":"function","name":"f","strict":false, "parameters":)"
      R"( {"type":"object","properties":{"a":{"type":"number","maximum":1.50}}}} ,)"
      R"( {"type":"function","name":"g"}])";
  auto e = ok(R"("tools":)" + tools);
  EXPECT_EQ(e.echo.tools,
            R"([{"description":"d é","type":"function","name":"f","strict":false,"parameters":)"
            R"({"type":"object","properties":{"a":{"type":"number","maximum":1.5}}}},)"
            R"({"type":"function","name":"g"}])");
  EXPECT_EQ(Json::parse(e.echo.tools), Json::parse(tools));
  // With a built-in tool (for a native backend) the whole array is echoed as simdjson writes it.
  auto mixed = ok(R"("tools":[{"type":"web_search", "x": 1},{"type":"function","name":"g"}])");
  EXPECT_EQ(mixed.echo.tools, R"([{"type":"web_search","x":1},{"type":"function","name":"g"}])");
}

TEST(ResponsesParse, ToolErrors) {
  EXPECT_EQ(bad(R"("tools":{})").type_code, "invalid_type");
  EXPECT_EQ(bad(R"("tools":[{"type":"function"}])").param, "tools[0].name");
  EXPECT_EQ(bad(R"("tools":[{"type":"function","name":"a b"}])").param, "tools[0].name");
  EXPECT_EQ(bad(R"("tools":[{"type":"function","name":"f","function":{}}])").param,
            "tools[0].function");  // chat's shape is not Responses'
  EXPECT_EQ(bad(R"("tools":[{"type":"function","name":"f","parameters":"x"}])").param,
            "tools[0].parameters");
  EXPECT_EQ(bad(R"("tools":[{"type":"function","name":"f","strict":"yes"}])").param,
            "tools[0].strict");
  EXPECT_EQ(bad(R"("tools":[{"type":"teleport"}])").param, "tools[0].type");
  EXPECT_EQ(bad(R"("tools":[{"name":"f"}])").param, "tools[0].type");
}

TEST(ResponsesParse, BuiltinToolsNeedANativeBackend) {
  for (const char* type :
       {"web_search", "web_search_preview", "file_search", "computer_use_preview",
        "code_interpreter", "image_generation", "mcp", "local_shell"}) {
    auto r =
        ok(std::string(R"("tools":[{"type":"function","name":"f"},{"type":")") + type + R"("}])");
    ASSERT_TRUE(r.needs_native) << type;
    EXPECT_EQ(r.needs_native->param, "tools[1]");
    EXPECT_NE(r.needs_native->message.find(type), std::string::npos);
  }
}

TEST(ResponsesParse, ToolChoice) {
  const std::string tools = R"("tools":[{"type":"function","name":"f"}],)";
  EXPECT_EQ(ok(tools + R"("tool_choice":"auto")").chat.tool_choice->mode, ToolChoice::Mode::kAuto);
  EXPECT_EQ(ok(tools + R"("tool_choice":"none")").chat.tool_choice->mode, ToolChoice::Mode::kNone);
  EXPECT_EQ(ok(tools + R"("tool_choice":"required")").chat.tool_choice->mode,
            ToolChoice::Mode::kRequired);
  auto named = ok(tools + R"("tool_choice":{"type":"function","name":"f"})");
  EXPECT_EQ(named.chat.tool_choice->mode, ToolChoice::Mode::kFunction);
  EXPECT_EQ(named.chat.tool_choice->name, "f");
  EXPECT_EQ(named.echo.tool_choice, R"({"type":"function","name":"f"})");
  EXPECT_EQ(bad(tools + R"("tool_choice":{"type":"function","name":"g"})").param, "tool_choice");
  EXPECT_EQ(bad(tools + R"("tool_choice":"sometimes")").type_code, "invalid_value");
  EXPECT_EQ(bad(tools + R"("tool_choice":{"type":"function"})").param, "tool_choice.name");
  EXPECT_EQ(bad(tools + R"("tool_choice":3)").type_code, "invalid_type");
  EXPECT_EQ(bad(R"("tool_choice":"required")").param, "tool_choice");  // no tools
  // Without tools, auto is what chat does anyway: not sent (chat refuses it without tools).
  EXPECT_FALSE(ok(R"("tool_choice":"auto")").chat.tool_choice);
}

TEST(ResponsesParse, ParallelToolCalls) {
  auto r = ok(R"("tools":[{"type":"function","name":"f"}],"parallel_tool_calls":false)");
  EXPECT_EQ(r.chat.parallel_tool_calls, false);
  EXPECT_FALSE(r.echo.parallel_tool_calls);
  EXPECT_EQ(bad(R"("parallel_tool_calls":"no")").type_code, "invalid_type");
  EXPECT_TRUE(ok("").echo.parallel_tool_calls);
}

TEST(ResponsesParse, MaxOutputTokens) {
  auto r = ok(R"("max_output_tokens":64)");
  EXPECT_EQ(r.chat.limits.max_tokens, 64);
  EXPECT_EQ(r.echo.max_output_tokens, 64);
  EXPECT_EQ(bad(R"("max_output_tokens":0)").type_code, "integer_below_min_value");
  EXPECT_EQ(bad(R"("max_output_tokens":99999999999)").type_code, "integer_above_max_value");
  EXPECT_EQ(bad(R"("max_output_tokens":18446744073709551615)").type_code,
            "integer_above_max_value");
  EXPECT_EQ(bad(R"("max_output_tokens":1.5)").type_code, "invalid_type");
  EXPECT_EQ(bad(R"("max_output_tokens":"8")").type_code, "invalid_type");
}

TEST(ResponsesParse, TemperatureAndTopP) {
  auto r = ok(R"("temperature":0.70,"top_p":1)");
  EXPECT_DOUBLE_EQ(*r.chat.sampling.temperature, 0.7);
  EXPECT_DOUBLE_EQ(*r.chat.sampling.top_p, 1.0);
  EXPECT_EQ(r.echo.top_p, "1");
  EXPECT_EQ(bad(R"("temperature":2.5)").type_code, "decimal_above_max_value");
  EXPECT_EQ(bad(R"("temperature":-1)").type_code, "decimal_below_min_value");
  EXPECT_EQ(bad(R"("temperature":"hot")").type_code, "invalid_type");
  EXPECT_EQ(bad(R"("top_p":1.5)").param, "top_p");
}

TEST(ResponsesParse, TextFormat) {
  auto r = ok(R"("text":{"format":{"type":"json_schema","name":"w","strict":true,
    "schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}})");
  ASSERT_TRUE(r.chat.response_format);
  EXPECT_EQ(r.chat.response_format->type, "json_schema");
  EXPECT_EQ(r.chat.response_format->json_schema["name"], "w");
  EXPECT_EQ(r.chat.response_format->json_schema["strict"], true);
  EXPECT_EQ(r.chat.response_format->json_schema["schema"]["required"][0], "a");
  EXPECT_TRUE(r.chat.has_response_format());
  EXPECT_EQ(ok(R"("text":{"format":{"type":"json_object"}})").chat.response_format->type,
            "json_object");
  EXPECT_FALSE(ok(R"("text":{"format":{"type":"text"}})").chat.response_format);
  EXPECT_EQ(bad(R"("text":{"format":{"type":"json_schema","schema":{}}})").param,
            "text.format.name");
  EXPECT_EQ(bad(R"("text":{"format":{"type":"json_schema","name":"w"}})").param,
            "text.format.schema");
  EXPECT_EQ(bad(R"("text":{"format":{"type":"yaml"}})").param, "text.format.type");
  EXPECT_EQ(bad(R"("text":{"format":{"type":"text","schema":{}}})").param, "text.format.schema");
  EXPECT_EQ(bad(R"("text":"json")").type_code, "invalid_type");
  EXPECT_EQ(ok(R"("text":{"verbosity":"low"})").chat.extra["verbosity"], "low");
  EXPECT_EQ(bad(R"("text":{"verbosity":"loud"})").param, "text.verbosity");
}

TEST(ResponsesParse, ReasoningEffort) {
  auto r = ok(R"("reasoning":{"effort":"high","summary":"auto"})");
  EXPECT_EQ(r.chat.extra["reasoning_effort"], "high");
  EXPECT_EQ(bad(R"("reasoning":{"effort":"extreme"})").param, "reasoning.effort");
  EXPECT_EQ(bad(R"("reasoning":{"summary":"long"})").param, "reasoning.summary");
  EXPECT_EQ(bad(R"("reasoning":"high")").type_code, "invalid_type");
  EXPECT_EQ(bad(R"("reasoning":{"depth":1})").param, "reasoning.depth");
}

TEST(ResponsesParse, StoreAndStream) {
  EXPECT_FALSE(ok(R"("store":false)").store);
  EXPECT_FALSE(ok(R"("store":false)").echo.store);
  EXPECT_TRUE(ok(R"("store":null)").store);
  EXPECT_EQ(bad(R"("store":"yes")").param, "store");
  EXPECT_TRUE(ok(R"("stream":true)").chat.streams());
  EXPECT_EQ(bad(R"("stream":1)").param, "stream");
  EXPECT_TRUE(ok(R"("stream":true,"stream_options":{"include_obfuscation":false})").chat.streams());
  EXPECT_EQ(bad(R"("stream_options":{"include_usage":true})").param,
            "stream_options.include_usage");
}

TEST(ResponsesParse, MetadataAndTaskId) {
  auto r = ok(R"("metadata":{"task_id":"t-1","tags":"a, b","who":"me"},"prompt_cache_key":"k")");
  EXPECT_EQ(r.chat.metadata.task_id, "t-1");  // metadata.task_id wins over prompt_cache_key
  EXPECT_EQ(r.chat.metadata.tags, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.echo.metadata, R"({"task_id":"t-1","tags":"a, b","who":"me"})");
  auto k = ok(R"("prompt_cache_key":"session-7")");
  EXPECT_EQ(k.chat.metadata.task_id, "session-7");
  EXPECT_EQ(k.prompt_cache_key, "session-7");
  EXPECT_EQ(bad(R"("metadata":{"n":1})").param, "metadata.n");
  EXPECT_EQ(bad(R"("metadata":[])").type_code, "invalid_type");
  std::string many;
  for (int i = 0; i < 17; ++i)
    many += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\":\"v\"";
  EXPECT_EQ(bad(R"("metadata":{)" + many + "}").type_code, "object_above_max_properties");
  EXPECT_EQ(bad(R"("metadata":{"v":")" + std::string(513, 'x') + R"("})").type_code,
            "string_above_max_length");
  EXPECT_EQ(bad(R"("prompt_cache_key":3)").param, "prompt_cache_key");
}

TEST(ResponsesParse, UserAndPassThroughHints) {
  auto r = ok(R"("user":"u1","safety_identifier":"s","service_tier":"auto")");
  EXPECT_EQ(r.chat.metadata.user, "u1");
  EXPECT_EQ(r.chat.extra["safety_identifier"], "s");
  EXPECT_EQ(r.chat.extra["service_tier"], "auto");
  EXPECT_EQ(bad(R"("user":1)").param, "user");
}

TEST(ResponsesParse, TruncationAndInclude) {
  ok(R"("truncation":"auto")");
  ok(R"("truncation":"disabled")");
  EXPECT_EQ(bad(R"("truncation":"middle")").param, "truncation");
  ok(R"("include":["reasoning.encrypted_content"])");
  EXPECT_EQ(bad(R"("include":["message.output_text.logprobs"])").type_code,
            "unsupported_parameter");
  EXPECT_EQ(bad(R"("include":["everything"])").param, "include[0]");
  EXPECT_EQ(bad(R"("include":"reasoning.encrypted_content")").type_code, "invalid_type");
}

TEST(ResponsesParse, UnsupportedMembersAreRefused) {
  EXPECT_EQ(bad(R"("background":true)").param, "background");
  ok(R"("background":false)");
  EXPECT_EQ(bad(R"("conversation":"conv_1")").param, "conversation");
  EXPECT_EQ(bad(R"("prompt":{"id":"p"})").param, "prompt");
  EXPECT_EQ(bad(R"("max_tool_calls":3)").param, "max_tool_calls");
  EXPECT_EQ(bad(R"("top_logprobs":2)").param, "top_logprobs");
  ok(R"("top_logprobs":0)");
}

TEST(ResponsesParse, TheChatBodyIsValidOpenAIChat) {
  auto r = ok(R"("instructions":"i","max_output_tokens":9,"temperature":0.5,
    "tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"auto",
    "text":{"format":{"type":"json_object"}},"stream":true)");
  auto round = parse_openai(Endpoint::kChatCompletions, render_openai(r.chat, "up"));
  ASSERT_TRUE(round) << round.error().message;
  EXPECT_EQ(round->model, "up");
  EXPECT_EQ(round->messages.size(), 2u);
  EXPECT_EQ(round->limits.max_tokens, 9);
  EXPECT_EQ(round->tools->at(0).name, "f");
  EXPECT_EQ(round->response_format->type, "json_object");
  EXPECT_TRUE(round->streams());
}

// ---- The input items a stored response keeps: the text to_json(...).dump() wrote ---------------

std::string dom_text(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  EXPECT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS) << json;
  std::string out;
  append_dom_json(out, doc);
  EXPECT_EQ(out, to_json(doc).dump()) << json;
  return out;
}

TEST(DomJson, WritesWhatTheKeptTreeDumps) {
  EXPECT_EQ(dom_text(R"( { "a" : [ 1 , -2 , true , null , "x" ] , "b" : { } , "c" : [ ] } )"),
            R"({"a":[1,-2,true,null,"x"],"b":{},"c":[]})");
  // Numbers: int64 limits, beyond int64, fractions and exponents as nlohmann writes doubles.
  dom_text(R"([9223372036854775807,-9223372036854775808,18446744073709551615,0,-0,1.0,0.1,1e300,)"
           R"(-2.5E-3,5e-324])");
  // Strings: escapes, control characters, non-ASCII, and the names of members.
  dom_text(R"({"q\"k\\":"\u0001\b\f\n\r\t\/ é 𝄞 \u2028 \ud83d\ude00","":""})");
  // A name given twice stays where it first was, with its last value (few members and many).
  EXPECT_EQ(dom_text(R"({"a":1,"b":2,"a":3})"), R"({"a":3,"b":2})");
  std::string many = "{";
  for (int i = 0; i < 40; ++i)
    many += "\"k" + std::to_string(i % 25) + "\":" + std::to_string(i) + ",";
  many += R"("z":{"y":1,"y":[2]}})";
  dom_text(many);
  // Deep nesting.
  std::string deep;
  for (int i = 0; i < 500; ++i) deep += R"({"a":[)";
  for (int i = 0; i < 500; ++i) deep += "]}";
  dom_text(deep);
}

TEST(ResponsesParse, InputItemsAreKeptOnlyWhenStored) {
  auto stored = items(R"([{"role":"user","content":"a\nb","status":null}])");
  EXPECT_EQ(stored.input_items, R"([{"role":"user","content":"a\nb","status":null}])");
  // The client's text without its white space: escapes and numbers as sent, and it reads back
  // as the same items (a later request's previous_response_id parses it).
  const std::string spaced =
      "[ {\"role\" :\t\"user\",\r\n \"content\": [ {\"type\":\"input_text\", \"text\": "
      "\"a \\u00e9 \\\"b\\\"\\n\\/ c\"} ] },\n {\"type\":\"function_call\", \"call_id\":\"c 1\", "
      "\"name\":\"f\",\"arguments\":\"{ \\\"x\\\": 1.50 }\"}, {\"type\":\"function_call_output\","
      "\"call_id\":\"c 1\",\"output\":\"ok\"} ]";
  auto kept = parse_responses(R"({"model":"m","tools":[{"type":"function","name":"f"}],)"
                              R"("input" :  )" +
                              spaced + R"( , "temperature" : 1e0 })");
  ASSERT_TRUE(kept) << kept.error().message;
  EXPECT_EQ(
      kept->input_items,
      "[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":"
      "\"a \\u00e9 \\\"b\\\"\\n\\/ c\"}]},{\"type\":\"function_call\",\"call_id\":\"c 1\","
      "\"name\":\"f\",\"arguments\":\"{ \\\"x\\\": 1.50 }\"},{\"type\":\"function_call_output\","
      "\"call_id\":\"c 1\",\"output\":\"ok\"}]");
  EXPECT_EQ(Json::parse(kept->input_items), Json::parse(spaced));
  // A key written with an escape could be another spelling of "input": the items are then
  // written from the parse (as a tree dumps them).
  auto escaped =
      parse_responses(R"({"model":"m","\u0069nput": [ {"role":"user","content":"x\u00e9"} ]})");
  ASSERT_TRUE(escaped) << escaped.error().message;
  EXPECT_EQ(escaped->input_items, "[{\"role\":\"user\",\"content\":\"x\xc3\xa9\"}]");
  auto plain = ok(R"("store":false)");
  EXPECT_EQ(plain.input_items, "[]");
  auto text = ok(R"("store":true)", R"("caf\u00e9 \"q\"")");
  EXPECT_EQ(text.input_items, R"([{"type":"message","role":"user","content":"café \"q\""}])");
  // The instructions' echo is their JSON string, as nlohmann writes it.
  auto with = ok(R"("instructions":"tab\there \u0001 é")");
  EXPECT_EQ(with.echo.instructions, Json("tab\there \x01 é").dump());
}

// A body parsed where it is (the request reader's slack) is read to its last byte and no
// further: the verdict and the request are those of the same body copied first.
TEST(ResponsesParse, ABodyParsedInPlaceReadsOnlyItsBytes) {
  const std::string whole = R"({"model":"m","input":"hi","instructions":"be brief"})";
  for (size_t cut : {whole.size(), whole.size() - 1, whole.size() - 3, whole.size() - 12}) {
    const std::string body = whole.substr(0, cut);
    auto want = parse_responses(body);
    for (const std::string junk : testing::kSlackJunk) {
      const std::string in_place = testing::with_slack(body, junk);
      ParseOptions options;
      options.readable_past_end = testing::slack_of(in_place);
      auto got = parse_responses(in_place, options);
      ASSERT_EQ(static_cast<bool>(got), static_cast<bool>(want)) << body << " + " << junk;
      if (!want) {
        EXPECT_EQ(got.error().message, want.error().message);
      } else {
        EXPECT_EQ(render_openai(got->chat, "m"), render_openai(want->chat, "m"));
      }
    }
  }
}

}  // namespace
}  // namespace ferry::api
