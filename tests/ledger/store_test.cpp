// One suite, two stores: every test here runs against SQLite and against PostgreSQL (the
// server scripts/pg_test.sh starts; FERRY_TEST_PG_URL). Without that URL the PostgreSQL cases
// skip with a message, except under CI (CI=true), where they fail.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <future>
#include <latch>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/clock.h"
#include "ledger/history.h"
#include "ledger/journal.h"
#include "ledger/keys.h"
#include "ledger/ledger.h"
#include "ledger/pg_db.h"
#include "ledger/pg_store.h"
#include "ledger/report.h"
#include "ledger/response_store.h"
#include "ledger/row_log.h"
#include "ledger/sqlite_store.h"
#include "ledger/tasks.h"
#include "ledger/verify.h"
#include "pg_outage.h"
#include "test_util.h"
#include "tests/common/csv_rows.h"

namespace ferry::ledger {
namespace {

using namespace ferry::ledger::testing;

constexpr const char* kPrices = R"(
- {model: gpu-large, effective_from: 2026-01-01, input: 3.00, cached_input: 0.30, output: 15.00, reasoning: 15.00}
)";

// A fresh, empty database of one kind, dropped at the end.
class TestDb {
 public:
  virtual ~TestDb() = default;
  virtual LedgerConfig config(const std::string& instance) = 0;
  virtual Status exec(const std::string& sql) = 0;
  virtual int64_t scalar(const std::string& sql) = 0;
  // SQL that lets the next statement alter a ledger row (the triggers refuse it otherwise).
  virtual std::string allow_tampering() const = 0;
  virtual std::string set_newer_schema() const = 0;
  virtual bool shared() const = 0;
};

class SqliteTestDb final : public TestDb {
 public:
  LedgerConfig config(const std::string&) override {
    LedgerConfig c;
    c.path = dir_.file("l.db");
    return c;
  }
  Status exec(const std::string& sql) override {
    auto db = ledger_db_open(dir_.file("l.db"), false);
    if (!db) return db.error();
    return db->exec(sql);
  }
  int64_t scalar(const std::string& sql) override {
    auto db = ledger_db_open(dir_.file("l.db"), true);
    if (!db) return -1;
    auto stmt = db->prepare(sql);
    if (!stmt) return -1;
    auto row = stmt->step();
    return row && *row ? stmt->int_at(0) : -1;
  }
  std::string allow_tampering() const override { return "DROP TRIGGER requests_no_update"; }
  std::string set_newer_schema() const override { return "PRAGMA user_version=99"; }
  bool shared() const override { return false; }

 private:
  TempDir dir_;
};

std::string pg_base_url() {
  const char* url = std::getenv("FERRY_TEST_PG_URL");
  return url != nullptr ? url : "";
}

class PgTestDb final : public TestDb {
 public:
  PgTestDb() {
    static std::atomic<int> counter{0};
    name_ = "ferry_t" + std::to_string(getpid()) + "_" + std::to_string(counter.fetch_add(1));
    std::string base = pg_base_url();
    auto admin = PgConn::connect(base);
    EXPECT_TRUE(admin) << (admin ? "" : admin.error().message);
    if (!admin) return;
    EXPECT_TRUE(admin->exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)"));
    EXPECT_TRUE(admin->exec("CREATE DATABASE " + name_));
    url_ = base.substr(0, base.rfind('/') + 1) + name_;
  }
  ~PgTestDb() override {
    auto admin = PgConn::connect(pg_base_url());
    if (admin) (void)admin->exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
  }
  LedgerConfig config(const std::string& instance) override {
    LedgerConfig c;
    c.path = url_;
    c.postgres = PgLedgerConfig{};
    c.postgres->url = url_;
    c.postgres->instance_id = instance;
    c.postgres->lease_refresh_ms = 20;
    return c;
  }
  Status exec(const std::string& sql) override {
    auto conn = PgConn::connect(url_);
    if (!conn) return conn.error();
    return conn->exec(sql);
  }
  int64_t scalar(const std::string& sql) override {
    auto conn = PgConn::connect(url_);
    if (!conn) return -1;
    auto rows = conn->run(sql);
    return rows && rows->rows() > 0 ? rows->integer(0, 0) : -1;
  }
  std::string allow_tampering() const override {
    return "ALTER TABLE requests DISABLE TRIGGER requests_append_only";
  }
  std::string set_newer_schema() const override {
    return "UPDATE meta SET value='99' WHERE key='schema_version'";
  }
  bool shared() const override { return true; }
  const std::string& url() const { return url_; }

 private:
  std::string name_;
  std::string url_;
};

class LedgerStore : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      db_ = std::make_unique<SqliteTestDb>();
      return;
    }
    if (pg_base_url().empty()) {
      const char* ci = std::getenv("CI");
      if (ci != nullptr && std::string(ci) == "true") {
        FAIL() << "FERRY_TEST_PG_URL is not set under CI: scripts/test.sh starts PostgreSQL "
                  "(scripts/pg_test.sh) and must export it";
      }
      GTEST_SKIP() << "PostgreSQL tests skipped: FERRY_TEST_PG_URL is not set (run through "
                      "scripts/test.sh, or scripts/pg_test.sh start DIR and export the URL)";
    }
    db_ = std::make_unique<PgTestDb>();
  }

  std::unique_ptr<Ledger> open(const std::string& instance = "gw-1",
                               std::vector<BudgetDef> budgets = {}) {
    auto opened = Ledger::open(db_->config(instance), catalog_from(kPrices), std::move(budgets));
    EXPECT_TRUE(opened) << (opened ? "" : opened.error().message);
    return opened ? std::move(*opened) : nullptr;
  }

  VerifyResult verify() {
    auto result = verify_ledger(db_->config("").path);
    EXPECT_TRUE(result) << (result ? "" : result.error().message);
    return result ? *result : VerifyResult{};
  }

  std::unique_ptr<TestDb> db_;
};

RequestRecord rich_record(int i) {
  RequestRecord r = simple_record("gpu-large", tokens_of(100 + i, 10, 50 + i, 0));
  r.started_us += i;
  r.ended_us += i;
  r.trusted_tags = {"t" + std::to_string(i % 3)};
  r.facts_json = R"({"n":)" + std::to_string(i) + "}";
  if (i % 4 == 0) r.usage_check = "usage over the limit";
  if (i % 2 == 0) r.request_id = "req-" + std::to_string(i);
  if (i % 5 == 0) {  // a fallback: two attempts, each priced
    AttemptRecord a;
    a.target = "gpu-large";
    a.upstream_model = "gpu-large-upstream";
    a.status = RequestStatus::kError;
    a.http_status = 500;
    a.error_code = "upstream_error";
    a.started_us = r.started_us;
    a.ended_us = r.started_us + 10;
    a.tokens = tokens_of(100, 0, 0, 0);
    AttemptRecord b = a;
    b.status = RequestStatus::kOk;
    b.http_status = 200;
    b.error_code = "";
    b.tokens = r.tokens;
    r.attempts = {a, b};
  }
  return r;
}

// The server's key watcher reads the stored keys every second over one connection: it sees
// keys created and revoked after it connected, and after a failed read it connects again.
TEST_P(LedgerStore, StoredKeysAreReadAgainOverOneConnection) {
  auto ledger = open();
  ASSERT_TRUE(ledger);
  const std::string db = db_->config("gw-1").path;
  StoredKeyReader reader(db);
  auto none = reader.read();
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->active.empty());
  EXPECT_FALSE(none->ever_stored);
  StoredKey spec;
  spec.id = "k-one";
  spec.team = "search";
  spec.role = "app";
  ASSERT_TRUE(create_key(db, spec, {}));
  spec.id = "k-two";
  ASSERT_TRUE(create_key(db, spec, {}));
  // The ledger's mark of a shadow copy's row is no key's tag.
  StoredKey shadowed = spec;
  shadowed.id = "k-shadow";
  shadowed.tags = {"shadow"};
  auto refused = create_key(db, shadowed, {});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().param, "tags");
  auto two = reader.read();
  ASSERT_TRUE(two) << two.error().message;
  ASSERT_EQ(two->active.size(), 2u);
  EXPECT_EQ(two->active[0].id, "k-one");
  EXPECT_EQ(two->active[0].team, "search");
  EXPECT_TRUE(two->ever_stored);
  ASSERT_TRUE(revoke_key(db, "k-one", 5));
  ASSERT_TRUE(revoke_key(db, "k-two", 6));
  auto revoked = reader.read();
  ASSERT_TRUE(revoked) << revoked.error().message;
  EXPECT_TRUE(revoked->active.empty());
  EXPECT_TRUE(revoked->ever_stored);  // authentication stays on
  EXPECT_EQ(reader.connects(), 1);
  // A read that fails drops the connection; the next read connects again.
  ASSERT_TRUE(db_->exec("ALTER TABLE api_keys RENAME TO api_keys_away"));
  EXPECT_FALSE(reader.read());
  ASSERT_TRUE(db_->exec("ALTER TABLE api_keys_away RENAME TO api_keys"));
  auto again = reader.read();
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->ever_stored);
  EXPECT_EQ(reader.connects(), 2);
}

