// Anthropic Messages through the real `ferry` binary: translated to an OpenAI chat backend and
// back (whole and streamed), passed through to a backend that speaks Messages natively, every
// error path in Anthropic's shape, x-api-key auth, count_tokens, and Claude Code's session id
// as the ledger's task.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/ferry_test_base.h"
#include "tests/integration/metrics_check.h"

namespace ferry::itest {
namespace {

constexpr const char* kSession = "claude-session-7f3a";

// The standard config with a ledger, a backend on the same upstream that speaks Messages
// natively, and models routed to it.
std::string messages_config(const ListenAddress& upstream, const std::string& db,
                            const std::string& extra = "") {
  std::string cfg = standard_config(upstream);
  std::string base = "http://" + upstream.host + ":" + std::to_string(upstream.port) + "/v1";
  cfg.replace(cfg.find("models:\n"), 8,
              "  - name: native\n    base_url: " + base +
                  "\n    apis: [chat, messages]\n    timeouts: { first_byte_ms: 2000 }\nmodels:\n"
                  "  - {name: claude-native, backend: native, upstream_model: echo}\n"
                  "  - {name: native-fail-429, backend: native, upstream_model: fail-429}\n");
  cfg += "ledger:\n  path: " + db + "\n" + extra;
  return cfg;
}

std::vector<std::string> x_api_key(const char* key = kAppKey) {
  return {std::string("x-api-key: ") + key, "anthropic-version: 2023-06-01"};
}

// The body of the upstream's last request (kept as JSON, or as text when it was not).
json body_of(const json& last) {
  const json& b = last["body"];
  return b.is_string() ? json::parse(b.get<std::string>(), nullptr, false) : b;
}

json message_body(const std::string& model, const std::string& text, bool stream = false) {
  json b = {{"model", model},
            {"max_tokens", 64},
            {"messages", json::array({{{"role", "user"}, {"content", text}}})}};
  if (stream) b["stream"] = true;
  return b;
}

class MessagesTest : public OwnConfigTest {
 protected:
  void start(const std::string& extra = "") {
    ferry_ = start_ferry(dir_, messages_config(upstream_.address, db_, extra));
  }

  std::optional<Response> post(const json& body, std::vector<std::string> headers = x_api_key(),
                               const std::string& target = "/v1/messages") {
    return post_json(ferry_.address, target, body, headers);
  }

  // The reply is Anthropic's error shape with `type` and `status`.
  static void expect_error(const std::optional<Response>& r, int status, const std::string& type) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    json j = r->body_json();
    EXPECT_EQ(j["type"], "error") << r->body;
    EXPECT_EQ(j["error"]["type"], type) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string() && !j["error"]["message"].empty()) << r->body;
    EXPECT_FALSE(j.contains("choices")) << r->body;
  }

  std::string ledger_csv() {
    auto r =
        http_request(ferry_.address, "GET", "/v1/ledger/export.csv", "", auth_headers(kAdminKey));
    EXPECT_TRUE(r);
    return r ? r->body : std::string();
  }

  // The ledger's rows that name `needle` (waiting for the writer up to 5 s).
  std::vector<std::string> rows_with(const std::string& needle, size_t at_least = 1) {
    std::vector<std::string> rows;
    for (int i = 0; i < 200; ++i) {
      rows.clear();
      std::string csv = ledger_csv();
      size_t at = 0;
      while (at < csv.size()) {
        size_t nl = csv.find('\n', at);
        std::string line = csv.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
        if (line.find(needle) != std::string::npos) rows.push_back(line);
        if (nl == std::string::npos) break;
        at = nl + 1;
      }
      if (rows.size() >= at_least) break;
      std::this_thread::sleep_for(Ms(25));
    }
    return rows;
  }
};

