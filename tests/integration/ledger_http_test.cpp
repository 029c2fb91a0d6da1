// The ledger through the real server: every request priced exactly (backend usage, or ferry's
// own count when usage is missing or a stream is cut), reports and exports over HTTP for
// finance/admin keys only, hard budgets under 200 concurrent requests, and a SIGKILL under
// load after which every answer a client fully received has its row and the chain verifies.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/common/csv_rows.h"
#include "tests/integration/ferry_test_base.h"
#include "tokenizer/tokenizer.h"

namespace ferry::itest {
namespace {

using Row = ferry::testing::CsvRow;
using ferry::testing::csv_rows;

// "12.345678" -> 12345678 micro-units (exact).
int64_t micros(const std::string& decimal) {
  if (decimal.empty()) return 0;
  bool neg = decimal[0] == '-';
  std::string s = neg ? decimal.substr(1) : decimal;
  auto dot = s.find('.');
  std::string whole = s.substr(0, dot);
  std::string frac = dot == std::string::npos ? "" : s.substr(dot + 1);
  frac.resize(6, '0');
  int64_t v = std::stoll(whole.empty() ? "0" : whole) * 1000000 + std::stoll(frac);
  return neg ? -v : v;
}

class LedgerHttpTest : public OwnConfigTest {
 protected:
  std::string config(const std::string& budget_amount = "") {
    std::string cfg = standard_config(upstream_.address);
    // Exact counting for the models whose usage is missing or cut.
    for (const char* m : {"no-usage", "close-mid-stream", "gpt-test", "slow"}) {
      std::string from = std::string("{name: ") + m + ",";
      auto at = cfg.find(from);
      cfg.insert(at + 1, "tokenizer: cl100k_base, ");
    }
    cfg += "ledger:\n  path: " + db_ + "\n";
    cfg += "prices:\n";
    for (const char* m : {"gpt-test", "no-usage", "close-mid-stream", "slow"}) {
      cfg += std::string("  - { model: ") + m +
             ", effective_from: 2026-01-01, input: 1.50, output: 10.00 }\n";
    }
    if (!budget_amount.empty()) {
      cfg += "budgets:\n  - { name: team-a-daily, scope: team, match: team-a, amount: " +
             budget_amount + ", period: day, mode: hard }\n";
    }
    return cfg;
  }

  std::vector<Row> export_rows(const char* key = kAdminKey) {
    auto r = http_request(ferry_.address, "GET", "/v1/ledger/export.csv", "", auth_headers(key));
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return csv_rows(r->body);
  }

  static std::map<std::string, Row> by_task(const std::vector<Row>& rows) {
    std::map<std::string, Row> m;
    for (const auto& r : rows) m[r.at("task_id")] = r;
    return m;
  }

  int64_t metric(const std::string& series) {
    auto r = http_request(ferry_.address, "GET", "/metrics");
    if (!r) return -1;
    auto at = r->body.find(series + " ");
    if (at == std::string::npos) return -1;
    return std::stoll(r->body.substr(at + series.size() + 1));
  }
};

std::vector<std::string> task_headers(const std::string& task, const char* key = kAppKey) {
  auto h = auth_headers(key);
  h.push_back("x-ferry-task: " + task);
  return h;
}

TEST_F(LedgerHttpTest, EveryRequestHasAnExactlyPricedRow) {
  ferry_ = start_ferry(dir_, config());
  auto ns = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "one two"),
                      task_headers("t-plain"));
  ASSERT_TRUE(ns);
  ASSERT_EQ(ns->status, 200);
  auto s = stream_request(ferry_.address, "/v1/chat/completions",
                          chat_body("gpt-test", "three four", true), task_headers("t-stream"));
  ASSERT_TRUE(s.saw_done);
  auto nu =
      stream_request(ferry_.address, "/v1/chat/completions",
                     chat_body("no-usage", "five six seven", true), task_headers("t-nousage"));
  ASSERT_TRUE(nu.saw_done);
  auto cut =
      stream_request(ferry_.address, "/v1/chat/completions",
                     chat_body("close-mid-stream", "eight nine", true), task_headers("t-cut"));
  ASSERT_TRUE(cut.head);
  EXPECT_FALSE(cut.saw_done);

