#include "ledger/sqlite_store.h"

#include <algorithm>
#include <map>

#include "common/clock.h"
#include "common/sha256.h"
#include "ledger/task_groups.h"
#include "ledger/time_util.h"

namespace ferry::ledger {

using detail::DailyDelta;
using detail::RowScratch;
using namespace detail;

namespace {

const char* const kMigrations[] = {
    R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE prices (
  version TEXT PRIMARY KEY, model TEXT NOT NULL, effective_from_us INTEGER NOT NULL,
  input INTEGER NOT NULL, cached_input INTEGER NOT NULL, output INTEGER NOT NULL,
  reasoning INTEGER NOT NULL, internal INTEGER NOT NULL, recorded_us INTEGER NOT NULL);
CREATE TABLE requests (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, adjusts_id TEXT, note TEXT,
  started_us INTEGER NOT NULL, ended_us INTEGER NOT NULL, day TEXT NOT NULL,
  key_id TEXT NOT NULL, team TEXT NOT NULL, project TEXT NOT NULL, task_id TEXT NOT NULL,
  trusted_tags TEXT NOT NULL, claimed_tags TEXT NOT NULL,
  requested_model TEXT NOT NULL, target TEXT NOT NULL, upstream_model TEXT NOT NULL,
  rule_id TEXT NOT NULL, policy_version TEXT NOT NULL,
  attempts INTEGER NOT NULL, status TEXT NOT NULL, http_status INTEGER NOT NULL,
  error_code TEXT NOT NULL, stream INTEGER NOT NULL, finish_reason TEXT NOT NULL,
  input_tokens INTEGER NOT NULL, input_source TEXT NOT NULL,
  cached_tokens INTEGER NOT NULL, cached_source TEXT NOT NULL,
  output_tokens INTEGER NOT NULL, output_source TEXT NOT NULL,
  reasoning_tokens INTEGER NOT NULL, reasoning_source TEXT NOT NULL,
  pricing TEXT NOT NULL, price_version TEXT NOT NULL,
  cost_input INTEGER, cost_cached INTEGER, cost_output INTEGER, cost_reasoning INTEGER,
  cost_total INTEGER, avoided_cost INTEGER, avoided_version TEXT NOT NULL,
  queue_us INTEGER NOT NULL, routing_us INTEGER NOT NULL, ttft_us INTEGER NOT NULL,
  total_us INTEGER NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL);
CREATE INDEX requests_task ON requests(task_id, started_us);
CREATE INDEX requests_ended ON requests(ended_us);
CREATE TABLE attempts (
  request_id TEXT NOT NULL, attempt INTEGER NOT NULL,
  target TEXT NOT NULL, upstream_model TEXT NOT NULL, status TEXT NOT NULL,
  http_status INTEGER NOT NULL, error_code TEXT NOT NULL,
  started_us INTEGER NOT NULL, ended_us INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL, input_source TEXT NOT NULL,
  cached_tokens INTEGER NOT NULL, cached_source TEXT NOT NULL,
  output_tokens INTEGER NOT NULL, output_source TEXT NOT NULL,
  reasoning_tokens INTEGER NOT NULL, reasoning_source TEXT NOT NULL,
  pricing TEXT NOT NULL, price_version TEXT NOT NULL,
  cost_input INTEGER, cost_cached INTEGER, cost_output INTEGER, cost_reasoning INTEGER,
  cost_total INTEGER,
  PRIMARY KEY (request_id, attempt)) WITHOUT ROWID;
CREATE TABLE daily (
  day TEXT NOT NULL, key_id TEXT NOT NULL, team TEXT NOT NULL, project TEXT NOT NULL,
  model TEXT NOT NULL, target TEXT NOT NULL, rule_id TEXT NOT NULL,
  requests INTEGER NOT NULL, unpriced INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
  cost_input INTEGER NOT NULL, cost_cached INTEGER NOT NULL, cost_output INTEGER NOT NULL,
  cost_reasoning INTEGER NOT NULL, cost_total INTEGER NOT NULL,
  avoided_total INTEGER NOT NULL, avoided_base INTEGER NOT NULL,
  first_us INTEGER NOT NULL, last_us INTEGER NOT NULL,
  PRIMARY KEY (day, key_id, team, project, model, target, rule_id)) WITHOUT ROWID;
CREATE TRIGGER requests_no_update BEFORE UPDATE ON requests
  BEGIN SELECT RAISE(ABORT, 'ledger rows are append-only; add an adjustment row'); END;
CREATE TRIGGER requests_no_delete BEFORE DELETE ON requests
  BEGIN SELECT RAISE(ABORT, 'ledger rows are append-only; add an adjustment row'); END;
CREATE TRIGGER attempts_no_update BEFORE UPDATE ON attempts
  BEGIN SELECT RAISE(ABORT, 'ledger rows are append-only'); END;
CREATE TRIGGER attempts_no_delete BEFORE DELETE ON attempts
  BEGIN SELECT RAISE(ABORT, 'ledger rows are append-only'); END;
)sql",
    // 2: the routing facts of a request (policies::facts_to_json), for `ferry policy replay`.
    // NULL for rows recorded without facts (every row before this version); the hash chain
    // covers the column only where it is set, so rows without facts hash as they always did.
    // Also: `daily_team`, the daily aggregate without key and rule, kept beside it in the same
    // transactions. Reports that need neither read it: a few rows a day where `daily` may
    // hold one per key, target and rule (and nearly one per request at worst).
    R"sql(
ALTER TABLE requests ADD COLUMN facts TEXT;
CREATE TABLE daily_team (
  day TEXT NOT NULL, team TEXT NOT NULL, project TEXT NOT NULL, model TEXT NOT NULL,
  target TEXT NOT NULL,
  requests INTEGER NOT NULL, unpriced INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
  cost_input INTEGER NOT NULL, cost_cached INTEGER NOT NULL, cost_output INTEGER NOT NULL,
  cost_reasoning INTEGER NOT NULL, cost_total INTEGER NOT NULL,
  avoided_total INTEGER NOT NULL, avoided_base INTEGER NOT NULL,
  first_us INTEGER NOT NULL, last_us INTEGER NOT NULL,
  PRIMARY KEY (day, team, project, model, target)) WITHOUT ROWID;
INSERT INTO daily_team SELECT day, team, project, model, target, SUM(requests), SUM(unpriced),
  SUM(input_tokens), SUM(cached_tokens), SUM(output_tokens), SUM(reasoning_tokens),
  SUM(cost_input), SUM(cost_cached), SUM(cost_output), SUM(cost_reasoning), SUM(cost_total),
  SUM(avoided_total), SUM(avoided_base), MIN(first_us), MAX(last_us)
  FROM daily GROUP BY day, team, project, model, target;
)sql",
    // 3: why a backend's usage was not billed as reported (RequestRecord::usage_check). NULL
    // for rows whose usage was trusted (every row before this version): they hash as before.
    R"sql(
ALTER TABLE requests ADD COLUMN usage_check TEXT;
)sql",
    // 4: the gateway's request id (x-request-id), so that a row can be found from the
    // client's id or the access log. NULL for rows recorded before; hashed only where set.
    R"sql(