TEST_F(MessagesTest, TranslatedToAChatBackendAndBack) {
  start();
  json body = message_body("gpt-test", "hello ferry");
  body["system"] = "be brief";
  body["stop_sequences"] = json::array({"END"});
  auto r = post(body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = r->body_json();
  EXPECT_EQ(j["type"], "message");
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_EQ(j["model"], "gpt-test");
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("msg_")) << r->body;
  ASSERT_EQ(j["content"].size(), 1u) << r->body;
  EXPECT_EQ(j["content"][0]["type"], "text");
  EXPECT_EQ(j["content"][0]["text"], "echo: hello ferry");
  EXPECT_EQ(j["stop_reason"], "end_turn");
  EXPECT_GT(j["usage"]["input_tokens"].get<int64_t>(), 0) << r->body;
  EXPECT_EQ(j["usage"]["output_tokens"], 3) << r->body;
  // The upstream got OpenAI chat, rendered from the typed request.
  json last = upstream_last_request(upstream_.address);
  EXPECT_EQ(last["target"], "/v1/chat/completions") << last.dump();
  json sent = body_of(last);
  EXPECT_EQ(sent["model"], "echo");
  EXPECT_EQ(sent["max_tokens"], 64);
  EXPECT_EQ(sent["messages"][0]["role"], "system");
  EXPECT_EQ(sent["messages"][1]["content"], "hello ferry");
  EXPECT_EQ(sent["stop"][0], "END");
  EXPECT_FALSE(sent.contains("system")) << sent.dump();
}

TEST_F(MessagesTest, StreamTranslatedAsAnthropicEvents) {
  start();
  StreamResult s = stream_request(ferry_.address, "/v1/messages",
                                  message_body("gpt-test", "one two three", true), x_api_key());
  ASSERT_TRUE(s.head);
  ASSERT_EQ(s.head->status, 200);
  EXPECT_EQ(s.end, ReadStatus::kEnd);
  EXPECT_FALSE(s.saw_done) << "no OpenAI [DONE] on a Messages stream";
  std::vector<std::string> names;
  std::string text;
  json final_usage;
  for (const auto& e : s.events) {
    names.push_back(e.event);
    json d = json::parse(e.data, nullptr, false);
    EXPECT_EQ(d["type"], e.event) << e.data;
    if (e.event == "content_block_delta") text += d["delta"]["text"].get<std::string>();
    if (e.event == "message_start") {
      EXPECT_EQ(d["message"]["model"], "gpt-test");
      EXPECT_GT(d["message"]["usage"]["input_tokens"].get<int64_t>(), 0) << e.data;
    }
    if (e.event == "message_delta") {
      EXPECT_EQ(d["delta"]["stop_reason"], "end_turn");
      final_usage = d["usage"];
    }
  }
  ASSERT_GE(names.size(), 6u);
  EXPECT_EQ(names.front(), "message_start");
  EXPECT_EQ(names[1], "ping");
  EXPECT_EQ(names.back(), "message_stop");
  EXPECT_EQ(text, "echo: one two three");
  EXPECT_EQ(final_usage["output_tokens"], 4) << final_usage.dump();
}

TEST_F(MessagesTest, PassedThroughToANativeBackend) {
  start();
  json body = message_body("claude-native", "native hello");
  body["x_native_field"] = 1;  // refused by ferry's parser: not sent
  auto bad = post(body);
  expect_error(bad, 400, "invalid_request_error");
  body.erase("x_native_field");
  body["top_k"] = 5;
  auto r = post(body, {"x-api-key: " + std::string(kAppKey), "anthropic-version: 2023-06-01",
                       "anthropic-beta: tools-2024-05-16"});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = r->body_json();
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("msg_up_"))
      << "relayed as the backend sent it";
  EXPECT_EQ(j["model"], "claude-native");
  EXPECT_EQ(j["content"][0]["text"], "echo: native hello");
  json last = upstream_last_request(upstream_.address);
  EXPECT_EQ(last["target"], "/v1/messages") << last.dump();
  json sent = body_of(last);
  json expected = body;
  expected["model"] = "echo";
  EXPECT_EQ(sent, expected) << "the client's body, only the model renamed";
  std::string headers = last["headers"].dump();
  EXPECT_NE(headers.find("2023-06-01"), std::string::npos) << headers;
  EXPECT_NE(headers.find("tools-2024-05-16"), std::string::npos) << headers;

  // Streamed: Anthropic's events relayed, the usage read from them for the ledger.
  StreamResult s =
      stream_request(ferry_.address, "/v1/messages", message_body("claude-native", "a b c", true),
                     {"x-api-key: " + std::string(kAppKey), "x-ferry-task: t-native"});
  ASSERT_TRUE(s.head);
  ASSERT_EQ(s.head->status, 200);
  ASSERT_FALSE(s.events.empty());
  EXPECT_EQ(s.events.front().event, "message_start");
  EXPECT_NE(s.events.front().data.find("\"model\":\"claude-native\""), std::string::npos)
      << s.events.front().data;
  EXPECT_EQ(s.events.back().event, "message_stop");
  EXPECT_FALSE(s.saw_done);
  auto rows = rows_with("t-native");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_NE(rows[0].find("end_turn"), std::string::npos) << rows[0];
}