// The watcher's poll reads the keys again only when they changed: one aggregate query says so
// for every change ferry makes (a key created, a key revoked), and after a failed poll the next
// one reads them all.
TEST_P(LedgerStore, StoredKeysArePolledAndReadOnlyWhenChanged) {
  auto ledger = open();
  ASSERT_TRUE(ledger);
  const std::string db = db_->config("gw-1").path;
  StoredKeyReader reader(db);
  auto first = reader.poll();
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_TRUE(first->has_value());  // the first poll reads
  EXPECT_TRUE((*first)->active.empty());
  EXPECT_FALSE((*first)->ever_stored);
  auto same = reader.poll();
  ASSERT_TRUE(same) << same.error().message;
  EXPECT_FALSE(same->has_value());
  EXPECT_EQ(reader.full_reads(), 1);

  StoredKey spec;
  spec.id = "k-one";
  spec.team = "search";
  spec.role = "app";
  ASSERT_TRUE(create_key(db, spec, {}));
  auto created = reader.poll();
  ASSERT_TRUE(created) << created.error().message;
  ASSERT_TRUE(created->has_value());
  ASSERT_EQ((*created)->active.size(), 1u);
  EXPECT_EQ((*created)->active[0].id, "k-one");
  EXPECT_TRUE((*created)->ever_stored);
  spec.id = "k-two";
  ASSERT_TRUE(create_key(db, spec, {}));
  spec.id = "k-three";
  ASSERT_TRUE(create_key(db, spec, {}));
  auto more = reader.poll();
  ASSERT_TRUE(more && more->has_value());
  EXPECT_EQ((*more)->active.size(), 3u);
  ASSERT_TRUE(reader.poll());
  EXPECT_EQ(reader.full_reads(), 3);

  // Revoking the newest key and then an older one: each is a change (the revoked count).
  ASSERT_TRUE(revoke_key(db, "k-three", 7));
  auto revoked = reader.poll();
  ASSERT_TRUE(revoked && revoked->has_value());
  ASSERT_EQ((*revoked)->active.size(), 2u);
  EXPECT_EQ((*revoked)->active[1].id, "k-two");
  ASSERT_TRUE(revoke_key(db, "k-one", 6));
  auto older = reader.poll();
  ASSERT_TRUE(older && older->has_value());
  ASSERT_EQ((*older)->active.size(), 1u);
  EXPECT_EQ((*older)->active[0].id, "k-two");
  auto quiet = reader.poll();
  ASSERT_TRUE(quiet && !quiet->has_value());
  // Revoking a revoked key changes nothing, and no read follows.
  ASSERT_TRUE(revoke_key(db, "k-one", 9));
  auto twice = reader.poll();
  ASSERT_TRUE(twice && !twice->has_value());
  EXPECT_EQ(reader.full_reads(), 5);

  // A failed poll drops the connection; the next one connects again and reads the keys.
  ASSERT_TRUE(db_->exec("ALTER TABLE api_keys RENAME TO api_keys_away"));
  EXPECT_FALSE(reader.poll());
  ASSERT_TRUE(db_->exec("ALTER TABLE api_keys_away RENAME TO api_keys"));
  auto again = reader.poll();
  ASSERT_TRUE(again) << again.error().message;
  ASSERT_TRUE(again->has_value());
  EXPECT_EQ((*again)->active.size(), 1u);
  EXPECT_EQ(reader.connects(), 2);
  EXPECT_EQ(reader.full_reads(), 6);
}

// The watcher keeps its statements prepared between polls (SQLite): none may keep its read
// transaction open, or the writers' checkpoints could never empty the WAL while ferry runs.
TEST_P(LedgerStore, KeptStatementsHoldNoReadBetweenPolls) {
  if (db_->shared()) GTEST_SKIP() << "SQLite's WAL only";
  auto ledger = open();
  ASSERT_TRUE(ledger);
  const std::string db = db_->config("gw-1").path;
  StoredKeyReader reader(db);
  StoredKey spec;
  spec.id = "k-one";
  spec.role = "app";
  ASSERT_TRUE(create_key(db, spec, {}));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(reader.poll());  // one read, then two kept polls
  EXPECT_EQ(reader.full_reads(), 1);
  spec.id = "k-two";
  ASSERT_TRUE(create_key(db, spec, {}));  // frames a reader's snapshot would pin
  auto writer = ledger_db_open(db, false);
  ASSERT_TRUE(writer);
  auto checkpoint = writer->prepare("PRAGMA wal_checkpoint(TRUNCATE)");
  ASSERT_TRUE(checkpoint);
  auto row = checkpoint->step();
  ASSERT_TRUE(row && *row);
  EXPECT_EQ(checkpoint->int_at(0), 0) << "a reader kept the WAL busy";
  EXPECT_EQ(checkpoint->int_at(1), 0) << "the WAL was not emptied";
  checkpoint->reset();
  auto changed = reader.poll();  // the kept statements read the checkpointed file
  ASSERT_TRUE(changed && changed->has_value());
  EXPECT_EQ((*changed)->active.size(), 2u);
}

TEST_P(LedgerStore, SameRowsVerifyAndBudgetsRebuildFromThem) {
  std::string adjusted;
  {
    auto ledger = open();
    ASSERT_TRUE(ledger);
    for (int i = 0; i < 40; ++i) {
      std::string id;
      ASSERT_TRUE(record_durably(*ledger, rich_record(i), &id));
      if (i == 3) adjusted = id;
    }
    Adjustment refund;
    refund.adjusts_id = adjusted;
    refund.output = Money::from_micros(-25);
    refund.note = "refund";
    std::promise<Status> done;
    ledger->adjust(refund, [&](const Status& st) { done.set_value(st); });
    ASSERT_TRUE(done.get_future().get());
  }
  VerifyResult v = verify();
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
  EXPECT_EQ(v.rows, 41);
  EXPECT_EQ(v.adjustments, 1);
  EXPECT_EQ(v.attempts, 16);  // rows 0, 5, ..., 35: two each
  int64_t sum = db_->scalar("SELECT SUM(cost_total) FROM requests");
  EXPECT_GT(sum, 0);
  EXPECT_EQ(db_->scalar("SELECT SUM(cost_total) FROM daily"), sum);
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM prices"), 1);
  // The adjustment took the original's attribution.
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests WHERE kind='adjustment' AND "
                        "team='team-a' AND key_id='key-a'"),
            1);
  // A budget's spent figure is rebuilt from the rows on open.
  auto budgets = budgets_from(R"(
- name: team-month
  scope: team
  match: team-a
  amount: 1000.00
  period: month
  mode: soft
)");
  auto reopened = open("gw-1", budgets);
  ASSERT_TRUE(reopened);
  // The rows are in June 2026; the current month's spent is what ended in it.
  PeriodBounds now = budget_period_at(budgets[0], unix_micros_now());
  EXPECT_EQ(
      reopened->budgets()[0].spent.micros(),
      db_->scalar("SELECT COALESCE(SUM(cost_total),0) FROM requests WHERE ended_us >= " +
                  std::to_string(now.start_us) + " AND ended_us < " + std::to_string(now.end_us)));
}

TEST_P(LedgerStore, ReportsEqualTheRowsFromEverySource) {
  {
    auto ledger = open();
    ASSERT_TRUE(ledger);
    for (int i = 0; i < 30; ++i) {
      RequestRecord r = rich_record(i);
      r.team = i % 3 == 0 ? "team-b" : "team-a";
      r.task_id = "task-" + std::to_string(i % 4);
      if (i % 7 == 0) r.status = RequestStatus::kRefused;
      if (i % 11 == 0) r.trusted_tags.push_back(std::string(kShadowTag));
      ASSERT_TRUE(record_durably(*ledger, r));
    }
  }
  int64_t sum = db_->scalar("SELECT SUM(cost_total) FROM requests");
  int64_t refused = db_->scalar("SELECT COUNT(*) FROM requests WHERE status='refused'");
  ASSERT_GT(refused, 0);
  std::vector<ReportQuery> queries(4);
  queries[0].by = {ReportBy::kTeam};                 // daily_team
  queries[1].by = {ReportBy::kKey, ReportBy::kDay};  // daily
  queries[2].by = {ReportBy::kTask};                 // the rows
  queries[3].by = {ReportBy::kTeam, ReportBy::kModel};
  queries[3].force_raw = true;
  std::optional<ReportRow> first;
  for (const auto& q : queries) {
    auto report = run_report(db_->config("").path, q);
    ASSERT_TRUE(report) << report.error().message;
    EXPECT_EQ(report->currency, "USD");
    EXPECT_EQ(report->totals.total.micros(), sum);
    EXPECT_EQ(report->totals.refused_requests, refused);
    EXPECT_GT(report->totals.shadow_requests, 0);
    if (!first) first = report->totals;
    EXPECT_EQ(report->totals.requests, first->requests);
    EXPECT_EQ(report->totals.input_tokens, first->input_tokens);
  }
  ReportQuery team_b;
  team_b.by = {ReportBy::kTeam};
  team_b.filter.team = "team-b";
  auto only_b = run_report(db_->config("").path, team_b);
  ASSERT_TRUE(only_b);
  ASSERT_EQ(only_b->rows.size(), 1u);
  EXPECT_EQ(only_b->totals.total.micros(),
            db_->scalar("SELECT SUM(cost_total) FROM requests WHERE team='team-b'"));
}