ALTER TABLE requests ADD COLUMN request_id TEXT;
CREATE INDEX requests_request_id ON requests(request_id);
)sql",
    // 5: what reports count apart (code finds these columns by name, not by version).
    // `requests` stays every request row; `refused` (refused before running: budget, policy
    // reject, context) and `shadows` (a shadow copy, tagged "shadow") are the rows among them
    // that were not served, and `unpriced_served` the unpriced rows that were. Existing groups
    // are filled from the rows (a shadow row found as shadow_row_sql finds it).
    R"sql(
ALTER TABLE daily ADD COLUMN refused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE daily ADD COLUMN shadows INTEGER NOT NULL DEFAULT 0;
ALTER TABLE daily ADD COLUMN unpriced_served INTEGER NOT NULL DEFAULT 0;
ALTER TABLE daily_team ADD COLUMN refused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE daily_team ADD COLUMN shadows INTEGER NOT NULL DEFAULT 0;
ALTER TABLE daily_team ADD COLUMN unpriced_served INTEGER NOT NULL DEFAULT 0;
UPDATE daily SET refused = x.refused, shadows = x.shadows, unpriced_served = x.unpriced_served
  FROM (SELECT day, key_id, team, project, upstream_model AS model, target, rule_id,
          SUM(kind='request' AND status='refused') AS refused,
          SUM(kind='request' AND status<>'refused' AND (instr(trusted_tags,'["shadow"')>0
              OR instr(trusted_tags,',"shadow"')>0)) AS shadows,
          SUM(kind='request' AND status<>'refused' AND NOT (instr(trusted_tags,'["shadow"')>0
              OR instr(trusted_tags,',"shadow"')>0) AND pricing='unpriced') AS unpriced_served
        FROM requests GROUP BY 1,2,3,4,5,6,7) AS x
  WHERE daily.day=x.day AND daily.key_id=x.key_id AND daily.team=x.team
    AND daily.project=x.project AND daily.model=x.model AND daily.target=x.target
    AND daily.rule_id=x.rule_id;
