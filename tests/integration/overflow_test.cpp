// Hostile integers through the real binary (issue 13): a max_tokens near INT64_MAX against the
// in-process engine (it aborted the process), a worst case that overflowed into a zero
// reservation past a hard budget, and backend usage that was negative, fractional or beyond
// what the request could produce (it was billed as a credit or as trillions). Real SQLite: the
// rows are read back from the ledger file and the hash chain is verified.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ledger/sqlite_db.h"
#include "ledger/verify.h"
#include "tests/integration/ferry_test_base.h"

namespace ferry::itest {
namespace {

// The standard config plus `backends_yaml` (list items) and `models_yaml` (list items).
std::string config_with(const ListenAddress& upstream, const std::string& backends_yaml,
                        const std::string& models_yaml, const std::string& tail) {
  std::string cfg = standard_config(upstream);
  if (!backends_yaml.empty()) {
    auto at = cfg.find("backends:\n");
    cfg.insert(at + 10, backends_yaml);
  }
  if (!models_yaml.empty()) {
    auto at = cfg.find("models:\n");
    cfg.insert(at + 8, models_yaml);
  }
  return cfg + tail;
}

class OverflowTest : public OwnConfigTest {
 protected:
  std::string make_local_model() {
    std::string path = (dir_.path() / "tiny.gguf").string();
    EXPECT_EQ(run_command(ferry_binary() + " model synth --preset tiny --type Q8_0 --seed 1 '" +
                          path + "' > /dev/null"),
              0);
    return path;
  }

