#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ledger/report.h"
#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
#include "ledger/store.h"
#include "ledger/verify.h"
#include "test_util.h"

namespace ferry::ledger {
namespace {

using testing::catalog_from;
using testing::kJune15;
using testing::simple_record;
using testing::TempDir;
using testing::tokens_of;

const char* kPrices = R"(
- {model: gpu-large, effective_from: 2026-01-01, input: 3.00, cached_input: 0.30, output: 15.00, reasoning: 17.00}
- {model: gpu-mid, effective_from: 2026-01-01, input: 0.70, output: 2.10}
- {model: local-small, effective_from: 2026-01-01, internal: true, input: 0.013, output: 0.027}
)";

// A ledger of varied rows: 4 teams, 3 days, 4 targets (one unpriced), tasks, attempts.
class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("l.db");
    LedgerConfig config;
    config.path = path_;
    config.reference_model = "gpu-large";
    auto ledger = Ledger::open(config, catalog_from(kPrices), {});
    ASSERT_TRUE(ledger);
    const char* targets[] = {"gpu-large", "gpu-mid", "local-small", "unpriced-model"};
    uint64_t seed = 12345;
    auto next = [&seed](int64_t mod) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<int64_t>((seed >> 33) % static_cast<uint64_t>(mod));
    };
    for (int i = 0; i < 400; ++i) {
      int64_t t = kJune15 + (i % 3) * kMicrosPerDay + i * 1000;
      RequestRecord r = simple_record(targets[next(4)],
                                      tokens_of(next(5000), next(3000), next(2000), next(700)), t);
      r.team = "team-" + std::to_string(next(4));
      r.key_id = "key-" + std::to_string(next(6));
      r.task_id = "task-" + std::to_string(i % 7);
      r.rule_id = i % 2 == 0 ? "cheap-first" : "default";
      if (i % 25 == 0) {
        AttemptRecord a1;
        a1.target = "gpu-mid";
        a1.tokens = tokens_of(100, 0, 7, 0);
        AttemptRecord a2;
        a2.target = "gpu-large";
        a2.tokens = tokens_of(100, 50, 9, 3);
        r.target = "gpu-large";
        r.attempts = {a1, a2};
      }
      (*ledger)->record(std::move(r), [](const Status& st) { EXPECT_TRUE(st); });
    }
    (*ledger)->flush();
  }

  int64_t db_sum(const std::string& sql) {
    auto db = ledger_db_open(path_, true);
    auto stmt = db->prepare(sql);
    EXPECT_TRUE(stmt);
    auto has = stmt->step();
    EXPECT_TRUE(has && *has);
    return stmt->int_at(0);
  }

  TempDir dir_;
  std::string path_;
};

void expect_same(const Report& a, const Report& b) {
  ASSERT_EQ(a.rows.size(), b.rows.size());
  for (size_t i = 0; i < a.rows.size(); ++i) {
    EXPECT_EQ(a.rows[i].group, b.rows[i].group);
    EXPECT_EQ(a.rows[i].requests, b.rows[i].requests);
    EXPECT_EQ(a.rows[i].unpriced_requests, b.rows[i].unpriced_requests);
    EXPECT_EQ(a.rows[i].input_tokens, b.rows[i].input_tokens);
    EXPECT_EQ(a.rows[i].reasoning_tokens, b.rows[i].reasoning_tokens);
    EXPECT_EQ(a.rows[i].total, b.rows[i].total);
    EXPECT_EQ(a.rows[i].cost_cached, b.rows[i].cost_cached);
    EXPECT_EQ(a.rows[i].avoided, b.rows[i].avoided);
    EXPECT_EQ(a.rows[i].first_us, b.rows[i].first_us);
    EXPECT_EQ(a.rows[i].last_us, b.rows[i].last_us);
  }
}