  auto rows = by_task(export_rows());
  ASSERT_EQ(rows.count("t-plain"), 1u);
  const Row& plain = rows["t-plain"];
  EXPECT_EQ(plain.at("status"), "ok");
  EXPECT_EQ(plain.at("input_source"), "backend");
  EXPECT_EQ(plain.at("key_id"), "app-key");
  EXPECT_EQ(plain.at("team"), "team-a");
  // The upstream's usage, priced at 1.50 / 10.00 per million.
  json usage = ns->body_json()["usage"];
  int64_t in = usage["prompt_tokens"].get<int64_t>();
  int64_t out = usage["completion_tokens"].get<int64_t>();
  EXPECT_EQ(std::stoll(plain.at("input_tokens")), in);
  EXPECT_EQ(std::stoll(plain.at("output_tokens")), out);
  // Each kind is tokens * price-per-million / 1e6, rounded half away from zero to the
  // micro-unit; the total is the sum of the kinds.
  int64_t cost_in = (in * 1500000 + 500000) / 1000000;
  int64_t cost_out = (out * 10000000 + 500000) / 1000000;
  EXPECT_EQ(micros(plain.at("cost_input")), cost_in);
  EXPECT_EQ(micros(plain.at("cost_output")), cost_out);
  EXPECT_EQ(micros(plain.at("cost_total")), cost_in + cost_out);

  // ferry's own count was compared with the backend's (the fault upstream counts words, so
  // the two differ and the mismatch is counted).
  EXPECT_EQ(metric("ferry_prompt_tokens_checked_total{model=\"gpt-test\"}"), 2);
  EXPECT_EQ(metric("ferry_prompt_tokens_mismatch_total{model=\"gpt-test\"}"), 2);
  // The access log carries ferry's own count beside the backend's.
  // (The log thread writes in batches: wait for the line.)
  auto line = ferry_.process->wait_for_line_containing("\"prompt_tokens_counted\"", Ms(10000));
  ASSERT_TRUE(line) << "no access-log line with prompt_tokens_counted";
  json logged = json::parse(*line, nullptr, false);
  ASSERT_FALSE(logged.is_discarded()) << *line;
  EXPECT_GT(logged["prompt_tokens_counted"].get<int64_t>(), 0);
  EXPECT_NE(logged["prompt_tokens_counted"], logged["prompt_tokens"]);  // the upstream counts words

  ASSERT_EQ(rows.count("t-stream"), 1u);
  EXPECT_EQ(rows["t-stream"].at("stream"), "1");
  EXPECT_EQ(rows["t-stream"].at("input_source"), "backend");
  EXPECT_NE(micros(rows["t-stream"].at("cost_total")), 0);

  // No usage from the backend: ferry counted the prompt and the streamed text itself.
  ASSERT_EQ(rows.count("t-nousage"), 1u);
  const Row& nou = rows["t-nousage"];
  EXPECT_EQ(nou.at("input_source"), "tokenizer");
  EXPECT_EQ(nou.at("output_source"), "tokenizer");
  auto tok = tokenizer::load_tokenizer("cl100k_base");
  ASSERT_TRUE(tok);
  EXPECT_EQ(std::stoll(nou.at("output_tokens")), static_cast<int64_t>((*tok)->count(nu.content())));
  EXPECT_NE(nou.at("pricing"), "unpriced");

  // A stream the backend cut short: what was generated is counted and priced.
  ASSERT_EQ(rows.count("t-cut"), 1u);
  EXPECT_EQ(rows["t-cut"].at("status"), "upstream_cut");
  EXPECT_EQ(std::stoll(rows["t-cut"].at("output_tokens")),
            static_cast<int64_t>((*tok)->count(cut.content())));

