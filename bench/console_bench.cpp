// The console's pages over a big ledger (never run by the tests):
//   ferry_console_bench [--rows N] [--db PATH] [--pg URL] [--reps N]
// fills a SQLite ledger (or, with --pg, an empty PostgreSQL database) with N synthetic request
// rows (default 1M; a task every 8 rows, half of the tasks marked) in SQL, builds the
// aggregates and rollups as the migration does, then times the function behind each page's
// endpoint, best of --reps (3), and prints each as a ratio to a full scan of the requests table in
// the same run
// (`SELECT COUNT(*), SUM(cost_total) FROM requests`): below 1 the page reads less than every
// row (an index or a rollup serves it), about 1 or more it reads them all.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "ledger/pg_db.h"
#include "ledger/pg_store.h"
#include "ledger/report.h"
#include "ledger/sqlite_db.h"
#include "ledger/sqlite_store.h"
#include "ledger/store.h"
#include "ledger/task_groups.h"
#include "ledger/tasks.h"
#include "ledger/time_util.h"
#include "ledger/verify.h"

using namespace ferry;
using namespace ferry::ledger;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <typename R>
bool ok(const R& r) {
  if (r) return true;
  std::fprintf(stderr, "%s\n", r.error().message.c_str());
  return false;
}

// The daily aggregates from the rows (the same SQL in both stores).
constexpr const char* kAggregatesSql =
    "INSERT INTO daily(day,key_id,team,project,model,target,rule_id,requests,unpriced,"
    "input_tokens,cached_tokens,output_tokens,reasoning_tokens,cost_input,cost_cached,"
    "cost_output,cost_reasoning,cost_total,avoided_total,avoided_base,refused,shadows,"
    "unpriced_served,first_us,last_us) SELECT day,key_id,team,project,upstream_model,target,"
    "rule_id,COUNT(*),0,SUM(input_tokens),0,SUM(output_tokens),0,SUM(cost_input),0,"
    "SUM(cost_output),0,SUM(cost_total),SUM(avoided_cost),SUM(cost_total),0,0,0,"
    "MIN(started_us),MAX(ended_us) FROM requests GROUP BY 1,2,3,4,5,6,7;"
    "INSERT INTO daily_team(day,team,project,model,target,requests,unpriced,input_tokens,"
    "cached_tokens,output_tokens,reasoning_tokens,cost_input,cost_cached,cost_output,"
    "cost_reasoning,cost_total,avoided_total,avoided_base,refused,shadows,unpriced_served,"
    "first_us,last_us) SELECT day,team,project,model,target,SUM(requests),0,"
    "SUM(input_tokens),0,SUM(output_tokens),0,SUM(cost_input),0,SUM(cost_output),0,"
    "SUM(cost_total),SUM(avoided_total),SUM(avoided_base),0,0,0,MIN(first_us),MAX(last_us) "
    "FROM daily GROUP BY 1,2,3,4,5;";

