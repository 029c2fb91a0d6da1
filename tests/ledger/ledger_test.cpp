#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>

#include "common/clock.h"
#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
#include "ledger/store.h"
#include "test_util.h"

namespace ferry::ledger {
namespace {

using testing::catalog_from;
using testing::kJune15;
using testing::record_durably;
using testing::scalar;
using testing::simple_record;
using testing::TempDir;
using testing::tokens_of;

const char* kPrices = R"(
- {model: gpu-large, effective_from: 2026-01-01, input: 3.00, cached_input: 0.30, output: 15.00, reasoning: 15.00}
- {model: gpu-large, effective_from: 2026-07-01, input: 2.00, cached_input: 0.20, output: 10.00}
- {model: local-small, effective_from: 2026-01-01, internal: true, input: 0.01, output: 0.02}
)";

std::unique_ptr<Ledger> open_ledger(const std::string& path, std::vector<BudgetDef> budgets = {},
                                    int64_t queue_capacity = 8192, int64_t retry_ms = 200) {
  LedgerConfig config;
  config.path = path;
  config.currency = "USD";
  config.reference_model = "gpu-large";
  config.queue_capacity = queue_capacity;
  config.retry_ms = retry_ms;
  auto ledger = Ledger::open(config, catalog_from(kPrices), std::move(budgets));
  EXPECT_TRUE(ledger) << (ledger ? "" : ledger.error().message);
  return ledger ? std::move(*ledger) : nullptr;
}

// Reads one row's column values by id.
std::map<std::string, Value> read_row(const std::string& path, const std::string& id) {
  auto db = ledger_db_open(path, true);
  EXPECT_TRUE(db);
  auto stmt = db->prepare("SELECT * FROM requests WHERE id = ?");
  EXPECT_TRUE(stmt);
  stmt->bind(1, id);
  std::map<std::string, Value> out;
  auto has = stmt->step();
  EXPECT_TRUE(has && *has) << "no row " << id;
  if (!has || !*has) return out;
  for (int i = 0; i < stmt->column_count(); ++i) out[stmt->column_name(i)] = stmt->value_at(i);
  return out;
}

int64_t int_of(const Value& v) {
  return std::get<int64_t>(v);
}
std::string text_of(const Value& v) {
  return std::get<std::string>(v);
}

TEST(Ledger, RecordsEveryKindWithSourcesAndAvoidedCost) {
  TempDir dir;
  auto ledger = open_ledger(dir.file("l.db"));
  Tokens t;
  t.input = {1000000, TokenSource::kBackend};
  t.cached_input = {500000, TokenSource::kBackend};
  t.output = {200000, TokenSource::kTokenizer};
  t.reasoning = {100000, TokenSource::kEstimate};
  RequestRecord r = simple_record("local-small", t);
  r.task_id = "task-42";
  r.trusted_tags = {"env:prod"};
  r.claimed_tags = {"customer:acme"};
  r.stream = true;
  r.finish_reason = "stop";
  std::string id;
  ASSERT_TRUE(record_durably(*ledger, r, &id));
  auto row = read_row(dir.file("l.db"), id);
  EXPECT_EQ(text_of(row["pricing"]), "internal");
  EXPECT_EQ(int_of(row["cost_input"]), 10000);     // 1M at 0.01
  EXPECT_EQ(int_of(row["cost_cached"]), 5000);     // 0.5M at 0.01 (defaults to input)
  EXPECT_EQ(int_of(row["cost_output"]), 4000);     // 0.2M at 0.02
  EXPECT_EQ(int_of(row["cost_reasoning"]), 2000);  // 0.1M at 0.02
  EXPECT_EQ(int_of(row["cost_total"]), 21000);
  // gpu-large in June: 3.00 + 0.15 + 3.00 + 1.50
  EXPECT_EQ(int_of(row["avoided_cost"]), 7650000);
  EXPECT_EQ(text_of(row["input_source"]), "backend");
  EXPECT_EQ(text_of(row["output_source"]), "tokenizer");
  EXPECT_EQ(text_of(row["reasoning_source"]), "estimate");
  EXPECT_EQ(text_of(row["task_id"]), "task-42");
  EXPECT_EQ(text_of(row["trusted_tags"]), "[\"env:prod\"]");
  EXPECT_EQ(text_of(row["claimed_tags"]), "[\"customer:acme\"]");
  EXPECT_EQ(int_of(row["stream"]), 1);
  EXPECT_EQ(text_of(row["day"]), "2026-06-15");
  EXPECT_EQ(text_of(row["price_version"]).rfind("local-small@2026-01-01#", 0), 0u);
  EXPECT_EQ(int_of(row["ttft_us"]), 300);
  EXPECT_EQ(ledger->stats().rows_committed, 1);
}

TEST(Ledger, UnpricedModelIsRecordedAsUnpricedNotZero) {
  TempDir dir;
  auto ledger = open_ledger(dir.file("l.db"));
  std::string id;
  ASSERT_TRUE(record_durably(*ledger, simple_record("mystery-model", tokens_of(10, 0, 5, 0)), &id));
  auto row = read_row(dir.file("l.db"), id);
  EXPECT_EQ(text_of(row["pricing"]), "unpriced");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(row["cost_total"]));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(row["cost_input"]));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(row["avoided_cost"]));
  EXPECT_EQ(text_of(row["price_version"]), "");
}

