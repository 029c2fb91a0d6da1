// The OpenAI API through the real `ferry` binary: pass-through of every field, model rewriting,
// streaming with and without usage, /v1/models, auth, request ids, health, metrics, access log.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "tests/integration/ferry_test_base.h"
#include "tests/integration/metrics_check.h"

namespace ferry::itest {
namespace {

using ApiTest = FerryTest;

bool json_has_key_containing(const json& j, std::string_view part) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (k.find(part) != std::string::npos || json_has_key_containing(v, part)) return true;
    }
  } else if (j.is_array()) {
    for (const auto& v : j) {
      if (json_has_key_containing(v, part)) return true;
    }
  }
  return false;
}

// The binary serves with the allocator it was built with (CMake FERRY_MIMALLOC): mimalloc is
// mapped into the running process, and a request is answered with it.
TEST_F(ApiTest, ServesWithTheAllocatorItWasBuiltWith) {
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "allocator"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::ifstream maps("/proc/" + std::to_string(ferry_.process->pid()) + "/maps");
  std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty());
#ifdef FERRY_EXPECT_MIMALLOC
  EXPECT_NE(text.find("libmimalloc"), std::string::npos);
#else
  EXPECT_EQ(text.find("libmimalloc"), std::string::npos);
#endif
}

TEST_F(ApiTest, ChatPassesEveryFieldThroughAndRewritesModel) {
  json body = chat_body("gpt-test", "hello ferry");
  body["tools"] = json::array({{{"type", "function"},
                                {"function",
                                 {{"name", "get_weather"},
                                  {"description", "Weather of a city"},
                                  {"parameters",
                                   {{"type", "object"},
                                    {"properties", {{"city", {{"type", "string"}}}}},
                                    {"required", json::array({"city"})}}}}}}});
  body["tool_choice"] = "auto";
  body["response_format"] = {{"type", "json_object"}};
  body["seed"] = 42;
  body["stop"] = json::array({"\n\n", "END"});
  body["n"] = 2;
  body["logprobs"] = true;
  body["top_logprobs"] = 2;
  body["temperature"] = 0.25;
  body["user"] = "end-user-7";
  body["x_vendor_extension"] = {{"nested", json::array({1, "two", {{"three", 3}}})}};

  auto r = post_json(ferry_.address, "/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = r->body_json();
  ASSERT_EQ(j["choices"].size(), 2u) << r->body;
  EXPECT_EQ(j["model"], "gpt-test") << "the reply names the model the client asked for";
  EXPECT_EQ(r->header("x-ferry-target").value_or(""), "gpt-test");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "echo: hello ferry");
  EXPECT_EQ(j["choices"][1]["message"]["content"], "echo: hello ferry");
  // The upstream counts 4 + 3 prompt words and 3 pieces per choice.
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7) << r->body;
  EXPECT_EQ(j["usage"]["completion_tokens"], 6) << r->body;
  EXPECT_EQ(j["usage"]["total_tokens"], 13) << r->body;

  json last = upstream_last_request(upstream_.address);
  EXPECT_EQ(last["method"], "POST");
  EXPECT_EQ(last["target"], "/v1/chat/completions");
  EXPECT_EQ(last["headers"]["authorization"], std::string("Bearer ") + kUpstreamKey)
      << "the upstream api_key replaces the client's key";
  const json& sent = last["body"];
  ASSERT_TRUE(sent.is_object()) << last.dump();
  EXPECT_EQ(sent["model"], "echo") << "model rewritten to upstream_model";
  for (const auto& [key, value] : body.items()) {
    if (key == "model") continue;
    EXPECT_EQ(sent.value(key, json()), value) << "field '" << key << "' not passed through";
  }
}