// N rows over 90 days, 500 keys in 25 teams, three targets (one local), a task every 8 rows;
// then the daily aggregates from the rows and an outcome for every other task.
int fill(const std::string& path, int64_t rows) {
  {
    auto store = SqliteStore::open(path, "USD");  // the schema, at this ferry's version
    if (!store) {
      std::fprintf(stderr, "%s\n", store.error().message.c_str());
      return 1;
    }
  }
  auto db = Db::open(path, false);
  if (!ok(db)) return 1;
  // The tables' secondary indexes are dropped while the rows go in and built after (one sort
  // each, where every row inserted into them was a random write); no journal, a 2 GiB cache.
  auto indexes = db->prepare(
      "SELECT name, sql FROM sqlite_master WHERE type='index' AND sql IS NOT NULL AND tbl_name "
      "IN ('requests','task_totals','task_targets')");
  if (!ok(indexes)) return 1;
  std::string drop;
  std::string create;
  for (;;) {
    auto has = indexes->step();
    if (!ok(has)) return 1;
    if (!*has) break;
    drop += "DROP INDEX " + indexes->text_at(0) + ";";
    create += indexes->text_at(1) + ";";
  }
  indexes->reset();
  auto n = [](int64_t v) { return std::to_string(v); };
  const int64_t start = days_from_civil({2026, 3, 1}) * kMicrosPerDay;
  const int64_t span = 90 * kMicrosPerDay;  // k * (span / rows): no product beyond int64
  std::string sql =
      "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-2097152; BEGIN;" + drop +
      "WITH RECURSIVE c(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM c WHERE k < " + n(rows - 1) +
      "), r AS (SELECT k, " + n(start) + " + k * " + n(span / rows) +
      " AS t, (k * 7919) % 500 AS key, CASE k % 3 WHEN 0 THEN 'local-small' WHEN 1 THEN "
      "'gpu-mid' ELSE 'gpu-large' END AS target, 200 + k % 900 AS inp, 50 + k % 300 AS outp "
      "FROM c) INSERT INTO requests(id,kind,started_us,ended_us,day,key_id,team,project,task_id,"
      "trusted_tags,claimed_tags,requested_model,target,upstream_model,rule_id,policy_version,"
      "attempts,status,http_status,error_code,stream,finish_reason,input_tokens,input_source,"
      "cached_tokens,cached_source,output_tokens,output_source,reasoning_tokens,"
      "reasoning_source,pricing,price_version,cost_input,cost_cached,cost_output,"
      "cost_reasoning,cost_total,avoided_cost,avoided_version,queue_us,routing_us,ttft_us,"
      "total_us,prev_hash,hash) SELECT printf('r%010d', k),'request',t,t+900000,"
      "strftime('%Y-%m-%d', t / 1000000, 'unixepoch'),'key-'||key,'team-'||(key % 25),"
      "'project-'||(key % 10),'task-'||(k / 8),'[]','[]','auto',target,target,"
      "'rule-'||(k % 12),'v1',1,'ok',200,'',0,'stop',inp,'backend',0,'backend',outp,'backend',"
      "0,'backend','priced',target||'@1',inp*3,0,outp*15,0,inp*3+outp*15,inp*5+outp*20,"
      "'ref@1',0,0,0,0,'x','x' FROM r;" +
      std::string(kAggregatesSql) +
      "INSERT INTO tasks(task_id,status,labels,key_id,marked_us,day) SELECT task_id,"
      "CASE (seq / 8) % 4 WHEN 0 THEN 'completed' ELSE 'failed' END,"
      "'{\"feature\":\"f'||((seq / 8) % 5)||'\"}','key-1',MAX(ended_us),MAX(day) FROM requests "
      "WHERE (seq / 8) % 2 = 0 GROUP BY task_id;" +
      std::string(detail::kBuildRollupsSql) + detail::task_report_sums_build_sql(false) +
      detail::task_groups_build_sql(false) + create + "COMMIT; PRAGMA journal_mode=WAL;";
  auto t0 = std::chrono::steady_clock::now();
  if (auto st = db->exec(sql); !st) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    return 1;
  }
  std::printf("filled %lld rows in %.1f s\n", static_cast<long long>(rows), seconds_since(t0));
  return 0;
}

