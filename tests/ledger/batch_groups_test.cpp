// A batch's rows and their groups (ledger/store.h: the daily aggregates and the rollups are
// summed per group in the batch, and a row of the same group as the row before it adds to that
// group's delta without looking it up): the same random rows appended in batches of random
// sizes and appended one per transaction leave the same database, table for table and row for
// row (the requests, their hash chain, the daily aggregates, the rollups and the task groups).
#include <gtest/gtest.h>

#include <random>

#include "ledger/sqlite_db.h"
#include "ledger/sqlite_store.h"
#include "ledger/store.h"
#include "test_util.h"

namespace ferry::ledger {
namespace {

using testing::catalog_from;
using testing::kJune15;
using testing::simple_record;
using testing::TempDir;
using testing::tokens_of;

const char* kPrices = R"(
- {model: gpu-large, effective_from: 2026-01-01, input: 3.00, cached_input: 0.30, output: 15.00, reasoning: 15.00}
- {model: local-small, effective_from: 2026-01-01, internal: true, input: 0.01, output: 0.02}
)";

// Rows whose group columns are drawn from a few values each; about half of them repeat the
// group of the row before (as a batch's rows mostly do), the others change one column or more.
std::vector<LedgerEntry> random_entries(uint32_t seed, int count) {
  std::mt19937 rng(seed);
  auto pick = [&](std::initializer_list<const char*> values) {
    std::uniform_int_distribution<size_t> d(0, values.size() - 1);
    return std::string(values.begin()[d(rng)]);
  };
  auto chance = [&](int percent) {
    return std::uniform_int_distribution<int>(0, 99)(rng) < percent;
  };
  const PriceCatalog catalog = catalog_from(kPrices);
  std::vector<LedgerEntry> out;
  RequestRecord before;
  for (int i = 0; i < count; ++i) {
    const std::string model = pick({"gpu-large", "local-small", "unpriced-model"});
    const int64_t day = std::uniform_int_distribution<int64_t>(0, 2)(rng);
    RequestRecord r = simple_record(model,
                                    tokens_of(std::uniform_int_distribution<int64_t>(1, 5000)(rng),
                                              std::uniform_int_distribution<int64_t>(0, 50)(rng),
                                              std::uniform_int_distribution<int64_t>(0, 900)(rng),
                                              std::uniform_int_distribution<int64_t>(0, 30)(rng)),
                                    kJune15 + day * 86400LL * 1000000 +
                                        std::uniform_int_distribution<int64_t>(0, 3600000000)(rng));
    r.key_id = pick({"key-a", "key-b", "key-c"});
    r.team = pick({"team-a", "team-b"});
    r.project = pick({"proj-a", "proj-b"});
    r.rule_id = pick({"default", "cheap"});
    r.task_id = pick({"", "", "task-1", "task-2", "task-3"});
    if (i > 0 && chance(55)) {  // the group of the row before, its own counts and times
      r.key_id = before.key_id;
      r.team = before.team;
      r.project = before.project;
      r.rule_id = before.rule_id;
      r.task_id = before.task_id;
      r.requested_model = r.target = before.target;
      r.upstream_model = before.upstream_model;
      r.started_us = before.started_us + std::uniform_int_distribution<int64_t>(-5000, 5000)(rng);
      r.ended_us = r.started_us + 1500000;
    }
    if (chance(10)) r.status = RequestStatus::kRefused;
    if (chance(10)) r.trusted_tags.push_back(std::string(kShadowTag));
    r.id = "row-" + std::to_string(i);
    LedgerEntry e;
    e.record = r;
    e.cost = catalog.price(r.target, r.tokens, r.started_us);
    if (chance(30))
      e.avoided = Money::from_micros(std::uniform_int_distribution<int64_t>(0, 99999)(rng));
    out.push_back(std::move(e));
    before = std::move(r);
  }
  return out;
}

// Every table's rows in a fixed order, each row as text.
std::map<std::string, std::vector<std::string>> contents(const std::string& path) {
  std::map<std::string, std::vector<std::string>> out;
  auto db = Db::open(path, true);
  EXPECT_TRUE(db) << (db ? "" : db.error().message);
  if (!db) return out;
  auto tables = db->prepare(
      "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY 1");
  EXPECT_TRUE(tables);
  std::vector<std::string> names;
  while (*tables->step()) names.push_back(tables->text_at(0));
  for (const std::string& table : names) {
    auto rows = db->prepare("SELECT * FROM \"" + table + "\"");
    EXPECT_TRUE(rows) << table;
    std::vector<std::string>& lines = out[table];
    while (*rows->step()) {
      std::string line;
      bool all_zero = true;
      for (int c = 0; c < rows->column_count(); ++c) {
        Value v = rows->value_at(c);
        if (std::holds_alternative<std::monostate>(v)) line += "NULL";
        if (const auto* i = std::get_if<int64_t>(&v)) {
          line += "I" + std::to_string(*i);
          all_zero = all_zero && *i == 0;
        }
        if (const auto* s = std::get_if<std::string>(&v)) line += "T" + *s;
        line += '|';
      }
      // A task moved to another group (an earlier day, a smaller team) leaves its old group's
      // row at zero; which of those rows exist depends on the rows a transaction held, not
      // on the sums, which must be equal.
      if (table.rfind("task_group", 0) == 0 && all_zero) continue;
      lines.push_back(std::move(line));
    }
    std::sort(lines.begin(), lines.end());
  }
  return out;
}

TEST(BatchGroups, BatchesOfAnySizeLeaveTheDatabaseOneRowATransactionLeaves) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    TempDir dir;
    const std::string batched = dir.file("batched.db"), single = dir.file("single.db");
    std::vector<LedgerEntry> rows_a = random_entries(seed, 700);
    std::vector<LedgerEntry> rows_b = rows_a;
    {
      auto a = SqliteStore::open(batched, "USD");
      auto b = SqliteStore::open(single, "USD");
      ASSERT_TRUE(a && b);
      std::mt19937 rng(seed * 7919);
      for (size_t begin = 0; begin < rows_a.size();) {
        size_t end =
            std::min(rows_a.size(), begin + std::uniform_int_distribution<size_t>(1, 120)(rng));
        std::vector<LedgerEntry*> batch;
        for (size_t i = begin; i < end; ++i) batch.push_back(&rows_a[i]);
        auto result = a->append(batch);
        ASSERT_TRUE(result) << result.error().message;
        for (const Status& st : *result) ASSERT_TRUE(st);
        begin = end;
      }
      for (LedgerEntry& e : rows_b) {
        std::vector<LedgerEntry*> one{&e};
        auto result = b->append(one);
        ASSERT_TRUE(result) << result.error().message;
        ASSERT_TRUE((*result)[0]);
      }
    }
    auto got = contents(batched);
    auto want = contents(single);
    // Not a trivial comparison: rows in every table a batch writes, many groups in each.
    ASSERT_EQ(got["requests"].size(), 700u);
    EXPECT_GT(want["daily"].size(), 40u);
    EXPECT_GT(want["daily_team"].size(), 20u);
    EXPECT_GT(want["daily_key"].size(), 10u);
    EXPECT_GE(want["task_totals"].size(), 3u);
    EXPECT_GT(want["task_targets"].size(), 6u);
    EXPECT_EQ(want["daily_untasked"].size(), 3u);
    EXPECT_FALSE(want["task_groups"].empty());
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [table, lines] : want) {
      SCOPED_TRACE(table);
      ASSERT_EQ(got[table].size(), lines.size());
      for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(got[table][i], lines[i]);
    }
  }
}

}  // namespace
}  // namespace ferry::ledger
