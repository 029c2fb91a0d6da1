// Schema 2 and the append path behind it: the facts column (stored, hashed, read back by
// for_each_request), migration of a schema-1 file, tags that need escaping or are not UTF-8,
// the per-batch daily aggregates (daily and daily_team) against the rows, and reports that
// read daily_team giving what the rows give.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ledger/history.h"
#include "ledger/report.h"
#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
#include "ledger/sqlite_store.h"
#include "ledger/verify.h"
#include "test_util.h"

namespace ferry::ledger {
namespace {

using testing::catalog_from;
using testing::kJune15;
using testing::record_durably;
using testing::simple_record;
using testing::TempDir;
using testing::tokens_of;

const char* kPrices = R"(
- {model: gpu-large, effective_from: 2026-01-01, input: 3.00, cached_input: 0.30, output: 15.00}
- {model: local-small, effective_from: 2026-01-01, internal: true, input: 0.01, output: 0.02}
)";

std::unique_ptr<Ledger> open_ledger(const std::string& path) {
  LedgerConfig config;
  config.path = path;
  config.reference_model = "gpu-large";
  auto ledger = Ledger::open(config, catalog_from(kPrices), {});
  EXPECT_TRUE(ledger) << (ledger ? "" : ledger.error().message);
  return ledger ? std::move(*ledger) : nullptr;
}

std::string text_at(const std::string& path, const std::string& sql, const std::string& param) {
  auto db = ledger_db_open(path, true);
  auto stmt = db->prepare(sql);
  EXPECT_TRUE(stmt) << sql;
  stmt->bind(1, param);
  auto has = stmt->step();
  EXPECT_TRUE(has && *has) << sql;
  return stmt->is_null(0) ? "<null>" : stmt->text_at(0);
}

std::vector<RecordedRequest> all_requests(const std::string& path, HistoryQuery query = {}) {
  std::vector<RecordedRequest> out;
  auto st = for_each_request(path, query, [&](const RecordedRequest& r) {
    out.push_back(r);
    return true;
  });
  EXPECT_TRUE(st) << (st ? "" : st.error().message);
  return out;
}

TEST(LedgerEncoding, CanonicalValuesArePinned) {
  // The chain of every existing file depends on these bytes: they must never change.
  std::vector<Value> values = {std::monostate{},  int64_t{42},     int64_t{-7},
                               std::string("ab"), std::string(""), std::string("x;y:z")};
  EXPECT_EQ(canonical_values(values), "N;I42;I-7;T2:ab;T0:;T5:x;y:z;");
  EXPECT_EQ(row_hash({int64_t{1}}, {{std::string("a")}}),
            row_hash({int64_t{1}}, {{std::string("a")}}));
  EXPECT_NE(row_hash({int64_t{1}}, {}), row_hash({int64_t{1}, std::string("")}, {}));
}

TEST(LedgerHistory, FactsAreStoredHashedAndReadBack) {
  TempDir dir;
  std::string path = dir.file("l.db");
  std::string with_id;
  std::string without_id;
  {
    auto ledger = open_ledger(path);
    RequestRecord r = simple_record("gpu-large", tokens_of(100, 20, 30, 5));
    r.facts_json = R"({"model":"auto","prompt_tokens":120})";
    r.rule_id = "short";
    ASSERT_TRUE(record_durably(*ledger, r, &with_id));
    RequestRecord plain = simple_record("local-small", tokens_of(10, 0, 3, 0), kJune15 + 5000000);
    ASSERT_TRUE(record_durably(*ledger, plain, &without_id));
    Adjustment adj;
    adj.adjusts_id = with_id;
    adj.input = Money::from_micros(-100);
    adj.note = "refund";
    std::promise<Status> done;
    ledger->adjust(adj, [&](const Status& st) { done.set_value(st); });
    ASSERT_TRUE(done.get_future().get());
  }
  EXPECT_EQ(text_at(path, "SELECT facts FROM requests WHERE id=?", with_id),
            R"({"model":"auto","prompt_tokens":120})");
  EXPECT_EQ(text_at(path, "SELECT facts FROM requests WHERE id=?", without_id), "<null>");
  auto verified = verify_ledger(path);
  ASSERT_TRUE(verified);
  EXPECT_TRUE(verified->ok()) << verified->problems.front();

  auto rows = all_requests(path);  // adjustments are not requests
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].id, with_id);
  EXPECT_EQ(rows[0].facts_json, R"({"model":"auto","prompt_tokens":120})");
  EXPECT_EQ(rows[0].target, "gpu-large");
  EXPECT_EQ(rows[0].rule_id, "short");
  EXPECT_EQ(rows[0].tokens.input.count, 100);
  EXPECT_EQ(rows[0].tokens.cached_input.count, 20);
  EXPECT_EQ(rows[0].tokens.output.count, 30);
  EXPECT_EQ(rows[0].tokens.reasoning.count, 5);
  EXPECT_EQ(rows[0].tokens.output.source, TokenSource::kBackend);
  EXPECT_EQ(rows[0].cost.pricing, Pricing::kPriced);
  // 100 x 3 + 20 x 0.3 + 30 x 15 + 5 x 15 (reasoning at the output price) micro-units.
  EXPECT_EQ(rows[0].cost.total(), Money::from_micros(300 + 6 + 450 + 75));
  EXPECT_EQ(rows[1].facts_json, "");
  EXPECT_EQ(rows[1].cost.pricing, Pricing::kInternal);

  HistoryQuery only_facts;
  only_facts.with_facts_only = true;
  EXPECT_EQ(all_requests(path, only_facts).size(), 1u);
  HistoryQuery later;  // ends at or after the second row's end
  later.from_us = kJune15 + 5000000 + 1500000;
  ASSERT_EQ(all_requests(path, later).size(), 1u);
  EXPECT_EQ(all_requests(path, later)[0].id, without_id);
  HistoryQuery before = later;
  before.from_us.reset();
  before.to_us = later.from_us;
  ASSERT_EQ(all_requests(path, before).size(), 1u);
  EXPECT_EQ(all_requests(path, before)[0].id, with_id);
  int visited = 0;
  ASSERT_TRUE(for_each_request(path, {}, [&](const RecordedRequest&) { return ++visited < 1; }));
  EXPECT_EQ(visited, 1);
  EXPECT_EQ(*ledger_currency(path), "USD");
}