TEST_F(ReportTest, GroupsReconcileToTheMicroUnit) {
  int64_t ledger_total = db_sum("SELECT SUM(cost_total) FROM requests");
  int64_t ledger_output = db_sum("SELECT SUM(COALESCE(cost_output,0)) FROM requests");
  int64_t unpriced = db_sum("SELECT COUNT(*) FROM requests WHERE pricing='unpriced'");
  ASSERT_GT(unpriced, 0);
  for (const char* by : {"team", "key", "project", "model", "target", "rule", "day", "month",
                         "task", "team,day", "day,team,model"}) {
    ReportQuery query;
    query.by = *parse_report_by_list(by);
    auto report = run_report(path_, query);
    ASSERT_TRUE(report) << report.error().message;
    Money sum;
    int64_t requests = 0;
    for (const auto& row : report->rows) {
      sum += row.total;
      requests += row.requests;
      EXPECT_EQ(row.total, row.cost_input + row.cost_cached + row.cost_output + row.cost_reasoning);
    }
    EXPECT_EQ(sum.micros(), ledger_total) << by;
    EXPECT_EQ(report->totals.total.micros(), ledger_total) << by;
    EXPECT_EQ(report->totals.cost_output.micros(), ledger_output) << by;
    EXPECT_EQ(report->totals.unpriced_requests, unpriced) << by;
    EXPECT_EQ(requests, 400) << by;
    // The daily aggregate and the rows agree.
    query.force_raw = true;
    auto raw = run_report(path_, query);
    ASSERT_TRUE(raw);
    expect_same(*report, *raw);
  }
}

// Adds 28 refused rows (team-0) and 5 shadow copies (team-1) to the 400 served ones.
void add_refusals_and_shadows(const std::string& path) {
  LedgerConfig config;
  config.path = path;
  config.reference_model = "gpu-large";
  auto ledger = Ledger::open(config, catalog_from(kPrices), {});
  ASSERT_TRUE(ledger);
  for (int i = 0; i < 28; ++i) {
    RequestRecord r = simple_record("gpu-mid", tokens_of(0, 0, 0, 0), kJune15 + i * 1000);
    r.team = "team-0";
    r.target = "";
    r.upstream_model = "";
    r.status = RequestStatus::kRefused;
    r.http_status = 429;
    (*ledger)->record(std::move(r), [](const Status& st) { EXPECT_TRUE(st); });
  }
  for (int i = 0; i < 5; ++i) {
    RequestRecord r = simple_record("gpu-large", tokens_of(100, 0, 10, 0), kJune15 + i * 1000);
    r.team = "team-1";
    r.trusted_tags = {"shadow"};
    (*ledger)->record(std::move(r), [](const Status& st) { EXPECT_TRUE(st); });
  }
  (*ledger)->flush();
}

void expect_served_counts(const std::string& path, int64_t served_unpriced, int64_t total) {
  for (const char* by : {"team", "key", "task", "target", "team,day"}) {
    ReportQuery query;
    query.by = *parse_report_by_list(by);
    auto report = run_report(path, query);
    ASSERT_TRUE(report) << report.error().message;
    EXPECT_EQ(report->totals.requests, 400) << by;
    EXPECT_EQ(report->totals.refused_requests, 28) << by;
    EXPECT_EQ(report->totals.shadow_requests, 5) << by;
    EXPECT_EQ(report->totals.unpriced_requests, served_unpriced) << by;
    EXPECT_EQ(report->totals.total.micros(), total) << by << ": every row's cost, shadows too";
    EXPECT_EQ(report->totals.average(), Money::from_micros((total * 2 + 400) / 800)) << by;
    query.force_raw = true;
    auto raw = run_report(path, query);
    ASSERT_TRUE(raw);
    expect_same(*report, *raw);
    for (size_t i = 0; i < raw->rows.size() && i < report->rows.size(); ++i) {
      EXPECT_EQ(report->rows[i].refused_requests, raw->rows[i].refused_requests) << by;
      EXPECT_EQ(report->rows[i].shadow_requests, raw->rows[i].shadow_requests) << by;
    }
  }
  std::string csv = format_report(*run_report(path, ReportQuery{}), ReportFormat::kCsv, false);
  EXPECT_EQ(csv.rfind("team,requests,unpriced_requests,refused_requests,shadow_requests,", 0), 0u)
      << csv;
}

