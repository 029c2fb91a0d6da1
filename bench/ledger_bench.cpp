// Ledger benchmarks (never run by the tests):
//   ferry_ledger_bench writer [--rows N] [--clients C] [--window W] [--db PATH]
//       durable rows/s through the real writer (group commit, WAL, synchronous=FULL)
//   ferry_ledger_bench report [--rows N] [--db PATH]
//       fills a ledger with N rows through the store's bulk path (synchronous=OFF, same
//       append code), then times `report --by team,day` (best of 5)
//       (--sql-bulk 1: generate the rows with one SQL statement instead, for 10M rows)
//   ferry_ledger_bench cpu [--requests N]
//       CPU time per request on the calling (gateway) thread: worst_case + admit + record
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/yaml_util.h"
#include "ledger/ledger.h"
#include "ledger/report.h"
#include "ledger/store.h"

using namespace ferry;
using namespace ferry::ledger;

namespace {

const char* kPrices = R"(
- {model: gpu-large, effective_from: 2026-01-01, input: 3.00, cached_input: 0.30, output: 15.00}
- {model: gpu-mid, effective_from: 2026-01-01, input: 0.70, output: 2.10}
- {model: local-small, effective_from: 2026-01-01, internal: true, input: 0.01, output: 0.02}
)";
const char* kTargets[] = {"gpu-large", "gpu-mid", "local-small", "gpu-large"};

int64_t arg(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == name) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

std::string arg_str(int argc, char** argv, const char* name, const std::string& fallback) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == name) return argv[i + 1];
  }
  return fallback;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

RequestRecord make_record(uint64_t n, int64_t at_us) {
  RequestRecord r;
  r.started_us = at_us;
  r.ended_us = at_us + 900000;
  int key = static_cast<int>(n % 100);
  r.key_id = "key-" + std::to_string(key);
  r.team = "team-" + std::to_string(key % 20);
  r.project = "project-" + std::to_string(key % 5);
  r.task_id = "task-" + std::to_string(n / 8);
  r.trusted_tags = {"env:prod"};
  r.requested_model = "auto";
  r.target = kTargets[n % 4];
  r.upstream_model = r.target + "-v1";
  r.rule_id = "rule-" + std::to_string(n % 3);
  r.policy_version = "v7";
  r.stream = (n & 1) != 0;
  r.finish_reason = "stop";
  r.tokens = split_openai_usage(static_cast<int64_t>(200 + n % 3000), static_cast<int64_t>(n % 128),
                                static_cast<int64_t>(50 + n % 700), static_cast<int64_t>(n % 40),
                                TokenSource::kBackend);
  r.timings = Timings{120, 40, 180000, 900000};
  return r;
}

int bench_writer(int argc, char** argv) {
  int64_t rows = arg(argc, argv, "--rows", 200000);
  int64_t clients = arg(argc, argv, "--clients", 64);
  int64_t window = arg(argc, argv, "--window", 64);  // outstanding rows per client
  std::string path = arg_str(argc, argv, "--db", "/tmp/ferry_ledger_bench_writer.db");
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  LedgerConfig config;
  config.path = path;
  config.reference_model = "gpu-large";
  config.queue_capacity = clients * window + 16;
  auto prices = PriceCatalog::from_yaml(yaml::parse(kPrices, "bench"), "bench");
  auto ledger = Ledger::open(config, prices, {});
  if (!ledger) {
    std::fprintf(stderr, "%s\n", ledger.error().message.c_str());
    return 1;
  }
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> durable{0};
  auto t0 = std::chrono::steady_clock::now();
  double cpu0 = process_cpu_seconds();
  std::vector<std::thread> threads;
  for (int64_t c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      // A client keeps `window` requests in flight and blocks (no spinning) for a free one.
      std::counting_semaphore<1 << 20> free_slots(window);
      for (;;) {
        int64_t n = next.fetch_add(1);
        if (n >= rows) break;
        free_slots.acquire();
        auto admission = (*ledger)->admit(Subject{}, Money());
        if (!admission) {
          std::fprintf(stderr, "admit: %s\n", admission.error().message.c_str());
          std::abort();
        }
        (*ledger)->record(make_record(static_cast<uint64_t>(n), unix_micros_now()),
                          std::move(*admission), [&](const Status& st) {
                            if (!st) std::abort();
                            durable.fetch_add(1);
                            free_slots.release();
                          });
      }
      for (int64_t i = 0; i < window; ++i) free_slots.acquire();  // all durable
    });
  }
  for (auto& t : threads) t.join();
  double wall = seconds_since(t0);
  double cpu = process_cpu_seconds() - cpu0;
  LedgerStats stats = (*ledger)->stats();
  std::printf("writer: %lld durable rows in %.3f s = %.0f rows/s (synchronous=FULL, WAL), "
              "%lld group commits (%.1f rows/commit), %.1f us CPU/row (whole process)\n",
              static_cast<long long>(durable.load()), wall, static_cast<double>(durable.load()) / wall,
              static_cast<long long>(stats.batches),
              static_cast<double>(stats.rows_committed) / static_cast<double>(std::max<int64_t>(1, stats.batches)),
              cpu * 1e6 / static_cast<double>(rows));
  return 0;
}