TEST_F(MessagesTest, ImagesNeedANativeBackend) {
  start();
  json body = message_body("gpt-test", "x");
  body["messages"][0]["content"] = json::array(
      {{{"type", "image"},
        {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "AA=="}}}},
       {{"type", "text"}, {"text", "what is this"}}});
  auto r = post(body);
  expect_error(r, 400, "invalid_request_error");
  EXPECT_NE(r->body.find("messages.0.content.0"), std::string::npos) << r->body;
  body["model"] = "claude-native";
  auto native = post(body);
  ASSERT_TRUE(native);
  EXPECT_EQ(native->status, 200) << native->body;
}

TEST_F(MessagesTest, AuthWithXApiKeyOrBearer) {
  start();
  expect_error(post(message_body("gpt-test", "x"), {}), 401, "authentication_error");
  expect_error(post(message_body("gpt-test", "x"), {"x-api-key: sk-wrong"}), 401,
               "authentication_error");
  auto bearer = post(message_body("gpt-test", "x"), auth_headers());
  ASSERT_TRUE(bearer);
  EXPECT_EQ(bearer->status, 200) << bearer->body;
  auto key = post(message_body("gpt-test", "x"), x_api_key(kHashedKey));
  ASSERT_TRUE(key);
  EXPECT_EQ(key->status, 200) << key->body;
  // The same key on the OpenAI endpoint.
  auto chat =
      post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "x"), x_api_key());
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200) << chat->body;
}

TEST_F(MessagesTest, EveryErrorPathInAnthropicsShape) {
  start(
      "budgets:\n  - { name: proj-y-cap, scope: project, match: proj-y, amount: 0.000001, "
      "period: day, mode: hard }\nprices:\n  - { model: gpt-test, effective_from: 2026-01-01, "
      "input: 1000, output: 1000 }\n");
  expect_error(post(message_body("no-such-model", "x")), 404, "not_found_error");
  expect_error(post(message_body("dead-model", "x")), 529, "overloaded_error");
  expect_error(post(message_body("fail-500", "x")), 502, "api_error");
  expect_error(post(message_body("hang", "x")), 504, "timeout_error");
  expect_error(post(message_body("native-fail-429", "x")), 429, "rate_limit_error");
  // A spent budget.
  expect_error(post(message_body("gpt-test", "x"), x_api_key(kHashedKey)), 429, "rate_limit_error");
  // Bad input: not JSON, a wrong type, missing max_tokens.
  auto raw = http_request(ferry_.address, "POST", "/v1/messages", "{not json", x_api_key());
  expect_error(raw, 400, "invalid_request_error");
  json no_max = message_body("gpt-test", "x");
  no_max.erase("max_tokens");
  expect_error(post(no_max), 400, "invalid_request_error");
  json wrong = message_body("gpt-test", "x");
  wrong["messages"][0]["content"] = 5;
  expect_error(post(wrong), 400, "invalid_request_error");
  // Too large: refused by the reader, in the endpoint's shape.
  std::string huge(2 << 20, 'a');
  auto big = post(message_body("gpt-test", huge));
  expect_error(big, 413, "request_too_large");
  // Mid-stream: the upstream closes after a few chunks.
  StreamResult cut =
      stream_request(ferry_.address, "/v1/messages",
                     message_body("close-mid-stream", "a b c d e f", true), x_api_key());
  ASSERT_TRUE(cut.head);
  EXPECT_EQ(cut.head->status, 200);
  ASSERT_FALSE(cut.events.empty());
  EXPECT_EQ(cut.events.back().event, "error") << cut.events.back().data;
  json e = json::parse(cut.events.back().data, nullptr, false);
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "api_error") << cut.events.back().data;
  // Still serving, on both APIs.
  auto ok = post(message_body("gpt-test", "still"));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto chat = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "x"));
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200);
}