// The cost levers' columns (trimmed tokens, the cache's hit/miss/bypass and the tokens a hit
// would have cost, the reasoning budget applied) written and read back alike by both stores,
// and the savings by lever reconciling to the micro-unit with the priced rows.
TEST_P(LedgerStore, LeverColumnsRoundTripAndTheSavingsReconcile) {
  {
    auto ledger = open();
    ASSERT_TRUE(ledger);
    for (int i = 0; i < 12; ++i) {
      RequestRecord r = simple_record("gpu-large", tokens_of(100 + i, 0, 20, 0));
      r.started_us += i;
      r.ended_us += i;
      if (i % 3 == 0) r.trimmed_tokens = 1000 + i;
      r.cache = i % 4 == 0 ? "hit" : i % 4 == 1 ? "miss" : i % 4 == 2 ? "bypass" : "";
      if (r.cache == "hit") {
        r.cache_tokens = tokens_of(500, 0, 40 + i, 0);
        r.tokens = Tokens{};
      }
      if (i % 2 == 1) r.reasoning_budget = i % 5 == 0 ? "dropped: no budget" : "budget:64";
      ASSERT_TRUE(record_durably(*ledger, r));
    }
  }
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests WHERE cache='hit'"), 3);
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests WHERE cache='miss'"), 3);
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests WHERE cache='bypass'"), 3);
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests WHERE cache_avoided IS NOT NULL"), 3);
  EXPECT_EQ(db_->scalar("SELECT SUM(trimmed_tokens) FROM requests WHERE trimmed_tokens > 0"),
            1000 + 1003 + 1006 + 1009);
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests WHERE reasoning_budget='budget:64'"), 5);
  ReportQuery q;
  q.by = {ReportBy::kTeam};
  q.levers = true;
  auto report = run_report(db_->config("").path, q);
  ASSERT_TRUE(report) << report.error().message;
  ASSERT_TRUE(report->levers);
  const LeverSavings& l = *report->levers;
  EXPECT_EQ(l.cache_hits, 3);
  EXPECT_EQ(l.cache_avoided.micros(),
            db_->scalar("SELECT SUM(cache_avoided) FROM requests WHERE cache='hit'"));
  // A hit's avoided cost is what its tokens cost at the price: 500 in at $3, 40+i out at $15.
  EXPECT_EQ(l.cache_avoided.micros(), 3 * (500 * 3) + (40 + 44 + 48) * 15);
  EXPECT_EQ(l.trimmed_requests, 4);
  EXPECT_EQ(l.trimmed_tokens, 1000 + 1003 + 1006 + 1009);
  EXPECT_EQ(l.trim_avoided.micros(), (1000 + 1003 + 1006 + 1009) * 3);
  EXPECT_EQ(l.reasoning_capped, 5);
}

TEST_P(LedgerStore, DuplicateIdIsRefusedAloneAndRowsAreAppendOnly) {
  auto ledger = open();
  ASSERT_TRUE(ledger);
  RequestRecord r = simple_record("gpu-large", tokens_of(1, 0, 1, 0));
  r.id = "fixed-id";
  ASSERT_TRUE(record_durably(*ledger, r));
  Status again = record_durably(*ledger, r);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kInvalidRequest);
  r.id = "";
  EXPECT_TRUE(record_durably(*ledger, r));
  EXPECT_EQ(ledger->stats().rows_refused, 1);
  Adjustment orphan;
  orphan.adjusts_id = "no-such-request";
  orphan.input = Money::from_micros(1);
  std::promise<Status> done;
  ledger->adjust(orphan, [&](const Status& st) { done.set_value(st); });
  Status orphaned = done.get_future().get();
  ASSERT_FALSE(orphaned);
  EXPECT_EQ(orphaned.error().code, ErrorCode::kNotFound);
  ledger.reset();
  Status update = db_->exec("UPDATE requests SET cost_total = 0");
  ASSERT_FALSE(update);
  EXPECT_NE(update.error().message.find("append-only"), std::string::npos);
  EXPECT_FALSE(db_->exec("DELETE FROM requests"));
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests"), 2);
  EXPECT_TRUE(verify().ok());
}

// A batch holding a row that is there already among new ones (a journal shipping again a
// batch whose COMMIT went through): that row alone is refused as a duplicate, the others are
// written once, in order, and the chain verifies. PostgreSQL finds the duplicate through the
// unique index and redoes the batch with a lookup of its ids; SQLite looks them up first.
TEST_P(LedgerStore, ADuplicateInsideABatchIsRefusedAloneTheOthersWrittenOnce) {
  const LedgerConfig config = db_->config("gw-1");
  std::unique_ptr<Store> store;
  if (config.postgres) {
    auto pg = PgStore::open(config.postgres->url, "USD", "gw-1");
    ASSERT_TRUE(pg) << pg.error().message;
    store = std::make_unique<PgStore>(std::move(*pg));
  } else {
    auto lite = SqliteStore::open(config.path, "USD");
    ASSERT_TRUE(lite) << lite.error().message;
    store = std::make_unique<SqliteStore>(std::move(*lite));
  }
  auto entry = [](const std::string& id, int i) {
    LedgerEntry e;
    e.record = rich_record(i);
    e.record.id = id;
    e.record.attempts.clear();  // the ledger sums the attempts into the row; none here
    return e;
  };
  std::vector<LedgerEntry> first = {entry("a", 0), entry("b", 1)};
  std::vector<LedgerEntry*> ptrs = {&first[0], &first[1]};
  auto written = store->append(ptrs);
  ASSERT_TRUE(written) << written.error().message;
  std::vector<LedgerEntry> second = {entry("c", 2), entry("b", 1), entry("d", 3), entry("c", 2)};
  ptrs = {&second[0], &second[1], &second[2], &second[3]};
  auto again = store->append(ptrs);
  ASSERT_TRUE(again) << again.error().message;
  ASSERT_EQ(again->size(), 4u);
  EXPECT_TRUE((*again)[0]);
  ASSERT_FALSE((*again)[1]);
  EXPECT_EQ((*again)[1].error().code, ErrorCode::kInvalidRequest);
  EXPECT_TRUE((*again)[2]);
  ASSERT_FALSE((*again)[3]);  // twice in the same batch
  EXPECT_EQ((*again)[3].error().code, ErrorCode::kInvalidRequest);
  if (config.postgres) {  // what the journal counts as shipped
    EXPECT_EQ((*again)[1].error().type_code, kDuplicateIdCode);
    EXPECT_EQ((*again)[3].error().type_code, kDuplicateIdCode);
  }
  // A batch of many rows (PostgreSQL sends them in several pieces before the duplicate near
  // the end fails the COPY): the same outcome.
  std::vector<LedgerEntry> big;
  for (int i = 0; i < 300; ++i) {
    big.push_back(entry(i == 250 ? "a" : "big-" + std::to_string(i), i));
    big.back().record.facts_json = R"({"pad":")" + std::string(1000, 'p') + R"("})";
  }
  ptrs.clear();
  for (auto& e : big) ptrs.push_back(&e);
  auto large = store->append(ptrs);
  ASSERT_TRUE(large) << large.error().message;
  ASSERT_EQ(large->size(), 300u);
  for (size_t i = 0; i < 300; ++i) EXPECT_EQ(static_cast<bool>((*large)[i]), i != 250) << i;
  store.reset();
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests"), 4 + 299);
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests WHERE id IN ('a','b','c','d')"), 4);
  EXPECT_EQ(db_->scalar("SELECT SUM(requests) FROM daily"), 4 + 299);
  VerifyResult v = verify();
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
}

TEST_P(LedgerStore, VerifyFindsAnAlteredRow) {
  {
    auto ledger = open();
    ASSERT_TRUE(ledger);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(record_durably(*ledger, rich_record(i)));
  }
  ASSERT_TRUE(verify().ok());
  ASSERT_TRUE(db_->exec(db_->allow_tampering()));
  ASSERT_TRUE(
      db_->exec("UPDATE requests SET input_tokens = input_tokens + 1 WHERE id = "
                "(SELECT MIN(id) FROM requests)"));
  VerifyResult v = verify();
  EXPECT_FALSE(v.ok());
  bool named = false;
  for (const auto& p : v.problems) named = named || p.find("hash mismatch") != std::string::npos;
  EXPECT_TRUE(named);
}

// A task's drill-down (the console's) reads either store: its rows in order with their
// attempts and prices, and each row's hash-chain link checked; an altered row is named.
TEST_P(LedgerStore, ATasksDrillDownChecksEachLinkOnEitherStore) {
  {
    auto ledger = open();
    ASSERT_TRUE(ledger);
    for (int i = 0; i < 6; ++i) {
      RequestRecord r = rich_record(i);
      r.task_id = i % 2 == 0 ? "drill" : "other";
      ASSERT_TRUE(record_durably(*ledger, std::move(r)));
    }
  }
  const std::string path = db_->config("").path;
  auto drill = [&](int64_t limit, int64_t offset) {
    auto text = task_requests_json(path, "drill", limit, offset);
    EXPECT_TRUE(text) << text.error().message;
    return text ? nlohmann::json::parse(*text) : nlohmann::json();
  };
  nlohmann::json all = drill(200, 0);
  ASSERT_EQ(all["requests"].size(), 3u) << all.dump(2);
  int64_t last_seq = 0;
  for (const auto& r : all["requests"]) {
    EXPECT_GT(r["seq"].get<int64_t>(), last_seq) << "in the ledger's order";
    last_seq = r["seq"].get<int64_t>();
    EXPECT_EQ(r["chain_verifies"], true) << r.dump(2);
    EXPECT_TRUE(r["cost_total"].is_string()) << "money as an exact decimal";
  }
  // Row 0 failed over: both attempts, in order, each priced.
  const auto& attempts = all["requests"][0]["attempt_list"];
  ASSERT_EQ(attempts.size(), 2u) << all.dump(2);
  EXPECT_EQ(attempts[0]["http_status"], 500);
  EXPECT_EQ(attempts[1]["http_status"], 200);
  EXPECT_TRUE(attempts[1]["cost_total"].is_string());
  EXPECT_TRUE(all["requests"][1]["attempt_list"].empty());
  nlohmann::json second = drill(1, 1);
  ASSERT_EQ(second["requests"].size(), 1u);
  EXPECT_EQ(second["requests"][0]["id"], all["requests"][1]["id"]);
  // An altered row fails its link; the others still verify.
  ASSERT_TRUE(db_->exec(db_->allow_tampering()));
  ASSERT_TRUE(db_->exec("UPDATE requests SET input_tokens = input_tokens + 1 WHERE id = '" +
                        all["requests"][1]["id"].get<std::string>() + "'"));
  nlohmann::json after = drill(200, 0);
  ASSERT_EQ(after["requests"].size(), 3u);
  EXPECT_EQ(after["requests"][0]["chain_verifies"], true);
  EXPECT_EQ(after["requests"][1]["chain_verifies"], false);
  EXPECT_TRUE(drill(200, 0)["requests"][2]["chain_verifies"].is_boolean());
}