TEST_F(ReportTest, RefusalsAndShadowsAreCountedApartFromServedRequests) {
  int64_t served_unpriced = db_sum("SELECT COUNT(*) FROM requests WHERE pricing='unpriced'");
  add_refusals_and_shadows(path_);
  int64_t total = db_sum("SELECT SUM(COALESCE(cost_total,0)) FROM requests");
  ASSERT_GT(db_sum("SELECT COUNT(*) FROM requests WHERE status='refused' AND pricing='unpriced'"),
            0);
  expect_served_counts(path_, served_unpriced, total);
  auto verified = verify_ledger(path_);
  ASSERT_TRUE(verified);
  EXPECT_TRUE(verified->ok()) << (verified->problems.empty() ? "" : verified->problems[0]);
}

// A shadow copy is a row whose trusted tags include "shadow" itself; a tag that merely holds the
// text (`x"shadow`, written `"x\"shadow"` in the row) is an ordinary served row for the daily
// sums, the reports read from the rows and verify alike (fuzz_ledger_row found verify flagging
// such a row: its SQL found the shadow tag by a substring of the tags' JSON).
TEST_F(ReportTest, ATagHoldingTheTextShadowIsNotAShadowCopy) {
  LedgerConfig config;
  config.path = path_;
  config.reference_model = "gpu-large";
  {
    auto ledger = Ledger::open(config, catalog_from(kPrices), {});
    ASSERT_TRUE(ledger);
    const std::vector<std::vector<std::string>> tags = {
        {"x\"shadow"}, {"a\",\"shadow"}, {"team-a", "shadow"}, {"shadow"}};
    for (size_t i = 0; i < tags.size(); ++i) {
      RequestRecord r = simple_record("gpu-large", tokens_of(100, 0, 10, 0), kJune15 + i * 1000);
      r.team = "team-9";
      r.trusted_tags = tags[i];
      (*ledger)->record(std::move(r), [](const Status& st) { EXPECT_TRUE(st); });
    }
    (*ledger)->flush();
  }
  ReportQuery query;
  query.by = *parse_report_by_list("team");
  query.filter.team = "team-9";
  for (bool raw : {false, true}) {
    query.force_raw = raw;
    auto report = run_report(path_, query);
    ASSERT_TRUE(report) << report.error().message;
    EXPECT_EQ(report->totals.requests, 2) << "raw " << raw;
    EXPECT_EQ(report->totals.shadow_requests, 2) << "raw " << raw;
  }
  auto verified = verify_ledger(path_);
  ASSERT_TRUE(verified);
  EXPECT_TRUE(verified->ok()) << (verified->problems.empty() ? "" : verified->problems[0]);
}