UPDATE daily_team SET refused = x.refused, shadows = x.shadows, unpriced_served = x.unpriced_served
  FROM (SELECT day, team, project, model, target, SUM(refused) AS refused,
          SUM(shadows) AS shadows, SUM(unpriced_served) AS unpriced_served
        FROM daily GROUP BY 1,2,3,4,5) AS x
  WHERE daily_team.day=x.day AND daily_team.team=x.team AND daily_team.project=x.project
    AND daily_team.model=x.model AND daily_team.target=x.target;
)sql",
    // 6: the local engine's output constraint (RequestRecord::constraint_mode, schema_hash).
    // NULL for rows without one (every row before this version): they hash as before.
    R"sql(
ALTER TABLE requests ADD COLUMN constraint_mode TEXT;
ALTER TABLE requests ADD COLUMN schema_hash TEXT;
)sql",
    // 7: task outcomes (ledger/tasks.h), marked once per task id; not part of the hash chain.
    // IF NOT EXISTS: a file taken back to an older version by dropping columns keeps the table.
    R"sql(
CREATE TABLE IF NOT EXISTS tasks (
  task_id TEXT PRIMARY KEY, status TEXT NOT NULL, labels TEXT NOT NULL, key_id TEXT NOT NULL,
  marked_us INTEGER NOT NULL, day TEXT NOT NULL) WITHOUT ROWID;
)sql",
    // 8: the cost levers (lever_columns()): tokens trimmed and their input price, a response
    // cache hit and the tokens and cost it avoided, the reasoning budget applied. NULL for rows
    // that pulled none (every row before this version): they hash as before.
    R"sql(
ALTER TABLE requests ADD COLUMN trimmed_tokens INTEGER;
ALTER TABLE requests ADD COLUMN trim_avoided INTEGER;
ALTER TABLE requests ADD COLUMN cache TEXT;
ALTER TABLE requests ADD COLUMN cache_tokens INTEGER;
ALTER TABLE requests ADD COLUMN cache_avoided INTEGER;
ALTER TABLE requests ADD COLUMN reasoning_budget TEXT;
)sql",
    // 9: the rollups (detail::Rollups in store.h): daily sums by key, and per task and per task
    // and target; built here from the rows and `daily`, then kept by the writer in the rows'
    // transactions (and task_totals.status by mark_task). And the API keys kept in the store
    // (ledger/keys.h; hashed, never in clear). The rollups are derived: a file taken back to an
    // older version keeps its tables, which are dropped and built again; its keys stay.
    R"sql(
DROP TABLE IF EXISTS daily_key;
DROP TABLE IF EXISTS task_totals;
DROP TABLE IF EXISTS task_targets;
CREATE TABLE daily_key (
  day TEXT NOT NULL, key_id TEXT NOT NULL, team TEXT NOT NULL, project TEXT NOT NULL,
  requests INTEGER NOT NULL, unpriced INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
  cost_input INTEGER NOT NULL, cost_cached INTEGER NOT NULL, cost_output INTEGER NOT NULL,
  cost_reasoning INTEGER NOT NULL, cost_total INTEGER NOT NULL,
  avoided_total INTEGER NOT NULL, avoided_base INTEGER NOT NULL,
  refused INTEGER NOT NULL, shadows INTEGER NOT NULL, unpriced_served INTEGER NOT NULL,
  first_us INTEGER NOT NULL, last_us INTEGER NOT NULL,
  PRIMARY KEY (day, key_id, team, project)) WITHOUT ROWID;
CREATE TABLE task_totals (
  task_id TEXT PRIMARY KEY, team TEXT, project TEXT, day TEXT,
  first_us INTEGER, last_us INTEGER, requests INTEGER NOT NULL, tokens INTEGER NOT NULL,
  cost INTEGER NOT NULL, status TEXT NOT NULL DEFAULT 'open');
