// OpenAI Responses rendering, per field: the response object and the SSE events.
#include "api/responses_render.h"

#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "tests/api/event_log.h"
#include "tests/api/sse_events.h"

namespace ferry::api {
namespace {

using nlohmann::json;

// The events as (name, data) pairs.
std::vector<std::pair<std::string, json>> parse_sse(const std::string& sse) {
  std::vector<std::pair<std::string, json>> out;
  for (SseEvent& e : parse_named_sse(sse)) out.emplace_back(std::move(e.name), std::move(e.data));
  return out;
}

Answer mixed_answer() {
  Answer a;
  a.model = "gpt-local";
  a.created = 1710000000;
  a.blocks.push_back(Block{BlockKind::kThinking, "reason first", "", "", "", ""});
  a.blocks.push_back(Block{BlockKind::kText, "Here: ", "", "", "", ""});
  a.blocks.push_back(Block{BlockKind::kToolCall, "", "", "call_x", "search", "{\"q\":\"a\"}"});
  a.blocks.push_back(Block{BlockKind::kToolCall, "", "", "", "fetch", "{\"u\":1}"});
  a.finish = FinishReason::kToolCalls;
  a.usage = Usage{50, 30, 10, 12, true};
  return a;
}

TEST(ResponsesRender, ResponseObjectFieldByField) {
  ResponsesRenderOptions o;
  o.echo.temperature = "0.7";
  o.echo.max_output_tokens = 256;
  o.echo.instructions = "\"be brief\"";
  WireBody r = render_response(mixed_answer(), o);
  ASSERT_EQ(r.status, 200);
  json j = json::parse(r.body);
  std::string id = j["id"];
  EXPECT_EQ(id.rfind("resp_", 0), 0u);
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["created_at"], 1710000000);
  EXPECT_EQ(j["status"], "completed");
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_TRUE(j["incomplete_details"].is_null());
  EXPECT_EQ(j["model"], "gpt-local");
  EXPECT_EQ(j["temperature"].dump(), "0.7");  // the client's digits, as sent
  EXPECT_EQ(j["max_output_tokens"], 256);
  EXPECT_EQ(j["instructions"], "be brief");
  ASSERT_EQ(j["output"].size(), 4u);
  const json& rs = j["output"][0];
  EXPECT_EQ(rs["type"], "reasoning");
  EXPECT_EQ(rs["id"].get<std::string>().rfind("rs_", 0), 0u);
  EXPECT_EQ(rs["summary"], json::array());
  EXPECT_EQ(rs["content"][0], (json{{"type", "reasoning_text"}, {"text", "reason first"}}));
  const json& msg = j["output"][1];
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["status"], "completed");
  EXPECT_EQ(msg["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(msg["content"][0]["type"], "output_text");
  EXPECT_EQ(msg["content"][0]["text"], "Here: ");
  EXPECT_EQ(msg["content"][0]["annotations"], json::array());
  const json& fc = j["output"][2];
  EXPECT_EQ(fc["type"], "function_call");
  EXPECT_EQ(fc["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(fc["call_id"], "call_x");
  EXPECT_EQ(fc["name"], "search");
  EXPECT_EQ(fc["arguments"], "{\"q\":\"a\"}");
  EXPECT_EQ(j["output"][3]["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(j["usage"], (json{{"input_tokens", 50},
                              {"input_tokens_details", {{"cached_tokens", 10}}},
                              {"output_tokens", 30},
                              {"output_tokens_details", {{"reasoning_tokens", 12}}},
                              {"total_tokens", 80}}));
  // Distinct item ids.
  std::set<std::string> ids;
  for (const json& item : j["output"]) ids.insert(item["id"].get<std::string>());
  EXPECT_EQ(ids.size(), 4u);
}

TEST(ResponsesRender, IncompleteForLengthAndContentFilter) {
  for (auto [reason, why] : {std::pair{FinishReason::kLength, "max_output_tokens"},
                             std::pair{FinishReason::kContentFilter, "content_filter"}}) {
    Answer a;
    a.finish = reason;
    json j = json::parse(render_response(a).body);
    EXPECT_EQ(j["status"], "incomplete");
    EXPECT_EQ(j["incomplete_details"]["reason"], why);
  }
  Answer stop;
  stop.finish = FinishReason::kStopSequence;
  EXPECT_EQ(json::parse(render_response(stop).body)["status"], "completed");
}

TEST(ResponsesRender, FailedAnswerIsAnOpenAIError) {
  Answer a;
  a.finish = FinishReason::kError;
  a.error = Error::make(ErrorCode::kContextOverflow, "too long");
  WireBody r = render_response(a);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "context_length_exceeded");
}

TEST(ResponsesStream, EventsFieldByField) {
  ResponsesStreamRenderer r;
  RenderSink sink(r);
  replay(mixed_answer(), sink, 4);
  auto ev = parse_sse(sink.out);
  ASSERT_GT(ev.size(), 10u);
  // Sequence numbers count from 0 without a gap; every event names its type.
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].second["sequence_number"], i);
    EXPECT_EQ(ev[i].first, ev[i].second["type"]);
  }
  EXPECT_EQ(ev[0].first, "response.created");
  EXPECT_EQ(ev[0].second["response"]["status"], "in_progress");
  EXPECT_TRUE(ev[0].second["response"]["usage"].is_null());
  EXPECT_EQ(ev[1].first, "response.in_progress");
  EXPECT_EQ(ev.back().first, "response.completed");
  const json& final_response = ev.back().second["response"];
  EXPECT_EQ(final_response["id"], ev[0].second["response"]["id"]);
  ASSERT_EQ(final_response["output"].size(), 4u);

  // Each item: added at its output_index, deltas with its item_id, done with the whole item.
  std::map<int, std::string> text_by_index, args_by_index;
  std::map<int, std::string> item_ids;
  for (const auto& [name, d] : ev) {
    if (name == "response.output_item.added") {
      int i = d["output_index"];
      item_ids[i] = d["item"]["id"];
      EXPECT_EQ(d["item"]["id"], final_response["output"][i]["id"]);
    }
    if (name == "response.output_text.delta" || name == "response.reasoning_text.delta") {
      EXPECT_EQ(d["item_id"], item_ids[d["output_index"]]);
      EXPECT_EQ(d["content_index"], 0);
      text_by_index[d["output_index"]] += d["delta"];
    }
    if (name == "response.function_call_arguments.delta") {
      EXPECT_EQ(d["item_id"], item_ids[d["output_index"]]);
      args_by_index[d["output_index"]] += d["delta"];
    }
    if (name == "response.function_call_arguments.done") {
      EXPECT_EQ(d["arguments"], args_by_index[d["output_index"]]);
      EXPECT_EQ(d["name"], final_response["output"][d["output_index"].get<int>()]["name"]);
    }
    if (name == "response.output_text.done") {
      EXPECT_EQ(d["text"], text_by_index[d["output_index"]]);
    }
    if (name == "response.output_item.done") {
      EXPECT_EQ(d["item"], final_response["output"][d["output_index"].get<int>()]);
    }
  }
  EXPECT_EQ(text_by_index[0], "reason first");
  EXPECT_EQ(text_by_index[1], "Here: ");
  EXPECT_EQ(args_by_index[2], "{\"q\":\"a\"}");
  EXPECT_EQ(args_by_index[3], "{\"u\":1}");
}