TEST_F(ReportTest, AnOlderFileIsMigratedWithItsRefusalsAndShadowsCounted) {
  int64_t served_unpriced = db_sum("SELECT COUNT(*) FROM requests WHERE pricing='unpriced'");
  add_refusals_and_shadows(path_);
  int64_t total = db_sum("SELECT SUM(COALESCE(cost_total,0)) FROM requests");
  {
    // Back to the version before: the aggregates without the new columns.
    auto db = ledger_db_open(path_, false);
    ASSERT_TRUE(db);
    for (const char* table : {"daily", "daily_team"}) {
      for (const char* column : {"refused", "shadows", "unpriced_served"}) {
        ASSERT_TRUE(db->exec(std::string("ALTER TABLE ") + table + " DROP COLUMN " + column));
      }
    }
    // And without the later columns (version 6: the constraint).
    ASSERT_TRUE(db->exec("ALTER TABLE requests DROP COLUMN constraint_mode"));
    ASSERT_TRUE(db->exec("ALTER TABLE requests DROP COLUMN schema_hash"));
    ASSERT_TRUE(db->exec(testing::kUndoSchemaEight));
    ASSERT_TRUE(db->exec("PRAGMA user_version=4"));
  }
  // Read-only, the old file is reported from its rows.
  expect_served_counts(path_, served_unpriced, total);
  {
    LedgerConfig config;
    config.path = path_;
    auto reopened = Ledger::open(config, catalog_from(kPrices), {});
    ASSERT_TRUE(reopened) << reopened.error().message;
  }
  EXPECT_EQ(db_sum("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(db_sum("SELECT SUM(refused) FROM daily"), 28);
  EXPECT_EQ(db_sum("SELECT SUM(shadows) FROM daily_team"), 5);
  expect_served_counts(path_, served_unpriced, total);
  auto verified = verify_ledger(path_);
  ASSERT_TRUE(verified);
  EXPECT_TRUE(verified->ok()) << (verified->problems.empty() ? "" : verified->problems[0]);
}

TEST_F(ReportTest, AttemptsExportCarriesEveryHopOfTheMatchingRequests) {
  int64_t attempts = db_sum("SELECT COUNT(*) FROM attempts");
  ASSERT_GT(attempts, 0);
  std::string csv;
  ASSERT_TRUE(export_attempts_csv(path_, ReportFilter{}, [&](std::string_view chunk) {
    csv.append(chunk);
    return true;
  }));
  EXPECT_EQ(csv.rfind("request_seq,request_id,attempt,target,", 0), 0u) << csv.substr(0, 200);
  EXPECT_EQ(static_cast<int64_t>(std::count(csv.begin(), csv.end(), '\n')), attempts + 1);
  EXPECT_NE(csv.find(",gpu-mid,"), std::string::npos);
  // The request's filter: a team with no attempts, and one with some.
  ReportFilter filter;
  filter.target = "gpu-mid";  // the requests' target (every multi-hop request ended on gpu-large)
  std::string none;
  ASSERT_TRUE(export_attempts_csv(path_, filter, [&](std::string_view chunk) {
    none.append(chunk);
    return true;
  }));
  EXPECT_EQ(std::count(none.begin(), none.end(), '\n'), 1) << none;
}

// A report over the rows read in seq chunks (for progress) is the single query's report: the
// same groups in the same order, every column to the micro-unit, whatever the chunk size.
TEST_F(ReportTest, ChunkedRowsReportIsTheSingleQueryReport) {
  add_refusals_and_shadows(path_);
  {  // groups whose bytewise order is not the alphabetical one, and an empty task
    LedgerConfig config;
    config.path = path_;
    config.reference_model = "gpu-large";
    auto ledger = Ledger::open(config, catalog_from(kPrices), {});
    ASSERT_TRUE(ledger);
    int i = 0;
    for (const char* task : {"Task-Z", "task-\xc3\xa9", "task-10", "", "task-0"}) {
      RequestRecord r = simple_record("gpu-large", tokens_of(1000 + i, 7, 333, 11),
                                      kJune15 + 2 * kMicrosPerDay + 5000000 + i);
      r.task_id = task;
      r.team = "team-" + std::to_string(i++ % 3);
      (*ledger)->record(std::move(r), [](const Status& st) { EXPECT_TRUE(st); });
    }
    (*ledger)->flush();
  }
  int64_t rows = db_sum("SELECT COUNT(*) FROM requests");
  ASSERT_EQ(rows, db_sum("SELECT MAX(seq) - MIN(seq) + 1 FROM requests"));
  struct Case {
    const char* by;
    std::optional<std::string> task;
  };
  for (const Case& c : {Case{"task", {}}, Case{"team,day", {}}, Case{"key,rule", {}},
                        Case{"task,target", {}}, Case{"model", std::string("task-3")}}) {
    ReportQuery query;
    query.by = *parse_report_by_list(c.by);
    query.filter.task_id = c.task;
    query.force_raw = true;
    auto single = run_report(path_, query);
    ASSERT_TRUE(single) << single.error().message;
    ASSERT_GT(single->rows.size(), 1u) << c.by;
    ASSERT_FALSE(single->from_aggregate);
    std::string expected = format_report(*single, ReportFormat::kJson, true);
    for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{13}, rows - 1, rows, rows * 10}) {
      query.chunk_rows = chunk;
      std::vector<std::pair<int64_t, int64_t>> calls;
      auto chunked = run_report(
          path_, query, [&calls](int64_t done, int64_t total) { calls.emplace_back(done, total); });
      ASSERT_TRUE(chunked) << chunked.error().message;
      expect_same(*single, *chunked);
      EXPECT_EQ(chunked->totals.total, single->totals.total) << c.by << " chunk " << chunk;
      EXPECT_EQ(chunked->totals.avoided_base, single->totals.avoided_base) << c.by;
      // Every column (savings and averages included) through the JSON text.
      EXPECT_EQ(format_report(*chunked, ReportFormat::kJson, true), expected)
          << c.by << " chunk " << chunk;
      ASSERT_EQ(static_cast<int64_t>(calls.size()), (rows + chunk - 1) / chunk) << chunk;
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(calls[i].second, rows);
        EXPECT_EQ(calls[i].first, std::min(rows, chunk * static_cast<int64_t>(i + 1)));
      }
    }
  }
  // Progress alone chunks the rows (about kReportChunks chunks), with the same result.
  ReportQuery query;
  query.by = {ReportBy::kTask};
  query.force_raw = true;  // by task alone, task_totals would answer
  auto single = run_report(path_, query);
  ASSERT_TRUE(single);
  int calls = 0;
  int64_t last = 0;
  auto chunked = run_report(path_, query, [&](int64_t done, int64_t total) {
    ++calls;
    EXPECT_GT(done, last);
    last = done;
    EXPECT_EQ(total, rows);
  });
  ASSERT_TRUE(chunked);
  EXPECT_EQ(format_report(*chunked, ReportFormat::kCsv, true),
            format_report(*single, ReportFormat::kCsv, true));
  EXPECT_GT(calls, 1);
  EXPECT_LE(calls, kReportChunks);
  EXPECT_EQ(last, rows);
  // The daily aggregates and the task rollup answer in one query: no progress.
  query.force_raw = false;
  for (ReportBy by : {ReportBy::kTeam, ReportBy::kTask}) {
    query.by = {by};
    calls = 0;
    auto daily = run_report(path_, query, [&](int64_t, int64_t) { ++calls; });
    ASSERT_TRUE(daily);
    EXPECT_TRUE(daily->from_aggregate);
    EXPECT_EQ(calls, 0);
  }
}

