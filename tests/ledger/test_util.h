// Helpers for the ledger tests: a temporary directory and small record builders.
// Single-threaded use per test.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>

#include "common/yaml_util.h"
#include "ledger/ledger.h"
#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
#include "tests/common/temp_dir.h"

namespace ferry::ledger::testing {

// SQL that takes a file back from schema 6 to how schema 4 left it (no constraint columns; daily
// and daily_team without the served counts), for tests that simulate older files.
// Schema 8's lever columns dropped (every undo below starts with it; schema 7's tasks table
// stays: its migration is CREATE TABLE IF NOT EXISTS).
#define FERRY_UNDO_SCHEMA_EIGHT                                                              \
  "ALTER TABLE requests DROP COLUMN trimmed_tokens; ALTER TABLE requests DROP COLUMN "       \
  "trim_avoided; ALTER TABLE requests DROP COLUMN cache; ALTER TABLE requests DROP COLUMN "  \
  "cache_tokens; ALTER TABLE requests DROP COLUMN cache_avoided; ALTER TABLE requests DROP " \
  "COLUMN reasoning_budget; "
inline constexpr const char* kUndoSchemaEight = FERRY_UNDO_SCHEMA_EIGHT;
inline constexpr const char* kUndoSchemaFive = FERRY_UNDO_SCHEMA_EIGHT
    "ALTER TABLE requests DROP COLUMN constraint_mode; ALTER TABLE requests DROP COLUMN "
    "schema_hash; "  // and schema 6
    "ALTER TABLE daily DROP COLUMN refused; ALTER TABLE daily DROP COLUMN shadows; "
    "ALTER TABLE daily DROP COLUMN unpriced_served; ALTER TABLE daily_team DROP COLUMN refused; "
    "ALTER TABLE daily_team DROP COLUMN shadows; "
    "ALTER TABLE daily_team DROP COLUMN unpriced_served; ";

// A ferry_ledger_XXXXXX directory, removed with its files at the end of the test.
class TempDir : public ferry::testing::TempDir {
 public:
  TempDir() : ferry::testing::TempDir("ferry_ledger") {}
};

// One price for `gpu-large` (3 / 15 per million input / output tokens), from 2026-01-01.
inline constexpr const char* kGpuLargePrices =
    "- {model: gpu-large, effective_from: 2026-01-01, input: 3.00, output: 15.00}\n";

inline PriceCatalog catalog_from(const std::string& yaml_text) {
  return PriceCatalog::from_yaml(yaml::parse(yaml_text, "test.yaml"), "test.yaml");
}

inline std::vector<BudgetDef> budgets_from(const std::string& yaml_text) {
  return parse_budgets(yaml::parse(yaml_text, "test.yaml"), "test.yaml");
}

// 2026-06-15T12:00:00Z
constexpr int64_t kJune15 = 1781524800LL * 1000000;

inline RequestRecord simple_record(const std::string& target, Tokens tokens,
                                   int64_t started_us = kJune15) {
  RequestRecord r;
  r.started_us = started_us;
  r.ended_us = started_us + 1500000;
  r.key_id = "key-a";
  r.team = "team-a";
  r.project = "proj-a";
  r.requested_model = target;
  r.target = target;
  r.upstream_model = target + "-upstream";
  r.rule_id = "default";
  r.policy_version = "p1";
  r.tokens = tokens;
  r.timings = Timings{10, 20, 300, 1500000};
  return r;
}

inline Tokens tokens_of(int64_t input, int64_t cached, int64_t output, int64_t reasoning,
                        TokenSource source = TokenSource::kBackend) {
  Tokens t;
  t.input = {input, source};
  t.cached_input = {cached, source};
  t.output = {output, source};
  t.reasoning = {reasoning, source};
  return t;
}

// Records and waits until durable.
inline Status record_durably(Ledger& ledger, RequestRecord record, std::string* id = nullptr) {
  std::promise<Status> done;
  auto fut = done.get_future();
  std::string got =
      ledger.record(std::move(record), [&done](const Status& st) { done.set_value(st); });
  if (id != nullptr) *id = got;
  return fut.get();
}

// The first column of the first row `sql` returns from the file (a count, a sum).
inline int64_t scalar(const std::string& path, const std::string& sql) {
  auto db = ledger_db_open(path, true);
  auto stmt = db->prepare(sql);
  EXPECT_TRUE(stmt) << sql;
  auto has = stmt->step();
  EXPECT_TRUE(has && *has);
  return stmt->int_at(0);
}

// The file's schema version (PRAGMA user_version); -1 when it cannot be read.
inline int64_t schema_version(const std::string& path) {
  auto db = ledger_db_open(path, true);
  if (!db) return -1;
  auto version = db->prepare("PRAGMA user_version");
  if (!version) return -1;
  auto has = version->step();
  return has && *has ? version->int_at(0) : -1;
}

}  // namespace ferry::ledger::testing