TEST(ResponsesStream, LengthIsResponseIncomplete) {
  Answer a;
  a.blocks.push_back(Block{BlockKind::kText, "cut", "", "", "", ""});
  a.finish = FinishReason::kLength;
  ResponsesStreamRenderer r;
  RenderSink sink(r);
  replay(a, sink);
  auto ev = parse_sse(sink.out);
  EXPECT_EQ(ev.back().first, "response.incomplete");
  EXPECT_EQ(ev.back().second["response"]["incomplete_details"]["reason"], "max_output_tokens");
}

TEST(ResponsesStream, ErrorAfterTheStartIsResponseFailed) {
  ResponsesStreamRenderer r;
  std::string out;
  Error e = Error::make(ErrorCode::kBackendError, "upstream reset");
  r.render(StartEvent{"x", "m", 0, {}}, out);
  r.render(BlockStartEvent{0, BlockKind::kText, {}, {}}, out);
  r.render(DeltaEvent{0, DeltaKind::kText, "partial"}, out);
  r.render(ErrorEvent{&e}, out);
  r.render(BlockStopEvent{0}, out);
  auto ev = parse_sse(out);
  EXPECT_EQ(ev.back().first, "response.failed");
  const json& resp = ev.back().second["response"];
  EXPECT_EQ(resp["status"], "failed");
  EXPECT_EQ(resp["error"], (json{{"code", "server_error"}, {"message", "upstream reset"}}));
  EXPECT_EQ(resp["output"][0]["content"][0]["text"], "partial");
}