TEST_F(MessagesTest, PolicyRefusalAndExhaustedFallbacksInAnthropicsShape) {
  std::string policy = dir_.write(
      "policies.yaml",
      "targets: { ok: gpt-test, broken: fail-500, down: dead-model }\n"
      "models: [chat, refused, doomed, messages-only]\n"
      "rules:\n"
      "  - { id: no, when: { model: refused }, reject: { status: 403, message: not for you } }\n"
      "  - { id: doomed, when: { model: doomed }, route: [broken, down] }\n"
      "  - { id: api, when: { api: messages, model: messages-only }, route: [ok] }\n"
      "  - { id: not-api, when: { model: messages-only }, reject: { status: 400, message: "
      "messages only } }\n"
      "default: { route: [ok] }\n");
  start("policy: { file: " + policy + ", watch: false }\n");
  expect_error(post(message_body("refused", "x")), 403, "permission_error");
  auto doomed = post(message_body("doomed", "x"));
  ASSERT_TRUE(doomed);
  EXPECT_GE(doomed->status, 500) << doomed->body;
  EXPECT_EQ(doomed->body_json()["type"], "error") << doomed->body;
  EXPECT_EQ(doomed->header("x-ferry-attempts").value_or(""), "2");
  // The `api` fact: the rule matches on /v1/messages only.
  auto on_messages = post(message_body("messages-only", "x"));
  ASSERT_TRUE(on_messages);
  EXPECT_EQ(on_messages->status, 200) << on_messages->body;
  EXPECT_EQ(on_messages->header("x-ferry-rule").value_or(""), "api");
  auto on_chat = post_json(ferry_.address, "/v1/chat/completions", chat_body("messages-only", "x"));
  ASSERT_TRUE(on_chat);
  EXPECT_EQ(on_chat->status, 400) << on_chat->body;
  EXPECT_TRUE(on_chat->body_json().contains("error")) << "OpenAI's shape on the chat endpoint";
  EXPECT_FALSE(on_chat->body_json().contains("type")) << on_chat->body;
}

// A policy's reasoning setting reaches a native Messages backend as `thinking`: a budget caps
// the thinking a client asked for (never turns it on), under Anthropic's 1024 minimum it turns
// thinking off, `off` disables it, an effort is dropped; each said in x-ferry-reasoning.
TEST_F(MessagesTest, ReasoningBudgetsReachANativeBackendAsThinking) {
  std::string policy = dir_.write(
      "policies.yaml",
      "targets: { native: claude-native }\n"
      "models: [capped, tiny, off, effort]\n"
      "rules:\n"
      "  - { id: capped, when: { model: capped }, route: [native], set: { reasoning: { "
      "max_tokens: 2000 } } }\n"
      "  - { id: tiny, when: { model: tiny }, route: [native], set: { reasoning: { max_tokens: "
      "500 } } }\n"
      "  - { id: off, when: { model: off }, route: [native], set: { reasoning: off } }\n"
      "  - { id: effort, when: { model: effort }, route: [native], set: { reasoning: high } }\n"
      "default: { route: [native] }\n");
  start("policy: { file: " + policy + ", watch: false }\n");
  auto sent_thinking = [&](const std::string& model, const json& thinking,
                           std::string* header = nullptr) {
    json body = message_body(model, "think about it");
    body["max_tokens"] = 8000;
    if (!thinking.is_null()) body["thinking"] = thinking;
    auto r = post(body);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no reply");
    if (header != nullptr && r) *header = r->header("x-ferry-reasoning").value_or("");
    return body_of(upstream_last_request(upstream_.address)).value("thinking", json());
  };
  std::string header;
  const json asked = {{"type", "enabled"}, {"budget_tokens", 5000}};
  EXPECT_EQ(sent_thinking("capped", asked, &header),
            (json{{"type", "enabled"}, {"budget_tokens", 2000}}));
  EXPECT_EQ(header, "max_tokens:2000");
  // A smaller budget than the cap is the client's own.
  EXPECT_EQ(sent_thinking("capped", {{"type", "enabled"}, {"budget_tokens", 1500}}),
            (json{{"type", "enabled"}, {"budget_tokens", 1500}}));
  // Adaptive thinking becomes a fixed budget at the cap.
  EXPECT_EQ(sent_thinking("capped", {{"type", "adaptive"}}),
            (json{{"type", "enabled"}, {"budget_tokens", 2000}}));
  // No thinking asked: none turned on.
  EXPECT_TRUE(sent_thinking("capped", json(), &header).is_null());
  EXPECT_NE(header.find("no thinking requested"), std::string::npos) << header;
  EXPECT_EQ(sent_thinking("tiny", asked, &header), (json{{"type", "disabled"}}));
  EXPECT_NE(header.find("1024"), std::string::npos) << header;
  EXPECT_EQ(sent_thinking("off", asked, &header), (json{{"type", "disabled"}}));
  EXPECT_EQ(header, "off");
  EXPECT_EQ(sent_thinking("effort", asked, &header), asked) << "an effort is not a budget";
  EXPECT_NE(header.find("dropped"), std::string::npos) << header;
}