CREATE INDEX task_totals_cost ON task_totals(cost DESC, task_id);
CREATE INDEX task_totals_status ON task_totals(status, cost DESC, task_id);
CREATE TABLE task_targets (
  target TEXT NOT NULL, task_id TEXT NOT NULL, requests INTEGER NOT NULL,
  tokens INTEGER NOT NULL, cost INTEGER NOT NULL,
  PRIMARY KEY (target, task_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY, sha256 TEXT NOT NULL UNIQUE, team TEXT NOT NULL, project TEXT NOT NULL,
  role TEXT NOT NULL, tags TEXT NOT NULL, created_us INTEGER NOT NULL, created_by TEXT NOT NULL,
  revoked_us INTEGER);
)sql",
    // 10: the task reports' rollup (ledger/task_groups.h): its tables, written once for both
    // stores, are task_groups_migration_sql(), run after this.
    R"sql(
)sql",
    // 11: the report by task from the rollups (store.h, kTaskReportSums): task_totals made again
    // with the report's sums (its rows copied; a file taken back to version 9 or 10 may have
    // them already) and daily_untasked (the rows without a task id), both filled from the rows
    // by task_report_sums_build_sql(), run after this.
    R"sql(
DROP TABLE IF EXISTS task_totals_11;
CREATE TABLE task_totals_11 (
  task_id TEXT PRIMARY KEY, team TEXT, project TEXT, day TEXT,
  first_us INTEGER, last_us INTEGER, requests INTEGER NOT NULL, tokens INTEGER NOT NULL,
  cost INTEGER NOT NULL, status TEXT NOT NULL DEFAULT 'open',
  unpriced_served INTEGER NOT NULL DEFAULT 0,
  refused INTEGER NOT NULL DEFAULT 0,
  shadows INTEGER NOT NULL DEFAULT 0,
  input_tokens INTEGER NOT NULL DEFAULT 0,
  cached_tokens INTEGER NOT NULL DEFAULT 0,
  output_tokens INTEGER NOT NULL DEFAULT 0,
  reasoning_tokens INTEGER NOT NULL DEFAULT 0,
  cost_input INTEGER NOT NULL DEFAULT 0,
  cost_cached INTEGER NOT NULL DEFAULT 0,
  cost_output INTEGER NOT NULL DEFAULT 0,
  cost_reasoning INTEGER NOT NULL DEFAULT 0,
  avoided_total INTEGER NOT NULL DEFAULT 0,
  avoided_base INTEGER NOT NULL DEFAULT 0);
INSERT INTO task_totals_11(task_id, team, project, day, first_us, last_us, requests, tokens,
  cost, status)
  SELECT task_id, team, project, day, first_us, last_us, requests, tokens, cost, status
  FROM task_totals;
DROP TABLE task_totals;
ALTER TABLE task_totals_11 RENAME TO task_totals;
CREATE INDEX task_totals_cost ON task_totals(cost DESC, task_id);
CREATE INDEX task_totals_status ON task_totals(status, cost DESC, task_id);
DROP TABLE IF EXISTS daily_untasked;
CREATE TABLE daily_untasked (
  day TEXT PRIMARY KEY, requests INTEGER NOT NULL, unpriced INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
  cost_input INTEGER NOT NULL, cost_cached INTEGER NOT NULL, cost_output INTEGER NOT NULL,
  cost_reasoning INTEGER NOT NULL, cost_total INTEGER NOT NULL,
  avoided_total INTEGER NOT NULL, avoided_base INTEGER NOT NULL,
  refused INTEGER NOT NULL, shadows INTEGER NOT NULL, unpriced_served INTEGER NOT NULL,
  first_us INTEGER NOT NULL, last_us INTEGER NOT NULL) WITHOUT ROWID;
)sql",
    // 12: top tasks of one team or project (the console's filters) walk their own cost order;
    // the cost index alone walks every task when few match.
    R"sql(
CREATE INDEX IF NOT EXISTS task_totals_team ON task_totals(team, cost DESC, task_id);
CREATE INDEX IF NOT EXISTS task_totals_project ON task_totals(project, cost DESC, task_id);
)sql",
    // 13: task_groups' label rows keyed by the task's day, team and project too: they are
    // task_label_groups_migration_sql() (ledger/task_groups.h), run after this.
    R"sql(
)sql",
};

constexpr int kMigrationCount = static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));
static_assert(kMigrationCount == kSchemaVersion);

}  // namespace