TEST(ResponsesStream, ErrorBeforeTheStartIsAnErrorEvent) {
  ResponsesStreamRenderer r;
  std::string out;
  Error e = Error::make(ErrorCode::kRateLimited, "budget");
  r.render(ErrorEvent{&e}, out);
  auto ev = parse_sse(out);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].first, "error");
  EXPECT_EQ(ev[0].second, (json{{"type", "error"},
                                {"sequence_number", 0},
                                {"code", "rate_limit_exceeded"},
                                {"message", "budget"},
                                {"param", nullptr}}));
}

TEST(ResponsesStream, AProducerThatBreaksTheGrammarFailsTheResponse) {
  ResponsesStreamRenderer r;
  std::string out;
  r.render(StartEvent{"x", "m", 0, {}}, out);
  r.render(DeltaEvent{3, DeltaKind::kText, "to nowhere"}, out);
  auto ev = parse_sse(out);
  EXPECT_EQ(ev.back().first, "response.failed");
  EXPECT_EQ(ev.back().second["response"]["error"]["code"], "server_error");
}

// A call the output limit cut: the item it ended in is incomplete, in its output_item.done and
// in the final response; the items before it completed.
TEST(ResponsesStream, TheItemTheLimitCutIsIncomplete) {
  Answer a;
  a.blocks.push_back(Block{BlockKind::kText, "Let me look.", "", "", "", ""});
  a.blocks.push_back(Block{BlockKind::kToolCall, "", "", "call_1", "read", "{\"path\":\"ma"});
  a.finish = FinishReason::kLength;
  ResponsesStreamRenderer r;
  RenderSink sink(r);
  replay(a, sink, 3);
  auto ev = parse_sse(sink.out);
  std::map<int, std::string> done_status;
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].second["sequence_number"], i);
    if (ev[i].first == "response.output_item.done") {
      done_status[ev[i].second["output_index"]] = ev[i].second["item"]["status"];
    }
  }
  EXPECT_EQ(done_status, (std::map<int, std::string>{{0, "completed"}, {1, "incomplete"}}));
  ASSERT_EQ(ev.back().first, "response.incomplete");
  const json& output = ev.back().second["response"]["output"];
  EXPECT_EQ(output[0]["status"], "completed");
  EXPECT_EQ(output[1]["status"], "incomplete");
  EXPECT_EQ(output[1]["arguments"], "{\"path\":\"ma");

  json body = json::parse(render_response(a).body);
  EXPECT_EQ(body["output"][0]["status"], "completed");
  EXPECT_EQ(body["output"][1]["status"], "incomplete");
  a.finish = FinishReason::kToolCalls;  // not cut: every item completed
  body = json::parse(render_response(a).body);
  EXPECT_EQ(body["output"][1]["status"], "completed");
}

// The answer was rendered whole, then failed (the ledger): what the end rendered is replaced
// by response.failed, numbered on from before the end, with the last item incomplete.
TEST(ResponsesStream, FailAfterTheEndReplacesTheEnd) {
  ResponsesStreamRenderer r;
  std::string sent;
  r.render(StartEvent{"x", "m", 0, {}}, sent);
  r.render(BlockStartEvent{0, BlockKind::kText, {}, {}}, sent);
  r.render(DeltaEvent{0, DeltaKind::kText, "all of it"}, sent);
  r.render(BlockStopEvent{0}, sent);
  std::string end;
  r.render(FinishEvent{FinishReason::kStop, {}, Usage{3, 4, 0, 0, true}}, end);
  ASSERT_NE(end.find("response.completed"), std::string::npos);
  std::string failed;
  Error e = Error::make(ErrorCode::kUnavailable, "the ledger is down");
  r.fail_after_end(e, failed);
  auto before = parse_sse(sent);
  auto ev = parse_sse(failed);
  ASSERT_EQ(ev.size(), 2u) << failed;
  EXPECT_EQ(ev[0].first, "response.output_item.done");
  EXPECT_EQ(ev[0].second["item"]["status"], "incomplete");
  EXPECT_EQ(ev[0].second["sequence_number"], before.size());
  EXPECT_EQ(ev[1].first, "response.failed");
  EXPECT_EQ(ev[1].second["sequence_number"], before.size() + 1);
  EXPECT_EQ(ev[1].second["response"]["id"], before[0].second["response"]["id"]);
  EXPECT_EQ(ev[1].second["response"]["status"], "failed");
  EXPECT_EQ(ev[1].second["response"]["error"]["message"], "the ledger is down");
  EXPECT_EQ(ev[1].second["response"]["output"][0]["content"][0]["text"], "all of it");
}

}  // namespace
}  // namespace ferry::api