TEST_F(MessagesTest, ClaudeCodeSessionIsTheTask) {
  start();
  std::vector<std::string> h = x_api_key();
  h.push_back(std::string("X-Claude-Code-Session-Id: ") + kSession);
  auto r = post(message_body("gpt-test", "from claude code"), h);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  // x-ferry-task wins over the session.
  h.push_back("x-ferry-task: explicit-task");
  auto r2 = post(message_body("gpt-test", "tagged"), h);
  ASSERT_TRUE(r2);
  ASSERT_EQ(r2->status, 200);
  EXPECT_EQ(rows_with(kSession).size(), 1u) << ledger_csv();
  EXPECT_EQ(rows_with("explicit-task").size(), 1u) << ledger_csv();
}

// Models whose upstream calls the first tool with its arguments cut by max_tokens, or with
// arguments that are not JSON.
constexpr const char* kToolModels =
    "  - {name: cut-call, backend: up, upstream_model: call-tool+cut-tool-args}\n"
    "  - {name: bad-call, backend: up, upstream_model: call-tool+bad-tool-args}\n";

json tool_body(const std::string& model, const std::string& text, bool stream = false) {
  json b = message_body(model, text, stream);
  b["tools"] =
      json::array({{{"name", "lookup"},
                    {"input_schema", {{"type", "object"}, {"properties", json::object()}}}}});
  return b;
}

