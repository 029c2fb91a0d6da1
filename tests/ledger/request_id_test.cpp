// Schema 3: the gateway's request id on each row (stored, indexed, covered by the hash chain,
// exported, filtered on by the export and the report), and a schema-2 file that migrates
// with its old rows still verifying.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ledger/report.h"
#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
#include "ledger/store.h"
#include "ledger/verify.h"
#include "test_util.h"

namespace ferry::ledger {
namespace {

using testing::catalog_from;
using testing::record_durably;
using testing::simple_record;
using testing::TempDir;
using testing::tokens_of;

const char* kPrices = R"(
- {model: gpu-large, effective_from: 2026-01-01, input: 3.00, output: 15.00}
)";

std::unique_ptr<Ledger> open_ledger(const std::string& path) {
  LedgerConfig config;
  config.path = path;
  auto ledger = Ledger::open(config, catalog_from(kPrices), {});
  EXPECT_TRUE(ledger) << (ledger ? "" : ledger.error().message);
  return ledger ? std::move(*ledger) : nullptr;
}

// Records one row per id ("" = none), each with `input` + its index input tokens.
void record_rows(const std::string& path, const std::vector<std::string>& request_ids,
                 int64_t input = 10) {
  auto ledger = open_ledger(path);
  ASSERT_TRUE(ledger);
  for (size_t i = 0; i < request_ids.size(); ++i) {
    RequestRecord r =
        simple_record("gpu-large", tokens_of(input + static_cast<int64_t>(i), 0, 5, 0));
    r.request_id = request_ids[i];
    ASSERT_TRUE(record_durably(*ledger, r));
  }
}

std::vector<std::vector<std::string>> export_lines(const std::string& path,
                                                   const ReportFilter& filter) {
  std::string all;
  auto st = export_csv(path, filter, [&](std::string_view chunk) {
    all.append(chunk);
    return true;
  });
  EXPECT_TRUE(st) << (st ? "" : st.error().message);
  std::vector<std::vector<std::string>> lines;
  size_t pos = 0;
  while (pos < all.size()) {
    size_t nl = all.find('\n', pos);
    std::string line = all.substr(pos, nl - pos);
    pos = nl == std::string::npos ? all.size() : nl + 1;
    std::vector<std::string> cells;
    size_t start = 0;
    for (;;) {  // the ids and numbers these tests read have no quotes or commas
      size_t comma = line.find(',', start);
      cells.push_back(line.substr(start, comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    lines.push_back(std::move(cells));
  }
  return lines;
}

std::string cell(const std::vector<std::vector<std::string>>& lines, size_t row,
                 const std::string& column) {
  const auto& header = lines.at(0);
  auto it = std::find(header.begin(), header.end(), column);
  EXPECT_NE(it, header.end()) << column;
  if (it == header.end()) return "";
  return lines.at(row).at(static_cast<size_t>(it - header.begin()));
}

TEST(LedgerRequestId, StoredExportedAndFilteredOn) {
  TempDir dir;
  std::string path = dir.file("l.db");
  record_rows(path, {"abc-123", "other-1", "", "abc-1234"});

  auto all = export_lines(path, {});
  ASSERT_EQ(all.size(), 5u);  // the header and 4 rows
  EXPECT_EQ(all[0].back(), "request_id");
  EXPECT_EQ(cell(all, 1, "request_id"), "abc-123");
  EXPECT_EQ(cell(all, 3, "request_id"), "");  // none: NULL, an empty cell

  ReportFilter filter;
  filter.request_id = "abc-123";
  auto one = export_lines(path, filter);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(cell(one, 1, "request_id"), "abc-123");
  EXPECT_EQ(cell(one, 1, "input_tokens"), "10");  // the first row's, not abc-1234's

  ReportQuery query;
  query.by = {ReportBy::kTeam};
  query.filter.request_id = "abc-1234";
  auto report = run_report(path, query);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_FALSE(report->from_aggregate);  // the aggregates have no request id
  EXPECT_EQ(report->totals.requests, 1);
  EXPECT_EQ(report->totals.input_tokens, 13);
  query.filter.request_id = "missing";
  report = run_report(path, query);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->totals.requests, 0);

  auto verified = verify_ledger(path);
  ASSERT_TRUE(verified);
  EXPECT_TRUE(verified->ok()) << verified->problems.front();
  EXPECT_EQ(verified->rows, 4);
}

TEST(LedgerRequestId, TheFilterUsesAnIndex) {
  TempDir dir;
  std::string path = dir.file("l.db");
  record_rows(path, {"abc-123"});
  auto db = ledger_db_open(path, true);
  ASSERT_TRUE(db);
  auto plan = db->prepare("EXPLAIN QUERY PLAN SELECT seq FROM requests WHERE request_id = ?");
  ASSERT_TRUE(plan);
  plan->bind(1, std::string_view("abc-123"));
  std::string details;
  for (;;) {
    auto has = plan->step();
    ASSERT_TRUE(has);
    if (!*has) break;
    details += plan->text_at(3) + "\n";
  }
  EXPECT_NE(details.find("INDEX requests_request_id"), std::string::npos) << details;
}

TEST(LedgerRequestId, TheChainCoversIt) {
  for (const char* tamper :
       {"UPDATE requests SET request_id='abc-124'", "UPDATE requests SET request_id=NULL"}) {
    TempDir dir;
    std::string path = dir.file("l.db");
    record_rows(path, {"abc-123"});
    {
      auto db = ledger_db_open(path, false);
      ASSERT_TRUE(db->exec("DROP TRIGGER requests_no_update"));
      ASSERT_TRUE(db->exec(tamper));
    }
    auto verified = verify_ledger(path);
    ASSERT_TRUE(verified);
    EXPECT_FALSE(verified->ok()) << tamper;
    ASSERT_FALSE(verified->problems.empty());
    EXPECT_NE(verified->problems.front().find("hash mismatch"), std::string::npos);
  }
  // A row without an id that gains one is caught too.
  TempDir dir;
  std::string path = dir.file("l.db");
  record_rows(path, {""});
  {
    auto db = ledger_db_open(path, false);
    ASSERT_TRUE(db->exec("DROP TRIGGER requests_no_update"));
    ASSERT_TRUE(db->exec("UPDATE requests SET request_id='abc-123'"));
  }
  EXPECT_FALSE(verify_ledger(path)->ok());
}

TEST(LedgerRequestId, SchemaThreeFileReadsMigratesAndStillVerifies) {
  TempDir dir;
  std::string path = dir.file("l.db");
  record_rows(path, {"", ""});
  {
    // Back to schema 3, as a file written before version 4 looks.
    auto db = ledger_db_open(path, false);
    ASSERT_TRUE(db->exec(std::string(testing::kUndoSchemaFive) +
                         "DROP INDEX requests_request_id; ALTER TABLE requests DROP COLUMN "
                         "request_id; PRAGMA user_version=3"));
  }
  // Read-only tools on the old file: verify, export (an empty request_id column) and a filter
  // that nothing matches.
  auto old = verify_ledger(path);
  ASSERT_TRUE(old);
  EXPECT_TRUE(old->ok()) << old->problems.front();
  auto lines = export_lines(path, {});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(cell(lines, 1, "request_id"), "");
  ReportFilter filter;
  filter.request_id = "abc-123";
  EXPECT_EQ(export_lines(path, filter).size(), 1u);
  ReportQuery query;
  query.filter.request_id = "abc-123";
  auto report = run_report(path, query);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_EQ(report->totals.requests, 0);

  record_rows(path, {"abc-123"}, 50);  // migrates, then appends to the same chain
  EXPECT_EQ(testing::schema_version(path), kSchemaVersion);
  auto migrated = verify_ledger(path);
  ASSERT_TRUE(migrated);
  EXPECT_TRUE(migrated->ok()) << migrated->problems.front();
  EXPECT_EQ(migrated->rows, 3);
  auto found = export_lines(path, filter);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(cell(found, 1, "input_tokens"), "50");
}

}  // namespace
}  // namespace ferry::ledger