TEST_F(ApiTest, CompletionsNonStreaming) {
  json body = completion_body("gpt-test", "say something");
  body["max_tokens"] = 50;
  body["suffix"] = "!";
  body["best_of_vendor"] = {{"k", 1}};
  auto r = post_json(ferry_.address, "/v1/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = r->body_json();
  EXPECT_EQ(j["model"], "gpt-test");
  EXPECT_EQ(j["choices"][0]["text"], "echo: say something");
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  json last = upstream_last_request(upstream_.address);
  EXPECT_EQ(last["target"], "/v1/completions");
  EXPECT_EQ(last["body"]["model"], "echo");
  EXPECT_EQ(last["body"]["suffix"], "!");
  EXPECT_EQ(last["body"]["best_of_vendor"], body["best_of_vendor"]);
  EXPECT_EQ(last["body"]["max_tokens"], 50);
}

TEST_F(ApiTest, StreamWithUsageWhenAsked) {
  json body = chat_body("gpt-test", "a b c", true);
  body["stream_options"] = {{"include_usage", true}};
  body["seed"] = 7;
  StreamResult s = stream_request(ferry_.address, "/v1/chat/completions", body);
  ASSERT_TRUE(s.head);
  ASSERT_EQ(s.head->status, 200);
  EXPECT_NE(s.head->header("content-type").value_or("").find("text/event-stream"),
            std::string::npos);
  EXPECT_EQ(s.end, ReadStatus::kEnd) << read_status_name(s.end);
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(s.content(), "echo: a b c");
  int usage_chunks = 0;
  for (const auto& c : s.chunks) {
    EXPECT_EQ(c.value("model", ""), "gpt-test") << "every chunk names the client's model";
    if (c.contains("usage") && c["usage"].is_object()) {
      ++usage_chunks;
      EXPECT_TRUE(c["choices"].empty()) << c.dump();
      EXPECT_EQ(c["usage"]["completion_tokens"], 4) << c.dump();
      EXPECT_EQ(c["usage"]["prompt_tokens"], 8) << c.dump();
    }
  }
  EXPECT_EQ(usage_chunks, 1);
  json last = upstream_last_request(upstream_.address);
  EXPECT_EQ(last["body"]["stream_options"]["include_usage"], true);
  EXPECT_EQ(last["body"]["seed"], 7);
  EXPECT_EQ(last["body"]["model"], "echo");
}

TEST_F(ApiTest, StreamWithoutIncludeUsageHidesUsageButAsksUpstream) {
  for (bool explicit_false : {false, true}) {
    json body = chat_body("gpt-test", "x y", true);
    if (explicit_false) body["stream_options"] = {{"include_usage", false}};
    StreamResult s = stream_request(ferry_.address, "/v1/chat/completions", body);
    ASSERT_TRUE(s.head);
    ASSERT_EQ(s.head->status, 200);
    EXPECT_TRUE(s.saw_done);
    EXPECT_EQ(s.end, ReadStatus::kEnd) << read_status_name(s.end);
    EXPECT_EQ(s.content(), "echo: x y");
    for (const auto& c : s.chunks) {
      EXPECT_FALSE(c.contains("usage") && !c["usage"].is_null())
          << "usage shown though the client did not ask: " << c.dump();
      EXPECT_FALSE(c.contains("choices") && c["choices"].empty())
          << "usage-only chunk shown though the client did not ask: " << c.dump();
    }
    json last = upstream_last_request(upstream_.address);
    EXPECT_EQ(last["body"]["stream_options"]["include_usage"], true)
        << "include_usage is forced on upstream: " << last["body"].dump();
  }
}

TEST_F(ApiTest, CompletionsStreamWithUsage) {
  json body = completion_body("gpt-test", "one two", true);
  body["stream_options"] = {{"include_usage", true}};
  StreamResult s = stream_request(ferry_.address, "/v1/completions", body);
  ASSERT_TRUE(s.head);
  ASSERT_EQ(s.head->status, 200);
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(s.content(), "echo: one two");
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_EQ(s.chunks.back()["usage"]["completion_tokens"], 3) << s.chunks.back().dump();
  EXPECT_EQ(upstream_last_request(upstream_.address)["target"], "/v1/completions");
}

TEST_F(ApiTest, UpstreamSplittingEventsIntoTinyPiecesStreamsIntact) {
  std::string text = "the quick brown fox jumps over the lazy dog again and again";
  json body = chat_body("chunky", text, true);
  body["stream_options"] = {{"include_usage", true}};
  StreamResult s = stream_request(ferry_.address, "/v1/chat/completions", body);
  ASSERT_TRUE(s.head);
  ASSERT_EQ(s.head->status, 200);
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(s.end, ReadStatus::kEnd);
  EXPECT_EQ(s.content(), "echo: " + text);
  EXPECT_EQ(s.chunks.size(), s.events.size() - 1) << "every event but [DONE] is JSON";
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_EQ(s.chunks.back()["usage"]["completion_tokens"], 13);

  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("chunky", text));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: " + text);
}

