// Tools and response_format on the in-process engine through the real binary (issue 15): a
// request the local model cannot serve (its template ignores tools) is a 400 naming the field
// that the policy falls back on to the next hop; served ones carry x-ferry-constraint, come
// back in OpenAI's shape (tool_calls, finish_reason, deltas without markers) and their ledger
// rows record the constraint mode and schema hash (real SQLite, the hash chain verified).
#include <gtest/gtest.h>

#include <string>

#include "ledger/sqlite_db.h"
#include "ledger/verify.h"
#include "tests/adapters/tool_templates.h"
#include "tests/integration/ferry_test_base.h"

namespace ferry::itest {
namespace {

const char* kPolicy = R"(targets:
  plain: local
  tooled: local-tools
  good: gpt-test
models: [local, fallback, tools]
rules:
  - id: fallback
    when: { model: fallback }
    route: [plain, good]
  - id: tools
    when: { model: tools }
    route: [tooled]
default: { route: [plain] }
)";

json weather_tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
    "required": ["city"], "additionalProperties": false}}}])");
}

class ToolCallsTest : public OwnConfigTest {
 protected:
  void SetUp() override {
    OwnConfigTest::SetUp();
    const std::string model = (dir_.path() / "tiny.gguf").string();
    ASSERT_EQ(run_command(ferry_binary() + " model synth --preset tiny --type Q8_0 --ctx 1024 " +
                          "--seed 3 '" + model + "' > /dev/null"),
              0);
    std::string cfg = standard_config(upstream_.address);
    cfg.insert(cfg.find("backends:\n") + 10,
               "  - { name: cpu, kind: local, model: " + model +
                   ", threads: 1 }\n  - { name: cpu-tools, kind: local, model: " + model +
                   ", threads: 1, chat_template: " + json(test::kHermesTemplate).dump() + " }\n");
    cfg.insert(
        cfg.find("models:\n") + 8,
        "  - { name: local, backend: cpu }\n  - { name: local-tools, backend: cpu-tools }\n");
    cfg += "policy: { file: " + dir_.write("policies.yaml", kPolicy) + ", watch: false }\n";
    cfg += "ledger:\n  path: " + db_ + "\n";
    ferry_ = start_ferry(dir_, cfg);
  }

  static json ask(const std::string& model, int max_tokens) {
    json body = chat_body(model, "What's the weather in Oslo?");
    body["max_tokens"] = max_tokens;
    body["temperature"] = 1;
    body["seed"] = 7;
    return body;
  }
};

TEST_F(ToolCallsTest, ToolsTheLocalTemplateCannotShowAreA400ThePolicyFallsBackOn) {
  json body = ask("local", 16);
  body["tools"] = weather_tools();
  body["tool_choice"] = "required";
  auto refused = post_json(ferry_.address, "/v1/chat/completions", body);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  const json err = refused->body_json()["error"];
  EXPECT_EQ(err["param"], "tools") << err.dump();
  EXPECT_EQ(err["code"], "unsupported_by_target") << err.dump();

  body["model"] = "fallback";  // route: [plain, good]
  auto served = post_json(ferry_.address, "/v1/chat/completions", body);
  ASSERT_TRUE(served);
  ASSERT_EQ(served->status, 200) << served->body;
  EXPECT_EQ(served->header("x-ferry-target").value_or(""), "good");
  EXPECT_EQ(served->header("x-ferry-attempts").value_or(""), "2");
  EXPECT_FALSE(served->header("x-ferry-constraint"));  // an HTTP target passes tools through
  const json sent = upstream_last_request(upstream_.address)["body"];
  EXPECT_EQ(sent["tools"], weather_tools());

  // A schema keyword the compiler cannot enforce: 400 naming it and its path.
  json schema = ask("local", 16);
  schema["response_format"] = json::parse(R"({"type": "json_schema", "json_schema": {"name": "x",
    "schema": {"type": "object", "properties": {"a": {"type": "string", "not": {}}}}}})");
  auto bad = post_json(ferry_.address, "/v1/chat/completions", schema);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_NE(bad->body.find("'not' at '#/properties/a'"), std::string::npos) << bad->body;
  EXPECT_EQ(bad->body_json()["error"]["param"], "response_format");

  // And it keeps serving, unconstrained answers saying so.
  auto plain = post_json(ferry_.address, "/v1/chat/completions", ask("local", 4));
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 200) << plain->body;
  EXPECT_EQ(plain->header("x-ferry-constraint").value_or(""), "none");
}