TEST(Ledger, PriceVersionFollowsEffectiveDate) {
  TempDir dir;
  auto ledger = open_ledger(dir.file("l.db"));
  int64_t before = *parse_utc_time("2026-06-30T23:59:59Z");
  int64_t after = *parse_utc_time("2026-07-01T00:00:01Z");
  std::string id1;
  std::string id2;
  ASSERT_TRUE(record_durably(
      *ledger, simple_record("gpu-large", tokens_of(1000000, 0, 0, 0), before), &id1));
  ASSERT_TRUE(record_durably(*ledger,
                             simple_record("gpu-large", tokens_of(1000000, 0, 0, 0), after), &id2));
  auto r1 = read_row(dir.file("l.db"), id1);
  auto r2 = read_row(dir.file("l.db"), id2);
  EXPECT_EQ(int_of(r1["cost_total"]), 3000000);
  EXPECT_EQ(int_of(r2["cost_total"]), 2000000);
  EXPECT_NE(text_of(r1["price_version"]), text_of(r2["price_version"]));
  // Both versions are kept, so a past period can be re-priced.
  EXPECT_EQ(scalar(dir.file("l.db"), "SELECT COUNT(*) FROM prices WHERE model='gpu-large'"), 2);
}

TEST(Ledger, FallbackAttemptsArePricedEachAndSummed) {
  TempDir dir;
  auto ledger = open_ledger(dir.file("l.db"));
  RequestRecord r = simple_record("local-small", {});
  AttemptRecord a1;
  a1.target = "gpu-large";
  a1.status = RequestStatus::kUpstreamCut;  // the backend's stream died: ferry counted
  a1.http_status = 200;
  a1.tokens = tokens_of(1000, 0, 40, 0, TokenSource::kTokenizer);
  AttemptRecord a2;
  a2.target = "local-small";
  a2.tokens = tokens_of(1000, 0, 100, 0, TokenSource::kBackend);
  r.attempts = {a1, a2};
  std::string id;
  ASSERT_TRUE(record_durably(*ledger, r, &id));
  auto row = read_row(dir.file("l.db"), id);
  EXPECT_EQ(int_of(row["attempts"]), 2);
  EXPECT_EQ(int_of(row["input_tokens"]), 2000);
  EXPECT_EQ(int_of(row["output_tokens"]), 140);
  EXPECT_EQ(text_of(row["output_source"]), "tokenizer");  // the weaker source of the two
  // gpu-large: 1000*3.00/M = 3000, 40*15/M = 600; local: 1000*0.01/M = 10, 100*0.02/M = 2
  EXPECT_EQ(int_of(row["cost_input"]), 3010);
  EXPECT_EQ(int_of(row["cost_output"]), 602);
  EXPECT_EQ(int_of(row["cost_total"]), 3612);
  EXPECT_EQ(text_of(row["pricing"]), "priced");
  EXPECT_EQ(scalar(dir.file("l.db"), "SELECT COUNT(*) FROM attempts WHERE request_id='" + id + "'"),
            2);
  EXPECT_EQ(scalar(dir.file("l.db"),
                   "SELECT cost_total FROM attempts WHERE attempt=1 AND request_id='" + id + "'"),
            3600);
}