  // The report over HTTP reconciles with the rows to the micro-unit.
  auto rep = http_request(ferry_.address, "GET", "/v1/ledger/report?by=task&format=json", "",
                          auth_headers(kAdminKey));
  ASSERT_TRUE(rep);
  ASSERT_EQ(rep->status, 200) << rep->body;
  json j = rep->body_json();
  int64_t sum = 0;
  for (const auto& [task, row] : rows) sum += micros(row.at("cost_total"));
  EXPECT_EQ(micros(j["totals"]["cost"]["total"].get<std::string>()), sum) << rep->body;
  EXPECT_EQ(j["totals"]["requests"], 4);

  // App keys may not read the ledger; injection through a filter is just a value.
  auto app =
      http_request(ferry_.address, "GET", "/v1/ledger/export.csv", "", auth_headers(kAppKey));
  ASSERT_TRUE(app);
  EXPECT_EQ(app->status, 403);
  auto inj =
      http_request(ferry_.address, "GET", "/v1/ledger/export.csv?team=x%27%20OR%20%271%27%3D%271",
                   "", auth_headers(kAdminKey));
  ASSERT_TRUE(inj);
  EXPECT_EQ(inj->status, 200);
  EXPECT_EQ(csv_rows(inj->body).size(), 0u) << inj->body;
}