  // The ledger's request rows as column -> text (NULL as "<null>"), in order.
  std::vector<std::map<std::string, std::string>> ledger_rows() {
    std::vector<std::map<std::string, std::string>> rows;
    if (ferry_.process) wait_ledger_committed(ferry_.address);
    auto db = ledger::Db::open(db_, true);
    EXPECT_TRUE(db) << db.error().message;
    if (!db) return rows;
    auto stmt = db->prepare(
        "SELECT status, input_tokens, input_source, output_tokens, output_source, "
        "cost_total, usage_check, task_id FROM requests WHERE kind='request' ORDER BY seq");
    EXPECT_TRUE(stmt);
    if (!stmt) return rows;
    const char* names[] = {"status",        "input_tokens", "input_source", "output_tokens",
                           "output_source", "cost_total",   "usage_check",  "task_id"};
    for (;;) {
      auto has = stmt->step();
      if (!has || !*has) break;
      std::map<std::string, std::string> row;
      for (int i = 0; i < 8; ++i) {
        if (stmt->is_null(i)) {
          row[names[i]] = "<null>";
        } else {
          ledger::Value v = stmt->value_at(i);
          row[names[i]] = std::holds_alternative<int64_t>(v) ? std::to_string(std::get<int64_t>(v))
                                                             : std::get<std::string>(v);
        }
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }
};

std::vector<std::string> task_headers(const std::string& task) {
  auto h = auth_headers();
  h.push_back("x-ferry-task: " + task);
  return h;
}

// ---- 1: max_tokens near INT64_MAX against the local engine ------------------------------------

TEST_F(OverflowTest, HugeMaxTokensToALocalModelIsRefusedAndTheProcessKeepsServing) {
  const std::string model = make_local_model();
  ferry_ = start_ferry(
      dir_, config_with(upstream_.address,
                        "  - { name: cpu, kind: local, model: " + model + ", threads: 1 }\n",
                        "  - {name: local, backend: cpu}\n", ""));
  json hello = chat_body("local", "hello");
  hello["max_tokens"] = 3;
  auto first = post_json(ferry_.address, "/v1/chat/completions", hello);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;

  // The issue's request aborted the process 4 times in 4; then values the edge lets through
  // but no context holds, and 2^64 - 1 (which wrapped to -1).
  struct Case {
    const char* field;
    std::string value;  // JSON text
  };
  const Case cases[] = {{"max_tokens", "9223372036854775807"},
                        {"max_tokens", "9223372036854775807"},
                        {"max_tokens", "9223372036854775807"},
                        {"max_tokens", "9223372036854775807"},
                        {"max_completion_tokens", "9223372036854775807"},
                        {"max_tokens", "4611686018427387904"},
                        {"max_tokens", "18446744073709551615"},
                        {"max_tokens", "2147483647"},
                        {"max_tokens", "-9223372036854775808"},
                        {"max_tokens", "1e300"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.field) + "=" + c.value);
    std::string body = chat_body("local", "hello").dump();
    body.insert(body.size() - 1, std::string(",\"") + c.field + "\":" + c.value);
    auto r = http_request(ferry_.address, "POST", "/v1/chat/completions", body, auth_headers());
    ASSERT_TRUE(r) << "ferry no longer answers";
    EXPECT_EQ(r->status, 400) << r->body;
    json e = r->body_json();
    const std::string param =
        e["error"]["param"].is_string() ? e["error"]["param"].get<std::string>() : "";
    // Past the edge's limit the field is named; within it the context check names the numbers.
    if (c.value == "2147483647") {
      EXPECT_EQ(e["error"]["code"], "context_length_exceeded") << r->body;
    } else {
      EXPECT_EQ(param, c.field) << r->body;
    }
  }
  // Token ids and logprobs the engine cannot honour are refused, not wrapped or ignored.
  const std::pair<const char*, std::string> bad_chat[] = {{"logit_bias", R"({"99999999999":1})"},
                                                          {"logit_bias", R"({"4294967301":1})"},
                                                          {"logit_bias", R"({"5":101})"},
                                                          {"logprobs", R"("yes")"},
                                                          {"logprobs", "3"},
                                                          {"top_logprobs", "21"}};
  for (const auto& [field, value] : bad_chat) {
    SCOPED_TRACE(std::string(field) + "=" + value);
    std::string body = hello.dump();
    body.insert(body.size() - 1, std::string(",\"") + field + "\":" + value);
    auto r = http_request(ferry_.address, "POST", "/v1/chat/completions", body, auth_headers());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_EQ(r->body_json()["error"]["param"], field) << r->body;
  }
  // A logit_bias key inside int32 but past this model's vocabulary: the local engine refuses.
  json big_key = hello;
  big_key["logit_bias"] = {{"2000000000", 1}};
  auto vocab = post_json(ferry_.address, "/v1/chat/completions", big_key);
  ASSERT_TRUE(vocab);
  EXPECT_EQ(vocab->status, 400) << vocab->body;
  EXPECT_EQ(vocab->body_json()["error"]["param"], "logit_bias");
  // A completions prompt token 4294967301 (2^32 + 5) is not token 5.
  json tokens = {{"model", "local"}, {"prompt", json::array({1, 4294967301LL})}, {"max_tokens", 2}};
  auto ids = post_json(ferry_.address, "/v1/completions", tokens);
  ASSERT_TRUE(ids);
  EXPECT_EQ(ids->status, 400) << ids->body;
  EXPECT_EQ(ids->body_json()["error"]["param"], "prompt");
  json cmpl_logprobs = completion_body("local", "hi");
  cmpl_logprobs["max_tokens"] = 2;
  cmpl_logprobs["logprobs"] = 6;
  auto lp = post_json(ferry_.address, "/v1/completions", cmpl_logprobs);
  ASSERT_TRUE(lp);
  EXPECT_EQ(lp->status, 400) << lp->body;

  // Still serving, with the same answer shape as before.
  auto after = post_json(ferry_.address, "/v1/chat/completions", hello);
  ASSERT_TRUE(after) << "ferry no longer answers";
  ASSERT_EQ(after->status, 200) << after->body;
  EXPECT_LE(after->body_json()["usage"]["completion_tokens"].get<int64_t>(), 3);
  EXPECT_FALSE(ferry_.process->wait_exit(Ms(1)).has_value()) << "ferry exited";
}

// ---- 3: a worst case that overflows must not become a zero reservation ---------------------

TEST_F(OverflowTest, AWorstCaseTooLargeToHoldIsRefusedByAHardBudget) {
  // `slow` has no tokenizer and no context length. At 5,000,000,000 per million output tokens,
  // max_tokens 2147483647 costs more than int64 micro-units hold: it wrapped (to a negative
  // figure, clamped to 0) and such requests were admitted. Saturated, it is refused by any
  // finite hard budget, while a request the budgets can hold still passes.
  std::string tail =
      "ledger:\n  path: " + db_ + "\nprices:\n" +
      "  - { model: slow, effective_from: 2026-01-01, input: 3.00, output: 5000000000 }\n" +
      "  - { model: gpt-test, effective_from: 2026-01-01, input: 3.00, output: 15.00 }\n" +
      "budgets:\n  - { name: team-a-daily, scope: team, match: team-a, amount: "
      "9000000000000, period: day, mode: hard }\n"
      "  - { name: team-a-small, scope: project, match: proj-x, amount: 0.004000, "
      "period: day, mode: hard }\n";
  ferry_ = start_ferry(dir_, config_with(upstream_.address, "", "", tail));
  // The issue's request: 20 at once, each with max_tokens 2^62, against 0.004000.
  std::atomic<int> statuses[600];  // value-initialised (C++20)
  std::vector<std::thread> threads;
  for (int i = 0; i < 20; ++i) {
    threads.emplace_back([&, i] {
      json body = chat_body("gpt-test", "budget");
      body["max_tokens"] = 4611686018427387904LL;
      auto r = post_json(ferry_.address, "/v1/chat/completions", body,
                         task_headers("issue-" + std::to_string(i)));
      if (r && r->status < 600) ++statuses[r->status];
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(statuses[400].load(), 20) << "200: " << statuses[200].load();

  auto status_of = [&](const json& body, const std::string& task) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", body, task_headers(task));
    EXPECT_TRUE(r);
    if (r && r->status != 200) {
      EXPECT_NE(r->body.find("error"), std::string::npos) << r->body;
    }
    return r ? r->status : 0;
  };
  // Within the edge's limits but too large to price: refused by the hard budget (429).
  json huge = chat_body("slow", "budget");
  huge["max_tokens"] = 2147483647;
  EXPECT_EQ(status_of(huge, "huge"), 429);
  // n choices multiply the output: 200 tokens x 128 at 15.00 per million is past 0.004000
  // (200 alone would fit).
  json many = chat_body("gpt-test", "budget");
  many["max_tokens"] = 200;
  many["n"] = 128;
  EXPECT_EQ(status_of(many, "many"), 429);
  // A request both budgets hold is admitted and billed.
  json small = chat_body("gpt-test", "budget");
  small["max_tokens"] = 8;
  EXPECT_EQ(status_of(small, "small"), 200);

  int64_t spent = 0;
  for (const auto& row : ledger_rows()) {
    if (row.at("cost_total") != "<null>") spent += std::stoll(row.at("cost_total"));
  }
  EXPECT_GT(spent, 0);
  EXPECT_LE(spent, 4000) << "hard budget overspent";
}

// ---- 4: usage from the backend is checked before it is billed ------------------------------

TEST_F(OverflowTest, ImplausibleUsageIsBilledOnFerrysOwnCountAndRecorded) {
  std::string cfg = config_with(upstream_.address, "", "",
                                "ledger:\n  path: " + db_ +
                                    "\nprices:\n  - { model: gpt-test, "
                                    "effective_from: 2026-01-01, input: "
                                    "3.00, output: 15.00 }\n");
  // Exact counting for gpt-test.
  cfg.insert(cfg.find("{name: gpt-test,") + 1, "tokenizer: cl100k_base, ");
  cfg.insert(cfg.find("{name: no-usage,") + 1, "tokenizer: cl100k_base, ");
  ferry_ = start_ferry(dir_, cfg);

  struct Case {
    const char* task;
    std::string usage;    // the usage object the upstream sends, as JSON text
    bool trusted;         // billed as reported
    const char* problem;  // what usage_check names when not
  };
  const Case cases[] = {
      {"huge", R"({"prompt_tokens":999999999999999999,"completion_tokens":999999999999999999})",
       false, "prompt_tokens 999999999999999999"},
      {"negative-prompt", R"({"prompt_tokens":-5,"completion_tokens":2})", false,
       "prompt_tokens -5"},
      {"over-max-tokens", R"({"prompt_tokens":12,"completion_tokens":4000})", false,
       "completion_tokens 4000 exceeds max_tokens 8"},
      {"float", R"({"prompt_tokens":1e300,"completion_tokens":2})", false, "not an integer"},
      {"beyond-int64", R"({"prompt_tokens":18446744073709551615,"completion_tokens":2})", false,
       "not an integer"},
      {"string", R"({"prompt_tokens":"11","completion_tokens":2})", false, "not an integer"},
      {"cached-over-prompt",
       R"({"prompt_tokens":12,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":13}})",
       false, "cached_tokens 13"},
      {"plausible", R"({"prompt_tokens":12,"completion_tokens":3})", true, ""},
  };
  for (const Case& c : cases) {
    for (bool stream : {false, true}) {
      SCOPED_TRACE(std::string(c.task) + (stream ? " stream" : ""));
      json body = chat_body("gpt-test", "one two three", stream);
      body["max_tokens"] = 8;
      body["x_test_usage"] = c.usage;
      const std::string task = std::string(c.task) + (stream ? "-s" : "");
      std::string content;
      if (stream) {
        auto s = stream_request(ferry_.address, "/v1/chat/completions", body, task_headers(task));
        ASSERT_TRUE(s.saw_done);
        content = s.content();
      } else {
        auto r = post_json(ferry_.address, "/v1/chat/completions", body, task_headers(task));
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        content = r->body_json()["choices"][0]["message"]["content"].get<std::string>();
      }
      ASSERT_FALSE(content.empty());
    }
  }
  // The same prompt to a backend that sends no usage: ferry's own count, as it always billed it.
  json reference = chat_body("no-usage", "one two three");
  reference["max_tokens"] = 8;
  auto ref =
      post_json(ferry_.address, "/v1/chat/completions", reference, task_headers("reference"));
  ASSERT_TRUE(ref);
  ASSERT_EQ(ref->status, 200) << ref->body;