TEST(Ledger, CutShortStreamsKeepTheirCountsAndStatus) {
  TempDir dir;
  auto ledger = open_ledger(dir.file("l.db"));
  // Local engine: the client hung up after 37 tokens; ferry counted them itself.
  RequestRecord local =
      simple_record("local-small", tokens_of(120, 0, 37, 0, TokenSource::kTokenizer));
  local.status = RequestStatus::kClientCancelled;
  local.stream = true;
  // HTTP backend that never sent usage: counted by ferry's tokenizer.
  RequestRecord remote =
      simple_record("gpu-large", tokens_of(120, 0, 55, 0, TokenSource::kTokenizer));
  remote.status = RequestStatus::kUpstreamCut;
  remote.stream = true;
  std::string id1;
  std::string id2;
  ASSERT_TRUE(record_durably(*ledger, local, &id1));
  ASSERT_TRUE(record_durably(*ledger, remote, &id2));
  auto r1 = read_row(dir.file("l.db"), id1);
  auto r2 = read_row(dir.file("l.db"), id2);
  EXPECT_EQ(text_of(r1["status"]), "client_cancelled");
  EXPECT_EQ(int_of(r1["output_tokens"]), 37);
  EXPECT_EQ(text_of(r1["output_source"]), "tokenizer");
  EXPECT_GT(int_of(r1["cost_total"]), 0);
  EXPECT_EQ(text_of(r2["status"]), "upstream_cut");
  EXPECT_EQ(int_of(r2["cost_output"]), 825);  // 55 * 15.00 / 1M
  EXPECT_EQ(int_of(r2["cost_input"]), 360);
}

BudgetDef hard_team_budget(Money amount) {
  BudgetDef def;
  def.name = "team-a-daily";
  def.scope = BudgetScope::kTeam;
  def.match = "team-a";
  def.amount = amount;
  def.period = BudgetPeriod::kDay;
  def.hard = true;
  return def;
}

TEST(Ledger, BudgetRaceNeverOverspendsAndSurvivesRestart) {
  TempDir dir;
  std::string path = dir.file("l.db");
  PriceCatalog prices = catalog_from(kPrices);
  int64_t now = unix_micros_now();
  Money worst = *prices.worst_case("gpu-large", 1000, 500, now);
  Money amount = Money::from_micros(worst.micros() * 10);
  auto ledger = open_ledger(path, {hard_team_budget(amount)});
  ASSERT_EQ(ledger->worst_case({"local-small", "gpu-large"}, 1000, 500), worst);
  constexpr int kThreads = 200;
  std::latch start(kThreads);
  std::latch attempted(kThreads);
  std::atomic<int> admitted{0};
  std::atomic<int> refused{0};
  std::atomic<int> durable{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      Subject subject{"key-a", "team-a", "proj-a"};
      start.arrive_and_wait();
      auto admission = ledger->admit(subject, worst);
      // Nobody records before everyone has tried: settling early would free room.
      attempted.arrive_and_wait();
      if (!admission) {
        EXPECT_EQ(admission.error().code, ErrorCode::kRateLimited);
        refused.fetch_add(1);
        return;
      }
      admitted.fetch_add(1);
      int64_t t = unix_micros_now();
      RequestRecord r = simple_record("gpu-large", tokens_of(600, 400, 450, 50), t);
      r.ended_us = t;
      ledger->record(std::move(r), std::move(*admission), [&](const Status& st) {
        EXPECT_TRUE(st);
        durable.fetch_add(1);
      });
    });
  }
  for (auto& t : threads) t.join();
  ledger->flush();
  EXPECT_EQ(admitted.load(), 10);
  EXPECT_EQ(refused.load(), kThreads - 10);
  EXPECT_EQ(durable.load(), 10);
  int64_t in_ledger = scalar(path, "SELECT SUM(cost_total) FROM requests WHERE team='team-a'");
  auto states = ledger->budgets();
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].spent.micros(), in_ledger);
  EXPECT_EQ(states[0].reserved.micros(), 0);
  EXPECT_LE(states[0].spent, amount);
  double left = *ledger->budget_left_pct(Subject{"key-a", "team-a", "proj-a"});
  ledger.reset();
  // After a restart the state is rebuilt from the ledger.
  auto reopened = open_ledger(path, {hard_team_budget(amount)});
  auto after = reopened->budgets();
  EXPECT_EQ(after[0].spent.micros(), in_ledger);
  EXPECT_EQ(after[0].reserved.micros(), 0);
  EXPECT_DOUBLE_EQ(*reopened->budget_left_pct(Subject{"key-a", "team-a", "proj-a"}), left);
}