// The same ledger in PostgreSQL (an empty database at `url`): the rows from generate_series,
// then the aggregates and rollups as the migration builds them.
int fill_pg(const std::string& url, int64_t rows) {
  auto store = PgStore::open(url, "USD", "bench");
  if (!store) {
    std::fprintf(stderr, "%s\n", store.error().message.c_str());
    return 1;
  }
  auto conn = PgConn::connect(url);
  if (!conn) {
    std::fprintf(stderr, "%s\n", conn.error().message.c_str());
    return 1;
  }
  // As in SQLite: the secondary indexes (not those of a key or unique constraint) are dropped
  // while the rows go in and built after, with memory for the sorts.
  auto indexes = conn->run(
      "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND "
      "tablename IN ('requests','task_totals','task_targets') AND indexname NOT IN (SELECT "
      "conname FROM pg_constraint)");
  if (!ok(indexes)) return 1;
  std::string drop;
  std::string create;
  for (int i = 0; i < indexes->rows(); ++i) {
    drop += "DROP INDEX " + indexes->text(i, 0) + ";";
    create += indexes->text(i, 1) + ";";
  }
  auto n = [](int64_t v) { return std::to_string(v); };
  const int64_t start = days_from_civil({2026, 3, 1}) * kMicrosPerDay;
  const int64_t span = 90 * kMicrosPerDay;  // k * (span / rows): no product beyond int64
  // The rows go in without their indexes, which are built once afterwards (as pg_restore
  // does): at 10M rows that is minutes where inserting into six b-trees row by row took hours.
  std::string sql =
      "SET synchronous_commit=off; SET work_mem='256MB'; SET maintenance_work_mem='1GB'; BEGIN;" +
      drop +
      "ALTER TABLE requests DROP CONSTRAINT requests_pkey, DROP CONSTRAINT requests_id_key, "
      "DROP CONSTRAINT requests_instance_id_chain_seq_key;"
      "INSERT INTO requests(id,kind,started_us,ended_us,day,"
      "key_id,team,project,task_id,trusted_tags,claimed_tags,requested_model,target,"
      "upstream_model,rule_id,policy_version,attempts,status,http_status,error_code,stream,"
      "finish_reason,input_tokens,input_source,cached_tokens,cached_source,output_tokens,"
      "output_source,reasoning_tokens,reasoning_source,pricing,price_version,cost_input,"
      "cost_cached,cost_output,cost_reasoning,cost_total,avoided_cost,avoided_version,queue_us,"
      "routing_us,ttft_us,total_us,prev_hash,hash,instance_id,chain_seq) SELECT "
      "'r'||lpad(k::text,10,'0'),'request',t,t+900000,to_char(to_timestamp(t/1000000.0) AT TIME "
      "ZONE 'UTC','YYYY-MM-DD'),'key-'||key,'team-'||(key % 25),'project-'||(key % 10),"
      "'task-'||(k / 8),'[]','[]','auto',target,target,'rule-'||(k % 12),'v1',1,'ok',200,'',0,"
      "'stop',inp,'backend',0,'backend',outp,'backend',0,'backend','priced',target||'@1',inp*3,"
      "0,outp*15,0,inp*3+outp*15,inp*5+outp*20,'ref@1',0,0,0,0,'x','x','bench',k + 1 FROM "
      "(SELECT k, " +
      n(start) + " + k * " + n(span / rows) +
      " AS t, (k * 7919) % 500 AS key, CASE k % 3 WHEN 0 THEN 'local-small' WHEN 1 THEN "
      "'gpu-mid' ELSE 'gpu-large' END AS target, 200 + k % 900 AS inp, 50 + k % 300 AS outp "
      "FROM generate_series(0::bigint, " +
      n(rows - 1) + ") AS k) AS r;" +
      "ALTER TABLE requests ADD CONSTRAINT requests_pkey PRIMARY KEY (seq), ADD CONSTRAINT "
      "requests_id_key UNIQUE (id), ADD CONSTRAINT requests_instance_id_chain_seq_key UNIQUE "
      "(instance_id, chain_seq);" +
      std::string(kAggregatesSql) +
      "INSERT INTO tasks(task_id,status,labels,key_id,marked_us,day) SELECT task_id,"
      "CASE (MIN(chain_seq) / 8) % 4 WHEN 0 THEN 'completed' ELSE 'failed' END,"
      "'{\"feature\":\"f'||((MIN(chain_seq) / 8) % 5)||'\"}','key-1',MAX(ended_us),MAX(day) "
      "FROM requests WHERE (chain_seq / 8) % 2 = 0 GROUP BY task_id;" +
      std::string(detail::kBuildRollupsSql) + detail::task_report_sums_build_sql(true) +
      detail::task_groups_build_sql(true) + create + "COMMIT; ANALYZE;";
  auto t0 = std::chrono::steady_clock::now();
  if (auto st = conn->exec(sql); !st) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    return 1;
  }
  std::printf("filled %lld rows into PostgreSQL in %.1f s\n", static_cast<long long>(rows),
              seconds_since(t0));
  return 0;
}

