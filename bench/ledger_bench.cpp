// Ledger benchmarks (never run by the tests):
//   ferry_ledger_bench writer [--rows N] [--clients C] [--window W] [--db PATH]
//                             [--random-tasks 0|1] [--facts 0|1|2]
//       durable rows/s through the real writer (group commit, WAL, synchronous=FULL);
//       --random-tasks scatters task ids over the task index as UUIDs do, --facts adds the
//       routing facts the gateway records with each row (1: facts_to_json, 2: compact)
//   ferry_ledger_bench report [--rows N] [--db PATH] [--sql-bulk 0|1] [--raw 0|1]
//                             [--days D --keys K --teams T --projects P --rules R]
//       fills a ledger with N rows (default 10M) under /tmp, times reports by team, day,
//       team+day, month and key+rule from the daily aggregate and, as the reference, by
//       team+day from the rows; deletes the file unless --db names it. --sql-bulk 1 (the
//       default above 2M rows) generates the rows in SQL; 0 appends them through the store
//       (synchronous=OFF, the writer's code, real hashes).
//   ferry_ledger_bench writer-pg --pg URL [writer options]
//       the same writer into PostgreSQL (one COPY per table per batch, synchronous commit on),
//       then into SQLite, in the same run: both rows/s figures, and the PostgreSQL server's CPU
//       per row when it runs on this machine (the PostgreSQL database's ledger tables must be
//       empty or absent; use a throw-away database)
//   ferry_ledger_bench cpu [--requests N] [--facts 0|1|2]
//       CPU time per request on the calling (gateway) thread: worst_case + admit + record
//   ferry_ledger_bench admit-pg --pg URL [--requests N] [--reps R]
//       the same on a PostgreSQL ledger with 25 shared hard budgets and 20 rate limits
//       (leases warm) against the same ledger without them, alternated R times
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/yaml_util.h"
#include "ledger/ledger.h"
#include "ledger/pg_db.h"
#include "ledger/report.h"
#include "ledger/sqlite_db.h"
#include "ledger/sqlite_store.h"

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

// Task ids: sequential ("task-<n/8>", neighbours in the task index) or, with --random-tasks 1,
// scattered over the index as real UUID task ids are.
bool g_random_tasks = false;