// Fills `tmp_path` with `rows` rows through the store's append path (no fsync).
int generate_rows(const std::string& tmp_path, int64_t rows) {
  int64_t days = 90;
  {
    auto store = Store::open(tmp_path, "USD");
    if (!store) {
      std::fprintf(stderr, "%s\n", store.error().message.c_str());
      return 1;
    }
    // Bulk path: the same append code, without fsync (generation only).
    (void)store->db().exec("PRAGMA synchronous=OFF; PRAGMA cache_size=-262144;");
    auto prices = PriceCatalog::from_yaml(yaml::parse(kPrices, "bench"), "bench");
    auto t0 = std::chrono::steady_clock::now();
    int64_t start = *parse_utc_time("2026-03-01");
    constexpr int64_t kBatch = 20000;
    std::vector<LedgerEntry> entries(kBatch);
    std::vector<LedgerEntry*> ptrs;
    for (int64_t done = 0; done < rows;) {
      int64_t n = std::min(kBatch, rows - done);
      ptrs.clear();
      for (int64_t i = 0; i < n; ++i) {
        int64_t k = done + i;
        int64_t at = start + (k * days * kMicrosPerDay) / rows;
        LedgerEntry& e = entries[static_cast<size_t>(i)];
        e.record = make_record(static_cast<uint64_t>(k), at);
        e.record.id = "r" + std::to_string(k);
        e.cost = prices.price(e.record.target, e.record.tokens, at);
        e.avoided = prices.price("gpu-large", e.record.tokens, at).total();
        ptrs.push_back(&e);
      }
      auto result = store->append(ptrs);
      if (!result) {
        std::fprintf(stderr, "%s\n", result.error().message.c_str());
        return 1;
      }
      done += n;
      if (done % 1000000 == 0) {
        std::fprintf(stderr, "  generated %lld rows (%.0f s)\n", static_cast<long long>(done),
                     seconds_since(t0));
      }
    }
    std::printf("generated %lld rows in %.1f s\n", static_cast<long long>(rows), seconds_since(t0));
    (void)store->db().exec("PRAGMA wal_checkpoint(TRUNCATE)");
  }
  return 0;
}