TEST_F(LedgerHttpTest, HardBudgetHoldsUnder200ConcurrentRequests) {
  // Worst case per request: ~9 prompt tokens at 1.50/M + 100 output tokens at 10.00/M, about
  // 0.001 014: the budget fits 10 of them at once. The upstream holds each request 300 ms, so
  // the 200 requests overlap and the reservations race.
  ferry_ = start_ferry(dir_, config("0.010200"));
  std::atomic<int> ok{0}, limited{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 50; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        json body = chat_body("slow", "budget race");
        body["max_tokens"] = 100;
        auto r = post_json(ferry_.address, "/v1/chat/completions", body,
                           task_headers("race-" + std::to_string(t) + "-" + std::to_string(i)));
        if (!r) {
          ++other;
        } else if (r->status == 200) {
          ++ok;
        } else if (r->status == 429) {
          ++limited;
          EXPECT_NE(r->body.find("team-a-daily"), std::string::npos) << r->body;
          // A spent budget is not worth retrying: no Retry-After, the reset in its own header.
          EXPECT_FALSE(r->header("retry-after").has_value());
          EXPECT_EQ(r->header("x-should-retry").value_or(""), "false");
          EXPECT_NE(r->body.find("\"budget_exceeded\""), std::string::npos) << r->body;
          auto reset = r->header("x-ferry-budget-reset");
          EXPECT_TRUE(reset && reset->size() == 27 && reset->back() == 'Z') << reset.value_or("");
        } else {
          ++other;
          ADD_FAILURE() << r->status << " " << r->body;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok + limited + other, 200);
  EXPECT_EQ(other.load(), 0);
  EXPECT_GE(ok.load(), 10);
  EXPECT_GT(limited.load(), 0);

  auto rows = export_rows();
  int64_t spent = 0;
  int ok_rows = 0;
  for (const auto& r : rows) {
    if (r.at("team") != "team-a") continue;
    spent += micros(r.at("cost_total"));
    if (r.at("status") == "ok") ++ok_rows;
  }
  EXPECT_EQ(ok_rows, ok.load()) << "one row per answered request";
  EXPECT_LE(spent, 10200) << "hard budget overspent";
  // The report counts what was served; the refusals have their own column (their rows are
  // queued, not awaited: the report is asked again until the last ones are in).
  json totals;
  EXPECT_TRUE(eventually([&] {
    totals = report_totals(ferry_.address);
    return totals.is_null() || totals.value("refused_requests", 0) >= limited.load();
  }));
  EXPECT_EQ(totals["requests"], ok.load()) << totals.dump();
  EXPECT_EQ(totals["refused_requests"], limited.load()) << totals.dump();
  EXPECT_EQ(totals["unpriced_requests"], 0) << totals.dump();
  EXPECT_EQ(metric("ferry_budget_spent_micros{budget=\"team-a-daily\"}"), spent);

  // After a restart the budget is rebuilt from the ledger.
  ASSERT_EQ(ferry_.process->stop(Ms(15000)), 0);
  ferry_ = start_ferry(dir_, config("0.010200"), "ferry2.yaml");
  EXPECT_EQ(metric("ferry_budget_spent_micros{budget=\"team-a-daily\"}"), spent);
}

TEST_F(LedgerHttpTest, SigkillUnderLoadLosesNoAnsweredRequest) {
  std::string cfg = config();
  // Rows wait in the row log (ledger/row_log.h) until 1,024 of them: the kill leaves some
  // there only, and the CLI below applies them (no process owns the log after the kill).
  cfg.replace(cfg.find("ledger:\n  path: " + db_ + "\n"), ("ledger:\n  path: " + db_ + "\n").size(),
              "ledger:\n  path: " + db_ + "\n  apply_ms: 60000\n");
  ferry_ = start_ferry(dir_, cfg);
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::set<std::string> received;  // tasks whose answer arrived completely
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        std::string task = "crash-" + std::to_string(t) + "-" + std::to_string(i);
        bool complete = false;
        if (t % 2 == 0) {
          auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "k"),
                             task_headers(task));
          complete = r && r->status == 200 && r->body_json().contains("choices");
        } else {
          auto s = stream_request(ferry_.address, "/v1/chat/completions",
                                  chat_body("gpt-test", "k", true), task_headers(task));
          complete = s.saw_done;
        }
        if (complete) {
          std::lock_guard lock(mu);
          received.insert(task);
        }
      }
    });
  }
  std::this_thread::sleep_for(Ms(1500));
  ferry_.process->send_signal(SIGKILL);
  ferry_.process->wait_exit(Ms(5000));
  stop = true;
  for (auto& c : clients) c.join();
  ferry_.process.reset();
  ASSERT_GT(received.size(), 10u) << "the load did not get going";
  // Bytes up to each segment's last non-zero one (a pre-sized segment is zeros past its rows).
  int64_t log_bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
    if (e.path().filename().string().rfind("ledger.db-rowlog.0", 0) == 0) {
      std::ifstream in(e.path(), std::ios::binary);
      std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t last = data.find_last_not_of('\0');
      log_bytes += last == std::string::npos ? 0 : static_cast<int64_t>(last) + 1;
    }
  }
  EXPECT_GT(log_bytes, 0) << "no row waited in the row log at the kill";

  EXPECT_EQ(run_command(ferry_binary() + " ledger verify --db " + db_ + " > /dev/null"), 0);
  std::string csv_path = (dir_.path() / "after-kill.csv").string();
  ASSERT_EQ(run_command(ferry_binary() + " ledger export --db " + db_ + " --out " + csv_path), 0);
  std::ifstream in(csv_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::set<std::string> recorded;
  for (const auto& r : csv_rows(text)) recorded.insert(r.at("task_id"));
  for (const auto& task : received) EXPECT_EQ(recorded.count(task), 1u) << task << " has no row";

  // After a restart the chain continues.
  ferry_ = start_ferry(dir_, cfg, "ferry-restarted.yaml");
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "again"),
                     task_headers("after-restart"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  ASSERT_EQ(ferry_.process->stop(Ms(15000)), 0);
  ferry_.process.reset();
  EXPECT_EQ(run_command(ferry_binary() + " ledger verify --db " + db_ + " > /dev/null"), 0);
}