TEST(Ledger, QueueFullRefusesWith503) {
  TempDir dir;
  auto ledger = open_ledger(dir.file("l.db"), {}, 2);
  Subject s{"k", "t", "p"};
  auto a1 = ledger->admit(s, Money());
  auto a2 = ledger->admit(s, Money());
  ASSERT_TRUE(a1);
  ASSERT_TRUE(a2);
  auto a3 = ledger->admit(s, Money());
  ASSERT_FALSE(a3);
  EXPECT_EQ(a3.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(a3.error().message.find("queue is full"), std::string::npos);
  { Admission dropped = std::move(*a1); }  // given back unused
  auto a4 = ledger->admit(s, Money());
  EXPECT_TRUE(a4);
  EXPECT_EQ(ledger->stats().pending, 2);
}

TEST(Ledger, WriteFailureRefusesNewRequestsUntilTheRowIsKept) {
  TempDir dir;
  auto ledger = open_ledger(dir.file("l.db"), {}, 100, 30);
  ledger->inject_commit_failures(3);
  std::promise<Status> done;
  auto fut = done.get_future();
  ledger->record(simple_record("gpu-large", tokens_of(1, 0, 1, 0)),
                 [&](const Status& st) { done.set_value(st); });
  // While the commit fails, admission says why.
  bool saw_refusal = false;
  for (int i = 0; i < 2000 && !saw_refusal; ++i) {
    auto admission = ledger->admit(Subject{}, Money());
    if (!admission) {
      EXPECT_EQ(admission.error().code, ErrorCode::kUnavailable);
      EXPECT_NE(admission.error().message.find("injected write failure"), std::string::npos);
      saw_refusal = true;
    }
    if (fut.wait_for(std::chrono::milliseconds(1)) == std::future_status::ready) break;
  }
  EXPECT_TRUE(saw_refusal);
  EXPECT_TRUE(fut.get());  // retried and kept, never dropped
  EXPECT_TRUE(ledger->health());
  EXPECT_EQ(ledger->stats().write_failures, 3);
  EXPECT_EQ(scalar(dir.file("l.db"), "SELECT COUNT(*) FROM requests"), 1);
}

TEST(Ledger, StopWritingReturnsOnceEveryQueuedRowsCallbackRan) {
  // What a server needs before it destroys its event loops: no callback of the ledger runs
  // after this returns. Rows that can be written are; a row the store keeps refusing is
  // refused (three more tries), not dropped without its callback.
  TempDir dir;
  auto ledger = open_ledger(dir.file("l.db"), {}, 100, 5);
  std::atomic<int> ok{0};
  std::atomic<int> refused{0};
  auto count = [&](const Status& st) { (st ? ok : refused).fetch_add(1); };
  for (int i = 0; i < 20; ++i)
    ledger->record(simple_record("gpu-large", tokens_of(1, 0, 1, 0)), count);
  ledger->stop_writing();
  EXPECT_EQ(ok.load(), 20);
  EXPECT_EQ(refused.load(), 0);
  ledger->stop_writing();  // again: nothing to do
  ledger.reset();          // and the destructor after it
  EXPECT_EQ(scalar(dir.file("l.db"), "SELECT COUNT(*) FROM requests"), 20);

  TempDir dir2;
  auto failing = open_ledger(dir2.file("l.db"), {}, 100, 5);
  failing->inject_commit_failures(1000000);
  std::promise<Status> done;
  auto fut = done.get_future();
  failing->record(simple_record("gpu-large", tokens_of(1, 0, 1, 0)),
                  [&](const Status& st) { done.set_value(st); });
  failing->stop_writing();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_FALSE(fut.get());
}

TEST(Ledger, AdjustmentsPointAtTheOriginalAndMoveTheBudget) {
  TempDir dir;
  std::string path = dir.file("l.db");
  auto ledger = open_ledger(path, {hard_team_budget(Money::from_micros(100000000))});
  int64_t now = unix_micros_now();
  RequestRecord r = simple_record("gpu-large", tokens_of(1000000, 0, 0, 0), now);
  r.ended_us = now;
  std::string id;
  ASSERT_TRUE(record_durably(*ledger, r, &id));
  const int64_t cost = catalog_from(kPrices).price("gpu-large", r.tokens, now).total().micros();
  ASSERT_GT(cost, 0);
  EXPECT_EQ(ledger->budgets()[0].spent.micros(), cost);
  Adjustment adj;
  adj.adjusts_id = id;
  adj.input = Money::from_micros(-1000000);
  adj.note = "provider credit";
  std::promise<Status> done;
  std::string adj_id = ledger->adjust(adj, [&](const Status& st) { done.set_value(st); });
  ASSERT_TRUE(done.get_future().get());
  EXPECT_EQ(ledger->budgets()[0].spent.micros(), cost - 1000000);
  auto row = read_row(path, adj_id);
  EXPECT_EQ(text_of(row["kind"]), "adjustment");
  EXPECT_EQ(text_of(row["adjusts_id"]), id);
  EXPECT_EQ(text_of(row["team"]), "team-a");
  EXPECT_EQ(int_of(row["cost_total"]), -1000000);
  EXPECT_EQ(text_of(row["note"]), "provider credit");
  // An adjustment of nothing is refused alone.
  Adjustment bad;
  bad.adjusts_id = "no-such-request";
  std::promise<Status> refused;
  ledger->adjust(bad, [&](const Status& st) { refused.set_value(st); });
  Status st = refused.get_future().get();
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kNotFound);
  ledger.reset();
  auto reopened = open_ledger(path, {hard_team_budget(Money::from_micros(100000000))});
  EXPECT_EQ(reopened->budgets()[0].spent.micros(), cost - 1000000);
}