// Fills `tmp_path` with `rows` synthetic rows in SQL (one INSERT ... SELECT over a recursive
// counter; indexes rebuilt afterwards, the daily aggregate built with one GROUP BY, hash
// columns left as filler). Much faster than the append path; used to reach 10M rows. The
// report reads the same tables either way.
int generate_rows_sql(const std::string& tmp_path, int64_t rows) {
  auto store = Store::open(tmp_path, "USD");
  if (!store) {
    std::fprintf(stderr, "%s\n", store.error().message.c_str());
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  int64_t start = *parse_utc_time("2026-03-01");
  int64_t span = 90 * kMicrosPerDay;
  std::string sql =
      "PRAGMA synchronous=OFF; PRAGMA journal_mode=OFF; PRAGMA cache_size=-262144;"
      "DROP INDEX requests_task; DROP INDEX requests_ended; BEGIN;"
      "WITH RECURSIVE c(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM c WHERE k < " +
      std::to_string(rows - 1) +
      "), r AS (SELECT k, " + std::to_string(start) + " + (k * " + std::to_string(span) + ") / " +
      std::to_string(rows) +
      " AS t, k % 100 AS key, CASE k % 4 WHEN 1 THEN 'gpu-mid' WHEN 2 THEN 'local-small' ELSE "
      "'gpu-large' END AS target, 200 + k % 3000 - k % 128 AS inp, k % 128 AS cached, "
      "50 + k % 700 - k % 40 AS outp, k % 40 AS reas FROM c), "
      "p AS (SELECT r.*, CASE target WHEN 'gpu-mid' THEN 700000 WHEN 'local-small' THEN 10000 "
      "ELSE 3000000 END AS pi, CASE target WHEN 'gpu-mid' THEN 700000 WHEN 'local-small' THEN "
      "10000 ELSE 300000 END AS pc, CASE target WHEN 'gpu-mid' THEN 2100000 WHEN 'local-small' "
      "THEN 20000 ELSE 15000000 END AS po FROM r) "
      "INSERT INTO requests(id,kind,started_us,ended_us,day,key_id,team,project,task_id,"
      "trusted_tags,claimed_tags,requested_model,target,upstream_model,rule_id,policy_version,"
      "attempts,status,http_status,error_code,stream,finish_reason,input_tokens,input_source,"
      "cached_tokens,cached_source,output_tokens,output_source,reasoning_tokens,"
      "reasoning_source,pricing,price_version,cost_input,cost_cached,cost_output,"
      "cost_reasoning,cost_total,avoided_cost,avoided_version,queue_us,routing_us,ttft_us,"
      "total_us,prev_hash,hash) SELECT printf('r%010d', k),'request',t,t+900000,"
      "strftime('%Y-%m-%d', t / 1000000, 'unixepoch'),'key-'||key,'team-'||(key % 20),"
      "'project-'||(key % 5),'task-'||(k / 8),'[\"env:prod\"]','[]','auto',target,"
      "target||'-v1','rule-'||(k % 3),'v7',1,'ok',200,'',k % 2,'stop',inp,'backend',cached,"
      "'backend',outp,'backend',reas,'backend',"
      "CASE target WHEN 'local-small' THEN 'internal' ELSE 'priced' END,target||'@bulk',"
      "(inp*pi+500000)/1000000,(cached*pc+500000)/1000000,(outp*po+500000)/1000000,"
      "(reas*po+500000)/1000000,(inp*pi+500000)/1000000+(cached*pc+500000)/1000000+"
      "(outp*po+500000)/1000000+(reas*po+500000)/1000000,"
      "(inp*3000000+500000)/1000000+(cached*300000+500000)/1000000+"
      "(outp*15000000+500000)/1000000+(reas*15000000+500000)/1000000,'gpu-large@bulk',"
      "120,40,180000,900000,'bulk','bulk' FROM p;"
      "CREATE INDEX requests_task ON requests(task_id, started_us);"
      "CREATE INDEX requests_ended ON requests(ended_us);"
      "INSERT INTO daily SELECT day,key_id,team,project,upstream_model,target,rule_id,"
      "SUM(kind='request'),SUM(kind='request' AND pricing='unpriced'),SUM(input_tokens),"
      "SUM(cached_tokens),SUM(output_tokens),SUM(reasoning_tokens),"
      "SUM(COALESCE(cost_input,0)),SUM(COALESCE(cost_cached,0)),SUM(COALESCE(cost_output,0)),"
      "SUM(COALESCE(cost_reasoning,0)),SUM(COALESCE(cost_total,0)),"
      "SUM(COALESCE(avoided_cost,0)),"
      "SUM(CASE WHEN avoided_cost IS NOT NULL THEN COALESCE(cost_total,0) ELSE 0 END),"
      "MIN(started_us),MAX(ended_us) FROM requests "
      "GROUP BY day,key_id,team,project,upstream_model,target,rule_id;"
      "COMMIT; PRAGMA journal_mode=WAL;";
  if (auto st = store->db().exec(sql); !st) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    return 1;
  }
  std::printf("generated %lld rows in SQL in %.1f s\n", static_cast<long long>(rows),
              seconds_since(t0));
  return 0;
}