TEST_F(ApiTest, StreamChunksAreForwardedAsTheyArrive) {
  // The upstream waits 300 ms between chunks (about 5 s in all): when the first content chunk
  // reaches the client, the upstream must still be sending.
  json body =
      chat_body("stream-slow", "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16", true);
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(make_request("POST", "/v1/chat/completions", body.dump(), auth_headers())));
  auto head = c->read_head(Ms(20000));
  ASSERT_TRUE(head);
  ASSERT_EQ(head->status, 200);
  SseEvent e;
  ASSERT_EQ(c->read_event(e, Ms(20000)), ReadStatus::kData);
  json stats = upstream_stats(upstream_.address);
  EXPECT_EQ(stats["in_flight"], 1) << "the first chunk arrived only after the upstream finished";
  bool done = false;
  ReadStatus st;
  while ((st = c->read_event(e, Ms(20000))) == ReadStatus::kData) done = done || e.data == "[DONE]";
  EXPECT_TRUE(done);
  EXPECT_EQ(st, ReadStatus::kEnd) << read_status_name(st);
}

TEST_F(ApiTest, ModelsListsConfiguredPublicNames) {
  auto r = http_request(ferry_.address, "GET", "/v1/models", {}, auth_headers());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = r->body_json();
  EXPECT_EQ(j["object"], "list");
  std::set<std::string> ids;
  for (const auto& m : j["data"]) {
    EXPECT_EQ(m["object"], "model");
    ids.insert(m["id"].get<std::string>());
  }
  EXPECT_TRUE(ids.count("gpt-test"));
  EXPECT_TRUE(ids.count("dead-model"));
  EXPECT_TRUE(ids.count("stream-slow"));
  EXPECT_FALSE(ids.count("echo")) << "upstream names are not public";
  EXPECT_EQ(ids.size(), 15u);
}

TEST_F(ApiTest, AuthRefusesMissingAndWrongKeysAndAcceptsGoodOnes) {
  json body = chat_body("gpt-test", "hi");
  for (const auto& headers : std::vector<std::vector<std::string>>{
           {}, auth_headers("sk-wrong"), {"Authorization: Bearer "}, {"Authorization: sk-test"}}) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", body, headers);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << (headers.empty() ? "<no header>" : headers[0]);
    EXPECT_TRUE(is_openai_error(*r));
  }
  auto models = http_request(ferry_.address, "GET", "/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);

  for (const char* key : {kAppKey, kHashedKey}) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", body, auth_headers(key));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << key << ": " << r->body;
    EXPECT_NE(upstream_last_request(upstream_.address)["headers"]["authorization"],
              std::string("Bearer ") + key)
        << "the client's key must not reach the upstream";
  }
}

TEST_F(ApiTest, UnknownModelIs404) {
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("no-such-model", "hi"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
  EXPECT_TRUE(is_openai_error(*r));
  EXPECT_NE(r->body.find("no-such-model"), std::string::npos) << "the message names the model";
  expect_serving();
}

TEST_F(ApiTest, MalformedJsonIs400) {
  for (std::string bad : {"{not json", "", "[1,2,3]", "\"just a string\"", "{\"model\": }"}) {
    auto r = http_request(ferry_.address, "POST", "/v1/chat/completions", bad, auth_headers());
    ASSERT_TRUE(r) << bad;
    EXPECT_EQ(r->status, 400) << "body: " << bad << " -> " << r->body;
    EXPECT_TRUE(is_openai_error(*r));
    EXPECT_EQ(r->body_json()["error"]["type"], "invalid_request_error") << r->body;
  }
  expect_serving();
}

TEST_F(ApiTest, WrongTypesAre400NamingTheField) {
  struct Case {
    json body;
    std::string field;
  };
  json base = chat_body("gpt-test", "hi");
  std::vector<Case> cases;
  {
    json b = base;
    b["messages"] = "not a list";
    cases.push_back({b, "messages"});
  }
  {
    json b = base;
    b.erase("messages");
    cases.push_back({b, "messages"});
  }
  {
    json b = base;
    b["model"] = 5;
    cases.push_back({b, "model"});
  }
  {
    json b = base;
    b.erase("model");
    cases.push_back({b, "model"});
  }
  {
    json b = base;
    b["stream"] = "yes";
    cases.push_back({b, "stream"});
  }
  {
    json b = base;
    b["max_tokens"] = "ten";
    cases.push_back({b, "max_tokens"});
  }
  {
    json b = base;
    b["stream_options"] = {{"include_usage", "sure"}};
    cases.push_back({b, "include_usage"});
  }
  for (const auto& c : cases) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", c.body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << c.body.dump() << " -> " << r->body;
    EXPECT_TRUE(is_openai_error(*r));
    json e = r->body_json()["error"];
    std::string param = e["param"].is_string() ? e["param"].get<std::string>() : "";
    std::string message = e["message"].is_string() ? e["message"].get<std::string>() : "";
    EXPECT_TRUE(param.find(c.field) != std::string::npos ||
                message.find(c.field) != std::string::npos)
        << "the error should name '" << c.field << "': " << r->body;
  }
  expect_serving();
}