Result<SqliteStore> SqliteStore::open(const std::string& path, const std::string& currency) {
  auto db = Db::open(path, false);
  if (!db) return db.error();
  SqliteStore store;
  store.db_ = std::move(*db);
  // A larger page cache keeps the index pages of a busy ledger in memory (64 MiB).
  (void)store.db_.exec("PRAGMA cache_size=-65536");
  auto version_stmt = store.db_.prepare("PRAGMA user_version");
  if (!version_stmt) return version_stmt.error();
  auto has_row = version_stmt->step();
  if (!has_row) return has_row.error();
  int64_t version = version_stmt->int_at(0);
  version_stmt->reset();
  if (version > kSchemaVersion) {
    return Error::make(ErrorCode::kUnavailable, "ledger database " + path + " has schema version " +
                                                    std::to_string(version) +
                                                    ", newer than this ferry (" +
                                                    std::to_string(kSchemaVersion) + ")");
  }
  for (int64_t v = version; v < kSchemaVersion; ++v) {
    std::string sql = std::string("BEGIN IMMEDIATE;") + kMigrations[v] +
                      (v + 1 == 9 ? kBuildRollupsSql : "") +
                      (v + 1 == 10 ? task_groups_migration_sql(false) : "") +
                      (v + 1 == 11 ? task_report_sums_build_sql(false) : "") +
                      (v + 1 == 13 ? task_label_groups_migration_sql(false) : "") +
                      "PRAGMA user_version=" + std::to_string(v + 1) + "; COMMIT;";
    auto st = store.db_.exec(sql);
    if (!st) {
      (void)store.db_.exec("ROLLBACK");
      return Error::make(ErrorCode::kUnavailable, "ledger migration to version " +
                                                      std::to_string(v + 1) +
                                                      " failed: " + st.error().message);
    }
  }
  // Currency: fixed at creation.
  auto get = store.db_.prepare("SELECT value FROM meta WHERE key='currency'");
  if (!get) return get.error();
  auto found = get->step();
  if (!found) return found.error();
  if (*found) {
    store.currency_ = get->text_at(0);
    if (!currency.empty() && currency != store.currency_) {
      return Error::make(ErrorCode::kUnavailable, "ledger database " + path + " is kept in " +
                                                      store.currency_ + ", the config says " +
                                                      currency);
    }
  } else {
    store.currency_ = currency.empty() ? "USD" : currency;
    auto put = store.db_.prepare("INSERT INTO meta(key, value) VALUES('currency', ?)");
    if (!put) return put.error();
    put->bind(1, store.currency_);
    if (auto st = put->run(); !st) return st.error();
  }
  get->reset();
  if (auto st = store.prepare_statements(); !st) return st.error();
  return store;
}

Status SqliteStore::prepare_statements() {
  auto ins =
      db_.prepare("INSERT INTO requests(" + join_names(request_columns()) + "," + kFactsColumn +
                  "," + kUsageCheckColumn + "," + kRequestIdColumn + ",hash," + kConstraintColumn +
                  "," + kSchemaHashColumn + "," + join_names(lever_columns()) + ") VALUES(" +
                  join_placeholders(request_columns().size() + 6 + lever_columns().size()) + ")");
  if (!ins) return ins.error();
  insert_request_ = std::move(*ins);
  auto att = db_.prepare("INSERT INTO attempts(" + join_names(attempt_columns()) + ") VALUES(" +
                         join_placeholders(attempt_columns().size()) + ")");
  if (!att) return att.error();
  insert_attempt_ = std::move(*att);
  auto daily = db_.prepare(daily_upsert_sql("daily", kDailyKey, 0));
  if (!daily) return daily.error();
  upsert_daily_ = std::move(*daily);
  auto daily_team = db_.prepare(daily_upsert_sql("daily_team", kDailyTeamKey, 0));
  if (!daily_team) return daily_team.error();
  upsert_daily_team_ = std::move(*daily_team);
  for (auto [stmt, sql] : {std::pair{&upsert_daily_key_, daily_key_upsert_sql(0)},
                           std::pair{&upsert_task_total_, task_totals_upsert_sql(0)},
                           std::pair{&upsert_task_target_, task_targets_upsert_sql(0)},
                           std::pair{&upsert_untasked_, daily_untasked_upsert_sql(0)}}) {
    auto prepared = db_.prepare(sql);
    if (!prepared) return prepared.error();
    *stmt = std::move(*prepared);
  }
  auto orig = db_.prepare(
      "SELECT key_id,team,project,task_id,requested_model,target,upstream_model,rule_id,"
      "policy_version FROM requests WHERE id=? AND kind='request'");
  if (!orig) return orig.error();
  find_original_ = std::move(*orig);
  auto head = db_.prepare("SELECT seq, hash FROM requests ORDER BY seq DESC LIMIT 1");
  if (!head) return head.error();
  head_ = std::move(*head);
  auto set_head = db_.prepare(
      "INSERT INTO meta(key,value) VALUES('chain_head',?) "
      "ON CONFLICT(key) DO UPDATE SET value=excluded.value");
  if (!set_head) return set_head.error();
  set_head_ = std::move(*set_head);
  return {};
}