// A call max_tokens cut is answered as Anthropic does: the tool_use block with what was
// generated (closed into an object), stop_reason max_tokens; streamed, the input_json_delta
// sent, the block's stop, message_delta with max_tokens. The ledger row is a success.
TEST_F(MessagesTest, AToolCallCutByMaxTokensIsATruncatedToolUse) {
  ferry_ = start_ferry(dir_, [&] {
    std::string cfg = messages_config(upstream_.address, db_);
    cfg.insert(cfg.find("models:\n") + 8, kToolModels);
    return cfg;
  }());
  const std::string text = "weather in paris please";
  const std::string generated = text.substr(0, text.size() / 2);
  std::vector<std::string> h = x_api_key();
  h.push_back("x-ferry-task: cut-body");
  auto r = post(tool_body("cut-call", text), h);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = r->body_json();
  EXPECT_EQ(j["stop_reason"], "max_tokens") << r->body;
  ASSERT_EQ(j["content"].size(), 1u) << r->body;
  EXPECT_EQ(j["content"][0]["type"], "tool_use");
  EXPECT_EQ(j["content"][0]["name"], "lookup");
  EXPECT_EQ(j["content"][0]["input"], json({{"q", generated}})) << r->body;

  h.back() = "x-ferry-task: cut-stream";
  StreamResult s =
      stream_request(ferry_.address, "/v1/messages", tool_body("cut-call", text, true), h);
  ASSERT_TRUE(s.head);
  ASSERT_EQ(s.head->status, 200);
  EXPECT_EQ(s.end, ReadStatus::kEnd);
  std::vector<std::string> names;
  std::string partial;
  for (const auto& e : s.events) {
    if (e.event == "ping") continue;
    names.push_back(e.event);
    json d = json::parse(e.data, nullptr, false);
    if (e.event == "content_block_delta") partial += d["delta"]["partial_json"].get<std::string>();
    if (e.event == "message_delta") {
      EXPECT_EQ(d["delta"]["stop_reason"], "max_tokens") << e.data;
    }
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(partial, "{\"q\":\"" + generated);
  for (const char* task : {"cut-body", "cut-stream"}) {
    auto rows = rows_with(task);
    ASSERT_EQ(rows.size(), 1u) << ledger_csv();
    EXPECT_NE(rows[0].find(",ok,"), std::string::npos) << rows[0];
  }
}

// A call whose arguments are not a JSON object cannot be a tool_use: a 502 (body) or an error
// event (stream), and a failed row in the ledger, never a success.
TEST_F(MessagesTest, AnUntranslatableReplyIsAnErrorRow) {
  ferry_ = start_ferry(dir_, [&] {
    std::string cfg = messages_config(upstream_.address, db_);
    cfg.insert(cfg.find("models:\n") + 8, kToolModels);
    return cfg;
  }());
  std::vector<std::string> h = x_api_key();
  h.push_back("x-ferry-task: bad-body");
  auto r = post(tool_body("bad-call", "x y"), h);
  expect_error(r, 502, "api_error");
  h.back() = "x-ferry-task: bad-stream";
  StreamResult s =
      stream_request(ferry_.address, "/v1/messages", tool_body("bad-call", "x y", true), h);
  ASSERT_TRUE(s.head);
  ASSERT_FALSE(s.events.empty());
  EXPECT_EQ(s.events.back().event, "error") << s.events.back().data;
  for (const auto& e : s.events) EXPECT_NE(e.event, "message_stop");
  // The body's row is an error; the stream's, cut after it began, is upstream_cut; both with
  // the backend_error code.
  for (const char* task : {"bad-body", "bad-stream"}) {
    auto rows = rows_with(task);
    ASSERT_EQ(rows.size(), 1u) << ledger_csv();
    EXPECT_EQ(rows[0].find(",ok,"), std::string::npos) << rows[0];
    EXPECT_NE(rows[0].find(",backend_error,"), std::string::npos) << rows[0];
  }
  auto ok = post(message_body("gpt-test", "still serving"));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// A translated stream whose upstream sends a chunk that is not JSON breaks as the chat path's
// does (the HTTP relay's check, which on a translated hop is the translator's own parse): before
// anything was sent a 502 in Anthropic's shape, after the first events an error event; the bad
// bytes never reach the client; the rows are an error and upstream_cut.
TEST_F(MessagesTest, AStreamChunkThatIsNotJsonBreaksTheStreamAsOnTheChatPath) {
  ferry_ = start_ferry(dir_, [&] {
    std::string cfg = messages_config(upstream_.address, db_);
    cfg.insert(cfg.find("models:\n") + 8,
               "  - {name: bad-first, backend: up, upstream_model: bad-event-first}\n"
               "  - {name: bad-mid, backend: up, upstream_model: bad-event-mid}\n");
    return cfg;
  }());
  std::vector<std::string> h = x_api_key();
  h.push_back("x-ferry-task: nj-first");
  auto first = post(message_body("bad-first", "a b c", true), h);
  expect_error(first, 502, "api_error");
  EXPECT_NE(
      first->body_json()["error"]["message"].get<std::string>().find("malformed stream event"),
      std::string::npos)
      << first->body;

  h.back() = "x-ferry-task: nj-mid";
  StreamResult mid =
      stream_request(ferry_.address, "/v1/messages", message_body("bad-mid", "a b c d", true), h);
  ASSERT_TRUE(mid.head);
  EXPECT_EQ(mid.head->status, 200);
  ASSERT_FALSE(mid.events.empty());
  EXPECT_EQ(mid.events.front().event, "message_start");
  EXPECT_EQ(mid.events.back().event, "error") << mid.events.back().data;
  json err = json::parse(mid.events.back().data, nullptr, false);
  EXPECT_NE(err["error"]["message"].get<std::string>().find("malformed stream event"),
            std::string::npos)
      << mid.events.back().data;
  for (const auto& ev : mid.events) {
    EXPECT_NE(ev.event, "message_stop");
    EXPECT_FALSE(json::parse(ev.data, nullptr, false).is_discarded()) << ev.data;
  }
  auto first_rows = rows_with("nj-first");
  ASSERT_EQ(first_rows.size(), 1u) << ledger_csv();
  EXPECT_NE(first_rows[0].find(",error,"), std::string::npos) << first_rows[0];
  auto mid_rows = rows_with("nj-mid");
  ASSERT_EQ(mid_rows.size(), 1u) << ledger_csv();
  EXPECT_NE(mid_rows[0].find(",upstream_cut,"), std::string::npos) << mid_rows[0];
  auto ok = post(message_body("gpt-test", "still serving"));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// /metrics counts requests, tokens and errors by front-end API.
TEST_F(MessagesTest, MetricsAreLabelledByApi) {
  ferry_ = start_ferry(dir_, [&] {
    std::string cfg = messages_config(upstream_.address, db_);
    cfg.insert(cfg.find("models:\n") + 8, kToolModels);
    return cfg;
  }());
  auto m = post(message_body("gpt-test", "hello ferry"));  // 3 output tokens: "echo: hello ferry"
  ASSERT_TRUE(m && m->status == 200);
  auto bad = post(tool_body("bad-call", "x"));
  ASSERT_TRUE(bad && bad->status == 502);
  auto chat = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "a b"));
  ASSERT_TRUE(chat && chat->status == 200);
  auto r = http_request(ferry_.address, "GET", "/metrics", {}, auth_headers(kAdminKey));
  ASSERT_TRUE(r && r->status == 200);
  const std::string& text = r->body;
  for (const char* line : {"ferry_api_requests_total{api=\"messages\",status=\"200\"} 1\n",
                           "ferry_api_requests_total{api=\"messages\",status=\"502\"} 1\n",
                           "ferry_api_requests_total{api=\"chat\",status=\"200\"} 1\n",
                           "ferry_api_errors_total{api=\"messages\"} 1\n",
                           "ferry_api_tokens_total{api=\"messages\",kind=\"output\"} 3\n",
                           "ferry_api_tokens_total{api=\"chat\",kind=\"output\"} 3\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing " << line << " in:\n" << text;
  }
  EXPECT_EQ(text.find("ferry_api_errors_total{api=\"chat\"}"), std::string::npos) << text;
  expect_metrics_declared(text);
}

TEST_F(MessagesTest, CountTokensRoutesLikeTheAnswerWithoutALedgerRow) {
  start();
  json body = message_body("gpt-test", "count these words");
  body.erase("max_tokens");
  std::vector<std::string> h = x_api_key();
  h.push_back("x-ferry-task: t-count");
  auto r = post(body, h, "/v1/messages/count_tokens");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = r->body_json();
  ASSERT_TRUE(j["input_tokens"].is_number_integer()) << r->body;
  EXPECT_GT(j["input_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(r->header("x-ferry-target").value_or(""), "gpt-test");
  json unknown = body;
  unknown["model"] = "no-such-model";
  expect_error(post(unknown, h, "/v1/messages/count_tokens"), 404, "not_found_error");
  // Neither the upstream nor the ledger saw it.
  EXPECT_EQ(upstream_stats(upstream_.address)["requests"], 0);
  auto answered = post(message_body("gpt-test", "x"),
                       {"x-api-key: " + std::string(kAppKey), "x-ferry-task: t-after"});
  ASSERT_TRUE(answered);
  ASSERT_EQ(rows_with("t-after").size(), 1u);
  EXPECT_TRUE(rows_with("t-count", 0).empty());
}

}  // namespace
}  // namespace ferry::itest