// Each row stores the request id the client sent (or the one ferry made and answered with),
// so the export, the report and `ferry ledger report --request-id` find exactly that row.
TEST_F(LedgerHttpTest, RowsCarryTheRequestIdAndFiltersFindThem) {
  ferry_ = start_ferry(dir_, config());
  auto with_id = [](const std::string& task, const std::string& id) {
    auto h = task_headers(task);
    h.push_back("x-request-id: " + id);
    return h;
  };
  for (const auto& [task, id] : {std::pair{"t-mine", "abc-123"}, std::pair{"t-near", "abc-1234"},
                                 std::pair{"t-bad", "has space"}}) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "one"),
                       with_id(task, id));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  auto made = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "two"),
                        task_headers("t-made"));
  ASSERT_TRUE(made);
  std::string made_id = made->header("x-request-id").value_or("");
  ASSERT_FALSE(made_id.empty());

  auto rows = by_task(export_rows());
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows["t-mine"].at("request_id"), "abc-123");
  EXPECT_EQ(rows["t-made"].at("request_id"), made_id);
  // An id the gateway does not honour (a space) was replaced by one it made; that is stored.
  EXPECT_NE(rows["t-bad"].at("request_id"), "has space");
  EXPECT_FALSE(rows["t-bad"].at("request_id").empty());

  auto only = http_request(ferry_.address, "GET", "/v1/ledger/export.csv?request_id=abc-123", "",
                           auth_headers(kAdminKey));
  ASSERT_TRUE(only);
  ASSERT_EQ(only->status, 200) << only->body;
  auto found = csv_rows(only->body);
  ASSERT_EQ(found.size(), 1u) << only->body;
  EXPECT_EQ(found[0].at("request_id"), "abc-123");
  EXPECT_EQ(found[0].at("task_id"), "t-mine");
  EXPECT_EQ(found[0].at("id"), rows["t-mine"].at("id"));
  auto generated =
      http_request(ferry_.address, "GET", "/v1/ledger/export.csv?request_id=" + made_id, "",
                   auth_headers(kAdminKey));
  ASSERT_TRUE(generated);
  ASSERT_EQ(csv_rows(generated->body).size(), 1u) << generated->body;
  EXPECT_EQ(csv_rows(generated->body)[0].at("task_id"), "t-made");

  auto rep = http_request(ferry_.address, "GET",
                          "/v1/ledger/report?by=task&format=json&request_id=abc-1234", "",
                          auth_headers(kAdminKey));
  ASSERT_TRUE(rep);
  ASSERT_EQ(rep->status, 200) << rep->body;
  json j = rep->body_json();
  EXPECT_EQ(j["totals"]["requests"], 1) << rep->body;
  ASSERT_EQ(j["groups"].size(), 1u) << rep->body;
  EXPECT_EQ(j["groups"][0]["task"], "t-near");

  std::string out = (dir_.path() / "report.json").string();
  ASSERT_EQ(run_command(ferry_binary() + " ledger report --db " + db_ +
                        " --by task --format json --request-id abc-123 > " + out),
            0);
  std::ifstream in(out);
  json cli = json::parse(in, nullptr, false);
  ASSERT_FALSE(cli.is_discarded());
  EXPECT_EQ(cli["totals"]["requests"], 1);
  ASSERT_EQ(cli["groups"].size(), 1u);
  EXPECT_EQ(cli["groups"][0]["task"], "t-mine");
}