TEST(LedgerHistory, TheChainCoversTheFacts) {
  TempDir dir;
  std::string path = dir.file("l.db");
  std::string id;
  {
    auto ledger = open_ledger(path);
    RequestRecord r = simple_record("gpu-large", tokens_of(100, 0, 30, 0));
    r.facts_json = R"({"model":"auto","prompt_tokens":100})";
    ASSERT_TRUE(record_durably(*ledger, r, &id));
  }
  {
    auto db = ledger_db_open(path, false);
    ASSERT_TRUE(db->exec("DROP TRIGGER requests_no_update"));
    ASSERT_TRUE(db->exec(R"(UPDATE requests SET facts='{"model":"auto","prompt_tokens":1}')"));
  }
  auto verified = verify_ledger(path);
  ASSERT_TRUE(verified);
  EXPECT_FALSE(verified->ok());
  ASSERT_FALSE(verified->problems.empty());
  EXPECT_NE(verified->problems.front().find("hash mismatch"), std::string::npos);
  {
    auto db = ledger_db_open(path, false);  // removing the facts is caught too
    ASSERT_TRUE(db->exec("UPDATE requests SET facts=NULL"));
  }
  EXPECT_FALSE(verify_ledger(path)->ok());
}

TEST(LedgerHistory, SchemaOneFileMigratesAndTheChainContinues) {
  TempDir dir;
  std::string path = dir.file("l.db");
  {
    auto ledger = open_ledger(path);  // rows without facts hash as schema 1 rows do
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(record_durably(*ledger, simple_record("gpu-large", tokens_of(10 + i, 0, 5, 0))));
    }
  }
  {
    // Back to schema 1 as a file written before version 2 looks.
    auto db = ledger_db_open(path, false);
    ASSERT_TRUE(
        db->exec("DROP INDEX requests_request_id; ALTER TABLE requests DROP COLUMN request_id; "
                 "ALTER TABLE requests DROP COLUMN facts; DROP TABLE daily_team; "
                 "ALTER TABLE requests DROP COLUMN usage_check; "
                 "ALTER TABLE daily DROP COLUMN refused; ALTER TABLE daily DROP COLUMN shadows; "
                 "ALTER TABLE daily DROP COLUMN unpriced_served; "
                 "ALTER TABLE requests DROP COLUMN constraint_mode; "
                 "ALTER TABLE requests DROP COLUMN schema_hash; PRAGMA user_version=1"));
    ASSERT_TRUE(db->exec(testing::kUndoSchemaEight));
  }
  auto old = verify_ledger(path);  // read-only: no migration
  ASSERT_TRUE(old);
  EXPECT_TRUE(old->ok()) << old->problems.front();
  EXPECT_EQ(all_requests(path).size(), 3u);
  EXPECT_EQ(all_requests(path)[0].facts_json, "");
  ReportQuery query;  // no daily_team yet: the report reads daily
  query.by = {ReportBy::kTeam};
  auto before = run_report(path, query);
  ASSERT_TRUE(before);
  {
    auto ledger = open_ledger(path);  // migrates
    RequestRecord r = simple_record("gpu-large", tokens_of(7, 0, 1, 0));
    r.facts_json = R"({"model":"auto"})";
    ASSERT_TRUE(record_durably(*ledger, r));
  }
  EXPECT_EQ(testing::schema_version(path), kSchemaVersion);
  auto migrated = verify_ledger(path);
  ASSERT_TRUE(migrated);
  EXPECT_TRUE(migrated->ok()) << migrated->problems.front();
  EXPECT_EQ(migrated->rows, 4);
  auto after = run_report(path, query);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->totals.requests, before->totals.requests + 1);
  EXPECT_EQ(after->totals.total, before->totals.total + Money::from_micros(7 * 3 + 15));
}

