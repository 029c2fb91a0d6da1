// POST /v1/responses through the real binary, translated for ferry_test_upstream (which speaks
// only chat): the `response` object and its event stream, what the backend was sent, function
// calls and their outputs over turns (sent whole, and continued with previous_response_id on
// another instance sharing the ledger file), the ledger's rows and task ids, and the 400s and
// 404s in OpenAI's shape while ferry keeps serving.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/csv_rows.h"
#include "tests/integration/ferry_test_base.h"

namespace ferry::itest {
namespace {

using Row = ferry::testing::CsvRow;
using ferry::testing::csv_rows;

class ResponsesTest : public OwnConfigTest {
 protected:
  // The standard config with a model whose upstream calls tools, and (when `ledger`) a ledger.
  std::string config(bool ledger = true) {
    std::string cfg = standard_config(upstream_.address);
    auto at = cfg.find("models:\n") + 8;
    cfg.insert(at,
               "  - {name: caller, backend: up, upstream_model: call-tool}\n"
               "  - {name: cut-call, backend: up, upstream_model: call-tool+cut-tool-args}\n");
    if (ledger) cfg += "ledger:\n  path: " + db_ + "\n";
    return cfg;
  }
  void start(bool ledger = true) { ferry_ = start_ferry(dir_, config(ledger)); }

  std::optional<Response> post(const json& body, const std::vector<std::string>& headers = {}) {
    auto h = auth_headers();
    h.insert(h.end(), headers.begin(), headers.end());
    return post_json(ferry_.address, "/v1/responses", body, h);
  }

