// Group commit (ledger.group_wait_us): the writer's plan for how long a group waits for the rows
// on their way, and a ledger that gathers its groups keeping every row and every promise.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <random>
#include <thread>

#include "common/clock.h"
#include "ledger/ledger.h"
#include "ledger/sqlite_db.h"
#include "test_util.h"

namespace ferry::ledger {
namespace {

using detail::GatherPlan;
using detail::plan_gather;
using testing::catalog_from;
using testing::scalar;
using testing::simple_record;
using testing::TempDir;
using testing::tokens_of;

constexpr int64_t kUs = 1000;  // nanoseconds

TEST(GroupCommit, WaitsOnlyForRowsOnTheirWayWhileRowsComeFast) {
  const int64_t window = 1000 * kUs;
  // Rows on their way (admitted, not recorded: pending less queued), at 1.5 gaps each.
  GatherPlan p = plan_gather(window, 100 * kUs, 2, 6, 0);
  EXPECT_EQ(p.rows, 6u);
  EXPECT_EQ(p.wait_ns, 4 * 150 * kUs);
  // The last group's clients not yet back count too.
  p = plan_gather(window, 100 * kUs, 2, 4, 2);
  EXPECT_EQ(p.rows, 6u);
  EXPECT_EQ(p.wait_ns, 4 * 150 * kUs);
  // At most the window.
  p = plan_gather(window, 100 * kUs, 3, 20, 0);
  EXPECT_EQ(p.rows, 20u);
  EXPECT_EQ(p.wait_ns, window);
  // A lone client: its own row is the queue, nothing else is coming, no wait.
  p = plan_gather(window, 100 * kUs, 1, 1, 0);
  EXPECT_EQ(p.wait_ns, 0);
  // More came back than were answered (other clients): nobody is still expected from them.
  p = plan_gather(window, 100 * kUs, 1, 1, -3);
  EXPECT_EQ(p.wait_ns, 0);
  // Rows slower than two a window: never held back, however many are in flight.
  p = plan_gather(window, 600 * kUs, 1, 500, 16);
  EXPECT_EQ(p.wait_ns, 0);
  EXPECT_GT(plan_gather(window, 500 * kUs, 1, 500, 16).wait_ns, 0);
  // Off, or no pace known yet.
  EXPECT_EQ(plan_gather(0, 100 * kUs, 1, 10, 0).wait_ns, 0);
  EXPECT_EQ(plan_gather(window, -1, 1, 10, 0).wait_ns, 0);
}

// Whatever the inputs: never past the window, waits only for more rows than are queued, and only
// at a pace of two rows a window or faster; no overflow at the extremes.
TEST(GroupCommit, PlanStaysWithinItsBoundsForAnyInputs) {
  std::mt19937_64 rng(17);
  auto pick = [&](int64_t hi) {
    return static_cast<int64_t>(rng() % static_cast<uint64_t>(hi + 1));
  };
  for (int i = 0; i < 200000; ++i) {
    const int64_t window = pick(4) == 0 ? 0 : pick(100000) * kUs;
    const int64_t gap = pick(3) == 0 ? pick(int64_t{1} << 40) : pick(2 * window + 1);
    const int64_t queued = 1 + pick(5000);
    const int64_t pending = queued + (pick(2) == 0 ? 0 : pick(int64_t{1} << 30));
    const int64_t returning = pick(8192) - 4096;
    GatherPlan p = plan_gather(window, gap, queued, pending, returning);
    ASSERT_GE(p.wait_ns, 0);
    ASSERT_LE(p.wait_ns, window);
    if (p.wait_ns > 0) {
      ASSERT_LE(gap * 2, window);
      ASSERT_GT(p.rows, static_cast<size_t>(queued));
      ASSERT_EQ(p.rows, static_cast<size_t>(pending + std::max<int64_t>(returning, 0)));
    }
  }
  GatherPlan huge = plan_gather(100000 * kUs, 50000 * kUs, 1, int64_t{1} << 62, 0);
  EXPECT_EQ(huge.wait_ns, 100000 * kUs);
}

const char* kPrices = R"(
- {model: gpu-large, effective_from: 2026-01-01, input: 3.00, cached_input: 0.30, output: 15.00}
)";

std::unique_ptr<Ledger> open_gathering(const std::string& path, int64_t apply_ms) {
  LedgerConfig config;
  config.path = path;
  config.currency = "USD";
  config.group_wait_us = 100000;  // the longest wait there is: groups gather whenever they can
  config.apply_ms = apply_ms;
  auto ledger = Ledger::open(config, catalog_from(kPrices), {});
  EXPECT_TRUE(ledger) << (ledger ? "" : ledger.error().message);
  return ledger ? std::move(*ledger) : nullptr;
}

// Clients in a closed loop (admit, record, wait until durable, again), as the gateway's
// connections are: every row is durable once, its callback called once and ok, and the file
// holds every row and every micro-unit; with the row log and without it.
TEST(GroupCommit, ClosedLoopClientsGetEveryRowDurable) {
  for (int64_t apply_ms : {int64_t{100}, int64_t{0}}) {
    SCOPED_TRACE("apply_ms " + std::to_string(apply_ms));
    TempDir dir;
    const std::string path = dir.file("l.db");
    auto ledger = open_gathering(path, apply_ms);
    ASSERT_TRUE(ledger);
    constexpr int kClients = 12;
    constexpr int kRows = 120;
    std::atomic<int> calls{0};
    std::atomic<int> failures{0};
    std::atomic<int64_t> micros{0};
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        Subject subject{"key-" + std::to_string(c), "team-a", "proj-a"};
        for (int i = 0; i < kRows; ++i) {
          auto admission = ledger->admit(subject, Money());
          if (!admission) {
            failures.fetch_add(1);
            return;
          }
          RequestRecord r =
              simple_record("gpu-large", tokens_of(100 + c, 0, 10 + i, 0), unix_micros_now());
          r.key_id = subject.key_id;
          std::promise<Status> done;
          auto durable = done.get_future();
          ledger->record(std::move(r), std::move(*admission), [&](const Status& st) {
            calls.fetch_add(1);
            done.set_value(st);
          });
          Status st = durable.get();
          if (!st) failures.fetch_add(1);
        }
      });
      for (int i = 0; i < kRows; ++i) {
        // 3.00 per million input tokens, 15.00 per million output: in micro-units.
        micros.fetch_add((100 + c) * 3 + (10 + i) * 15);
      }
    }
    for (auto& t : clients) t.join();
    ledger->flush();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(calls.load(), kClients * kRows);
    const LedgerStats stats = ledger->stats();
    EXPECT_EQ(stats.rows_committed, kClients * kRows);
    EXPECT_EQ(stats.pending, 0);
    EXPECT_LE(stats.batches, kClients * kRows);
    std::printf("%lld rows in %lld groups\n", static_cast<long long>(stats.rows_committed),
                static_cast<long long>(stats.batches));
    ledger.reset();
    EXPECT_EQ(scalar(path, "SELECT COUNT(*) FROM requests"), kClients * kRows);
    EXPECT_EQ(scalar(path, "SELECT SUM(cost_total) FROM requests"), micros.load());
  }
}