TEST(LedgerHistory, TagsAreJsonAndBadUtf8NeverStopsTheWriter) {
  TempDir dir;
  std::string path = dir.file("l.db");
  std::vector<std::string> trusted = {"a\"b",
                                      "c\\d",
                                      "e\tf\x01g\n",
                                      "\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80",
                                      std::string("nul\0x", 5),
                                      "\x7f"};
  std::vector<std::string> claimed = {"ok", "bad\xff", "cut\xe2\x82", "\xc0\xaf", "\xed\xa0\x80"};
  std::string id;
  {
    auto ledger = open_ledger(path);
    RequestRecord r = simple_record("gpu-large", tokens_of(1, 0, 1, 0));
    r.trusted_tags = trusted;
    r.claimed_tags = claimed;
    ASSERT_TRUE(record_durably(*ledger, r, &id));
  }
  // Valid UTF-8: exactly what nlohmann::json writes (and reads back).
  std::string stored = text_at(path, "SELECT trusted_tags FROM requests WHERE id=?", id);
  EXPECT_EQ(stored, nlohmann::json(trusted).dump());
  EXPECT_EQ(nlohmann::json::parse(stored).get<std::vector<std::string>>(), trusted);
  // Invalid UTF-8: each bad byte becomes U+FFFD; the result is valid JSON.
  std::string bad = text_at(path, "SELECT claimed_tags FROM requests WHERE id=?", id);
  const std::string r = "\xef\xbf\xbd";
  EXPECT_EQ(nlohmann::json::parse(bad).get<std::vector<std::string>>(),
            (std::vector<std::string>{"ok", "bad" + r, "cut" + r + r, r + r, r + r + r}));
  auto verified = verify_ledger(path);
  ASSERT_TRUE(verified);
  EXPECT_TRUE(verified->ok());
}