  json ok(const json& body) {
    auto r = post(body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return r->body_json();
  }

  // A 4xx in OpenAI's shape; returns its `error` object.
  json error_of(const json& body, int status) {
    auto r = post(body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, status) << r->body;
    json e = r->body_json();
    EXPECT_TRUE(e.contains("error")) << r->body;
    if (!e.contains("error")) return {};
    EXPECT_TRUE(e["error"]["message"].is_string());
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(e["error"].contains("param"));
    EXPECT_TRUE(e["error"].contains("code"));
    return e["error"];
  }

  void expect_serving() {
    json r = ok({{"model", "gpt-test"}, {"input", "still ok"}});
    EXPECT_EQ(r["output"][0]["content"][0]["text"], "echo: still ok");
  }

  std::vector<Row> ledger_rows() {
    auto r =
        http_request(ferry_.address, "GET", "/v1/ledger/export.csv", "", auth_headers(kAdminKey));
    EXPECT_TRUE(r && r->status == 200);
    return r ? csv_rows(r->body) : std::vector<Row>{};
  }
};

std::string output_text(const json& response) {
  std::string text;
  for (const auto& item : response["output"]) {
    if (item["type"] != "message") continue;
    for (const auto& part : item["content"]) text += part.value("text", "");
  }
  return text;
}

TEST_F(ResponsesTest, AStringInputIsAnsweredAsAResponseObject) {
  start();
  json r = ok({{"model", "gpt-test"},
               {"input", "Hello there"},
               {"instructions", "Be brief."},
               {"max_output_tokens", 50},
               {"temperature", 0.5}});
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], "gpt-test");
  EXPECT_TRUE(r["id"].get<std::string>().starts_with("resp_"));
  EXPECT_EQ(output_text(r), "echo: Hello there");
  EXPECT_EQ(r["instructions"], "Be brief.");
  EXPECT_EQ(r["max_output_tokens"], 50);
  EXPECT_EQ(r["temperature"], 0.5);
  EXPECT_GT(r["usage"]["input_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(r["usage"]["output_tokens"], 3);  // the upstream's pieces: "echo: ", "Hello ", "there"
  // The backend was sent OpenAI chat: the instructions as the system message first.
  json seen = upstream_last_request(upstream_.address)["body"];
  ASSERT_EQ(seen["messages"].size(), 2u);
  EXPECT_EQ(seen["messages"][0]["role"], "system");
  EXPECT_EQ(seen["messages"][0]["content"], "Be brief.");
  EXPECT_EQ(seen["messages"][1]["content"], "Hello there");
  EXPECT_EQ(seen["model"], "echo");
  EXPECT_EQ(seen["max_tokens"], 50);
  EXPECT_FALSE(seen.contains("input"));
}

TEST_F(ResponsesTest, AStreamIsResponsesEventsInOrder) {
  start();
  json body = {{"model", "gpt-test"}, {"input", "stream me please"}, {"stream", true}};
  StreamResult s = stream_request(ferry_.address, "/v1/responses", body);
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 200);
  EXPECT_EQ(s.end, ReadStatus::kEnd);
  ASSERT_GE(s.chunks.size(), 6u);
  EXPECT_EQ(s.chunks.front()["type"], "response.created");
  EXPECT_EQ(s.chunks.back()["type"], "response.completed");
  EXPECT_FALSE(s.saw_done);  // Responses streams have no [DONE]
  std::string deltas;
  int64_t sequence = -1;
  for (const auto& c : s.chunks) {
    EXPECT_EQ(c["sequence_number"].get<int64_t>(), sequence + 1);
    sequence = c["sequence_number"].get<int64_t>();
    if (c["type"] == "response.output_text.delta") deltas += c["delta"].get<std::string>();
  }
  EXPECT_EQ(deltas, "echo: stream me please");
  const json& done = s.chunks.back()["response"];
  EXPECT_EQ(output_text(done), "echo: stream me please");
  EXPECT_GT(done["usage"]["input_tokens"].get<int64_t>(), 0);
}

TEST_F(ResponsesTest, FunctionCallsAndTheirOutputsOverTwoTurns) {
  start();
  json tools =
      json::array({{{"type", "function"},
                    {"name", "lookup"},
                    {"description", "Looks a word up"},
                    {"parameters", {{"type", "object"}, {"properties", json::object()}}}}});
  json first = ok({{"model", "caller"}, {"input", "find ferries"}, {"tools", tools}});
  ASSERT_EQ(first["output"].size(), 1u) << first.dump();
  const json& call = first["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "lookup");
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>())["q"], "find ferries");
  std::string call_id = call["call_id"];
  EXPECT_TRUE(call_id.starts_with("call_up_"));  // the backend's id, kept for the next turn
  // The backend was sent the tools in chat's nested shape.
  json seen = upstream_last_request(upstream_.address)["body"];
  EXPECT_EQ(seen["tools"][0]["function"]["name"], "lookup");
  // Turn two, the whole conversation sent again (as store: false clients do).
  json input = json::array(
      {{{"role", "user"}, {"content", "find ferries"}},
       {{"type", "function_call"},
        {"call_id", call_id},
        {"name", "lookup"},
        {"arguments", call["arguments"]}},
       {{"type", "function_call_output"}, {"call_id", call_id}, {"output", "three ferries"}}});
  json second = ok({{"model", "caller"}, {"input", input}, {"tools", tools}, {"store", false}});
  EXPECT_EQ(output_text(second), "echo: three ferries");
  seen = upstream_last_request(upstream_.address)["body"];
  ASSERT_EQ(seen["messages"].size(), 3u);
  EXPECT_EQ(seen["messages"][1]["tool_calls"][0]["id"], call_id);
  EXPECT_EQ(seen["messages"][2]["role"], "tool");
  EXPECT_EQ(seen["messages"][2]["tool_call_id"], call_id);
}

TEST_F(ResponsesTest, PreviousResponseIdContinuesOnAnotherInstance) {
  start();
  json tools = json::array({{{"type", "function"}, {"name", "lookup"}}});
  json first = ok({{"model", "caller"}, {"input", "find boats"}, {"tools", tools}});
  std::string call_id = first["output"][0]["call_id"];
  std::string id = first["id"];
  EXPECT_EQ(first["store"], true);
  // A second ferry on the same ledger file answers the continuation.
  TempDir other_dir;
  Server other = start_ferry(other_dir, config());
  json input = json::array(
      {{{"type", "function_call_output"}, {"call_id", call_id}, {"output", "two boats"}}});
  auto r = post_json(
      other.address, "/v1/responses",
      {{"model", "caller"}, {"input", input}, {"tools", tools}, {"previous_response_id", id}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json second = r->body_json();
  EXPECT_EQ(output_text(second), "echo: two boats");
  EXPECT_EQ(second["previous_response_id"], id);
  json seen = upstream_last_request(upstream_.address)["body"];
  ASSERT_EQ(seen["messages"].size(), 3u);  // the stored user message and call, then the output
  EXPECT_EQ(seen["messages"][0]["content"], "find boats");
  EXPECT_EQ(seen["messages"][1]["tool_calls"][0]["id"], call_id);
  // Three turns deep, back on the first instance: the whole history again.
  json third =
      ok({{"model", "gpt-test"}, {"input", "and now?"}, {"previous_response_id", second["id"]}});
  EXPECT_EQ(output_text(third), "echo: and now?");
  seen = upstream_last_request(upstream_.address)["body"];
  ASSERT_EQ(seen["messages"].size(), 5u);
  // The stored answer comes back as the assistant turn, its text as a string or as text parts.
  const json& answer = seen["messages"][3]["content"];
  const std::string answer_text =
      answer.is_string() ? answer.get<std::string>() : answer.at(0).at("text").get<std::string>();
  EXPECT_EQ(answer_text, "echo: two boats");
  EXPECT_EQ(other.process->stop(Ms(15000)), 0);
}

TEST_F(ResponsesTest, MissingOrUnstoredPreviousResponsesAre404) {
  start();
  json e =
      error_of({{"model", "gpt-test"}, {"input", "x"}, {"previous_response_id", "resp_nope"}}, 404);
  EXPECT_EQ(e["code"], "previous_response_not_found");
  EXPECT_EQ(e["param"], "previous_response_id");
  json unstored = ok({{"model", "gpt-test"}, {"input", "forget me"}, {"store", false}});
  EXPECT_EQ(unstored["store"], false);
  error_of({{"model", "gpt-test"}, {"input", "x"}, {"previous_response_id", unstored["id"]}}, 404);
  // Another key does not see this key's responses.
  json mine = ok({{"model", "gpt-test"}, {"input", "mine"}});
  auto r = post_json(ferry_.address, "/v1/responses",
                     {{"model", "gpt-test"}, {"input", "x"}, {"previous_response_id", mine["id"]}},
                     auth_headers(kHashedKey));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
  expect_serving();
}

TEST_F(ResponsesTest, WithoutALedgerNothingIsStoredAndPreviousIdsAreRefused) {
  start(/*ledger=*/false);
  json r = ok({{"model", "gpt-test"}, {"input", "hello"}});  // store defaults to true: skipped
  json e =
      error_of({{"model", "gpt-test"}, {"input", "x"}, {"previous_response_id", r["id"]}}, 400);
  EXPECT_EQ(e["param"], "previous_response_id");
  EXPECT_NE(e["message"].get<std::string>().find("ledger"), std::string::npos);
  expect_serving();
}

TEST_F(ResponsesTest, LedgerRowsAndTaskIds) {
  start();
  ok({{"model", "gpt-test"}, {"input", "one"}, {"prompt_cache_key", "codex-session-1"}});
  ok({{"model", "gpt-test"},
      {"input", "two"},
      {"metadata", {{"task_id", "from-metadata"}}},
      {"prompt_cache_key", "ignored-key"}});
  auto r = post({{"model", "gpt-test"}, {"input", "three"}, {"prompt_cache_key", "k"}},
                {"x-ferry-task: from-header"});
  ASSERT_TRUE(r && r->status == 200);
  StreamResult s = stream_request(ferry_.address, "/v1/responses",
                                  {{"model", "gpt-test"},
                                   {"input", "four"},
                                   {"stream", true},
                                   {"prompt_cache_key", "streamed"}});
  EXPECT_EQ(s.end, ReadStatus::kEnd);
  std::map<std::string, Row> by_task;
  for (auto& row : ledger_rows()) by_task[row["task_id"]] = row;
  for (const char* task : {"codex-session-1", "from-metadata", "from-header", "streamed"}) {
    ASSERT_TRUE(by_task.count(task)) << task;
    EXPECT_EQ(by_task[task]["status"], "ok") << task;
    EXPECT_NE(by_task[task]["input_tokens"], "0") << task;
  }
  EXPECT_EQ(by_task["streamed"]["stream"], "1");
}

TEST_F(ResponsesTest, BadInputGetsOpenAIErrorsAndFerryKeepsServing) {
  start();
  struct Case {
    json body;
    std::string param;
  };
  const json tools = json::array({{{"type", "function"}, {"name", "f"}}});
  std::vector<Case> cases = {
      {{{"model", "gpt-test"}}, "input"},
      {{{"model", "gpt-test"}, {"input", ""}}, "input"},
      {{{"model", "gpt-test"}, {"input", json::array()}}, "input"},
      {{{"model", 5}, {"input", "x"}}, "model"},
      {{{"model", "gpt-test"}, {"input", "x"}, {"temperature", "hot"}}, "temperature"},
      {{{"model", "gpt-test"}, {"input", "x"}, {"max_output_tokens", -1}}, "max_output_tokens"},
      {{{"model", "gpt-test"}, {"input", "x"}, {"stream", "yes"}}, "stream"},
      {{{"model", "gpt-test"}, {"input", "x"}, {"tools", "none"}}, "tools"},
      {{{"model", "gpt-test"}, {"input", "x"}, {"tool_choice", "maybe"}, {"tools", tools}},
       "tool_choice"},
      {{{"model", "gpt-test"}, {"input", json::array({{{"type", "telepathy"}}})}}, "input[0].type"},
      {{{"model", "gpt-test"},
        {"input",
         json::array({{{"type", "function_call_output"}, {"call_id", "c9"}, {"output", "x"}}})}},
       "input"},
      {{{"model", "gpt-test"},
        {"input", json::array({{{"role", "user"},
                                {"content", json::array({{{"type", "input_image"},
                                                          {"image_url", "http://x/y.png"}}})}}})}},
       "input[0].content[0]"},
      {{{"model", "gpt-test"}, {"input", "x"}, {"tools", json::array({{{"type", "web_search"}}})}},
       "tools[0]"},
      {{{"model", "gpt-test"}, {"input", "x"}, {"text", {{"format", {{"type", "yaml"}}}}}},
       "text.format.type"},
      {{{"model", "gpt-test"}, {"input", "x"}, {"surprise", true}}, "surprise"},
  };
  for (const auto& c : cases) {
    json e = error_of(c.body, 400);
    EXPECT_EQ(e["param"], c.param) << c.body.dump();
  }
  auto r = http_request(ferry_.address, "POST", "/v1/responses", "{not json", auth_headers());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = http_request(ferry_.address, "POST", "/v1/responses", R"({"model":"gpt-test","input":"x"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);  // no key
  // An unknown model is the 404 of chat.
  error_of({{"model", "no-such-model"}, {"input", "x"}}, 404);
  expect_serving();
  // Bad requests leave no half-written rows: only the served ones are there.
  for (const auto& row : ledger_rows()) EXPECT_NE(row.at("status"), "") << row.at("id");
}

// A call max_tokens cut: status incomplete, reason max_output_tokens, the arguments as
// generated; streamed, the arguments' deltas and response.incomplete.
TEST_F(ResponsesTest, AFunctionCallCutByTheLimitIsIncomplete) {
  start();
  json tools =
      json::array({{{"type", "function"},
                    {"name", "lookup"},
                    {"parameters", {{"type", "object"}, {"properties", json::object()}}}}});
  const std::string text = "find the ferries";
  const std::string cut = "{\"q\":\"" + text.substr(0, text.size() / 2);
  json r = ok({{"model", "cut-call"}, {"input", text}, {"tools", tools}});
  EXPECT_EQ(r["status"], "incomplete") << r.dump();
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens") << r.dump();
  ASSERT_EQ(r["output"].size(), 1u) << r.dump();
  EXPECT_EQ(r["output"][0]["type"], "function_call");
  EXPECT_EQ(r["output"][0]["arguments"], cut);
  EXPECT_EQ(r["output"][0]["status"], "incomplete") << "the item the limit cut";
  StreamResult s =
      stream_request(ferry_.address, "/v1/responses",
                     {{"model", "cut-call"}, {"input", text}, {"tools", tools}, {"stream", true}});
  ASSERT_TRUE(s.head);
  ASSERT_FALSE(s.chunks.empty());
  std::string deltas;
  for (const auto& c : s.chunks) {
    if (c["type"] == "response.function_call_arguments.delta") deltas += c["delta"];
  }
  EXPECT_EQ(deltas, cut);
  int items_done = 0;
  for (const auto& c : s.chunks) {
    if (c["type"] != "response.output_item.done") continue;
    ++items_done;
    EXPECT_EQ(c["item"]["status"], "incomplete") << c.dump();
  }
  EXPECT_EQ(items_done, 1);
  EXPECT_EQ(s.chunks.back()["type"], "response.incomplete");
  EXPECT_EQ(s.chunks.back()["response"]["output"][0]["status"], "incomplete");
  EXPECT_EQ(s.chunks.back()["response"]["incomplete_details"]["reason"], "max_output_tokens");
  expect_serving();
}

TEST_F(ResponsesTest, UpstreamFailuresAreResponsesErrors) {
  start();
  auto r = post({{"model", "fail-500"}, {"input", "x"}});
  ASSERT_TRUE(r);
  EXPECT_GE(r->status, 500) << r->body;
  EXPECT_TRUE(r->body_json().contains("error"));
  StreamResult s =
      stream_request(ferry_.address, "/v1/responses",
                     {{"model", "close-mid-stream"}, {"input", "a b c d e f g"}, {"stream", true}});
  ASSERT_TRUE(s.head);
  ASSERT_FALSE(s.chunks.empty());
  const std::string last = s.chunks.back()["type"];
  EXPECT_TRUE(last == "response.failed" || last == "error") << last;
  expect_serving();
}

// A backend with `responses` in its `apis` gets the client's body as sent (the model renamed)
// and its answer relayed verbatim, whole and streamed; the ledger reads the usage and status
// from the response object (incomplete at max_output_tokens is a `length` row); a policy's
// effort reaches it as reasoning.effort, a token budget is dropped and said so.
TEST_F(ResponsesTest, PassedThroughToANativeBackendWithItsReasoningEffort) {
  std::string cfg = config();
  const std::string base =
      "http://" + upstream_.address.host + ":" + std::to_string(upstream_.address.port) + "/v1";
  cfg.replace(cfg.find("models:\n"), 8,
              "  - name: native\n    base_url: " + base +
                  "\n    apis: [chat, responses]\n    timeouts: { first_byte_ms: 2000 }\n"
                  "models:\n  - {name: resp-native, backend: native, upstream_model: echo}\n");
  cfg += "policy: { file: " +
         dir_.write("policies.yaml",
                    "targets: { native: resp-native }\n"
                    "models: [resp-native, thinker, budgeted]\n"
                    "rules:\n"
                    "  - { id: think, when: { model: thinker }, route: [native], set: { "
                    "reasoning: low } }\n"
                    "  - { id: budget, when: { model: budgeted }, route: [native], set: { "
                    "reasoning: { max_tokens: 100 } } }\n"
                    "default: { route: [native] }\n") +
         ", watch: false }\n";
  ferry_ = start_ferry(dir_, cfg);

  json body = {{"model", "resp-native"}, {"input", "native hello"}, {"prompt_cache_key", "t-1"}};
  json r = ok(body);
  EXPECT_TRUE(r["id"].get<std::string>().starts_with("resp_up_")) << "relayed as sent: " << r;
  EXPECT_EQ(r["model"], "resp-native");
  EXPECT_EQ(output_text(r), "echo: native hello");
  json last = upstream_last_request(upstream_.address);
  EXPECT_EQ(last["target"], "/v1/responses") << last.dump();
  json sent =
      last["body"].is_string() ? json::parse(last["body"].get<std::string>()) : last["body"];
  json expected = body;
  expected["model"] = "echo";
  EXPECT_EQ(sent, expected) << "the client's body, only the model renamed";

  // Cut by max_output_tokens: incomplete, relayed as such.
  json cut = ok({{"model", "resp-native"},
                 {"input", "one two three four five"},
                 {"max_output_tokens", 2},
                 {"prompt_cache_key", "t-cut"}});
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"]["reason"], "max_output_tokens");

  StreamResult s = stream_request(ferry_.address, "/v1/responses",
                                  {{"model", "resp-native"},
                                   {"input", "a b c"},
                                   {"stream", true},
                                   {"prompt_cache_key", "t-stream"}});
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 200);
  EXPECT_EQ(s.end, ReadStatus::kEnd);
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_EQ(s.chunks.front()["type"], "response.created");
  EXPECT_EQ(s.chunks.front()["response"]["model"], "resp-native") << "renamed in the relay";
  EXPECT_EQ(s.chunks.back()["type"], "response.completed");
  EXPECT_EQ(s.chunks.back()["response"]["id"].get<std::string>().substr(0, 8), "resp_up_");
  EXPECT_FALSE(s.saw_done);

  // The policy's reasoning: an effort sent as reasoning.effort, a budget dropped with a header.
  auto thinker = post({{"model", "thinker"}, {"input", "hm"}});
  ASSERT_TRUE(thinker && thinker->status == 200) << (thinker ? thinker->body : "");
  EXPECT_EQ(thinker->header("x-ferry-reasoning").value_or(""), "effort:low");
  json thought = upstream_last_request(upstream_.address)["body"];
  if (thought.is_string()) thought = json::parse(thought.get<std::string>());
  EXPECT_EQ(thought["reasoning"]["effort"], "low") << thought;
  auto budgeted = post({{"model", "budgeted"}, {"input", "hm"}});
  ASSERT_TRUE(budgeted && budgeted->status == 200) << (budgeted ? budgeted->body : "");
  EXPECT_NE(budgeted->header("x-ferry-reasoning").value_or("").find("dropped"), std::string::npos);

  std::map<std::string, Row> by_task;
  for (auto& row : ledger_rows()) by_task[row["task_id"]] = row;
  for (const char* task : {"t-1", "t-cut", "t-stream"}) {
    ASSERT_TRUE(by_task.count(task)) << task;
    EXPECT_EQ(by_task[task]["status"], "ok") << task;
    EXPECT_NE(by_task[task]["input_tokens"], "0") << task;
    EXPECT_NE(by_task[task]["output_tokens"], "0") << task;
  }
  EXPECT_EQ(by_task["t-cut"]["output_tokens"], "2");
  EXPECT_EQ(by_task["t-cut"]["finish_reason"], "length");
  EXPECT_EQ(by_task["t-1"]["finish_reason"], "stop");
  EXPECT_EQ(by_task["t-stream"]["stream"], "1");
}

}  // namespace
}  // namespace ferry::itest