std::string task_id_for(uint64_t n) {
  if (!g_random_tasks) return "task-" + std::to_string(n / 8);
  uint64_t h = (n / 8 + 1) * 0x9E3779B97F4A7C15ULL;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 29;
  char buf[24];
  std::snprintf(buf, sizeof buf, "task-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// With --facts 1, each row carries routing facts as the gateway records them: the JSON of
// policies::facts_to_json for a request with three targets (about 750 bytes); --facts 2, the
// same facts in policies::facts_to_compact_json form (defaults left out, about 450 bytes).
int g_facts = 0;

std::string facts_for(uint64_t n, int64_t at_us, const std::string& team) {
  char buf[1024];
  int key = static_cast<int>(n % 100);
  int project = static_cast<int>(n % 5);
  int prompt = static_cast<int>(200 + n % 3000);
  auto split = static_cast<unsigned long long>(n * 2654435761ULL);
  auto seconds = static_cast<long long>(at_us / 1000000);
  if (g_facts == 2) {
    std::snprintf(
        buf, sizeof buf,
        R"({"key":"key-%d","max_tokens":512,"model":"auto","project":"project-%d",)"
        R"("prompt_tokens":%d,"role":"app","split":%llu,"stream":true,"tags":["env:prod"],)"
        R"("targets":[{"context_length":32768,"prompt_tokens":%d,"queue_depth":3,)"
        R"("ref":"local-small"},{"context_length":131072,"error_rate":0.01,"est_wait_ms":120,)"
        R"("p90_ttft_ms":350,"prompt_tokens":%d,"queue_depth":12,"ref":"gpu-large"},)"
        R"({"context_length":32768,"ref":"gpu-mid"}],"task_id":true,"team":"%s",)"
        R"("unix_seconds":%lld})",
        key, project, prompt, split, prompt + 10, prompt, team.c_str(), seconds);
    return buf;
  }
  std::snprintf(
      buf, sizeof buf,
      R"({"budget_left_pct":null,"claimed_tags":[],"key":"key-%d","max_tokens":512,)"
      R"("model":"auto","project":"project-%d","prompt_tokens":%d,"response_format":false,)"
      R"("role":"app","split":%llu,"stream":true,"tags":["env:prod"],"task_id":true,)"
      R"("targets":[{"context_length":32768,"error_rate":null,"est_wait_ms":null,)"
      R"("healthy":true,"p90_ttft_ms":null,"prompt_tokens":%d,"queue_depth":3,)"
      R"("ref":"local-small"},{"context_length":131072,"error_rate":0.01,"est_wait_ms":120,)"
      R"("healthy":true,"p90_ttft_ms":350,"prompt_tokens":%d,"queue_depth":12,)"
      R"("ref":"gpu-large"},{"context_length":32768,"error_rate":null,"est_wait_ms":null,)"
      R"("healthy":true,"p90_ttft_ms":null,"prompt_tokens":null,"queue_depth":null,)"
      R"("ref":"gpu-mid"}],"team":"%s","temperature":null,"tools":false,"top_p":null,)"
      R"("unix_seconds":%lld})",
      key, project, prompt, split, prompt + 10, prompt, team.c_str(), seconds);
  return buf;
}

RequestRecord make_record(uint64_t n, int64_t at_us) {
  RequestRecord r;
  r.started_us = at_us;
  r.ended_us = at_us + 900000;
  int key = static_cast<int>(n % 100);
  r.key_id = "key-" + std::to_string(key);
  r.team = "team-" + std::to_string(key % 20);
  r.project = "project-" + std::to_string(key % 5);
  r.task_id = task_id_for(n);
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
  if (g_facts != 0) r.facts_json = facts_for(n, at_us, r.team);
  return r;
}

// The CPU seconds a PostgreSQL server has used: its postmaster (the parent of a backend of
// ours) and every process it started (backends, WAL writer, checkpointer, autovacuum), read
// from /proc (the server must run on this machine). A process that exits meanwhile takes its
// time with it (autovacuum workers): a lower bound. -1 when it cannot be read.
class ServerCpu {
 public:
  explicit ServerCpu(const std::string& url) {
    auto conn = PgConn::connect(url);
    if (!conn) return;
    auto pid = conn->run("SELECT pg_backend_pid()");
    if (!pid || pid->rows() == 0) return;
    postmaster_ = parent_of(pid->integer(0, 0));
  }
  double seconds() const {
    if (postmaster_ <= 0) return -1;
    double total = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      int64_t pid = std::atoll(name.c_str());
      Stat st = read_stat(pid);
      if (pid == postmaster_ || st.ppid == postmaster_) total += st.cpu_seconds;
    }
    return total;
  }

 private:
  struct Stat {
    int64_t ppid = 0;
    double cpu_seconds = 0;
  };
  static Stat read_stat(int64_t pid) {
    Stat out;
    FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
    if (f == nullptr) return out;
    char buf[1024];
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    const char* p = std::strrchr(buf, ')');  // the command name may hold spaces
    if (p == nullptr) return out;
    // Fields after the name: state ppid ... utime (12th after it) stime (13th).
    long long ppid = 0;
    unsigned long long utime = 0;
    unsigned long long stime = 0;
    if (std::sscanf(p + 2, "%*c %lld %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ppid, &utime,
                    &stime) != 3) {
      return out;
    }
    out.ppid = ppid;
    out.cpu_seconds =
        static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
    return out;
  }
  static int64_t parent_of(int64_t pid) { return read_stat(pid).ppid; }
  int64_t postmaster_ = 0;
};

// `pg_url` "": SQLite at --db; else that PostgreSQL database.
int bench_writer(int argc, char** argv, const std::string& pg_url = "") {
  int64_t rows = arg(argc, argv, "--rows", 200000);
  int64_t clients = arg(argc, argv, "--clients", 64);
  int64_t window = arg(argc, argv, "--window", 64);  // outstanding rows per client
  std::string path = arg_str(argc, argv, "--db", "/tmp/ferry_ledger_bench_writer.db");
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  LedgerConfig config;
  config.path = path;
  if (!pg_url.empty()) {
    config.path = pg_url;
    config.postgres = PgLedgerConfig{};
    config.postgres->url = pg_url;
    config.postgres->instance_id = "bench-" + std::to_string(getpid());
  }
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
  // The WAL's largest size during the run: checkpoints must keep it bounded.
  std::atomic<bool> done{false};
  std::atomic<int64_t> max_wal{0};
  std::thread wal_watch([&] {
    while (!done.load()) {
      std::error_code ec;
      auto size = static_cast<int64_t>(std::filesystem::file_size(path + "-wal", ec));
      if (!ec && size > max_wal.load()) max_wal.store(size);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::optional<ServerCpu> server;
  if (!pg_url.empty()) server.emplace(pg_url);
  const double server0 = server ? server->seconds() : -1;
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
  done.store(true);
  wal_watch.join();
  LedgerStats stats = (*ledger)->stats();
  std::printf(
      "writer: %lld durable rows in %.3f s = %.0f rows/s (%s), %lld group commits (%.1f "
      "rows/commit), %.1f us CPU/row (whole process)\n",
      static_cast<long long>(durable.load()), wall, static_cast<double>(durable.load()) / wall,
      pg_url.empty() ? "SQLite, synchronous=FULL, WAL" : "PostgreSQL, synchronous_commit on",
      static_cast<long long>(stats.batches),
      static_cast<double>(stats.rows_committed) /
          static_cast<double>(std::max<int64_t>(1, stats.batches)),
      cpu * 1e6 / static_cast<double>(rows));
  if (server && server0 >= 0) {
    std::printf("writer: PostgreSQL server CPU %.1f us/row (postmaster and its processes)\n",
                (server->seconds() - server0) * 1e6 / static_cast<double>(rows));
  }
  if (pg_url.empty()) {
    std::printf("writer: largest WAL during the run %.1f MiB\n",
                static_cast<double>(max_wal.load()) / (1024.0 * 1024.0));
  }
  return 0;
}

// Fills `tmp_path` with `rows` rows through the store's append path (no fsync).
int generate_rows(const std::string& tmp_path, int64_t rows) {
  int64_t days = 90;
  {
    auto store = SqliteStore::open(tmp_path, "USD");
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

// How many distinct values each dimension takes in generated rows. The daily aggregate has
// one row per (day, key, team, project, model, target, rule) seen, so these, not the row
// count, decide how much a report reads.
struct Shape {
  int64_t days = 90;
  int64_t keys = 500;
  int64_t teams = 25;     // team = key % teams
  int64_t projects = 10;  // project = key % projects
  int64_t rules = 12;
};

// Fills `tmp_path` with `rows` synthetic rows in SQL (one INSERT ... SELECT over a recursive
// counter; indexes rebuilt afterwards, the daily aggregate built with one GROUP BY, hash
// columns left as filler: `verify` fails on such a file). Much faster than the append path;
// used to reach 10M rows. The report reads the same tables either way.
int generate_rows_sql(const std::string& tmp_path, int64_t rows, const Shape& shape) {
  auto store = SqliteStore::open(tmp_path, "USD");
  if (!store) {
    std::fprintf(stderr, "%s\n", store.error().message.c_str());
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  int64_t start = *parse_utc_time("2026-03-01");
  int64_t span = shape.days * kMicrosPerDay;
  auto n = [](int64_t v) { return std::to_string(v); };
  std::string sql =
      "PRAGMA synchronous=OFF; PRAGMA journal_mode=OFF; PRAGMA cache_size=-262144;"
      "DROP INDEX requests_task; DROP INDEX requests_ended; BEGIN;"
      "WITH RECURSIVE c(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM c WHERE k < " +
      n(rows - 1) + "), r AS (SELECT k, " + n(start) + " + (k * " + n(span) + ") / " + n(rows) +
      " AS t, (k * 7919) % " + n(shape.keys) +
      " AS key, CASE (k / 3) % 4 WHEN 1 THEN 'gpu-mid' WHEN 2 THEN 'local-small' ELSE "
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
      "strftime('%Y-%m-%d', t / 1000000, 'unixepoch'),'key-'||key,'team-'||(key % " +
      n(shape.teams) + "),'project-'||(key % " + n(shape.projects) +
      "),'task-'||(k / 8),'[\"env:prod\"]','[]','auto',target,"
      "target||'-v1','rule-'||((k / 7) % " +
      n(shape.rules) +
      "),'v7',1,'ok',200,'',k % 2,'stop',inp,'backend',cached,"
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
      "INSERT INTO daily_team SELECT day,team,project,model,target,SUM(requests),SUM(unpriced),"
      "SUM(input_tokens),SUM(cached_tokens),SUM(output_tokens),SUM(reasoning_tokens),"
      "SUM(cost_input),SUM(cost_cached),SUM(cost_output),SUM(cost_reasoning),SUM(cost_total),"
      "SUM(avoided_total),SUM(avoided_base),MIN(first_us),MAX(last_us) FROM daily "
      "GROUP BY day,team,project,model,target;"
      "COMMIT; PRAGMA journal_mode=WAL;";
  if (auto st = store->db().exec(sql); !st) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    return 1;
  }
  std::printf("generated %lld rows in SQL in %.1f s\n", static_cast<long long>(rows),
              seconds_since(t0));
  return 0;
}

int64_t count_rows(const std::string& path, const char* table) {
  auto db = Db::open(path, true);
  if (!db) return -1;
  auto stmt = db->prepare(std::string("SELECT COUNT(*) FROM ") + table);
  if (!stmt || !stmt->step()) return -1;
  return stmt->int_at(0);
}

// Best of `runs` (and the first, cold, run) of one report.
enum class From { kBest, kDaily, kRows };  // the table run_report picks, `daily`, the rows

void time_report(const std::string& path, const std::vector<ReportBy>& by, From from, int runs,
                 const char* label) {
  ReportQuery query;
  query.by = by;
  query.force_full_aggregate = from == From::kDaily;
  query.force_raw = from == From::kRows;
  double best = 1e9;
  double first = 0;
  size_t groups = 0;
  Money total;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto report = run_report(path, query);
    double s = seconds_since(t0);
    if (!report) {
      std::fprintf(stderr, "%s\n", report.error().message.c_str());
      return;
    }
    if (i == 0) first = s;
    best = std::min(best, s);
    groups = report->rows.size();
    total = report->totals.total;
  }
  std::printf("  %-28s %6zu groups  total %s  first %.3f s  best of %d %.3f s\n", label, groups,
              total.to_string().c_str(), first, runs, best);
}

int bench_report(int argc, char** argv) {
  int64_t rows = arg(argc, argv, "--rows", 10000000);
  bool sql_bulk = arg(argc, argv, "--sql-bulk", rows > 2000000 ? 1 : 0) != 0;
  Shape shape;
  shape.days = arg(argc, argv, "--days", shape.days);
  shape.keys = arg(argc, argv, "--keys", shape.keys);
  shape.teams = arg(argc, argv, "--teams", shape.teams);
  shape.projects = arg(argc, argv, "--projects", shape.projects);
  shape.rules = arg(argc, argv, "--rules", shape.rules);
  bool raw_too = arg(argc, argv, "--raw", 1) != 0;
  // A file named with --db is kept (and reused when it exists); the default one is deleted.
  std::string given = arg_str(argc, argv, "--db", "");
  std::string path = given.empty()
                         ? "/tmp/ferry_ledger_bench_report_" + std::to_string(::getpid()) + ".db"
                         : given;
  if (!std::filesystem::exists(path)) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + ".tmp" + suffix);
    int rc = sql_bulk ? generate_rows_sql(path + ".tmp", rows, shape)
                      : generate_rows(path + ".tmp", rows);
    if (rc != 0) return rc;
    std::filesystem::rename(path + ".tmp", path);
    for (const char* suffix : {"-wal", "-shm"}) std::filesystem::remove(path + ".tmp" + suffix);
  }
  std::printf(
      "report over %lld rows (aggregates: %lld daily rows, %lld daily_team rows; "
      "%.0f MiB file):\n",
      static_cast<long long>(count_rows(path, "requests")),
      static_cast<long long>(count_rows(path, "daily")),
      static_cast<long long>(count_rows(path, "daily_team")),
      static_cast<double>(std::filesystem::file_size(path)) / (1024.0 * 1024.0));
  time_report(path, {ReportBy::kTeam}, From::kBest, 5, "--by team");
  time_report(path, {ReportBy::kDay}, From::kBest, 5, "--by day");
  time_report(path, {ReportBy::kTeam, ReportBy::kDay}, From::kBest, 5, "--by team,day");
  time_report(path, {ReportBy::kMonth}, From::kBest, 5, "--by month");
  time_report(path, {ReportBy::kKey, ReportBy::kRule}, From::kBest, 3, "--by key,rule");
  // References, which must give the same totals: the same report from the full daily
  // aggregate (key and rule kept), and summed from the rows.
  time_report(path, {ReportBy::kTeam, ReportBy::kDay}, From::kDaily, 3, "--by team,day (daily)");
  if (raw_too) {
    time_report(path, {ReportBy::kTeam, ReportBy::kDay}, From::kRows, 1, "--by team,day (rows)");
  }
  if (given.empty()) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  }
  return 0;
}

// What the gateway's threads do per request with the ledger, on the calling thread's CPU
// clock: worst_case + budget_left_pct + admit + record (the record itself is built by the
// gateway anyway; moving it in is part of the cost). -1 when an admission is refused.
double gateway_cpu_us(Ledger& ledger, std::vector<RequestRecord>& records,
                      std::atomic<int64_t>& durable) {
  const std::vector<std::string> route = {"gpu-mid", "gpu-large"};
  double cpu0 = thread_cpu_seconds();
  for (RequestRecord& r : records) {
    Subject subject{r.key_id, r.team, r.project};
    Money worst = ledger.worst_case(route, 2000, 512);
    (void)ledger.budget_left_pct(subject);
    auto admission = ledger.admit(subject, worst, 2512);
    if (!admission) {
      std::fprintf(stderr, "admit: %s\n", admission.error().message.c_str());
      return -1;
    }
    ledger.record(std::move(r), std::move(*admission),
                  [&](const Status&) { durable.fetch_add(1); });
  }
  return (thread_cpu_seconds() - cpu0) * 1e6 / static_cast<double>(records.size());
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
      yaml::parse(
          "- {name: t, scope: team, match: team-3, amount: 1000000, period: month}\n"
          "- {name: k, scope: key, match: key-3, amount: 1000000, period: day, mode: soft}\n",
          "bench"),
      "bench");
  auto ledger = Ledger::open(config, prices, budgets);
  if (!ledger) return 1;
  std::vector<RequestRecord> records;
  records.reserve(static_cast<size_t>(requests));
  int64_t now = unix_micros_now();
  for (int64_t i = 0; i < requests; ++i)
    records.push_back(make_record(static_cast<uint64_t>(i), now));
  std::atomic<int64_t> durable{0};
  double us = gateway_cpu_us(**ledger, records, durable);
  if (us < 0) return 1;
  (*ledger)->flush();
  std::printf(
      "cpu: %.2f us of gateway-thread CPU per request (worst_case + budget_left_pct + "
      "admit + record), %lld requests, all durable: %s\n",
      us, static_cast<long long>(requests), durable.load() == requests ? "yes" : "no");
  return 0;
}

// Admission on a PostgreSQL ledger with shared hard budgets and rate limits (leases warm),
// against the same ledger without any, alternated `--reps` times in one run: the
// gateway-thread CPU per request of each and the difference.
int bench_admit_pg(int argc, char** argv, const std::string& url) {
  int64_t requests = arg(argc, argv, "--requests", 20000);
  int64_t reps = arg(argc, argv, "--reps", 5);
  auto prices = PriceCatalog::from_yaml(yaml::parse(kPrices, "bench"), "bench");
  // Every bench record is under one team budget, one project budget and one team rate limit.
  std::string budget_yaml;
  std::string limit_yaml;
  for (int t = 0; t < 20; ++t) {
    std::string team = "team-" + std::to_string(t);
    budget_yaml += "- {name: b-" + team + ", scope: team, match: " + team +
                   ", amount: 1000000, period: month}\n";
    limit_yaml += "- {name: r-" + team + ", scope: team, match: " + team +
                  ", requests_per_minute: 100000000, tokens_per_minute: 10000000000}\n";
  }
  for (int p = 0; p < 5; ++p) {
    budget_yaml += "- {name: b-project-" + std::to_string(p) + ", scope: project, match: project-" +
                   std::to_string(p) + ", amount: 1000000, period: day}\n";
  }
  std::vector<double> plain, shared;
  for (int64_t rep = 0; rep < reps; ++rep) {
    for (int with = 0; with < 2; ++with) {
      LedgerConfig config;
      config.path = url;
      config.postgres = PgLedgerConfig{};
      config.postgres->url = url;
      config.postgres->instance_id =
          "bench-admit-" + std::to_string(getpid()) + "-" + std::to_string(rep * 2 + with);
      config.postgres->journal = "";
      config.queue_capacity = requests + 16;
      std::vector<BudgetDef> budgets;
      std::vector<RateLimitDef> limits;
      if (with != 0) {
        budgets = parse_budgets(yaml::parse(budget_yaml, "bench"), "bench");
        limits = parse_rate_limits(yaml::parse(limit_yaml, "bench"), "bench");
      }
      auto ledger = Ledger::open(config, prices, budgets, limits);
      if (!ledger) {
        std::fprintf(stderr, "%s\n", ledger.error().message.c_str());
        return 1;
      }
      std::vector<RequestRecord> records;
      int64_t now = unix_micros_now();
      for (int64_t i = 0; i < requests; ++i)
        records.push_back(make_record(static_cast<uint64_t>(i), now));
      std::atomic<int64_t> durable{0};
      double us = gateway_cpu_us(**ledger, records, durable);
      if (us < 0) {
        std::fprintf(stderr, "admit-pg: an admission was refused (leases not warm?)\n");
        return 1;
      }
      (*ledger)->flush();
      (with != 0 ? shared : plain).push_back(us);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("admit-pg: %lld requests x %lld reps, gateway-thread CPU per request\n",
              static_cast<long long>(requests), static_cast<long long>(reps));
  for (size_t i = 0; i < plain.size(); ++i) {
    std::printf(
        "  rep %zu: without budgets %.2f us, with 25 shared budgets + 20 rate limits "
        "%.2f us, added %.2f us\n",
        i, plain[i], shared[i], shared[i] - plain[i]);
  }
  std::printf("admit-pg: median added %.2f us per request (medians %.2f vs %.2f us)\n",
              median(shared) - median(plain), median(shared), median(plain));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  g_random_tasks = arg(argc, argv, "--random-tasks", 0) != 0;
  g_facts = static_cast<int>(arg(argc, argv, "--facts", 0));
  if (mode == "writer") return bench_writer(argc, argv);
  if (mode == "report") return bench_report(argc, argv);
  if (mode == "cpu") return bench_cpu(argc, argv);
  if (mode == "admit-pg") return bench_admit_pg(argc, argv, arg_str(argc, argv, "--pg", ""));
  if (mode == "writer-pg") {
    std::string url = arg_str(argc, argv, "--pg", "");
    if (url.empty()) {
      std::fprintf(stderr, "writer-pg needs --pg postgresql://...\n");
      return 2;
    }
    if (int rc = bench_writer(argc, argv, url); rc != 0) return rc;
    return bench_writer(argc, argv);
  }
  std::fprintf(stderr, "usage: ferry_ledger_bench writer|writer-pg|report|cpu [options]\n");
  return 2;
}