// Many rows in one transaction across a few groups, one of them refused in the middle: the
// aggregates, summed once per group per batch, must equal the rows.
TEST(LedgerHistory, BatchAggregatesMatchTheRows) {
  TempDir dir;
  std::string path = dir.file("l.db");
  auto store = SqliteStore::open(path, "USD");
  ASSERT_TRUE(store);
  PriceCatalog prices = catalog_from(kPrices);
  std::vector<LedgerEntry> entries(300);
  std::vector<LedgerEntry*> ptrs;
  for (size_t i = 0; i < entries.size(); ++i) {
    LedgerEntry& e = entries[i];
    std::string target = i % 3 == 0 ? "local-small" : i % 3 == 1 ? "gpu-large" : "unpriced-m";
    e.record = simple_record(target, tokens_of(100 + static_cast<int64_t>(i), 3, 7, 1),
                             kJune15 + static_cast<int64_t>(i % 2) * 86400000000LL);
    e.record.id = "r" + std::to_string(i == 150 ? 10 : i);  // row 150 repeats row 10's id
    e.record.key_id = "key-" + std::to_string(i % 4);
    e.record.team = "team-" + std::to_string(i % 2);
    e.record.rule_id = "rule-" + std::to_string(i % 5);
    e.cost = prices.price(target, e.record.tokens, e.record.started_us);
    if (i % 7 != 0)
      e.avoided = prices.price("gpu-large", e.record.tokens, e.record.started_us).total();
    ptrs.push_back(&e);
  }
  auto result = store->append(ptrs);
  ASSERT_TRUE(result);
  for (size_t i = 0; i < result->size(); ++i)
    EXPECT_EQ(static_cast<bool>((*result)[i]), i != 150) << i;
  auto verified = verify_ledger(path);
  ASSERT_TRUE(verified);
  EXPECT_TRUE(verified->ok()) << verified->problems.front();
  EXPECT_EQ(verified->rows, 299);

  // Every grouping the reports offer: daily_team, daily and the rows agree to the micro-unit.
  for (auto by : std::vector<std::vector<ReportBy>>{{ReportBy::kTeam},
                                                    {ReportBy::kDay},
                                                    {ReportBy::kTeam, ReportBy::kDay},
                                                    {ReportBy::kMonth, ReportBy::kModel},
                                                    {ReportBy::kTarget, ReportBy::kProject}}) {
    ReportQuery fast;
    fast.by = by;
    ReportQuery daily = fast;
    daily.force_full_aggregate = true;
    ReportQuery rows = fast;
    rows.force_raw = true;
    auto a = run_report(path, fast);
    auto b = run_report(path, daily);
    auto c = run_report(path, rows);
    ASSERT_TRUE(a && b && c);
    ASSERT_EQ(a->rows.size(), c->rows.size());
    ASSERT_EQ(b->rows.size(), c->rows.size());
    for (size_t i = 0; i < a->rows.size(); ++i) {
      for (const Report* other : {&*b, &*c}) {
        const ReportRow& x = a->rows[i];
        const ReportRow& y = other->rows[i];
        EXPECT_EQ(x.group, y.group);
        EXPECT_EQ(x.requests, y.requests);
        EXPECT_EQ(x.unpriced_requests, y.unpriced_requests);
        EXPECT_EQ(x.input_tokens, y.input_tokens);
        EXPECT_EQ(x.cached_tokens, y.cached_tokens);
        EXPECT_EQ(x.reasoning_tokens, y.reasoning_tokens);
        EXPECT_EQ(x.total, y.total);
        EXPECT_EQ(x.avoided, y.avoided);
        EXPECT_EQ(x.avoided_base, y.avoided_base);
        EXPECT_EQ(x.first_us, y.first_us);
        EXPECT_EQ(x.last_us, y.last_us);
      }
    }
    EXPECT_EQ(a->totals.requests, 299);
    EXPECT_EQ(a->totals.unpriced_requests, 100);
  }
  {
    // A report by key still works (from daily) and a corrupted daily_team is caught.
    ReportQuery by_key;
    by_key.by = {ReportBy::kKey};
    auto keys = run_report(path, by_key);
    ASSERT_TRUE(keys);
    EXPECT_EQ(keys->rows.size(), 4u);
    auto db = ledger_db_open(path, false);
    ASSERT_TRUE(
        db->exec("UPDATE daily_team SET cost_total = cost_total + 1 WHERE team = 'team-0' "
                 "AND target = 'gpu-large'"));
  }
  auto broken = verify_ledger(path);
  ASSERT_TRUE(broken);
  EXPECT_FALSE(broken->ok());
}

}  // namespace
}  // namespace ferry::ledger