// `ferry ledger report` over the rows (by task with a filter) shows progress on stderr (plain
// lines when not a terminal; FERRY_PROGRESS=always shows it however quickly the report ends),
// and the report on stdout is the same as without; a report the daily aggregates or the task
// rollup answer (by task without a filter: the same groups and figures) shows none.
TEST_F(LedgerHttpTest, LedgerReportOverTheRowsShowsProgressLines) {
  ferry_ = start_ferry(dir_, config());
  for (int i = 0; i < 12; ++i) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "one"),
                       task_headers("t-" + std::to_string(i % 5)));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string out = (dir_.path() / "report.csv").string();
  std::string err = (dir_.path() / "report.err").string();
  std::string quiet_out = (dir_.path() / "quiet.csv").string();
  std::string report = ferry_binary() + " ledger report --db " + db_ + " --format csv";
  const std::string by_task_rows = " --by task --from 2000-01-01";  // a filter: the rows
  ASSERT_EQ(
      run_command("FERRY_PROGRESS=always " + report + by_task_rows + " > " + out + " 2> " + err),
      0);
  ASSERT_EQ(run_command(report + by_task_rows + " > " + quiet_out + " 2> /dev/null"), 0);
  EXPECT_EQ(read(out), read(quiet_out));
  EXPECT_NE(read(out).find("t-4,"), std::string::npos) << read(out);
  std::istringstream lines(read(err));
  std::vector<std::string> progress;
  for (std::string line; std::getline(lines, line);) progress.push_back(line);
  ASSERT_GE(progress.size(), 2u) << read(err);
  for (const auto& line : progress) {
    EXPECT_EQ(line.rfind("ferry ledger report: rows: ", 0), 0u) << line;
    EXPECT_EQ(line.find('\r'), std::string::npos) << "no redraw when not a terminal: " << line;
  }
  EXPECT_NE(progress[0].find("% ("), std::string::npos) << progress[0];
  EXPECT_NE(progress[0].find(" left"), std::string::npos) << progress[0];
  const std::string& last = progress.back();
  auto slash = last.find('/');
  ASSERT_NE(slash, std::string::npos) << last;
  std::string done = last.substr(last.find('(') + 1, slash - last.find('(') - 1);
  EXPECT_EQ(last.rfind("ferry ledger report: rows: 100% (" + done + "/" + done + "), done in ", 0),
            0u)
      << last;
  EXPECT_GE(std::stoll(done), 12);

  std::string rollup_out = (dir_.path() / "rollup.csv").string();
  ASSERT_EQ(
      run_command("FERRY_PROGRESS=always " + report + " --by task > " + rollup_out + " 2> " + err),
      0);
  EXPECT_EQ(read(err), "") << "task_totals answers at once";
  EXPECT_EQ(read(rollup_out), read(quiet_out));

  ASSERT_EQ(run_command("FERRY_PROGRESS=always " + report + " --by team > " + out + " 2> " + err),
            0);
  EXPECT_EQ(read(err), "") << "the daily aggregates answer at once";
  EXPECT_NE(read(out).find("TOTAL,12,"), std::string::npos) << read(out);
}

TEST_F(LedgerHttpTest, FullLedgerQueueRefusesWith503AndSoftBudgetsWarn) {
  // Room for 2 requests between admission and durability; the upstream holds each 500 ms.
  std::string cfg = config();
  cfg.replace(cfg.find("ledger:\n  path: "), std::string("ledger:\n").size(),
              "ledger:\n  queue_capacity: 2\n");
  cfg +=
      "budgets:\n  - { name: team-a-soft, scope: team, match: team-a, amount: 0.000001, "
      "period: day, mode: soft }\n";
  ferry_ = start_ferry(dir_, cfg);
  std::atomic<int> ok{0}, unavailable{0};
  std::vector<std::thread> threads;
  std::mutex mu;
  std::string refusal;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("slow", "q"));
      if (r && r->status == 200) ++ok;
      if (r && r->status == 503) {
        ++unavailable;
        std::lock_guard lock(mu);
        refusal = r->body;
        EXPECT_TRUE(r->header("retry-after").has_value());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_GE(ok.load(), 2);
  EXPECT_GT(unavailable.load(), 0);
  EXPECT_EQ(ok + unavailable, 8);
  EXPECT_NE(refusal.find("ledger"), std::string::npos) << refusal;
  // Once the queue drained, requests are admitted again; past the soft budget they carry a
  // warning header and count in a metric.
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "again"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto warning = r->header("x-ferry-budget-warning");
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("team-a-soft"), std::string::npos);
  EXPECT_GE(metric("ferry_budget_soft_exceeded_total{budget=\"team-a-soft\"}"), 1);
}

}  // namespace
}  // namespace ferry::itest