TEST_F(ToolCallsTest, ServedToolCallsAndSchemasAreOpenAiShapedAndRecorded) {
  json body = ask("tools", 200);
  body["tools"] = weather_tools();
  body["tool_choice"] = "required";
  body["parallel_tool_calls"] = false;
  auto r = post_json(ferry_.address, "/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->header("x-ferry-constraint").value_or(""), "tools");
  const json choice = r->body_json()["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice.dump();
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  ASSERT_TRUE(args["city"].is_string()) << args.dump();
  EXPECT_EQ(args.size(), 1u);

  body["stream"] = true;
  StreamResult s = stream_request(ferry_.address, "/v1/chat/completions", body);
  ASSERT_TRUE(s.head);
  ASSERT_EQ(s.head->status, 200);
  EXPECT_EQ(s.head->header("x-ferry-constraint").value_or(""), "tools");
  std::string name, arguments, finish;
  int with_id = 0;
  for (const json& c : s.chunks) {
    EXPECT_EQ(c.dump().find("tool_call>"), std::string::npos) << "a raw marker was streamed";
    if (!c.contains("choices") || c["choices"].empty()) continue;
    const json& ch = c["choices"][0];
    if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
    if (!ch["delta"].contains("tool_calls")) continue;
    const json& d = ch["delta"]["tool_calls"][0];
    EXPECT_EQ(d["index"], 0);
    if (d.contains("id")) {
      ++with_id;
      name = d["function"]["name"];
    }
    arguments += d["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(with_id, 1);  // id, type and name once, in the first delta
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_TRUE(json::parse(arguments)["city"].is_string()) << arguments;

  json schema = ask("local", 120);
  schema["response_format"] = json::parse(R"({"type": "json_schema", "json_schema": {"name": "x",
    "strict": true, "schema": {"type": "object", "properties": {"n": {"type": "integer"}},
    "required": ["n"], "additionalProperties": false}}})");
  auto js = post_json(ferry_.address, "/v1/chat/completions", schema);
  ASSERT_TRUE(js);
  ASSERT_EQ(js->status, 200) << js->body;
  EXPECT_EQ(js->header("x-ferry-constraint").value_or(""), "json_schema");
  const json out = js->body_json()["choices"][0];
  if (out["finish_reason"] == "stop") {
    EXPECT_TRUE(json::parse(out["message"]["content"].get<std::string>())["n"].is_number_integer());
  }

  ASSERT_EQ(ferry_.process->stop(Ms(15000)), 0);
  ferry_.process.reset();
  auto db = ledger::Db::open(db_, true);
  ASSERT_TRUE(db) << db.error().message;
  auto stmt = db->prepare(
      "SELECT constraint_mode, schema_hash FROM requests WHERE kind='request' ORDER BY seq");
  ASSERT_TRUE(stmt);
  std::vector<std::pair<std::string, std::string>> rows;
  while (true) {
    auto has = stmt->step();
    if (!has || !*has) break;
    rows.emplace_back(stmt->text_at(0), stmt->is_null(1) ? "" : stmt->text_at(1));
  }
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].first, "tools");
  EXPECT_EQ(rows[0].second.size(), 64u);
  EXPECT_EQ(rows[1], rows[0]);  // the same tools compile to the same grammar
  EXPECT_EQ(rows[2].first, "json_schema");
  EXPECT_NE(rows[2].second, rows[0].second);
  auto verified = ledger::verify_ledger(db_);
  ASSERT_TRUE(verified) << verified.error().message;
  EXPECT_TRUE(verified->ok()) << (verified->problems.empty() ? "" : verified->problems[0]);
}

}  // namespace
}  // namespace ferry::itest