TEST_P(LedgerStore, NewerSchemaIsRefused) {
  { ASSERT_TRUE(open()); }
  ASSERT_TRUE(db_->exec(db_->set_newer_schema()));
  auto newer = Ledger::open(db_->config("gw-1"), PriceCatalog(), {});
  ASSERT_FALSE(newer);
  EXPECT_NE(newer.error().message.find("newer"), std::string::npos) << newer.error().message;
}

TEST_P(LedgerStore, ManyConcurrentRowsAreEachDurableOnce) {
  auto ledger = open();
  ASSERT_TRUE(ledger);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 500;
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        ledger->record(rich_record(t * kPerThread + i),
                       [&](const Status& st) { (st ? ok : failed).fetch_add(1); });
      }
    });
  }
  for (auto& t : threads) t.join();
  ledger->flush();
  EXPECT_EQ(ok.load(), kThreads * kPerThread);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests"), kThreads * kPerThread);
  EXPECT_LT(ledger->stats().batches, kThreads * kPerThread);  // group commits
  EXPECT_TRUE(verify().ok());
}

TEST_P(LedgerStore, HostileBytesAreRecordedAndVerify) {
  auto ledger = open();
  ASSERT_TRUE(ledger);
  RequestRecord r = simple_record("gpu-large", tokens_of(1, 0, 1, 0));
  r.task_id = std::string("bad\xff\xfe utf8 and a \0 byte", 24);
  r.claimed_tags = {"\xc3\x28"};
  ASSERT_TRUE(record_durably(*ledger, r));
  ledger.reset();
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests"), 1);
  EXPECT_TRUE(verify().ok());
}

