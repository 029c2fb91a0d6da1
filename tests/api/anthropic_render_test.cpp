// Anthropic Messages rendering, per field: the message body, the SSE events, the errors.
#include "api/anthropic_render.h"

#include "api/json_read.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/api/event_log.h"
#include "tests/api/sse_events.h"

namespace ferry::api {
namespace {

using nlohmann::json;

Answer tool_answer() {
  Answer a;
  a.model = "claude-local";
  a.blocks.push_back(Block{BlockKind::kThinking, "Plan: call it.", "", "", "", ""});
  a.blocks.push_back(Block{BlockKind::kText, "Sure.", "", "", "", ""});
  a.blocks.push_back(Block{BlockKind::kToolCall, "", "", "call_9", "lookup", "{\"q\":[1,2]}"});
  a.blocks.push_back(Block{BlockKind::kToolCall, "", "", "", "noargs", ""});
  a.finish = FinishReason::kToolCalls;
  a.usage = Usage{100, 20, 60, 7, true};
  return a;
}

TEST(AnthropicRender, MessageBodyFieldByField) {
  WireBody r = render_anthropic_message(tool_answer());
  ASSERT_EQ(r.status, 200) << r.body;
  json m = json::parse(r.body);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "claude-local");
  std::string id = m["id"];
  EXPECT_EQ(id.rfind("msg_", 0), 0u);
  EXPECT_EQ(id.size(), 4u + 24u);
  ASSERT_EQ(m["content"].size(), 4u);
  EXPECT_EQ(m["content"][0],
            (json{{"type", "thinking"}, {"thinking", "Plan: call it."}, {"signature", ""}}));
  EXPECT_EQ(m["content"][1], (json{{"type", "text"}, {"text", "Sure."}}));
  EXPECT_EQ(m["content"][2]["type"], "tool_use");
  EXPECT_EQ(m["content"][2]["id"], "call_9");  // the producer's id, so the next turn matches
  EXPECT_EQ(m["content"][2]["input"], json::parse("{\"q\":[1,2]}"));
  EXPECT_EQ(m["content"][3]["input"], json::object());  // empty arguments
  EXPECT_EQ(m["content"][3]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  // Anthropic counts cache reads apart from input_tokens.
  EXPECT_EQ(m["usage"]["input_tokens"], 40);
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 60);
  EXPECT_EQ(m["usage"]["cache_creation_input_tokens"], 0);
  EXPECT_EQ(m["usage"]["output_tokens"], 20);
  EXPECT_EQ(m["usage"]["output_tokens_details"]["thinking_tokens"], 7);
}

TEST(AnthropicRender, StopReasons) {
  struct Case {
    FinishReason reason;
    const char* want;
  };
  for (Case c : {Case{FinishReason::kStop, "end_turn"}, Case{FinishReason::kLength, "max_tokens"},
                 Case{FinishReason::kStopSequence, "stop_sequence"},
                 Case{FinishReason::kToolCalls, "tool_use"},
                 Case{FinishReason::kContentFilter, "refusal"}}) {
    Answer a;
    a.finish = c.reason;
    a.stop_sequence = "\n\nHuman:";
    json m = json::parse(render_anthropic_message(a).body);
    EXPECT_EQ(m["stop_reason"], c.want);
    if (c.reason == FinishReason::kStopSequence) {
      EXPECT_EQ(m["stop_sequence"], "\n\nHuman:");
    } else {
      EXPECT_TRUE(m["stop_sequence"].is_null());
    }
  }
}

TEST(AnthropicRender, ArgumentsThatAreNotAnObjectAreAnError) {
  for (const char* args : {"{\"a\":", "[1]", "\"s\"", "{} {}"}) {
    Answer a;
    a.blocks.push_back(Block{BlockKind::kToolCall, "", "", "c", "f", args});
    WireBody r = render_anthropic_message(a);
    EXPECT_EQ(r.status, 502) << args;
    json e = json::parse(r.body);
    EXPECT_EQ(e["type"], "error");
    EXPECT_EQ(e["error"]["type"], "api_error");
    EXPECT_NE(e["error"]["message"].get<std::string>().find("\"f\""), std::string::npos);
  }
}

// What a cut-off object says so far, as a valid object (the tool_use input of a call
// max_tokens cut).
TEST(ClosePartialJson, KeepsWhatIsCompleteAndClosesTheRest) {
  struct Case {
    const char* prefix;
    const char* want;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"", "{}"},
           {"[1,2", "{}"},
           {"  {", "{}"},
           {"{\"a\"", "{}"},
           {"{\"a\":", "{}"},
           {"{\"a\": \"Par", "{\"a\":\"Par\"}"},
           {"{\"a\": \"P\\", "{\"a\":\"P\"}"},            // never inside an escape
           {"{\"a\": \"P\\u00", "{\"a\":\"P\"}"},         // nor a \u escape
           {"{\"a\": \"P\\ud83d\\ude", "{\"a\":\"P\"}"},  // nor a surrogate pair
           {"{\"a\": \"P\xc3", "{\"a\":\"P\"}"},          // nor a UTF-8 sequence
           {"{\"a\": 12", "{\"a\":12}"},
           {"{\"a\": 1.", "{}"},
           {"{\"a\": 1, \"b\": tr", "{\"a\":1}"},
           {"{\"a\": true, \"b\"", "{\"a\":true}"},
           {"{\"a\": [1, {\"b\": [\"x", "{\"a\":[1,{\"b\":[\"x\"]}]}"},
           {"{\"a\": {}, \"b\": [", "{\"a\":{},\"b\":[]}"},
           {"{\"a\": 1} trailing", "{\"a\":1}"},
           {"{\"a\": 1,", "{\"a\":1}"},
           {"{\"a\": 1 x", "{\"a\":1}"},  // garbage: the last complete member
       }) {
    EXPECT_EQ(json::parse(close_json_object_prefix(c.prefix)), json::parse(c.want)) << c.prefix;
  }
}