  auto rows = ledger_rows();
  std::map<std::string, std::map<std::string, std::string>> by_task;
  for (const auto& r : rows) by_task[r.at("task_id")] = r;
  // ferry's own exact count of the prompt (the same for every case).
  ASSERT_EQ(by_task.count("reference"), 1u);
  ASSERT_EQ(by_task.at("reference").at("input_source"), "tokenizer");
  const std::string exact_prompt = by_task.at("reference").at("input_tokens");
  for (const Case& c : cases) {
    for (const char* suffix : {"", "-s"}) {
      const std::string task = std::string(c.task) + suffix;
      SCOPED_TRACE(task);
      ASSERT_EQ(by_task.count(task), 1u);
      const auto& row = by_task.at(task);
      EXPECT_EQ(row.at("status"), "ok");
      const int64_t cost = std::stoll(row.at("cost_total"));
      EXPECT_GE(cost, 0) << "a charge is never a credit";
      if (c.trusted) {
        EXPECT_EQ(row.at("input_source"), "backend");
        EXPECT_EQ(row.at("input_tokens"), "12");
        EXPECT_EQ(row.at("usage_check"), "<null>");
        continue;
      }
      // Billed on ferry's own counts: the prompt it counted, the text it saw generated.
      EXPECT_EQ(row.at("input_source"), "tokenizer");
      EXPECT_EQ(row.at("input_tokens"), exact_prompt);
      EXPECT_EQ(row.at("output_source"), "tokenizer");
      const int64_t in = std::stoll(row.at("input_tokens"));
      const int64_t out = std::stoll(row.at("output_tokens"));
      EXPECT_GT(in, 0);
      EXPECT_GT(out, 0);
      EXPECT_LE(out, 8);
      EXPECT_EQ(cost, (in * 3000000 + 500000) / 1000000 + (out * 15000000 + 500000) / 1000000);
      // The discrepancy is kept: what the backend reported, and why it was not billed.
      ASSERT_NE(row.at("usage_check"), "<null>");
      json check = json::parse(row.at("usage_check"), nullptr, false);
      ASSERT_TRUE(check.is_array()) << row.at("usage_check");
      ASSERT_EQ(check.size(), 1u);
      EXPECT_NE(check[0]["problem"].get<std::string>().find(c.problem), std::string::npos)
          << row.at("usage_check");
      EXPECT_TRUE(check[0].contains("reported"));
    }
  }
  // The chain verifies, and no row is a credit.
  ASSERT_EQ(ferry_.process->stop(Ms(15000)), 0);
  ferry_.process.reset();
  auto verified = ledger::verify_ledger(db_);
  ASSERT_TRUE(verified) << verified.error().message;
  EXPECT_TRUE(verified->ok()) << (verified->problems.empty() ? "" : verified->problems[0]);
}

}  // namespace
}  // namespace ferry::itest