// Two instances on one database, each with its own chain and lease, against one hard budget:
// never more spent than the budget, and every admitted request's row kept.
TEST_P(LedgerStore, HardBudgetHoldsAcrossInstances) {
  if (!db_->shared()) GTEST_SKIP() << "a SQLite ledger belongs to one instance";
  PriceCatalog prices = catalog_from(kPrices);
  int64_t now = unix_micros_now();
  Money worst = *prices.worst_case("gpu-large", 1000, 500, now);
  Money amount = Money::from_micros(worst.micros() * 30);
  auto budgets = budgets_from("- name: team-day\n  scope: team\n  match: team-a\n  amount: " +
                              amount.to_string() + "\n  period: day\n  mode: hard\n");
  auto a = open("gw-a", budgets);
  auto b = open("gw-b", budgets);
  ASSERT_TRUE(a && b);
  constexpr int kThreads = 120;
  std::atomic<int> admitted{0};
  std::atomic<int> refused{0};
  std::atomic<int> durable{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      Ledger& ledger = i % 2 == 0 ? *a : *b;
      // A few rounds each: leases are topped up between them.
      for (int round = 0; round < 3; ++round) {
        auto admission = ledger.admit(Subject{"key-a", "team-a", "proj-a"}, worst);
        if (!admission) {
          EXPECT_EQ(admission.error().code, ErrorCode::kRateLimited);
          refused.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          continue;
        }
        admitted.fetch_add(1);
        int64_t t = unix_micros_now();
        RequestRecord r = simple_record("gpu-large", tokens_of(1000, 0, 500, 0), t);
        r.ended_us = t;
        std::promise<Status> done;
        ledger.record(std::move(r), std::move(*admission),
                      [&](const Status& st) { done.set_value(st); });
        if (done.get_future().get()) durable.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  a->flush();
  b->flush();
  int64_t spent = db_->scalar("SELECT COALESCE(SUM(cost_total),0) FROM requests");
  EXPECT_EQ(durable.load(), admitted.load());
  EXPECT_GT(admitted.load(), 0);
  EXPECT_GT(refused.load(), 0);
  EXPECT_LE(spent, amount.micros());
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests"), admitted.load());
  EXPECT_EQ(db_->scalar("SELECT spent FROM budget_shares"), spent);
  EXPECT_LE(db_->scalar("SELECT spent + (SELECT COALESCE(SUM(amount),0) FROM budget_leases) "
                        "FROM budget_shares"),
            amount.micros());
  EXPECT_EQ(db_->scalar("SELECT COUNT(DISTINCT instance_id) FROM requests"), 2);
  a.reset();
  b.reset();
  // Clean shutdown gives every lease back.
  EXPECT_EQ(db_->scalar("SELECT COALESCE(SUM(amount),0) FROM budget_leases"), 0);
  VerifyResult v = verify();
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
  EXPECT_NE(v.head.find("gw-a="), std::string::npos);
  EXPECT_NE(v.head.find("gw-b="), std::string::npos);
}

// The history `ferry policy replay` reads: the same rows, with their facts and costs, from
// either store; the range and with_facts_only filters hold.
// Every instance reads the shared spent figure: what one instance spends shows in another's
// budget_left_pct (the routing fact) and, past a soft budget, in the other's admissions as the
// soft warning; within a lease pass (lease_refresh_ms 20 here), polled for, never timed.
TEST_P(LedgerStore, SpendOnOneInstanceShowsInAnothersLeftPctAndSoftWarning) {
  if (!db_->shared()) GTEST_SKIP() << "a SQLite ledger belongs to one instance";
  // A row of 1000 input and 500 output tokens on gpu-large costs 3000 + 7500 = 10,500 micros.
  auto budgets = budgets_from(
      "- name: team-soft\n  scope: team\n  match: team-a\n  amount: 0.042\n  period: day\n"
      "  mode: soft\n");
  auto a = open("gw-a", budgets);
  auto b = open("gw-b", budgets);
  ASSERT_TRUE(a && b);
  const Subject subject{"key-a", "team-a", "proj-a"};
  EXPECT_EQ(b->budget_left_pct(subject), 100.0);
  auto spend = [&](int rows) {
    for (int i = 0; i < rows; ++i) {
      int64_t t = unix_micros_now();
      RequestRecord r = simple_record("gpu-large", tokens_of(1000, 0, 500, 0), t);
      r.ended_us = t;
      ASSERT_TRUE(record_durably(*a, r));
    }
  };
  auto b_sees = [&](const std::function<bool()>& seen) {
    for (int i = 0; i < 500 && !seen(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return seen();
  };
  spend(2);  // 21,000 of 42,000: half left
  EXPECT_TRUE(b_sees([&] { return b->budget_left_pct(subject) == 50.0; }))
      << "instance b reads " << b->budget_left_pct(subject).value_or(-1);
  auto fine = b->admit(subject, Money());
  ASSERT_TRUE(fine);
  EXPECT_TRUE(fine->soft_exceeded().empty());
  spend(3);  // 52,500: past the soft budget, and soft: admitted with the warning
  EXPECT_TRUE(b_sees([&] {
    auto admission = b->admit(subject, Money());
    return admission && !admission->soft_exceeded().empty();
  }));
  auto warned = b->admit(subject, Money());
  ASSERT_TRUE(warned);
  ASSERT_EQ(warned->soft_exceeded().size(), 1u);
  EXPECT_EQ(warned->soft_exceeded()[0], "team-soft");
  EXPECT_EQ(warned->budget_left_pct(), 0.0);
  EXPECT_EQ(b->budgets()[0].spent.micros(), 52500);
}

TEST_P(LedgerStore, HistoryReadsTheRowsBack) {
  std::vector<std::string> ids;
  {
    auto ledger = open();
    ASSERT_TRUE(ledger);
    for (int i = 0; i < 12; ++i) {
      RequestRecord r = rich_record(i);
      if (i % 3 == 0) r.facts_json.clear();
      ids.emplace_back();
      ASSERT_TRUE(record_durably(*ledger, std::move(r), &ids.back()));
    }
  }
  const std::string path = db_->config("").path;
  std::vector<RecordedRequest> seen;
  ASSERT_TRUE(for_each_request(path, HistoryQuery{}, [&](const RecordedRequest& r) {
    seen.push_back(r);
    return true;
  }));
  ASSERT_EQ(seen.size(), ids.size());
  for (size_t i = 0; i < seen.size(); ++i) {  // rich_record(i) ends i us after the previous
    EXPECT_EQ(seen[i].id, ids[i]);
    EXPECT_EQ(seen[i].facts_json, i % 3 == 0 ? "" : R"({"n":)" + std::to_string(i) + "}");
    EXPECT_EQ(seen[i].tokens.input.count,
              100 + static_cast<int64_t>(i) + (i % 5 == 0 ? 100 : 0));  // fallbacks sum tries
    EXPECT_GT(seen[i].cost.total().micros(), 0);
  }
  HistoryQuery facts_only;
  facts_only.with_facts_only = true;
  facts_only.from_us = seen[2].ended_us;
  int64_t n = 0;
  ASSERT_TRUE(for_each_request(path, facts_only, [&](const RecordedRequest& r) {
    EXPECT_FALSE(r.facts_json.empty());
    ++n;
    return true;
  }));
  EXPECT_EQ(n, 7);  // 2..11 without 3, 6, 9
  auto counted = count_requests(path, facts_only);
  ASSERT_TRUE(counted);
  EXPECT_EQ(*counted, 10);  // ignores with_facts_only
  auto currency = ledger_currency(path);
  ASSERT_TRUE(currency);
  EXPECT_EQ(*currency, "USD");
}

TEST_P(LedgerStore, ExportWritesEveryRowAndAttemptOnEitherStore) {
  std::vector<std::string> ids;
  {
    auto ledger = open();
    ASSERT_TRUE(ledger);
    for (int i = 0; i < 12; ++i) {
      RequestRecord r = rich_record(i);
      r.team = i % 2 == 0 ? "red" : "blue";
      r.task_id = "task,with \"quotes\" " + std::to_string(i);
      ids.emplace_back();
      ASSERT_TRUE(record_durably(*ledger, std::move(r), &ids.back()));
    }
  }
  const std::string path = db_->config("").path;
  std::vector<RecordedRequest> history;
  ASSERT_TRUE(for_each_request(path, HistoryQuery{}, [&](const RecordedRequest& r) {
    history.push_back(r);
    return true;
  }));
  auto exported = [&](const ReportFilter& filter, bool attempts) {
    std::string text;
    auto run = attempts ? export_attempts_csv : export_csv;
    Status st = run(
        path, filter,
        [&](std::string_view chunk) {
          text += chunk;
          return true;
        },
        256);  // small chunks: many sink calls
    EXPECT_TRUE(st) << st.error().message;
    return ferry::testing::csv_lines(text);
  };
  auto rows = exported(ReportFilter{}, false);
  ASSERT_EQ(rows.size(), ids.size() + 1);
  const auto& header = rows.front();
  auto column = [&](const std::string& name) {
    auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << name;
    return static_cast<size_t>(it - header.begin());
  };
  EXPECT_EQ(header.front(), "seq");
  EXPECT_EQ(header.back(), kRequestIdColumn);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto& line = rows[i + 1];
    ASSERT_EQ(line.size(), header.size());
    EXPECT_EQ(line[column("id")], ids[i]);
    EXPECT_EQ(line[column("task_id")], "task,with \"quotes\" " + std::to_string(i));
    EXPECT_EQ(line[column("cost_total")], history[i].cost.total().to_string());
    EXPECT_EQ(line[column("input_tokens")], std::to_string(history[i].tokens.input.count));
    EXPECT_EQ(line.back(), i % 2 == 0 ? "req-" + std::to_string(i) : "");
  }
  ReportFilter red;
  red.team = "red";
  EXPECT_EQ(exported(red, false).size(), ids.size() / 2 + 1);
  auto count = count_export_rows(path, red, false);
  ASSERT_TRUE(count);
  EXPECT_EQ(*count, static_cast<int64_t>(ids.size() / 2));
  // Attempts: rows 0, 5 and 10 fell back (two tries each, kept as attempt rows); a request
  // answered by its first try has no attempt rows.
  auto attempts = exported(ReportFilter{}, true);
  ASSERT_EQ(attempts.size(), 3u * 2 + 1);
  EXPECT_EQ(attempts[1][0], rows[1][0]);  // request_seq: the request's own seq
  EXPECT_EQ(attempts[6][0], rows[11][0]);
  auto counted = count_export_rows(path, ReportFilter{}, true);
  ASSERT_TRUE(counted);
  EXPECT_EQ(*counted, 6);
  // A sink that stops ends the export early, with an ok status.
  int calls = 0;
  EXPECT_TRUE(export_csv(
      path, ReportFilter{},
      [&](std::string_view) {
        ++calls;
        return false;
      },
      64));
  EXPECT_EQ(calls, 1);
}

// Stored Responses (`store: true`) live in the ledger's database on either store: a response
// kept through one instance's store is read back whole through another's, by its key only,
// until it expires.
TEST_P(LedgerStore, StoredResponsesAreSharedByEveryInstance) {
  { auto ledger = open(); }  // the ledger's own schema first, as a server opens it
  const std::string path = db_->config("").path;
  auto one = ResponseStore::open(path);
  ASSERT_TRUE(one) << one.error().message;
  auto two = ResponseStore::open(path, ResponseStoreConfig{1});
  ASSERT_TRUE(two) << two.error().message;
  const int64_t now = unix_micros_now();
  auto put = [](ResponseStore& store, StoredResponse r) {
    std::promise<Status> done;
    store.put(std::move(r), [&](const Status& st) { done.set_value(st); });
    return done.get_future().get();
  };
  StoredResponse r;
  r.id = "resp_shared";
  r.key_id = "app";
  r.model = "m";
  r.created_us = now;
  r.items = R"([{"type":"message","role":"user","content":"h\u00e9 \"quoted\" \\ back"}])";
  r.output = "[]";
  r.response = R"({"id":"resp_shared"})";
  ASSERT_TRUE(put(**one, r));
  auto got = (*two)->get("resp_shared", "app", now + 1);
  ASSERT_TRUE(got) << got.error().message;
  ASSERT_TRUE(*got);
  EXPECT_EQ((*got)->items, r.items);
  EXPECT_EQ((*got)->response, r.response);
  EXPECT_EQ((*got)->expires_us, now + 30 * 86'400'000'000LL);  // the writer's keep
  auto other_key = (*two)->get("resp_shared", "someone-else", now + 1);
  ASSERT_TRUE(other_key);
  EXPECT_FALSE(*other_key);
  // Written again (the same id), it replaces; expired, it is gone and purged.
  const int64_t hour = 3'600'000'000;
  r.expires_us = now + hour;  // later than the writer's own purges after its commits
  r.output = R"([{"type":"message"}])";
  ASSERT_TRUE(put(**two, r));
  auto replaced = (*one)->get("resp_shared", "app", now + 1);
  ASSERT_TRUE(replaced);
  ASSERT_TRUE(*replaced);
  EXPECT_EQ((*replaced)->output, r.output);
  auto expired = (*one)->get("resp_shared", "app", now + hour);
  ASSERT_TRUE(expired);
  EXPECT_FALSE(*expired);
  auto purged = (*one)->purge(now + hour);
  ASSERT_TRUE(purged);
  EXPECT_EQ(*purged, 1);
}

// Rows of 12 tasks over two targets (one local), three teams, two days, an adjustment, some
// tasks marked before their rows and some after; and rows without a task.
void record_task_rows(LedgerStore& t, Ledger& ledger, const std::string& db) {
  std::string adjusted;
  for (int i = 0; i < 60; ++i) {
    RequestRecord r =
        simple_record(i % 3 == 0 ? "local-small" : "gpu-large", tokens_of(100 + i, 0, 20 + i, 0),
                      kJune15 + (i % 2) * 86400000000LL);
    r.team = "team-" + std::to_string(i % 3);
    r.task_id = i % 10 == 9 ? "" : "task-" + std::to_string(i % 12);
    if (i == 20) {
      // A task marked before any of its rows: the rollup takes its status from `tasks`.
      TaskMark early{"task-8", TaskStatus::kFailed, {{"feature", "f-early"}}, "key-a", kJune15};
      ASSERT_TRUE(mark_task(db, early));
    }
    if (i % 12 == 8 && i < 20) r.task_id = "task-x";  // rows of task-8 come after its mark
    std::string id;
    ASSERT_TRUE(record_durably(ledger, r, &id));
    if (i == 4) adjusted = id;
  }
  Adjustment refund;
  refund.adjusts_id = adjusted;  // task-4
  refund.output = Money::from_micros(-700);
  refund.note = "refund";
  std::promise<Status> done;
  ledger.adjust(refund, [&](const Status& st) { done.set_value(st); });
  ASSERT_TRUE(done.get_future().get());
  for (int k : {1, 2, 5}) {
    TaskMark m{"task-" + std::to_string(k),
               k == 5 ? TaskStatus::kAbandoned : TaskStatus::kCompleted,
               {{"feature", "f" + std::to_string(k % 2)}},
               "key-a",
               kJune15 + 1};
    ASSERT_TRUE(mark_task(db, m));
  }
  // Rows after the marks: task-2 (completed) in its own group; task-1 (completed, team-1) from
  // a smaller team and task-3 (open, June 16) from an earlier day: both change group, moving
  // their sums whole, local and not; then task-3 marked with two labels.
  const int64_t day = 86400000000LL;
  struct Later {
    const char* task;
    const char* team;
    int64_t at;
    const char* target;
  };
  for (Later later : {Later{"task-2", "team-2", kJune15, "gpu-large"},
                      Later{"task-1", "team-0", kJune15 + day, "local-small"},
                      Later{"task-3", "team-0", kJune15 - day, "gpu-large"}}) {
    RequestRecord r = simple_record(later.target, tokens_of(50, 0, 9, 0), later.at);
    r.team = later.team;
    r.task_id = later.task;
    ASSERT_TRUE(record_durably(ledger, r));
  }
  TaskMark labelled{"task-3",
                    TaskStatus::kCompleted,
                    {{"feature", "f1"}, {"tier", "gold"}},
                    "key-a",
                    kJune15 + 2 * day};
  ASSERT_TRUE(mark_task(db, labelled));
  (void)t;
}

void expect_same_reports(const TaskReport& a, const TaskReport& b) {
  ASSERT_EQ(a.rows.size(), b.rows.size());
  for (size_t i = 0; i < a.rows.size(); ++i) {
    SCOPED_TRACE(a.rows[i].group + "/" + std::string(task_status_name(a.rows[i].status)));
    EXPECT_EQ(a.rows[i].group, b.rows[i].group);
    EXPECT_EQ(a.rows[i].status, b.rows[i].status);
    EXPECT_EQ(a.rows[i].tasks, b.rows[i].tasks);
    EXPECT_EQ(a.rows[i].requests, b.rows[i].requests);
    EXPECT_EQ(a.rows[i].tokens, b.rows[i].tokens);
    EXPECT_EQ(a.rows[i].local_tokens, b.rows[i].local_tokens);
    EXPECT_EQ(a.rows[i].cost.micros(), b.rows[i].cost.micros());
    EXPECT_EQ(a.rows[i].local_cost.micros(), b.rows[i].local_cost.micros());
    EXPECT_EQ(a.rows[i].local_requests, b.rows[i].local_requests);
  }
}

// Every grouping of the task report (outcome alone, team, project, day, month, labels: one
// the tasks have, another, one none has).
const std::vector<std::string> kTaskGroupings = {
    "", "team", "project", "day", "month", "label:feature", "label:tier", "label:none"};

// Every task report from the rollups equals the same report from the rows, and adds up to
// `task_cost` (the rows' cost with a task, adjustments included).
void expect_task_reports_equal_rows(const std::string& db, int64_t task_cost) {
  TaskReportQuery q;
  q.local_targets = {"local-small"};
  for (const std::string& by : kTaskGroupings) {
    SCOPED_TRACE("by " + by);
    q.by = by;
    q.force_raw = false;
    auto rolled = task_report(db, q);
    ASSERT_TRUE(rolled) << rolled.error().message;
    q.force_raw = true;
    auto raw = task_report(db, q);
    ASSERT_TRUE(raw) << raw.error().message;
    expect_same_reports(*rolled, *raw);
    int64_t sum = 0;
    for (const auto& g : rolled->rows) sum += g.cost.micros();
    EXPECT_EQ(sum, task_cost);
  }
}

void expect_same_top(const TopTasks& a, const TopTasks& b) {
  EXPECT_EQ(a.total, b.total);
  ASSERT_EQ(a.tasks.size(), b.tasks.size());
  for (size_t i = 0; i < a.tasks.size(); ++i) {
    SCOPED_TRACE(a.tasks[i].task_id);
    EXPECT_EQ(a.tasks[i].task_id, b.tasks[i].task_id);
    EXPECT_EQ(a.tasks[i].status, b.tasks[i].status);
    EXPECT_EQ(a.tasks[i].cost.micros(), b.tasks[i].cost.micros());
    EXPECT_EQ(a.tasks[i].local_cost.micros(), b.tasks[i].local_cost.micros());
    EXPECT_EQ(a.tasks[i].requests, b.tasks[i].requests);
    EXPECT_EQ(a.tasks[i].team, b.tasks[i].team);
  }
}

// The console's filters of team, project and day select tasks by their own team, project and
// day: a filtered report is, from the rollups and from the rows alike, the group of that value
// in the unfiltered report by that attribute (from the rows); filters together, by any group,
// and the top tasks' pages (total, order, sums) are the same from the rollups as from the rows;
// a filter of the rows reads the rows, a label's report with a filter of the tasks the rollups
// (schema 13: the label's groups are keyed by the task's day, team and project too).
void expect_task_filters_select_tasks(const std::string& db) {
  TaskReportQuery all;
  all.local_targets = {"local-small"};
  all.force_raw = true;
  int checked = 0;
  for (std::string dim : {"team", "project", "day"}) {
    all.by = dim;
    auto grouped = task_report(db, all);
    ASSERT_TRUE(grouped) << grouped.error().message;
    std::map<std::string, TaskReport> expected;
    for (const auto& g : grouped->rows) {
      TaskGroup in_group = g;
      in_group.group = "";
      expected[g.group].rows.push_back(in_group);
    }
    for (const auto& [value, want] : expected) {
      for (bool raw : {false, true}) {
        SCOPED_TRACE(dim + "=" + value + (raw ? " (rows)" : " (rollups)"));
        TaskReportQuery q;
        q.local_targets = all.local_targets;
        q.force_raw = raw;
        if (dim == "team") q.filter.team = value;
        if (dim == "project") q.filter.project = value;
        if (dim == "day") q.filter.from = q.filter.to = parse_civil_date(value);
        auto got = task_report(db, q);
        ASSERT_TRUE(got) << got.error().message;
        EXPECT_EQ(got->from_rows, raw);
        expect_same_reports(*got, want);
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 10);
  // Filters together (and a day range), by every group, and the top tasks.
  std::vector<ReportFilter> filters(6);
  filters[0].team = "team-0";
  filters[0].from = parse_civil_date("2026-06-15");
  filters[1].to = parse_civil_date("2026-06-15");
  filters[2].team = "team-1";
  filters[2].project = "nowhere";
  filters[3].team = "team-1";
  filters[4].project = "proj-a";
  filters[5].from = parse_civil_date("2026-06-16");
  for (size_t i = 0; i < filters.size(); ++i) {
    SCOPED_TRACE("filter " + std::to_string(i));
    TaskReportQuery q;
    q.local_targets = all.local_targets;
    q.filter = filters[i];
    for (const std::string& by : kTaskGroupings) {
      SCOPED_TRACE("by " + by);
      q.by = by;
      q.force_raw = false;
      auto rolled = task_report(db, q);
      q.force_raw = true;
      auto rows = task_report(db, q);
      ASSERT_TRUE(rolled && rows);
      EXPECT_FALSE(rolled->from_rows);
      EXPECT_TRUE(rows->from_rows);
      expect_same_reports(*rolled, *rows);
    }
    for (std::optional<TaskStatus> status :
         {std::optional<TaskStatus>(), std::optional(TaskStatus::kCompleted)}) {
      for (int64_t offset : {0, 1}) {
        q.force_raw = false;
        auto rolled = top_tasks(db, q, status, 3, offset);
        q.force_raw = true;
        auto rows = top_tasks(db, q, status, 3, offset);
        ASSERT_TRUE(rolled && rows);
        EXPECT_FALSE(rolled->from_rows);
        EXPECT_TRUE(rows->from_rows);
        expect_same_top(*rolled, *rows);
        if (i == 2) {
          EXPECT_EQ(rolled->total, 0);
        }
        if (i == 0) {
          for (const auto& t : rolled->tasks) EXPECT_EQ(t.team, "team-0");
        }
      }
    }
  }
  // A filter of the rows reads them, whatever else is filtered.
  TaskReportQuery by_target;
  by_target.filter.target = "local-small";
  by_target.filter.team = "team-0";
  auto read = task_report(db, by_target);
  auto top = top_tasks(db, by_target, std::nullopt, 3, 0);
  ASSERT_TRUE(read && top);
  EXPECT_TRUE(read->from_rows);
  EXPECT_TRUE(top->from_rows);
  EXPECT_EQ(nlohmann::json::parse(task_report_json(*read))["read"], "rows");
}

constexpr const char* kTaskPrices = R"(
- {model: gpu-large, effective_from: 2026-01-01, input: 3.00, cached_input: 0.30, output: 15.00, reasoning: 15.00}
- {model: local-small, effective_from: 2026-01-01, input: 0.10, cached_input: 0.01, output: 0.20, reasoning: 0.20, internal: true}
)";

// The rollups (task_totals, task_targets, daily_key, task_groups, task_group_targets) answer as
// the rows do, to the micro-unit, adjustments included, after rows that move a task to another
// group and marks that move it to its outcome and labels; and a ledger migrated from schema 8
// (or 9, before task_groups) gets them built from its rows. The report by task reads task_totals
// and daily_untasked (schema 11): every column of every task equals the rows' report, refused,
// shadow, unpriced and cheaper-than-reference rows and the rows without a task included.
TEST_P(LedgerStore, RollupsEqualTheRowsAndAreBuiltByTheMigration) {
  const std::string db = db_->config("").path;
  {
    auto opened = Ledger::open(db_->config("gw-1"), catalog_from(kTaskPrices), {});
    ASSERT_TRUE(opened) << opened.error().message;
    record_task_rows(*this, **opened, db);
  }
  {
    LedgerConfig config = db_->config("gw-1");
    config.reference_model = "gpu-large";  // local-small rows get an avoided cost
    auto opened = Ledger::open(config, catalog_from(kTaskPrices), {});
    ASSERT_TRUE(opened) << opened.error().message;
    for (int i = 0; i < 8; ++i) {
      RequestRecord r = simple_record(i % 4 == 3 ? "unpriced-model" : "local-small",
                                      tokens_of(40 + i, 10 + i, 7 + i, 3 * i), kJune15 + i);
      r.task_id = i % 3 == 2 ? "" : "task-" + std::to_string(i % 4);
      if (i == 1) r.status = RequestStatus::kRefused;
      if (i == 2 || i == 4) r.trusted_tags.push_back(std::string(kShadowTag));
      ASSERT_TRUE(record_durably(**opened, r));
    }
  }
  auto check = [&] {
    // The report by task from the rollups equals the rows' report, every column of every task.
    ReportQuery by_task;
    by_task.by = {ReportBy::kTask};
    auto rolled = run_report(db, by_task);
    by_task.force_raw = true;
    auto rows = run_report(db, by_task);
    ASSERT_TRUE(rolled && rows) << (rolled ? rows.error().message : rolled.error().message);
    EXPECT_TRUE(rolled->from_aggregate);
    EXPECT_FALSE(rows->from_aggregate);
    EXPECT_GT(rows->totals.refused_requests, 0);
    EXPECT_GT(rows->totals.shadow_requests, 0);
    EXPECT_GT(rows->totals.unpriced_requests, 0);
    EXPECT_GT(rows->totals.saved().micros(), 0);
    EXPECT_GT(rows->totals.reasoning_tokens, 0);
    ASSERT_FALSE(rows->rows.empty());
    EXPECT_EQ(rows->rows.front().group, std::vector<std::string>{""});  // rows without a task
    ASSERT_EQ(rolled->rows.size(), rows->rows.size());
    for (size_t i = 0; i < rows->rows.size(); ++i) {
      const ReportRow& a = rolled->rows[i];
      const ReportRow& b = rows->rows[i];
      SCOPED_TRACE(b.group.front());
      EXPECT_EQ(a.group, b.group);
      EXPECT_EQ(a.requests, b.requests);
      EXPECT_EQ(a.unpriced_requests, b.unpriced_requests);
      EXPECT_EQ(a.refused_requests, b.refused_requests);
      EXPECT_EQ(a.shadow_requests, b.shadow_requests);
      EXPECT_EQ(a.input_tokens, b.input_tokens);
      EXPECT_EQ(a.cached_tokens, b.cached_tokens);
      EXPECT_EQ(a.output_tokens, b.output_tokens);
      EXPECT_EQ(a.reasoning_tokens, b.reasoning_tokens);
      EXPECT_EQ(a.cost_input.micros(), b.cost_input.micros());
      EXPECT_EQ(a.cost_cached.micros(), b.cost_cached.micros());
      EXPECT_EQ(a.cost_output.micros(), b.cost_output.micros());
      EXPECT_EQ(a.cost_reasoning.micros(), b.cost_reasoning.micros());
      EXPECT_EQ(a.total.micros(), b.total.micros());
      EXPECT_EQ(a.avoided.micros(), b.avoided.micros());
      EXPECT_EQ(a.avoided_base.micros(), b.avoided_base.micros());
      EXPECT_EQ(a.first_us, b.first_us);
      EXPECT_EQ(a.last_us, b.last_us);
    }
    // A filtered report by task reads the rows.
    ReportQuery filtered;
    filtered.by = {ReportBy::kTask};
    filtered.filter.team = "team-1";
    auto team_tasks = run_report(db, filtered);
    ASSERT_TRUE(team_tasks);
    EXPECT_FALSE(team_tasks->from_aggregate);

    expect_task_reports_equal_rows(
        db, db_->scalar("SELECT SUM(COALESCE(cost_total,0)) FROM requests WHERE task_id <> ''"));
    TaskReportQuery q;
    q.local_targets = {"local-small"};
    q.by = "";
    q.force_raw = false;
    auto by_status = task_report(db, q);
    ASSERT_TRUE(by_status);
    std::map<TaskStatus, int64_t> tasks;
    for (const auto& g : by_status->rows) tasks[g.status] += g.tasks;
    EXPECT_EQ(tasks[TaskStatus::kCompleted], 3);
    EXPECT_EQ(tasks[TaskStatus::kAbandoned], 1);
    EXPECT_EQ(tasks[TaskStatus::kFailed], 1);  // task-8, marked before its rows
    for (std::optional<TaskStatus> status :
         {std::optional<TaskStatus>(), std::optional(TaskStatus::kCompleted)}) {
      q.force_raw = false;
      auto rolled = top_tasks(db, q, status, 5, 1);
      q.force_raw = true;
      auto raw = top_tasks(db, q, status, 5, 1);
      ASSERT_TRUE(rolled && raw);
      expect_same_top(*rolled, *raw);
    }
    expect_task_filters_select_tasks(db);
    // The spend report by key and month reads daily_key; the rows give the same figures.
    ReportQuery by_key;
    by_key.by = {ReportBy::kMonth, ReportBy::kKey};
    by_key.filter.team = "team-1";
    auto fast = run_report(db, by_key);
    by_key.force_raw = true;
    auto slow = run_report(db, by_key);
    ASSERT_TRUE(fast && slow);
    EXPECT_TRUE(fast->from_aggregate);
    EXPECT_EQ(fast->totals.total.micros(), slow->totals.total.micros());
    EXPECT_EQ(fast->totals.requests, slow->totals.requests);
    EXPECT_EQ(fast->totals.output_tokens, slow->totals.output_tokens);
    EXPECT_EQ(fast->totals.total.micros(),
              db_->scalar("SELECT SUM(COALESCE(cost_total,0)) FROM requests WHERE team='team-1'"));
  };
  // The file taken back to an older schema (SQLite's, PostgreSQL's), then opened: migrated.
  auto reopen_from = [&](int sqlite_version, int pg_version) {
    ASSERT_TRUE(db_->exec(db_->shared() ? "UPDATE meta SET value='" + std::to_string(pg_version) +
                                              "' WHERE key='schema_version'"
                                        : "PRAGMA user_version=" + std::to_string(sqlite_version)));
    auto reopened = Ledger::open(db_->config("gw-1"), catalog_from(kTaskPrices), {});
    ASSERT_TRUE(reopened) << reopened.error().message;
  };
  check();
  EXPECT_GT(db_->scalar("SELECT COUNT(*) FROM task_totals"), 10);
  // The label's groups: task-1 and task-3 have feature f1 (task-5's is f1 too, abandoned).
  EXPECT_EQ(db_->scalar("SELECT SUM(tasks) FROM task_groups WHERE label='feature' AND "
                        "value='f1' AND status='completed'"),
            2);
  // Schema 12 (PostgreSQL 8) kept a label's groups by label, value and status alone: its
  // label rows (here wiped, and a stale one) are made again keyed by day, team and project.
  const int64_t group_rows = db_->scalar("SELECT COUNT(*) FROM task_groups WHERE tasks > 0");
  const int64_t label_rows =
      db_->scalar("SELECT COUNT(*) FROM task_groups WHERE label <> '' AND tasks > 0");
  EXPECT_GT(db_->scalar("SELECT COUNT(DISTINCT team || '/' || day) FROM task_groups WHERE "
                        "label = 'feature' AND value = 'f1'"),
            1);
  ASSERT_TRUE(db_->exec(
      "DELETE FROM task_groups WHERE label <> ''; DELETE FROM task_group_targets WHERE label "
      "<> ''; INSERT INTO task_groups(label,value,status,day,team,project,tasks,requests,tokens,"
      "cost) VALUES('feature','f1','completed','','','',2,5,500,12345)"));
  reopen_from(12, 8);
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM task_groups WHERE label <> '' AND tasks > 0"),
            label_rows);
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM task_groups WHERE label <> '' AND team = ''"), 0);
  check();
  // Back to the schema before the task groups; opening the ledger builds them again.
  // The report sums wiped: schema 11's migration (PostgreSQL's 7) fills them again.
  ASSERT_TRUE(db_->exec(
      "DROP TABLE task_groups; DROP TABLE task_group_targets; DELETE FROM daily_untasked; "
      "UPDATE task_totals SET input_tokens = 0, cost_output = 0, refused = 0, avoided_total = 0"));
  reopen_from(9, 5);
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM task_groups"), group_rows);
  check();
  // Back to the schema before the rollups; opening the ledger builds them from the rows.
  ASSERT_TRUE(
      db_->exec("DROP TABLE daily_key; DROP TABLE task_totals; DROP TABLE task_targets; "
                "DROP TABLE api_keys; DROP TABLE task_groups; DROP TABLE task_group_targets; "
                "DROP TABLE daily_untasked"));
  reopen_from(8, 3);
  EXPECT_GT(db_->scalar("SELECT COUNT(*) FROM task_totals"), 10);
  check();
}

// Writers (two instances on PostgreSQL) append rows of the same tasks, from several teams and
// days, while another thread marks those tasks: the task groups still equal the rows.
TEST_P(LedgerStore, ConcurrentWritersAndMarksKeepTheTaskGroupsExact) {
  const std::string db = db_->config("").path;
  std::vector<std::unique_ptr<Ledger>> ledgers;
  for (const char* instance : {"gw-1", "gw-2"}) {
    if (!ledgers.empty() && !db_->shared()) break;  // a SQLite ledger has one writer
    auto opened = Ledger::open(db_->config(instance), catalog_from(kTaskPrices), {});
    ASSERT_TRUE(opened) << opened.error().message;
    ledgers.push_back(std::move(*opened));
  }
  constexpr int kTasks = 24;
  constexpr int kRowsPerThread = 300;
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Ledger& ledger = *ledgers[t % ledgers.size()];
      for (int i = 0; i < kRowsPerThread; ++i) {
        int n = t * kRowsPerThread + i;
        RequestRecord r = simple_record(n % 3 == 0 ? "local-small" : "gpu-large",
                                        tokens_of(10 + n % 50, 0, 5 + n % 7, 0),
                                        kJune15 + (n % 4) * 86400000000LL);
        r.team = "team-" + std::to_string((n / 7) % 3);
        r.task_id = "task-" + std::to_string((n * 7) % kTasks);
        ledger.record(std::move(r), [&](const Status& st) {
          if (!st) failed.fetch_add(1);
        });
      }
    });
  }
  threads.emplace_back([&] {
    for (int k = 0; k < kTasks; k += 2) {
      TaskMark m{"task-" + std::to_string(k),
                 k % 4 == 0 ? TaskStatus::kCompleted : TaskStatus::kFailed,
                 {{"feature", "f" + std::to_string(k % 3)}},
                 "key-a",
                 kJune15 + (k % 5) * 86400000000LL};
      if (!mark_task(db, m)) failed.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  for (auto& t : threads) t.join();
  for (auto& l : ledgers) l->flush();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(db_->scalar("SELECT COUNT(*) FROM requests"), 4 * kRowsPerThread);
  expect_task_reports_equal_rows(db, db_->scalar("SELECT SUM(COALESCE(cost_total,0)) FROM "
                                                 "requests WHERE task_id <> ''"));
  EXPECT_EQ(db_->scalar("SELECT SUM(tasks) FROM task_groups WHERE label = ''"), kTasks);
}

INSTANTIATE_TEST_SUITE_P(Stores, LedgerStore, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

// PostgreSQL unreachable for one database (no new connections, the open ones cut) and back:
// what a server that stops answering looks like to the ledger, without touching the others'
// databases on the same server.
class PgOutage {
 public:
  explicit PgOutage(const PgTestDb& db) : db_(db) {}
  void cut() { set(false); }
  void restore() { set(true); }

 private:
  void set(bool allow) {
    const std::string name = db_.url().substr(db_.url().rfind('/') + 1);
    Status st = set_pg_connections(pg_base_url(), name, allow);
    ASSERT_TRUE(st) << st.error().message;
  }
  const PgTestDb& db_;
};

// The journal tests need PostgreSQL: skipped without it, failed under CI.
class LedgerJournal : public ::testing::Test {
 protected:
  void SetUp() override {
    if (pg_base_url().empty()) {
      const char* ci = std::getenv("CI");
      if (ci != nullptr && std::string(ci) == "true") FAIL() << "FERRY_TEST_PG_URL is not set";
      GTEST_SKIP() << "PostgreSQL tests skipped: FERRY_TEST_PG_URL is not set";
    }
    db_ = std::make_unique<PgTestDb>();
  }
  LedgerConfig config(bool refuse_when_down = false) {
    LedgerConfig c = db_->config("gw-j");
    c.retry_ms = 20;
    c.postgres->journal = dir_.file("journal.db");
    c.postgres->refuse_when_down = refuse_when_down;
    return c;
  }
  std::unique_ptr<Ledger> open(bool refuse_when_down = false) {
    auto opened = Ledger::open(config(refuse_when_down), catalog_from(kPrices), {});
    EXPECT_TRUE(opened) << (opened ? "" : opened.error().message);
    return opened ? std::move(*opened) : nullptr;
  }
  // Waits (bounded: a hang fails, no speed is asserted) until the journal has shipped.
  static bool drained(Ledger& ledger) {
    for (int i = 0; i < 1000; ++i) {
      auto s = ledger.stats();
      if (s.journal_pending == 0 && !s.store_down) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  int64_t rows() { return db_->scalar("SELECT count(*) FROM requests"); }

  TempDir dir_;
  std::unique_ptr<PgTestDb> db_;
};

// Rows written while the database is unreachable are durable in the journal (the callback
// says ok, traffic keeps being admitted), and ship once it answers again: none lost, none
// doubled, the chain verifies.
TEST_F(LedgerJournal, RowsKeptWhileDownShipWhenBack) {
  auto ledger = open();
  ASSERT_TRUE(ledger);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    ids.emplace_back();
    ASSERT_TRUE(record_durably(*ledger, rich_record(i), &ids.back()));
  }
  PgOutage outage(*db_);
  outage.cut();
  for (int i = 5; i < 25; ++i) {
    Status st = record_durably(*ledger, rich_record(i));
    ASSERT_TRUE(st) << st.error().message;
  }
  LedgerStats down = ledger->stats();
  EXPECT_TRUE(down.store_down);
  EXPECT_EQ(down.journal_pending, 20);
  EXPECT_TRUE(ledger->health());  // serve_within_lease: still admitting
  EXPECT_TRUE(ledger->admit(Subject{"key-a", "team-a", "proj-a"}, Money()));
  outage.restore();
  ASSERT_TRUE(drained(*ledger));
  EXPECT_EQ(rows(), 25);
  EXPECT_EQ(ledger->stats().journal_shipped, 20);
  ledger.reset();
  auto verified = verify_ledger(db_->config("").path);
  ASSERT_TRUE(verified) << verified.error().message;
  EXPECT_TRUE(verified->ok()) << (verified->problems.empty() ? "" : verified->problems[0]);
}

// Stored Responses while PostgreSQL is unreachable: a put fails with a clear error (the
// response is then refused to the client, never answered as stored), and once the database
// answers again the same store writes and reads without a restart.
TEST_F(LedgerJournal, StoredResponsesFailClearlyWhileDownAndComeBack) {
  { auto ledger = open(); }
  auto store = ResponseStore::open(db_->config("").path);
  ASSERT_TRUE(store) << store.error().message;
  auto put = [&](const std::string& id) {
    StoredResponse r;
    r.id = id;
    r.key_id = "app";
    r.model = "m";
    r.items = "[]";
    r.output = "[]";
    r.response = "{}";
    std::promise<Status> done;
    (*store)->put(std::move(r), [&](const Status& st) { done.set_value(st); });
    return done.get_future().get();
  };
  ASSERT_TRUE(put("resp_before"));
  PgOutage outage(*db_);
  outage.cut();
  Status during = put("resp_during");
  ASSERT_FALSE(during);
  EXPECT_EQ(during.error().code, ErrorCode::kUnavailable) << during.error().message;
  auto read_during = (*store)->get("resp_before", "app", unix_micros_now());
  EXPECT_FALSE(read_during);
  outage.restore();
  ASSERT_TRUE(put("resp_after"));
  for (const char* id : {"resp_before", "resp_after"}) {
    auto got = (*store)->get(id, "app", unix_micros_now());
    ASSERT_TRUE(got) << got.error().message;
    EXPECT_TRUE(*got) << id;
  }
  auto lost = (*store)->get("resp_during", "app", unix_micros_now());
  ASSERT_TRUE(lost);
  EXPECT_FALSE(*lost);
}

// The journal outlives the process: rows kept while the database was down ship on the next
// start, and a row already in the database (its COMMIT reached the server before the
// connection broke) is counted once.
TEST_F(LedgerJournal, JournalSurvivesRestartAndShipsIdempotently) {
  std::string first_id;
  {
    auto ledger = open();
    ASSERT_TRUE(ledger);
    ASSERT_TRUE(record_durably(*ledger, rich_record(0), &first_id));
    PgOutage outage(*db_);
    outage.cut();
    for (int i = 1; i < 8; ++i) ASSERT_TRUE(record_durably(*ledger, rich_record(i)));
    EXPECT_EQ(ledger->stats().journal_pending, 7);
    ledger.reset();  // stops with the database still down
    outage.restore();
  }
  {
    // The row already in the database, kept in the journal again.
    auto journal = Journal::open(dir_.file("journal.db"));
    ASSERT_TRUE(journal);
    LedgerEntry again;
    again.record = rich_record(0);
    again.record.id = first_id;
    std::vector<LedgerEntry*> entries{&again};
    ASSERT_TRUE(journal->append(entries));
    EXPECT_EQ(journal->pending(), 8);
  }
  auto ledger = open();
  ASSERT_TRUE(ledger);
  ASSERT_TRUE(drained(*ledger));
  EXPECT_EQ(rows(), 8);
  EXPECT_EQ(db_->scalar("SELECT count(*) FROM requests WHERE id = '" + first_id + "'"), 1);
  EXPECT_EQ(ledger->stats().rows_refused, 0);
}

// on_store_down: refuse: while the database is unreachable new traffic is refused (503),
// and what was in flight is still kept.
TEST_F(LedgerJournal, RefuseWhenDown) {
  auto ledger = open(/*refuse_when_down=*/true);
  ASSERT_TRUE(ledger);
  PgOutage outage(*db_);
  outage.cut();
  ASSERT_TRUE(record_durably(*ledger, rich_record(1)));
  EXPECT_TRUE(ledger->stats().store_down);
  auto refused = ledger->admit(Subject{"key-a", "team-a", "proj-a"}, Money());
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kUnavailable);
  outage.restore();
  ASSERT_TRUE(drained(*ledger));
  EXPECT_TRUE(ledger->admit(Subject{"key-a", "team-a", "proj-a"}, Money()));
  EXPECT_EQ(rows(), 1);
}

TEST(LedgerStoreConfig, ParsesPostgres) {
  setenv("FERRY_TEST_LEDGER_URL", "postgresql://u@h/db", 1);
  auto c = parse_ledger_config(yaml::parse("postgres:\n  url_env: FERRY_TEST_LEDGER_URL\n  "
                                           "instance_id: gw-7\n  lease_pct: 10\n",
                                           "f.yaml"),
                               "f.yaml");
  ASSERT_TRUE(c.postgres);
  EXPECT_EQ(c.postgres->url, "postgresql://u@h/db");
  EXPECT_EQ(c.path, "postgresql://u@h/db");
  EXPECT_EQ(c.postgres->instance_id, "gw-7");
  EXPECT_EQ(c.postgres->lease_pct, 10);
  EXPECT_EQ(c.postgres->journal, "f.yaml.journal.db");  // beside the config by default
  EXPECT_FALSE(c.postgres->refuse_when_down);
  auto off = parse_ledger_config(
      yaml::parse("postgres:\n  url: postgresql://x/y\n  journal: off\n  on_store_down: refuse\n",
                  "cfg/f.yaml"),
      "cfg/f.yaml");
  EXPECT_EQ(off.postgres->journal, "");
  EXPECT_TRUE(off.postgres->refuse_when_down);
  auto named = parse_ledger_config(
      yaml::parse("postgres:\n  url: postgresql://x/y\n  journal: j.db\n", "cfg/f.yaml"),
      "cfg/f.yaml");
  EXPECT_EQ(named.postgres->journal, "cfg/j.db");  // relative to the config file
  EXPECT_THROW(
      parse_ledger_config(
          yaml::parse("postgres:\n  url: postgresql://x/y\n  on_store_down: maybe\n", "f.yaml"),
          "f.yaml"),
      yaml::YamlError);
  EXPECT_THROW(
      parse_ledger_config(yaml::parse("postgres:\n  url: mysql://x\n", "f.yaml"), "f.yaml"),
      yaml::YamlError);
  EXPECT_THROW(
      parse_ledger_config(yaml::parse("path: a.db\npostgres:\n  url: postgresql://x/y\n", "f.yaml"),
                          "f.yaml"),
      yaml::YamlError);
  EXPECT_THROW(
      parse_ledger_config(yaml::parse("postgres:\n  url_env: FERRY_NO_SUCH_VARIABLE\n", "f.yaml"),
                          "f.yaml"),
      yaml::YamlError);
}

}  // namespace
}  // namespace ferry::ledger