// A call max_tokens ended is the tool_use block with what was generated, as Anthropic does;
// only the last block of a max_tokens answer is taken as cut.
TEST(AnthropicRender, ACallCutByMaxTokensIsATruncatedToolUse) {
  Answer a;
  a.blocks.push_back(Block{BlockKind::kText, "Checking.", "", "", "", ""});
  a.blocks.push_back(Block{BlockKind::kToolCall, "", "", "c", "f", "{\"city\": \"Pa"});
  a.finish = FinishReason::kLength;
  WireBody r = render_anthropic_message(a);
  ASSERT_EQ(r.status, 200) << r.body;
  json m = json::parse(r.body);
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_EQ(m["content"][1]["type"], "tool_use");
  EXPECT_EQ(m["content"][1]["input"], (json{{"city", "Pa"}}));
  EXPECT_FALSE(anthropic_render_problem(a));
  std::swap(a.blocks[0], a.blocks[1]);  // not the last block: not cut, an error
  EXPECT_EQ(render_anthropic_message(a).status, 502);
  EXPECT_TRUE(anthropic_render_problem(a));
}

TEST(AnthropicRender, ErrorKindsAndStatuses) {
  struct Case {
    ErrorCode code;
    int status;
    const char* type;
  };
  for (Case c : {Case{ErrorCode::kInvalidRequest, 400, "invalid_request_error"},
                 Case{ErrorCode::kContextOverflow, 400, "invalid_request_error"},
                 Case{ErrorCode::kUnauthorized, 401, "authentication_error"},
                 Case{ErrorCode::kForbidden, 403, "permission_error"},
                 Case{ErrorCode::kNotFound, 404, "not_found_error"},
                 Case{ErrorCode::kPayloadTooLarge, 413, "request_too_large"},
                 Case{ErrorCode::kRateLimited, 429, "rate_limit_error"},
                 Case{ErrorCode::kBackendError, 502, "api_error"},
                 Case{ErrorCode::kUnavailable, 529, "overloaded_error"},
                 Case{ErrorCode::kTimeout, 504, "timeout_error"},
                 Case{ErrorCode::kInternal, 500, "api_error"}}) {
    Error e = Error::make(c.code, "why");
    EXPECT_EQ(anthropic_error_kind(e).status, c.status);
    json j = json::parse(anthropic_error_json(e, "req_1"));
    EXPECT_EQ(j, (json{{"type", "error"},
                       {"error", {{"type", c.type}, {"message", "why"}}},
                       {"request_id", "req_1"}}));
    Answer failed;
    failed.finish = FinishReason::kError;
    failed.error = e;
    WireBody r = render_anthropic_message(failed);
    EXPECT_EQ(r.status, c.status);
    EXPECT_EQ(json::parse(r.body)["error"]["type"], c.type);
  }
  EXPECT_FALSE(json::parse(anthropic_error_json(Error::make(ErrorCode::kInternal, "x")))
                   .contains("request_id"));
}