TEST_F(ApiTest, InvalidUtf8Is400) {
  std::string body = R"({"model":"gpt-test","messages":[{"role":"user","content":"bad )";
  body += "\xff\xfe\xc3";
  body += R"("}]})";
  auto r = http_request(ferry_.address, "POST", "/v1/chat/completions", body, auth_headers());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_TRUE(is_openai_error(*r));
  expect_serving();
}

TEST_F(ApiTest, RequestIdIsGeneratedAndHonoured) {
  auto a = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "1"));
  auto b = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "2"));
  ASSERT_TRUE(a && b);
  auto ida = a->header("x-request-id");
  auto idb = b->header("x-request-id");
  ASSERT_TRUE(ida && idb);
  EXPECT_FALSE(ida->empty());
  EXPECT_NE(*ida, *idb);

  auto mine =
      post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "3"),
                {std::string("Authorization: Bearer ") + kAppKey, "X-Request-Id: itest-req-0001"});
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->header("x-request-id").value_or(""), "itest-req-0001");

  // Errors carry one too.
  auto denied = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "4"), {});
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);
  EXPECT_FALSE(denied->header("x-request-id").value_or("").empty());
  auto missing =
      post_json(ferry_.address, "/v1/chat/completions", chat_body("nope", "5"),
                {std::string("Authorization: Bearer ") + kAppKey, "X-Request-Id: itest-req-0002"});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->header("x-request-id").value_or(""), "itest-req-0002");

  StreamResult s = stream_request(
      ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "6", true),
      {std::string("Authorization: Bearer ") + kAppKey, "X-Request-Id: itest-req-0003"});
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->header("x-request-id").value_or(""), "itest-req-0003");
}

TEST_F(ApiTest, HealthReadyAndMetrics) {
  auto health = http_request(ferry_.address, "GET", "/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto ready = http_request(ferry_.address, "GET", "/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);

  ASSERT_TRUE(post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "m")));
  stream_request(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "s", true));
  ASSERT_TRUE(post_json(ferry_.address, "/v1/chat/completions", chat_body("fail-500", "f")));

  auto m = http_request(ferry_.address, "GET", "/metrics", {}, auth_headers(kAdminKey));
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  EXPECT_NE(m->header("content-type").value_or("").find("text/plain"), std::string::npos);
  const std::string& text = m->body;
  for (const char* needle :
       {"# TYPE ferry_requests_total counter", "ferry_requests_total{", "model=\"gpt-test\"",
        "backend=\"up\"", "status=\"200\"", "status=\"502\"",
        "# TYPE ferry_request_duration_seconds histogram", "ferry_request_duration_seconds_bucket{",
        "le=\"+Inf\"", "ferry_request_duration_seconds_count",
        "# TYPE ferry_time_to_first_token_seconds histogram",
        "ferry_time_to_first_token_seconds_bucket", "# TYPE ferry_in_flight_requests gauge",
        "ferry_in_flight_requests", "ferry_backend_errors_total{"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << "missing '" << needle << "' in:\n" << text;
  }
  // Every family shown is the one declared in gateway/metrics.h, with its type, help, labels.
  expect_metrics_declared(text);
}

// Sums the values of every sample line that starts with `prefix`.
int64_t metric_sum(const std::string& text, const std::string& prefix) {
  int64_t sum = 0;
  size_t at = 0;
  while ((at = text.find("\n" + prefix, at)) != std::string::npos) {
    size_t eol = text.find('\n', at + 1);
    std::string line = text.substr(at + 1, eol - at - 1);
    sum += std::stoll(line.substr(line.rfind(' ') + 1));
    at = eol;
  }
  return sum;
}

TEST_F(ApiTest, EveryCountedRequestIsTimedAndNamedEvenWhenRefusedBeforeRouting) {
  ASSERT_TRUE(post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "ok")));
  auto bad =
      http_request(ferry_.address, "POST", "/v1/chat/completions", "{not json", auth_headers());
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  json no_model = chat_body("gpt-test", "x");
  no_model.erase("model");
  auto missing = post_json(ferry_.address, "/v1/chat/completions", no_model);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 400);
  auto m = http_request(ferry_.address, "GET", "/metrics", {}, auth_headers(kAdminKey));
  ASSERT_TRUE(m);
  const std::string& text = m->body;
  int64_t counted = metric_sum(text, "ferry_requests_total{");
  EXPECT_EQ(counted, 3) << text;
  EXPECT_EQ(metric_sum(text, "ferry_request_duration_seconds_count{"), counted) << text;
  EXPECT_EQ(text.find("model=\"\""), std::string::npos) << text;
  EXPECT_NE(text.find("ferry_request_duration_seconds_count{model=\"(none)\"} 2"),
            std::string::npos)
      << text;
}