TEST_F(ReportTest, TaskReportHasFirstAndLastRequest) {
  ReportQuery query;
  query.by = {ReportBy::kTask};
  auto report = run_report(path_, query);
  ASSERT_TRUE(report);
  ASSERT_EQ(report->rows.size(), 7u);
  EXPECT_TRUE(report->from_aggregate);  // task_totals (schema 11)
  query.force_raw = true;
  auto rows = run_report(path_, query);
  ASSERT_TRUE(rows);
  EXPECT_FALSE(rows->from_aggregate);
  for (const Report* r : {&*report, &*rows}) {
    const ReportRow& task0 = r->rows[0];
    EXPECT_EQ(task0.group[0], "task-0");
    EXPECT_EQ(task0.first_us,
              db_sum("SELECT MIN(started_us) FROM requests WHERE task_id='task-0'"));
    EXPECT_EQ(task0.last_us, db_sum("SELECT MAX(ended_us) FROM requests WHERE task_id='task-0'"));
    EXPECT_GT(task0.last_us, task0.first_us);
  }
}

TEST_F(ReportTest, FiltersAndDates) {
  ReportQuery query;
  query.by = {ReportBy::kDay};
  query.filter.team = "team-1";
  query.filter.from = CivilDate{2026, 6, 16};
  query.filter.to = CivilDate{2026, 6, 16};
  auto report = run_report(path_, query);
  ASSERT_TRUE(report);
  ASSERT_EQ(report->rows.size(), 1u);
  EXPECT_EQ(report->rows[0].group[0], "2026-06-16");
  EXPECT_EQ(report->totals.total.micros(),
            db_sum("SELECT COALESCE(SUM(cost_total),0) FROM requests WHERE team='team-1' AND "
                   "day='2026-06-16'"));
}

TEST_F(ReportTest, FiltersAreParameterisedNotSql) {
  const char* attacks[] = {
      "team-1' OR '1'='1",
      "team-1\" OR \"1\"=\"1",
      "x'; DROP TABLE requests; --",
      "') UNION SELECT name,1,1,1,1,1,1,1,1,1,1,1,1,1,1 FROM sqlite_master --",
      "%",
  };
  for (const char* attack : attacks) {
    for (bool raw : {false, true}) {
      ReportQuery query;
      query.by = {ReportBy::kTeam};
      query.force_raw = raw;
      query.filter.team = attack;
      query.filter.key_id = attack;
      auto report = run_report(path_, query);
      ASSERT_TRUE(report) << attack;
      EXPECT_TRUE(report->rows.empty()) << attack;
      EXPECT_EQ(report->totals.requests, 0);
      std::vector<std::string> chunks;
      ReportFilter filter;
      filter.task_id = attack;
      ASSERT_TRUE(export_csv(path_, filter, [&](std::string_view c) {
        chunks.emplace_back(c);
        return true;
      }));
      ASSERT_EQ(chunks.size(), 1u);  // the header only
    }
  }
  EXPECT_EQ(db_sum("SELECT COUNT(*) FROM requests"), 400);
}