// Best of --reps runs of `fn`, in seconds (and the calling thread's CPU time, best of the same
// runs: with SQLite the query runs on this thread, so it resists the load of other processes;
// with PostgreSQL it is the client's share only); false from fn stops the bench.
int g_reps = 3;
double g_best_cpu = 0;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double best_of_3(const std::function<bool()>& fn) {
  double best = 1e9;
  g_best_cpu = 1e9;
  for (int i = 0; i < g_reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    double c0 = thread_cpu_seconds();
    if (!fn()) std::exit(1);
    g_best_cpu = std::min(g_best_cpu, thread_cpu_seconds() - c0);
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

struct Page {
  const char* name;
  std::function<bool()> fn;
};

// The function behind each console page over `db` (a SQLite path or a PostgreSQL URL).
std::vector<Page> pages_of(const std::string& db) {
  auto report = [db](std::vector<ReportBy> by, bool raw) {
    return [db, by, raw] {
      ReportQuery q;
      q.by = by;
      q.force_raw = raw;
      return ok(run_report(db, q));
    };
  };
  TaskReportQuery tq;
  tq.local_targets = {"local-small"};
  auto tasks = [db, tq](const std::string& by) {
    return [db, tq, by] {
      auto q = tq;
      q.by = by;
      return ok(task_report(db, q));
    };
  };
  auto tasks_where = [db, tq](const std::string& by, const ReportFilter& f) {
    return [db, tq, by, f] {
      auto q = tq;
      q.by = by;
      q.filter = f;
      return ok(task_report(db, q));
    };
  };
  auto top_where = [db, tq](const ReportFilter& f, std::optional<TaskStatus> status,
                            int64_t offset) {
    return [db, tq, f, status, offset] {
      auto q = tq;
      q.filter = f;
      return ok(top_tasks(db, q, status, 50, offset));
    };
  };
  ReportFilter team15, project1, week, one_model;
  team15.team = "team-15";         // 4% of the tasks (a task's team is its rows' smallest)
  project1.project = "project-1";  // 20% of the tasks
  week.from = CivilDate{2026, 4, 1};
  week.to = CivilDate{2026, 4, 7};
  one_model.model = "gpu-mid";
  std::vector<Page> pages = {
      {"spend (report day,team)", report({ReportBy::kDay, ReportBy::kTeam}, false)},
      {"spend (report month,key)", report({ReportBy::kMonth, ReportBy::kKey}, false)},
      {"local (report day,target)", report({ReportBy::kDay, ReportBy::kTarget}, false)},
      {"tasks (by outcome)", tasks("")},
      {"tasks (by team)", tasks("team")},
      {"tasks (by label)", tasks("label:feature")},
      {"tasks (by month)", tasks("month")},
      {"top tasks (50)", [db, tq] { return ok(top_tasks(db, tq, std::nullopt, 50, 0)); }},
      {"top tasks (50, completed)",
       [db, tq] { return ok(top_tasks(db, tq, TaskStatus::kCompleted, 50, 0)); }},
      {"top tasks (page 100)", [db, tq] { return ok(top_tasks(db, tq, std::nullopt, 50, 5000)); }},
      // The console's filters (team, project, from, to) select tasks by their own team,
      // project and day: task_groups' keys and a check on task_totals' cost walk.
      {"tasks (by outcome, one team)", tasks_where("", team15)},
      {"tasks (by month, one project)", tasks_where("month", project1)},
      {"tasks (by day, one week)", tasks_where("day", week)},
      {"top tasks (50, one team)", top_where(team15, std::nullopt, 0)},
      {"top tasks (50 completed, one team)", top_where(team15, TaskStatus::kCompleted, 0)},
      {"top tasks (50, one week)", top_where(week, std::nullopt, 0)},
      {"top tasks (page 100, one team)", top_where(team15, std::nullopt, 5000)},
      // A label's groups are keyed by the task's team, project and day too (schema 13).
      {"tasks (by label, one team)", tasks_where("label:feature", team15)},
      {"tasks (by label, one project)", tasks_where("label:feature", project1)},
      {"tasks (by label, one week)", tasks_where("label:feature", week)},
      // A filter of the rows (key, model, target, rule) reads the rows: this costs that.
      {"top tasks (50, one model: rows)", top_where(one_model, std::nullopt, 0)},
  };
  // `ferry ledger report --by X` for each dimension (what finance runs; the CLI calls this).
  for (auto [name, by] : {std::pair{"report by team", ReportBy::kTeam},
                          {"report by project", ReportBy::kProject},
                          {"report by key", ReportBy::kKey},
                          {"report by model", ReportBy::kModel},
                          {"report by target", ReportBy::kTarget},
                          {"report by rule", ReportBy::kRule},
                          {"report by day", ReportBy::kDay},
                          {"report by month", ReportBy::kMonth},
                          {"report by task", ReportBy::kTask}}) {
    pages.push_back({name, report({by}, false)});
  }
  if (!is_pg_url(db)) {
    pages.push_back(
        {"task drill-down", [db] { return ok(task_requests_json(db, "task-1234", 200, 0)); }});
  } else {
    pages.push_back({"finance report from the rows (team)", report({ReportBy::kTeam}, true)});
  }
  return pages;
}

std::string g_only;  // --pages SUBSTR: only the pages whose name holds it

void run_pages(const std::string& db, double scan) {
  for (const auto& p : pages_of(db)) {
    if (std::string_view(p.name).find(g_only) == std::string_view::npos) continue;
    double s = best_of_3(p.fn);
    std::printf("  %-36s %.3f s  = %.4f x scan  (thread CPU %.3f s)\n", p.name, s, s / scan,
                g_best_cpu);
  }
}

int run_pg(const std::string& url, int64_t rows) {
  auto conn = PgConn::connect(url);
  if (!ok(conn)) return 1;
  auto has = conn->run("SELECT to_regclass('requests') IS NOT NULL");
  bool filled = false;
  if (has && has->text(0, 0) == "t") {
    auto count = conn->run("SELECT COUNT(*) FROM requests");
    filled = count && count->integer(0, 0) > 0;
  }
  if (!filled && fill_pg(url, rows) != 0) return 1;
  const double scan =
      best_of_3([&] { return ok(conn->run("SELECT COUNT(*), SUM(cost_total) FROM requests")); });
  std::printf("PostgreSQL: full scan of requests: %.3f s (the unit below)\n", scan);
  run_pages(url, scan);
  return 0;
}

}  // namespace

// ferry_console_bench [--rows N] [--db PATH] [--pg URL] [--reps N] [--pages SUBSTR]
int main(int argc, char** argv) {
  int64_t rows = 1000000;
  std::string db;
  std::string pg;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--rows") rows = std::atoll(argv[i + 1]);
    if (a == "--db") db = argv[i + 1];
    if (a == "--pg") pg = argv[i + 1];
    if (a == "--reps") g_reps = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--pages") g_only = argv[i + 1];
  }
  if (!pg.empty()) return run_pg(pg, rows);
  const bool keep = !db.empty();
  if (db.empty()) db = "/tmp/ferry-console-bench.db";
  if (!keep || !std::filesystem::exists(db)) {
    std::filesystem::remove(db);
    if (fill(db, rows) != 0) return 1;
  } else {
    // A file filled by an older ferry: migrated to this one's schema (its new indexes) first.
    auto t0 = std::chrono::steady_clock::now();
    auto store = SqliteStore::open(db, "");
    if (!store) {
      std::fprintf(stderr, "%s\n", store.error().message.c_str());
      return 1;
    }
    std::printf("opened (migrated) in %.1f s\n", seconds_since(t0));
  }
  const double scan = best_of_3([&] {
    auto d = Db::open(db, true);
    if (!ok(d)) return false;
    auto s = d->prepare("SELECT COUNT(*), SUM(cost_total) FROM requests");
    return ok(s) && ok(s->step());
  });
  std::printf("full scan of requests: %.3f s (the unit below; thread CPU %.3f s)\n", scan,
              g_best_cpu);
  run_pages(db, scan);
  if (!keep) std::filesystem::remove(db);
  return 0;
}