int bench_report(int argc, char** argv) {
  int64_t rows = arg(argc, argv, "--rows", 1000000);
  bool sql_bulk = arg(argc, argv, "--sql-bulk", 0) != 0;
  std::string path = arg_str(argc, argv, "--db", "/tmp/ferry_ledger_bench_report_" +
                                                     std::to_string(rows) +
                                                     (sql_bulk ? "_sql" : "") + ".db");
  if (!std::filesystem::exists(path)) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + ".tmp" + suffix);
    int rc = sql_bulk ? generate_rows_sql(path + ".tmp", rows) : generate_rows(path + ".tmp", rows);
    if (rc != 0) return rc;
    std::filesystem::rename(path + ".tmp", path);
    for (const char* suffix : {"-wal", "-shm"}) std::filesystem::remove(path + ".tmp" + suffix);
  }
  ReportQuery query;
  query.by = {ReportBy::kTeam, ReportBy::kDay};
  double best = 1e9;
  size_t groups = 0;
  Money total;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto report = run_report(path, query);
    double s = seconds_since(t0);
    if (!report) {
      std::fprintf(stderr, "%s\n", report.error().message.c_str());
      return 1;
    }
    best = std::min(best, s);
    groups = report->rows.size();
    total = report->totals.total;
  }
  std::printf("report --by team,day over %lld rows: %zu groups, total %s, best of 5: %.3f s\n",
              static_cast<long long>(rows), groups, total.to_string().c_str(), best);
  query.by = {ReportBy::kMonth};
  auto t0 = std::chrono::steady_clock::now();
  auto month = run_report(path, query);
  std::printf("report --by month: %.3f s (total %s)\n", seconds_since(t0),
              month ? month->totals.total.to_string().c_str() : "error");
  return 0;
}

int bench_cpu(int argc, char** argv) {
  int64_t requests = arg(argc, argv, "--requests", 200000);
  std::string path = "/tmp/ferry_ledger_bench_cpu.db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  LedgerConfig config;
  config.path = path;
  config.reference_model = "gpu-large";
  config.queue_capacity = requests + 16;
  auto prices = PriceCatalog::from_yaml(yaml::parse(kPrices, "bench"), "bench");
  std::vector<BudgetDef> budgets = parse_budgets(
      yaml::parse("- {name: t, scope: team, match: team-3, amount: 1000000, period: month}\n"
                  "- {name: k, scope: key, match: key-3, amount: 1000000, period: day, mode: soft}\n",
                  "bench"),
      "bench");
  auto ledger = Ledger::open(config, prices, budgets);
  if (!ledger) return 1;
  std::vector<RequestRecord> records;
  records.reserve(static_cast<size_t>(requests));
  int64_t now = unix_micros_now();
  for (int64_t i = 0; i < requests; ++i) records.push_back(make_record(static_cast<uint64_t>(i), now));
  std::vector<std::string> route = {"gpu-mid", "gpu-large"};
  std::atomic<int64_t> durable{0};
  // Measured: what the gateway's threads do per request (the record itself is built by the
  // gateway anyway; moving it in is part of the cost).
  double cpu0 = thread_cpu_seconds();
  for (int64_t i = 0; i < requests; ++i) {
    RequestRecord& r = records[static_cast<size_t>(i)];
    Subject subject{r.key_id, r.team, r.project};
    Money worst = (*ledger)->worst_case(route, 2000, 512);
    (void)(*ledger)->budget_left_pct(subject);
    auto admission = (*ledger)->admit(subject, worst);
    if (!admission) return 1;
    (*ledger)->record(std::move(r), std::move(*admission),
                      [&](const Status&) { durable.fetch_add(1); });
  }
  double cpu = thread_cpu_seconds() - cpu0;
  (*ledger)->flush();
  std::printf("cpu: %.2f us of gateway-thread CPU per request (worst_case + budget_left_pct + "
              "admit + record), %lld requests, all durable: %s\n",
              cpu * 1e6 / static_cast<double>(requests), static_cast<long long>(requests),
              durable.load() == requests ? "yes" : "no");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "writer") return bench_writer(argc, argv);
  if (mode == "report") return bench_report(argc, argv);
  if (mode == "cpu") return bench_cpu(argc, argv);
  std::fprintf(stderr, "usage: ferry_ledger_bench writer|report|cpu [options]\n");
  return 2;
}