TEST(AnthropicStream, EventsFieldByField) {
  Answer a = tool_answer();
  a.blocks[0].signature = "c2lnbmF0dXJl";
  AnthropicStreamRenderer r(AnthropicRenderOptions{{"msg_fixed", "alias", 0}});
  RenderSink sink(r);
  replay(a, sink, 3, Usage{100, 1, 60, 0, true});
  std::vector<SseEvent> ev = parse_named_sse(sink.out);
  ASSERT_GE(ev.size(), 6u);
  // message_start, then ping.
  EXPECT_EQ(ev[0].name, "message_start");
  EXPECT_EQ(ev[0].data["type"], "message_start");
  const json& msg = ev[0].data["message"];
  EXPECT_EQ(msg["id"], "msg_fixed");
  EXPECT_EQ(msg["model"], "alias");
  EXPECT_EQ(msg["content"], json::array());
  EXPECT_TRUE(msg["stop_reason"].is_null());
  EXPECT_EQ(msg["usage"]["input_tokens"], 40);
  EXPECT_EQ(msg["usage"]["cache_read_input_tokens"], 60);
  EXPECT_EQ(ev[1].name, "ping");
  EXPECT_EQ(ev[1].data, (json{{"type", "ping"}}));
  // Every event's name is its data's type.
  for (const SseEvent& e : ev) EXPECT_EQ(e.name, e.data["type"]);
  // Blocks: start / deltas / stop, with the delta types of each kind.
  std::string thinking, partial, signature;
  int signature_deltas = 0;
  for (const SseEvent& e : ev) {
    if (e.name != "content_block_delta") continue;
    const json& d = e.data["delta"];
    if (e.data["index"] == 0 && d["type"] == "thinking_delta") thinking += d["thinking"];
    if (e.data["index"] == 0 && d["type"] == "signature_delta") {
      signature = d["signature"];
      ++signature_deltas;
    }
    if (e.data["index"] == 2) {
      EXPECT_EQ(d["type"], "input_json_delta");
      partial += d["partial_json"];
    }
  }
  EXPECT_EQ(thinking, "Plan: call it.");
  EXPECT_EQ(signature, "c2lnbmF0dXJl");
  EXPECT_EQ(signature_deltas, 1);  // whole: clients replace the signature, never append
  EXPECT_EQ(partial, "{\"q\":[1,2]}");
  auto starts = std::count_if(ev.begin(), ev.end(),
                              [](const SseEvent& e) { return e.name == "content_block_start"; });
  EXPECT_EQ(starts, 4);
  json tool_start;
  for (const SseEvent& e : ev) {
    if (e.name == "content_block_start" && e.data["index"] == 2) tool_start = e.data;
  }
  EXPECT_EQ(
      tool_start["content_block"],
      (json{
          {"type", "tool_use"}, {"id", "call_9"}, {"name", "lookup"}, {"input", json::object()}}));
  // message_delta then message_stop.
  const SseEvent& delta = ev[ev.size() - 2];
  EXPECT_EQ(delta.name, "message_delta");
  EXPECT_EQ(delta.data["delta"]["stop_reason"], "tool_use");
  EXPECT_TRUE(delta.data["delta"]["stop_sequence"].is_null());
  EXPECT_EQ(delta.data["usage"]["output_tokens"], 20);
  EXPECT_EQ(delta.data["usage"]["input_tokens"], 40);
  EXPECT_EQ(ev.back().name, "message_stop");
}