TEST_F(ReportTest, MoneyIsExactDecimalTextInJsonAndCsv) {
  ReportQuery query;
  query.by = {ReportBy::kTeam};
  auto report = run_report(path_, query);
  ASSERT_TRUE(report);
  auto json = nlohmann::json::parse(format_report(*report, ReportFormat::kJson, true));
  EXPECT_EQ(json["currency"], "USD");
  ASSERT_EQ(json["groups"].size(), report->rows.size());
  Money sum;
  for (const auto& group : json["groups"]) {
    ASSERT_TRUE(group["cost"]["total"].is_string());
    ASSERT_TRUE(group["avg_per_request"].is_string());
    ASSERT_TRUE(group["savings"]["saved"].is_string());
    auto total = Money::parse(group["cost"]["total"].get<std::string>());
    ASSERT_TRUE(total);
    sum += *total;
  }
  EXPECT_EQ(json["totals"]["cost"]["total"].get<std::string>(), sum.to_string());
  EXPECT_EQ(sum, report->totals.total);
  std::string csv = format_report(*report, ReportFormat::kCsv, false);
  EXPECT_EQ(csv.rfind("team,requests,unpriced_requests,", 0), 0u);
  EXPECT_NE(csv.find("TOTAL,400,"), std::string::npos);
  EXPECT_NE(csv.find("," + report->totals.total.to_string() + ","), std::string::npos);
  std::string table = format_report(*report, ReportFormat::kTable, true);
  EXPECT_NE(table.find("saved"), std::string::npos);
  EXPECT_NE(table.find(report->totals.total.to_string()), std::string::npos);
}

TEST_F(ReportTest, SavingsCompareActualWithTheReferenceModel) {
  ReportQuery query;
  query.by = {ReportBy::kTarget};
  auto report = run_report(path_, query);
  ASSERT_TRUE(report);
  for (const auto& row : report->rows) {
    EXPECT_GE(row.avoided, Money());
    if (row.group[0] == "gpu-mid" || row.group[0] == "local-small") {
      EXPECT_GT(row.saved(), Money()) << row.group[0];
    }
    if (row.group[0] == "unpriced-model") {
      EXPECT_EQ(row.avoided, Money());
    }
  }
}

TEST_F(ReportTest, ExportStreamsInChunks) {
  std::vector<std::string> chunks;
  ASSERT_TRUE(export_csv(
      path_, ReportFilter{},
      [&](std::string_view c) {
        chunks.emplace_back(c);
        return true;
      },
      4096));
  EXPECT_GT(chunks.size(), 10u);
  std::string all;
  for (const auto& c : chunks) {
    EXPECT_LE(c.size(), 4096u + 4096u);
    all += c;
  }
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 401);
  EXPECT_EQ(all.rfind("seq,id,kind,", 0), 0u);
  // Unpriced rows have empty cost cells, never 0.
  EXPECT_NE(all.find(",unpriced,,,,,,,"), std::string::npos);
  // A sink that stops ends the export early.
  int calls = 0;
  ASSERT_TRUE(export_csv(
      path_, ReportFilter{}, [&](std::string_view) { return ++calls < 2; }, 1024));
  EXPECT_EQ(calls, 2);
}

TEST(ReportFormat, CsvFieldsAreQuotedAndDefused) {
  EXPECT_EQ(csv_field("plain", true), "plain");
  EXPECT_EQ(csv_field("a,b", true), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\"", true), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("=HYPERLINK(1)", true), "'=HYPERLINK(1)");
  EXPECT_EQ(csv_field("-1.500000", false), "-1.500000");
  EXPECT_FALSE(parse_report_by_list("team,team"));
  EXPECT_FALSE(parse_report_by_list("team;drop"));
  EXPECT_FALSE(parse_report_by_list(""));
}

}  // namespace
}  // namespace ferry::ledger