TEST_F(ApiTest, AccessLogHasOneJsonLinePerRequest) {
  auto r =
      post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "log me"),
                {std::string("Authorization: Bearer ") + kAppKey, "X-Request-Id: itest-log-0001"});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  auto line = ferry_.process->wait_for_line_containing("itest-log-0001", Ms(10000));
  ASSERT_TRUE(line) << "no access-log line for the request";
  json j = json::parse(*line, nullptr, false);
  ASSERT_TRUE(j.is_object()) << *line;
  EXPECT_TRUE(json_contains_value(j, "app-key")) << *line;
  EXPECT_TRUE(json_contains_value(j, "gpt-test")) << *line;
  EXPECT_TRUE(json_contains_value(j, "up")) << *line;
  EXPECT_TRUE(json_contains_value(j, 200)) << *line;
  EXPECT_TRUE(json_contains_value(j, 7)) << "prompt tokens from the backend's usage: " << *line;
  EXPECT_TRUE(json_contains_value(j, 3)) << "completion tokens from the backend's usage: " << *line;
  EXPECT_TRUE(json_has_key_containing(j, "latency") || json_has_key_containing(j, "duration"))
      << *line;
  EXPECT_TRUE(json_has_key_containing(j, "ttft") || json_has_key_containing(j, "first_token"))
      << *line;

  // A refused request is logged too, and each request only once.
  auto denied = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "x"),
                          {"X-Request-Id: itest-log-0002"});
  ASSERT_TRUE(denied);
  auto denied_line = ferry_.process->wait_for_line_containing("itest-log-0002", Ms(10000));
  ASSERT_TRUE(denied_line);
  EXPECT_TRUE(json_contains_value(json::parse(*denied_line, nullptr, false), 401)) << *denied_line;
  int count = 0;
  for (const auto& l : ferry_.process->stdout_lines()) {
    if (l.find("itest-log-0001") != std::string::npos) ++count;
  }
  EXPECT_EQ(count, 1);
}

TEST_F(ApiTest, KeepAliveAndPipelinedRequestsOnOneConnection) {
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(c->send(make_request("POST", "/v1/chat/completions",
                                     chat_body("gpt-test", "k" + std::to_string(i)).dump(),
                                     auth_headers())));
    auto r = c->read_response(Ms(20000));
    ASSERT_TRUE(r) << "request " << i << " on the same connection";
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: k" + std::to_string(i));
  }
  // Three requests in one write: three answers, in order.
  std::string batch;
  for (int i = 0; i < 3; ++i) {
    batch += make_request("POST", "/v1/chat/completions",
                          chat_body("gpt-test", "p" + std::to_string(i)).dump(),
                          {std::string("Authorization: Bearer ") + kAppKey,
                           "X-Request-Id: pipe-" + std::to_string(i)});
  }
  ASSERT_TRUE(c->send(batch));
  for (int i = 0; i < 3; ++i) {
    auto r = c->read_response(Ms(20000));
    ASSERT_TRUE(r) << "pipelined response " << i;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->header("x-request-id").value_or(""), "pipe-" + std::to_string(i));
    EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: p" + std::to_string(i));
  }
}

TEST_F(ApiTest, SlowBackendWithinTimeoutsSucceeds) {
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("slow", "patience"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: patience");
  StreamResult s =
      stream_request(ferry_.address, "/v1/completions", completion_body("slow", "later", true));
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 200);
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(s.content(), "echo: later");
}

TEST_F(ApiTest, ManyPipelinedRequestsAreAllAnsweredInOrder) {
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  std::string batch;
  constexpr int kCount = 40;  // more than limits.max_pipelined (16 by default)
  for (int i = 0; i < kCount; ++i) {
    batch += make_request("GET", "/healthz", "", {"X-Request-Id: hp-" + std::to_string(i)});
  }
  ASSERT_TRUE(c->send(batch));
  for (int i = 0; i < kCount; ++i) {
    auto r = c->read_response(Ms(20000));
    ASSERT_TRUE(r) << "pipelined response " << i << " missing";
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->header("x-request-id").value_or(""), "hp-" + std::to_string(i));
  }
  expect_serving();
}

TEST_F(ApiTest, UnknownRouteIs404) {
  auto r = http_request(ferry_.address, "GET", "/v1/nothing-here", {}, auth_headers());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(is_openai_error(*r));
  expect_serving();
}

}  // namespace
}  // namespace ferry::itest