TEST(Ledger, DuplicateIdIsRefusedAloneAndRowsAreAppendOnly) {
  TempDir dir;
  std::string path = dir.file("l.db");
  auto ledger = open_ledger(path);
  RequestRecord r = simple_record("gpu-large", tokens_of(1, 0, 1, 0));
  r.id = "fixed-id";
  ASSERT_TRUE(record_durably(*ledger, r));
  Status again = record_durably(*ledger, r);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kInvalidRequest);
  r.id = "";
  EXPECT_TRUE(record_durably(*ledger, r));
  EXPECT_EQ(ledger->stats().rows_refused, 1);
  auto db = ledger_db_open(path, false);
  ASSERT_TRUE(db);
  Status update = db->exec("UPDATE requests SET cost_total = 0");
  ASSERT_FALSE(update);
  EXPECT_NE(update.error().message.find("append-only"), std::string::npos);
  EXPECT_FALSE(db->exec("DELETE FROM requests"));
}

TEST(Ledger, SchemaVersionAndCurrencyAreChecked) {
  TempDir dir;
  std::string path = dir.file("l.db");
  { auto ledger = open_ledger(path); }
  EXPECT_EQ(scalar(path, "PRAGMA user_version"), kSchemaVersion);
  {
    LedgerConfig config;
    config.path = path;
    config.currency = "EUR";
    auto refused = Ledger::open(config, PriceCatalog(), {});
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("USD"), std::string::npos);
  }
  {
    auto db = ledger_db_open(path, false);
    ASSERT_TRUE(db->exec("PRAGMA user_version=99"));
  }
  LedgerConfig config;
  config.path = path;
  auto newer = Ledger::open(config, PriceCatalog(), {});
  ASSERT_FALSE(newer);
  EXPECT_NE(newer.error().message.find("newer"), std::string::npos);
}

TEST(Ledger, ParsesLedgerConfig) {
  auto config = parse_ledger_config(
      yaml::parse("path: /tmp/x.db\ncurrency: EUR\nreference_model: gpu\nqueue_capacity: 16\n",
                  "c"),
      "c");
  EXPECT_EQ(config.path, "/tmp/x.db");
  EXPECT_EQ(config.currency, "EUR");
  EXPECT_EQ(config.reference_model, "gpu");
  EXPECT_EQ(config.queue_capacity, 16);
  EXPECT_THROW(parse_ledger_config(yaml::parse("path: x\nsynchronous: off\n", "c"), "c"),
               yaml::YamlError);
}

// A PostgreSQL URL given as a server's ledger path is refused (its instance id, and so its own
// hash chain, is configured under ledger.postgres), naming the key to use instead.
TEST(Ledger, RefusesPostgresUrlAsPath) {
  try {
    (void)parse_ledger_config(yaml::parse("path: postgresql://ferry@db/ferry\n", "c"), "c");
    FAIL() << "a URL as the path was accepted";
  } catch (const yaml::YamlError& e) {
    EXPECT_NE(std::string(e.what()).find("ledger.postgres.url"), std::string::npos) << e.what();
  }
}

TEST(Ledger, ExampleConfigParses) {
  YAML::Node root = yaml::parse_file(FERRY_LEDGER_EXAMPLE);
  LedgerConfig config = parse_ledger_config(root["ledger"], FERRY_LEDGER_EXAMPLE);
  EXPECT_EQ(config.reference_model, "gpu-large");
  PriceCatalog prices = PriceCatalog::from_yaml(root["prices"], FERRY_LEDGER_EXAMPLE);
  EXPECT_EQ(prices.entries().size(), 3u);
  auto budgets = parse_budgets(root["budgets"], FERRY_LEDGER_EXAMPLE);
  ASSERT_EQ(budgets.size(), 2u);
  EXPECT_EQ(budgets[0].amount, Money::from_micros(500000000));
  EXPECT_FALSE(budgets[1].hard);
}

}  // namespace
}  // namespace ferry::ledger