Status SqliteStore::sync_prices(const PriceCatalog& catalog) {
  auto stmt = db_.prepare(
      "INSERT OR IGNORE INTO prices(version,model,effective_from_us,input,cached_input,output,"
      "reasoning,internal,recorded_us) VALUES(?,?,?,?,?,?,?,?,?)");
  if (!stmt) return stmt.error();
  if (auto st = db_.exec("BEGIN IMMEDIATE"); !st) return st;
  int64_t now = unix_micros_now();
  for (const auto& e : catalog.entries()) {
    stmt->bind(1, e.version).bind(2, e.model).bind(3, e.effective_from_us);
    stmt->bind(4, e.input.micros()).bind(5, e.cached_input.micros()).bind(6, e.output.micros());
    stmt->bind(7, e.reasoning.micros()).bind(8, int64_t{e.internal ? 1 : 0}).bind(9, now);
    if (auto st = stmt->run(); !st) {
      (void)db_.exec("ROLLBACK");
      return st;
    }
  }
  return db_.exec("COMMIT");
}

namespace {

// Binds a text column that is NULL when empty, without copying (the text outlives the run).
void bind_text_or_null(Stmt& stmt, int index, const std::string& text) {
  if (text.empty()) {
    stmt.bind_null(index);
  } else {
    stmt.bind_ref(index, std::string_view(text));
  }
}

}  // namespace

Status SqliteStore::copy_original(RequestRecord& r, const std::string& adjusts_id) {
  find_original_.bind(1, adjusts_id);
  auto found = find_original_.step();
  if (!found) return found.error();
  if (!*found) {
    find_original_.reset();
    return Error::make(ErrorCode::kNotFound, "adjustment: no request with id '" + adjusts_id + "'");
  }
  r.key_id = find_original_.text_at(0);
  r.team = find_original_.text_at(1);
  r.project = find_original_.text_at(2);
  r.task_id = find_original_.text_at(3);
  r.requested_model = find_original_.text_at(4);
  r.target = find_original_.text_at(5);
  r.upstream_model = find_original_.text_at(6);
  r.rule_id = find_original_.text_at(7);
  r.policy_version = find_original_.text_at(8);
  find_original_.reset();
  return {};
}