TEST(AnthropicStream, ErrorMidStreamIsAnErrorEventAndTheEnd) {
  AnthropicStreamRenderer r;
  std::string out;
  Error e = Error::make(ErrorCode::kUnavailable, "no backend");
  r.render(StartEvent{"x", "m", 0, {}}, out);
  r.render(BlockStartEvent{0, BlockKind::kText, {}, {}}, out);
  r.render(DeltaEvent{0, DeltaKind::kText, "par"}, out);
  r.render(ErrorEvent{&e}, out);
  r.render(BlockStopEvent{0}, out);
  std::vector<SseEvent> ev = parse_named_sse(out);
  ASSERT_EQ(ev.back().name, "error");
  EXPECT_EQ(ev.back().data,
            (json{{"type", "error"},
                  {"error", {{"type", "overloaded_error"}, {"message", "no backend"}}}}));
  EXPECT_EQ(ev[ev.size() - 2].name, "content_block_delta");
}

TEST(AnthropicStream, StreamedArgumentsThatAreNotAnObjectEndInAnError) {
  AnthropicStreamRenderer r;
  std::string out;
  r.render(StartEvent{"x", "m", 0, {}}, out);
  r.render(BlockStartEvent{0, BlockKind::kToolCall, "c", "f"}, out);
  r.render(DeltaEvent{0, DeltaKind::kArguments, "{\"a\":"}, out);
  r.render(BlockStopEvent{0}, out);
  r.render(FinishEvent{FinishReason::kToolCalls, {}, {}}, out);
  std::vector<SseEvent> ev = parse_named_sse(out);
  EXPECT_EQ(ev.back().name, "error");
  EXPECT_EQ(ev.back().data["error"]["type"], "api_error");
  for (const SseEvent& e : ev) EXPECT_NE(e.name, "message_stop");
  ASSERT_TRUE(r.failure());  // the renderer's own error, for the ledger
  EXPECT_EQ(r.failure()->code, ErrorCode::kBackendError);
}

// Streamed: the input_json_delta as generated, the block's stop, message_delta max_tokens.
TEST(AnthropicStream, ACallCutByMaxTokensStopsWithMaxTokens) {
  AnthropicStreamRenderer r;
  std::string out;
  r.render(StartEvent{"x", "m", 0, {}}, out);
  r.render(BlockStartEvent{0, BlockKind::kToolCall, "c", "f"}, out);
  r.render(DeltaEvent{0, DeltaKind::kArguments, "{\"a\": \"P"}, out);
  r.render(BlockStopEvent{0}, out);
  r.render(FinishEvent{FinishReason::kLength, {}, {}}, out);
  std::vector<SseEvent> ev = parse_named_sse(out);
  std::vector<std::string> names;
  for (const SseEvent& e : ev) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "ping", "content_block_start",
                                             "content_block_delta", "content_block_stop",
                                             "message_delta", "message_stop"}));
  EXPECT_EQ(ev[3].data["delta"]["partial_json"], "{\"a\": \"P");
  EXPECT_EQ(ev[4].data["index"], 0);
  EXPECT_EQ(ev[5].data["delta"]["stop_reason"], "max_tokens");
  EXPECT_FALSE(r.failure());
}

TEST(AnthropicStream, UsageAtTheEndWhenTheStartDidNotKnowIt) {
  AnthropicStreamRenderer r;
  std::string out;
  r.render(StartEvent{"x", "m", 0, {}}, out);
  r.render(FinishEvent{FinishReason::kLength, {}, Usage{9, 4, 0, 0, true}}, out);
  std::vector<SseEvent> ev = parse_named_sse(out);
  EXPECT_EQ(ev[0].data["message"]["usage"]["input_tokens"], 0);
  const json& d = ev[ev.size() - 2].data;
  EXPECT_EQ(d["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(d["usage"]["input_tokens"], 9);
  EXPECT_EQ(d["usage"]["output_tokens"], 4);
}

TEST(AnthropicStream, PingIsAPingEvent) {
  std::string out;
  AnthropicStreamRenderer::ping(out);
  std::vector<SseEvent> ev = parse_named_sse(out);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].name, "ping");
}

}  // namespace
}  // namespace ferry::api