// Rows admitted and never recorded (a held stream, a request given up) keep no group from
// being written for good, and neither flush() nor closing the ledger waits for them.
TEST(GroupCommit, RowsThatNeverComeHoldNothingForGood) {
  TempDir dir;
  const std::string path = dir.file("l.db");
  auto ledger = open_gathering(path, 100);
  ASSERT_TRUE(ledger);
  Subject subject{"key-a", "team-a", "proj-a"};
  std::vector<Admission> held;
  for (int i = 0; i < 64; ++i) {
    auto admission = ledger->admit(subject, Money());
    ASSERT_TRUE(admission);
    held.push_back(std::move(*admission));
  }
  // A fast run of rows, so that the writer's pace allows gathering, then one more.
  for (int round = 0; round < 3; ++round) {
    std::vector<std::future<Status>> durable;
    for (int i = 0; i < 50; ++i) {
      auto done = std::make_shared<std::promise<Status>>();
      durable.push_back(done->get_future());
      ledger->record(simple_record("gpu-large", tokens_of(1, 0, 1, 0), unix_micros_now()),
                     [done](const Status& st) { done->set_value(st); });
    }
    for (auto& d : durable) EXPECT_TRUE(d.get());
  }
  ledger->record(simple_record("gpu-large", tokens_of(1, 0, 1, 0), unix_micros_now()),
                 [](const Status&) {});
  ledger->flush();
  EXPECT_EQ(ledger->stats().rows_committed, 151);
  EXPECT_EQ(ledger->stats().pending, 64);
  held.clear();
  EXPECT_EQ(ledger->stats().pending, 0);
  ledger->record(simple_record("gpu-large", tokens_of(1, 0, 1, 0), unix_micros_now()),
                 [](const Status&) {});
  ledger.reset();  // closes with the last row queued: written, not left behind
  EXPECT_EQ(scalar(path, "SELECT COUNT(*) FROM requests"), 152);
}

TEST(GroupCommit, ConfigKeyIsReadAndBounded) {
  EXPECT_EQ(parse_ledger_config(yaml::parse("path: x.db\n", "c"), "c").group_wait_us, 1000);
  EXPECT_EQ(
      parse_ledger_config(yaml::parse("path: x.db\ngroup_wait_us: 0\n", "c"), "c").group_wait_us,
      0);
  EXPECT_EQ(
      parse_ledger_config(yaml::parse("path: x.db\ngroup_wait_us: 2500\n", "c"), "c").group_wait_us,
      2500);
  EXPECT_THROW(parse_ledger_config(yaml::parse("path: x.db\ngroup_wait_us: -1\n", "c"), "c"),
               yaml::YamlError);
  EXPECT_THROW(parse_ledger_config(yaml::parse("path: x.db\ngroup_wait_us: 1000000\n", "c"), "c"),
               yaml::YamlError);
}

}  // namespace
}  // namespace ferry::ledger