Status SqliteStore::append_one(LedgerEntry& entry, std::string& prev_hash, int64_t& last_seq,
                               detail::RowScratch& scratch,
                               std::map<std::string, detail::DailyDelta>& daily,
                               std::map<std::string, detail::DailyDelta>& daily_team,
                               detail::Rollups& rollups) {
  RequestRecord& r = entry.record;
  if (entry.kind == EntryKind::kAdjustment) {
    if (Status st = copy_original(r, entry.adjusts_id); !st) return st;
  }
  request_values(entry, prev_hash, scratch);
  size_t attempt_count = r.attempts.size();
  if (scratch.attempts.size() < attempt_count) scratch.attempts.resize(attempt_count);
  // One cost per attempt; a missing one (an entry not made by the ledger) is unpriced.
  if (entry.attempt_costs.size() < attempt_count) entry.attempt_costs.resize(attempt_count);
  for (size_t i = 0; i < attempt_count; ++i) {
    attempt_values(r.id, i, r.attempts[i], entry.attempt_costs[i], scratch.attempts[i]);
  }
  hash_text(scratch.values, r.request_id, scratch.attempts.data(), attempt_count,
            scratch.hash_text);
  std::string hash = sha256_hex(scratch.hash_text);

  // Every parameter is bound for every row (no clear_bindings needed); the views stay valid
  // until the statement has run.
  const size_t columns = request_columns().size();
  for (size_t i = 0; i < columns; ++i) {
    insert_request_.bind_ref(static_cast<int>(i + 1), scratch.values[i]);
  }
  bind_text_or_null(insert_request_, static_cast<int>(columns + 1), r.facts_json);
  bind_text_or_null(insert_request_, static_cast<int>(columns + 2), r.usage_check);
  bind_text_or_null(insert_request_, static_cast<int>(columns + 3), r.request_id);
  insert_request_.bind_ref(static_cast<int>(columns + 4), std::string_view(hash));
  bind_text_or_null(insert_request_, static_cast<int>(columns + 5), r.constraint_mode);
  bind_text_or_null(insert_request_, static_cast<int>(columns + 6), r.schema_hash);
  scratch.levers.clear();
  lever_values(entry, scratch.levers);
  for (size_t i = 0; i < scratch.levers.size(); ++i) {
    insert_request_.bind_ref(static_cast<int>(columns + 7 + i), scratch.levers[i]);
  }
  auto st = insert_request_.run();
  if (!st) {
    // A constraint (duplicate id) refuses this row alone; anything else fails the batch.
    if ((insert_request_.last_error_code() & 0xff) == SQLITE_CONSTRAINT) {
      Error error = st.error();
      error.code = ErrorCode::kInvalidRequest;
      return error;
    }
    return st;
  }
  for (size_t a = 0; a < attempt_count; ++a) {
    const auto& values = scratch.attempts[a];
    for (size_t i = 0; i < values.size(); ++i) {
      insert_attempt_.bind_ref(static_cast<int>(i + 1), values[i]);
    }
    if (auto ast = insert_attempt_.run(); !ast) return ast;
  }

  std::string& key = scratch.hash_text;  // reused as the group key
  add_to_daily(daily, rollups.last_daily, key,
               {scratch.day, r.key_id, r.team, r.project, r.upstream_model, r.target, r.rule_id},
               scratch.day, entry, r.key_id, r.rule_id);
  add_to_daily(daily_team, rollups.last_daily_team, key,
               {scratch.day, r.team, r.project, r.upstream_model, r.target}, scratch.day, entry, "",
               "");
  add_to_rollups(rollups, key, scratch.day, entry);
  prev_hash = std::move(hash);
  ++last_seq;
  return {};
}

Status SqliteStore::upsert_daily(Stmt& upsert, const detail::DailyDelta& d,
                                 bool with_key_and_rule) {
  int p = 1;
  upsert.bind_ref(p++, std::string_view(d.day));
  if (with_key_and_rule) upsert.bind_ref(p++, std::string_view(d.key_id));
  upsert.bind_ref(p++, std::string_view(d.team));
  upsert.bind_ref(p++, std::string_view(d.project));
  upsert.bind_ref(p++, std::string_view(d.model));
  upsert.bind_ref(p++, std::string_view(d.target));
  if (with_key_and_rule) upsert.bind_ref(p++, std::string_view(d.rule_id));
  for (int64_t v : daily_sums(d)) upsert.bind(p++, v);
  return upsert.run();
}

Status SqliteStore::upsert_rollups(const detail::Rollups& rollups) {
  const RunSql on_db = [this](const std::string& sql, const std::vector<Value>& params) {
    return query_rows(db_, sql, params);
  };
  auto groups = batch_group_deltas(on_db, rollups, false);
  if (!groups) return groups.error();
  std::vector<ValueRef> values;
  auto run = [&](Stmt& stmt) {
    for (size_t i = 0; i < values.size(); ++i) stmt.bind_ref(static_cast<int>(i + 1), values[i]);
    values.clear();
    return stmt.run();
  };
  for (const auto& [key, d] : rollups.daily_key) {
    daily_key_values(d, values);
    if (auto st = run(upsert_daily_key_); !st) return st;
  }
  for (const auto& [key, d] : rollups.tasks) {
    task_total_values(d, values);
    if (auto st = run(upsert_task_total_); !st) return st;
  }
  for (const auto& [key, d] : rollups.task_targets) {
    task_target_values(d, values);
    if (auto st = run(upsert_task_target_); !st) return st;
  }
  for (const auto& [key, d] : rollups.untasked) {
    daily_untasked_values(d, values);
    if (auto st = run(upsert_untasked_); !st) return st;
  }
  // A task marked before this batch's rows of it: its status, once per batch.
  constexpr size_t kIdsPerUpdate = 500;
  std::vector<const std::string*> ids;
  for (const auto& [id, d] : rollups.tasks) ids.push_back(&id);
  for (size_t begin = 0; begin < ids.size(); begin += kIdsPerUpdate) {
    size_t n = std::min(kIdsPerUpdate, ids.size() - begin);
    auto stmt = db_.prepare(task_status_sql(n));
    if (!stmt) return stmt.error();
    for (size_t i = 0; i < n; ++i) stmt->bind(static_cast<int>(i + 1), *ids[begin + i]);
    if (auto st = stmt->run(); !st) return st;
  }
  return upsert_task_groups(on_db, *groups);
}

Result<std::vector<Status>> SqliteStore::append(std::vector<LedgerEntry*>& entries,
                                                bool fail_commit) {
  if (auto st = db_.exec("BEGIN IMMEDIATE"); !st) return st.error();
  auto rollback = [&](Error error) -> Result<std::vector<Status>> {
    (void)db_.exec("ROLLBACK");
    return error;
  };
  // Read the chain head inside the transaction: another process (the CLI) may have appended.
  std::string prev_hash = kGenesisHash;
  int64_t last_seq = 0;
  auto has_head = head_.step();
  if (!has_head) return rollback(has_head.error());
  if (*has_head) {
    last_seq = head_.int_at(0);
    prev_hash = head_.text_at(1);
  }
  head_.reset();
  detail::RowScratch scratch;
  std::map<std::string, detail::DailyDelta> daily;
  std::map<std::string, detail::DailyDelta> daily_team;
  detail::Rollups rollups;
  std::vector<Status> results;
  results.reserve(entries.size());
  for (LedgerEntry* entry : entries) {
    auto st = append_one(*entry, prev_hash, last_seq, scratch, daily, daily_team, rollups);
    if (!st && st.error().code == ErrorCode::kUnavailable) return rollback(st.error());
    results.push_back(std::move(st));
  }
  for (const auto& [key, delta] : daily) {
    if (auto st = upsert_daily(upsert_daily_, delta, true); !st) return rollback(st.error());
  }
  for (const auto& [key, delta] : daily_team) {
    if (auto st = upsert_daily(upsert_daily_team_, delta, false); !st) {
      return rollback(st.error());
    }
  }
  if (auto st = upsert_rollups(rollups); !st) return rollback(st.error());
  set_head_.bind(1, std::to_string(last_seq) + ":" + prev_hash);
  if (auto st = set_head_.run(); !st) return rollback(st.error());
  set_head_.reset();
  if (fail_commit) {
    return rollback(
        Error::make(ErrorCode::kUnavailable, "ledger database: injected write failure"));
  }
  if (auto st = db_.exec("COMMIT"); !st) return rollback(st.error());
  return results;
}

void SqliteStore::take_over_checkpoints() {
  if (!wal_frames_) wal_frames_ = std::make_unique<std::atomic<int64_t>>(0);
  // Once emptied, the WAL file is cut back to 64 MiB rather than kept at its largest size.
  (void)db_.exec("PRAGMA journal_size_limit=67108864");
  // Replaces SQLite's auto-checkpoint hook (which is itself a WAL hook).
  sqlite3_wal_hook(
      db_.raw(),
      [](void* arg, sqlite3*, const char*, int frames) {
        static_cast<std::atomic<int64_t>*>(arg)->store(frames);
        return SQLITE_OK;
      },
      wal_frames_.get());
}

Status SqliteStore::checkpoint() {
  int rc =
      sqlite3_wal_checkpoint_v2(db_.raw(), "main", SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
  if (rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED) return {};
  return sqlite_error(db_.raw(), rc, "checkpoint");
}

Result<Money> SqliteStore::spent_between(BudgetScope scope, const std::string& match,
                                         int64_t start_us, int64_t end_us) {
  const char* column = scope == BudgetScope::kKey    ? "key_id"
                       : scope == BudgetScope::kTeam ? "team"
                                                     : "project";
  auto stmt = db_.prepare(std::string("SELECT COALESCE(SUM(cost_total),0) FROM requests "
                                      "WHERE ended_us >= ? AND ended_us < ? AND ") +
                          column + " = ?");
  if (!stmt) return stmt.error();
  stmt->bind(1, start_us).bind(2, end_us).bind(3, match);
  auto row = stmt->step();
  if (!row) return row.error();
  return Money::from_micros(stmt->int_at(0));
}

}  // namespace ferry::ledger
