#include "ledger/pg_store.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "common/clock.h"
#include "common/json_text.h"
#include "common/saturating.h"
#include "common/sha256.h"
#include "ledger/rate_limits.h"
#include "ledger/task_groups.h"
#include "ledger/time_util.h"

namespace ferry::ledger {

using namespace detail;

namespace {

// Migration i brings the schema from version i to i + 1. Never edit a shipped migration;
// append a new one. Money and token counts are BIGINT micro-units / counts, as in SQLite.
const char* const kPgMigrations[] = {
    R"sql(
CREATE TABLE prices (
  version TEXT PRIMARY KEY, model TEXT NOT NULL, effective_from_us BIGINT NOT NULL,
  input BIGINT NOT NULL, cached_input BIGINT NOT NULL, output BIGINT NOT NULL,
  reasoning BIGINT NOT NULL, internal BIGINT NOT NULL, recorded_us BIGINT NOT NULL);
CREATE TABLE requests (
  seq BIGSERIAL PRIMARY KEY,
  id TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, adjusts_id TEXT, note TEXT,
  started_us BIGINT NOT NULL, ended_us BIGINT NOT NULL, day TEXT NOT NULL,
  key_id TEXT NOT NULL, team TEXT NOT NULL, project TEXT NOT NULL, task_id TEXT NOT NULL,
  trusted_tags TEXT NOT NULL, claimed_tags TEXT NOT NULL,
  requested_model TEXT NOT NULL, target TEXT NOT NULL, upstream_model TEXT NOT NULL,
  rule_id TEXT NOT NULL, policy_version TEXT NOT NULL,
  attempts BIGINT NOT NULL, status TEXT NOT NULL, http_status BIGINT NOT NULL,
  error_code TEXT NOT NULL, stream BIGINT NOT NULL, finish_reason TEXT NOT NULL,
  input_tokens BIGINT NOT NULL, input_source TEXT NOT NULL,
  cached_tokens BIGINT NOT NULL, cached_source TEXT NOT NULL,
  output_tokens BIGINT NOT NULL, output_source TEXT NOT NULL,
  reasoning_tokens BIGINT NOT NULL, reasoning_source TEXT NOT NULL,
  pricing TEXT NOT NULL, price_version TEXT NOT NULL,
  cost_input BIGINT, cost_cached BIGINT, cost_output BIGINT, cost_reasoning BIGINT,
  cost_total BIGINT, avoided_cost BIGINT, avoided_version TEXT NOT NULL,
  queue_us BIGINT NOT NULL, routing_us BIGINT NOT NULL, ttft_us BIGINT NOT NULL,
  total_us BIGINT NOT NULL, prev_hash TEXT NOT NULL,
  facts TEXT, usage_check TEXT, request_id TEXT, hash TEXT NOT NULL,
  instance_id TEXT NOT NULL, chain_seq BIGINT NOT NULL,
  constraint_mode TEXT, schema_hash TEXT,
  UNIQUE (instance_id, chain_seq));
CREATE INDEX requests_task ON requests(task_id, started_us);
CREATE INDEX requests_ended ON requests(ended_us);
CREATE INDEX requests_request_id ON requests(request_id);
CREATE TABLE attempts (
  request_id TEXT NOT NULL, attempt BIGINT NOT NULL,
  target TEXT NOT NULL, upstream_model TEXT NOT NULL, status TEXT NOT NULL,
  http_status BIGINT NOT NULL, error_code TEXT NOT NULL,
  started_us BIGINT NOT NULL, ended_us BIGINT NOT NULL,
  input_tokens BIGINT NOT NULL, input_source TEXT NOT NULL,
  cached_tokens BIGINT NOT NULL, cached_source TEXT NOT NULL,
  output_tokens BIGINT NOT NULL, output_source TEXT NOT NULL,
  reasoning_tokens BIGINT NOT NULL, reasoning_source TEXT NOT NULL,
  pricing TEXT NOT NULL, price_version TEXT NOT NULL,
  cost_input BIGINT, cost_cached BIGINT, cost_output BIGINT, cost_reasoning BIGINT,
  cost_total BIGINT,
  PRIMARY KEY (request_id, attempt));
CREATE TABLE daily (
  day TEXT NOT NULL, key_id TEXT NOT NULL, team TEXT NOT NULL, project TEXT NOT NULL,
  model TEXT NOT NULL, target TEXT NOT NULL, rule_id TEXT NOT NULL,
  requests BIGINT NOT NULL, unpriced BIGINT NOT NULL,
  input_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL,
  output_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
  cost_input BIGINT NOT NULL, cost_cached BIGINT NOT NULL, cost_output BIGINT NOT NULL,
  cost_reasoning BIGINT NOT NULL, cost_total BIGINT NOT NULL,
  avoided_total BIGINT NOT NULL, avoided_base BIGINT NOT NULL,
  refused BIGINT NOT NULL, shadows BIGINT NOT NULL, unpriced_served BIGINT NOT NULL,
  first_us BIGINT NOT NULL, last_us BIGINT NOT NULL,
  PRIMARY KEY (day, key_id, team, project, model, target, rule_id));
CREATE TABLE daily_team (
  day TEXT NOT NULL, team TEXT NOT NULL, project TEXT NOT NULL, model TEXT NOT NULL,
  target TEXT NOT NULL,
  requests BIGINT NOT NULL, unpriced BIGINT NOT NULL,
  input_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL,
  output_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
  cost_input BIGINT NOT NULL, cost_cached BIGINT NOT NULL, cost_output BIGINT NOT NULL,
  cost_reasoning BIGINT NOT NULL, cost_total BIGINT NOT NULL,
  avoided_total BIGINT NOT NULL, avoided_base BIGINT NOT NULL,
  refused BIGINT NOT NULL, shadows BIGINT NOT NULL, unpriced_served BIGINT NOT NULL,
  first_us BIGINT NOT NULL, last_us BIGINT NOT NULL,
  PRIMARY KEY (day, team, project, model, target));
-- One hash chain per instance: its last row, updated in each batch's transaction.
CREATE TABLE chain_heads (
  instance_id TEXT PRIMARY KEY, chain_seq BIGINT NOT NULL, hash TEXT NOT NULL);
-- Shared budgets: the spent figure of a budget's period (every instance's rows, grown in the
-- rows' transactions) and the slices instances hold (leases, renewed while they live).
CREATE TABLE budget_shares (
  name TEXT NOT NULL, period_start_us BIGINT NOT NULL, amount_limit BIGINT NOT NULL,
  spent BIGINT NOT NULL, PRIMARY KEY (name, period_start_us));
CREATE TABLE budget_leases (
  name TEXT NOT NULL, period_start_us BIGINT NOT NULL, instance_id TEXT NOT NULL,
  amount BIGINT NOT NULL, expires_us BIGINT NOT NULL,
  PRIMARY KEY (name, period_start_us, instance_id));
CREATE FUNCTION ferry_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN RAISE EXCEPTION 'ledger rows are append-only; add an adjustment row'; END $$;
CREATE TRIGGER requests_append_only BEFORE UPDATE OR DELETE ON requests
  FOR EACH ROW EXECUTE FUNCTION ferry_append_only();
CREATE TRIGGER attempts_append_only BEFORE UPDATE OR DELETE ON attempts
  FOR EACH ROW EXECUTE FUNCTION ferry_append_only();
)sql",
    // 2: task outcomes (ledger/tasks.h), marked once per task id; not part of the hash chain.
    R"sql(
CREATE TABLE IF NOT EXISTS tasks (
  task_id TEXT PRIMARY KEY, status TEXT NOT NULL, labels TEXT NOT NULL, key_id TEXT NOT NULL,
  marked_us BIGINT NOT NULL, day TEXT NOT NULL);
)sql",
    // 3: the cost levers (lever_columns()), NULL for rows that pulled none.
    R"sql(
ALTER TABLE requests ADD COLUMN trimmed_tokens BIGINT, ADD COLUMN trim_avoided BIGINT,
  ADD COLUMN cache TEXT, ADD COLUMN cache_tokens BIGINT, ADD COLUMN cache_avoided BIGINT,
  ADD COLUMN reasoning_budget TEXT;
)sql",
    // 4: the rollups (detail::Rollups in store.h), built from the rows (kBuildRollupsSql, run
    // after this), then kept by the writers in the rows' transactions; and the API keys kept in
    // the store (ledger/keys.h; hashed, never in clear). task_totals' team, project and day are
    // NULL in a row mark_task made before any ledger row of the task was committed.
    R"sql(
DROP TABLE IF EXISTS daily_key;
DROP TABLE IF EXISTS task_totals;
DROP TABLE IF EXISTS task_targets;
CREATE TABLE daily_key (
  day TEXT NOT NULL, key_id TEXT NOT NULL, team TEXT NOT NULL, project TEXT NOT NULL,
  requests BIGINT NOT NULL, unpriced BIGINT NOT NULL,
  input_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL,
  output_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
  cost_input BIGINT NOT NULL, cost_cached BIGINT NOT NULL, cost_output BIGINT NOT NULL,
  cost_reasoning BIGINT NOT NULL, cost_total BIGINT NOT NULL,
  avoided_total BIGINT NOT NULL, avoided_base BIGINT NOT NULL,
  refused BIGINT NOT NULL, shadows BIGINT NOT NULL, unpriced_served BIGINT NOT NULL,
  first_us BIGINT NOT NULL, last_us BIGINT NOT NULL,
  PRIMARY KEY (day, key_id, team, project));
CREATE TABLE task_totals (
  task_id TEXT PRIMARY KEY, team TEXT, project TEXT, day TEXT, first_us BIGINT, last_us BIGINT,
  requests BIGINT NOT NULL, tokens BIGINT NOT NULL, cost BIGINT NOT NULL,
  status TEXT NOT NULL DEFAULT 'open');
CREATE INDEX task_totals_cost ON task_totals(cost DESC, task_id COLLATE "C");
CREATE INDEX task_totals_status ON task_totals(status, cost DESC, task_id COLLATE "C");
CREATE TABLE task_targets (
  target TEXT NOT NULL, task_id TEXT NOT NULL, requests BIGINT NOT NULL, tokens BIGINT NOT NULL,
  cost BIGINT NOT NULL, PRIMARY KEY (target, task_id));
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY, sha256 TEXT NOT NULL UNIQUE, team TEXT NOT NULL, project TEXT NOT NULL,
  role TEXT NOT NULL, tags TEXT NOT NULL, created_us BIGINT NOT NULL, created_by TEXT NOT NULL,
  revoked_us BIGINT);
)sql",
    // 5: shared rate limits (ledger/rate_limits.h): one token bucket per limit and dimension,
    // in kUnitsPerQuota units, refilled as it is read; instances lease slices out of it.
    R"sql(
CREATE TABLE IF NOT EXISTS rate_buckets (
  name TEXT NOT NULL, dimension TEXT NOT NULL, per_minute BIGINT NOT NULL,
  level BIGINT NOT NULL, updated_us BIGINT NOT NULL, last_grant BIGINT NOT NULL,
  PRIMARY KEY (name, dimension));
)sql",
    // 6: the task reports' rollup (ledger/task_groups.h): its tables, written once for both
    // stores, are task_groups_migration_sql(), run after this.
    R"sql(
)sql",
    // 7: the report by task from the rollups (store.h, kTaskReportSums): task_totals' report
    // sums (a database taken back to version 5 or 6 may have them already) and daily_untasked
    // (the rows without a task id), both filled from the rows by task_report_sums_build_sql(),
    // run after this.
    R"sql(
ALTER TABLE task_totals
  ADD COLUMN IF NOT EXISTS unpriced_served BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS refused BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS shadows BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS input_tokens BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS cached_tokens BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS output_tokens BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS reasoning_tokens BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS cost_input BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS cost_cached BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS cost_output BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS cost_reasoning BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS avoided_total BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS avoided_base BIGINT NOT NULL DEFAULT 0;
DROP TABLE IF EXISTS daily_untasked;
CREATE TABLE daily_untasked (
  day TEXT PRIMARY KEY, requests BIGINT NOT NULL, unpriced BIGINT NOT NULL,
  input_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL,
  output_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
  cost_input BIGINT NOT NULL, cost_cached BIGINT NOT NULL, cost_output BIGINT NOT NULL,
  cost_reasoning BIGINT NOT NULL, cost_total BIGINT NOT NULL,
  avoided_total BIGINT NOT NULL, avoided_base BIGINT NOT NULL,
  refused BIGINT NOT NULL, shadows BIGINT NOT NULL, unpriced_served BIGINT NOT NULL,
  first_us BIGINT NOT NULL, last_us BIGINT NOT NULL);
)sql",
    // 8: top tasks of one team or project (the console's filters) walk their own cost order;
    // the cost index alone walks every task when few match.
    R"sql(
CREATE INDEX IF NOT EXISTS task_totals_team ON task_totals(team, cost DESC, task_id COLLATE "C");
CREATE INDEX IF NOT EXISTS task_totals_project ON task_totals(project, cost DESC, task_id COLLATE "C");
)sql",
    // 9: task_groups' label rows keyed by the task's day, team and project too: they are
    // task_label_groups_migration_sql() (ledger/task_groups.h), run after this.
    R"sql(
)sql",
    // 10: each instance's lease on a shared rate bucket (the units it holds), so the bucket
    // refills only up to the quota less what is out on live leases.
    R"sql(
CREATE TABLE IF NOT EXISTS rate_leases (
  name TEXT NOT NULL, dimension TEXT NOT NULL, instance_id TEXT NOT NULL,
  held BIGINT NOT NULL, expires_us BIGINT NOT NULL,
  PRIMARY KEY (name, dimension, instance_id));
)sql",
};

constexpr int kPgMigrationCount =
    static_cast<int>(sizeof(kPgMigrations) / sizeof(kPgMigrations[0]));
static_assert(kPgMigrationCount == kPgSchemaVersion);
// Serializes migrations of instances starting together (pg_advisory_xact_lock).
constexpr const char* kMigrationLock = "SELECT pg_advisory_xact_lock(7236142908811)";
// Rows per multi-row INSERT: PostgreSQL takes at most 65535 parameters per statement.
constexpr size_t kRowsPerInsert = 1000;
// Bytes of COPY rows sent at a time while the batch's rows are made (about 100 rows; the
// server reads COPY data in 64 KiB pieces).
constexpr size_t kCopyPiece = 64 * 1024;

// PostgreSQL text holds valid UTF-8 without NUL; SQLite holds any bytes. A value that is not
// (a client's header can carry anything) is stored, and hashed, with U+FFFD for each bad byte.
void make_storable(std::string& text) {
  if (text.find('\0') == std::string::npos && is_valid_utf8(text)) return;
  std::string out;
  out.reserve(text.size() + 8);
  size_t i = 0;
  while (i < text.size()) {
    auto lead = static_cast<unsigned char>(text[i]);
    size_t len = lead < 0x80         ? 1
                 : (lead >> 5) == 6  ? 2
                 : (lead >> 4) == 14 ? 3
                 : (lead >> 3) == 30 ? 4
                                     : 0;
    if (lead != 0 && len != 0 && i + len <= text.size() &&
        is_valid_utf8(std::string_view(text).substr(i, len))) {
      out.append(text, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  text = std::move(out);
}

void make_record_storable(LedgerEntry& e) {
  RequestRecord& r = e.record;
  // One cost per attempt (the ledger always gives them; an entry made elsewhere, e.g. kept in
  // a journal by hand, may not): a missing one is an unpriced attempt, never a read past the end.
  if (e.attempt_costs.size() < r.attempts.size()) e.attempt_costs.resize(r.attempts.size());
  for (std::string* s : {&r.id,
                         &e.adjusts_id,
                         &e.note,
                         &r.key_id,
                         &r.team,
                         &r.project,
                         &r.task_id,
                         &r.requested_model,
                         &r.target,
                         &r.upstream_model,
                         &r.rule_id,
                         &r.policy_version,
                         &r.error_code,
                         &r.finish_reason,
                         &r.facts_json,
                         &r.usage_check,
                         &r.request_id,
                         &r.cache,
                         &r.reasoning_budget,
                         &e.cost.price_version,
                         &e.avoided_version}) {
    make_storable(*s);
  }
  for (auto* tags : {&r.trusted_tags, &r.claimed_tags}) {
    for (auto& t : *tags) make_storable(t);
  }
  for (auto& a : r.attempts) {
    for (std::string* s : {&a.target, &a.upstream_model, &a.error_code}) make_storable(*s);
  }
  for (auto& c : e.attempt_costs) make_storable(c.price_version);
}

const char* scope_column(BudgetScope scope) {
  return scope == BudgetScope::kKey ? "key_id" : scope == BudgetScope::kTeam ? "team" : "project";
}

// Creates a budget period's shared row when missing, its spent figure summed from the rows
// already committed (an instance inserting rows of the period waits for this to commit).
Status ensure_share(PgConn& conn, const BudgetCharge& b) {
  auto done =
      conn.run(std::string("INSERT INTO budget_shares(name,period_start_us,amount_limit,spent) "
                           "SELECT $1,$2,$3,COALESCE(SUM(cost_total),0) FROM requests "
                           "WHERE ended_us >= $2 AND ended_us < $4 AND ") +
                   scope_column(b.scope) + " = $5 ON CONFLICT (name, period_start_us) DO NOTHING",
               {b.budget, pg_int(b.period_start_us), pg_int(b.limit.micros()),
                pg_int(b.period_end_us), b.match});
  if (!done) return done.error();
  return {};
}

// The rows of one batch in COPY's text format: one COPY per table per batch, the server
// parsing no statement per row (the multi-row INSERTs it replaced bound ~45 parameters a row
// and left the server CPU-bound at ~3.5k rows/s; bench/README.md). The requests' rows are sent
// in pieces as they are made (kCopyPiece), the attempts' at the end.
struct BatchRows {
  std::string requests;
  size_t request_rows = 0;
  std::string attempts;
  size_t attempt_rows = 0;
};

void copy_value(std::string& row, const ValueRef& value, bool first = false) {
  if (const auto* i = std::get_if<int64_t>(&value)) {
    pg_copy_int(row, *i, first);
  } else if (const auto* s = std::get_if<std::string_view>(&value)) {
    pg_copy_text(row, *s, first);
  } else {
    pg_copy_null(row, first);
  }
}

void copy_text_or_null(std::string& row, const std::string& text) {
  if (text.empty()) {
    pg_copy_null(row);
  } else {
    pg_copy_text(row, text);
  }
}

// One table's upsert of a batch as one statement: its rows as one array per column (unnest),
// the statement short and the same at any row count. The multi-row VALUES it replaced bound
// a parameter per value, and the server's parsing and planning of them was ~15% of its CPU
// per batch (perf; bench/README.md). `one_row_sql` is the upsert of one row ("VALUES($1,...)");
// `values` holds `columns` values per row; a column's type is that of its first non-NULL value
// (text when it has none).
Status upsert_unnest(PgConn& conn, const std::string& one_row_sql,
                     const std::vector<ValueRef>& values, size_t columns) {
  if (values.empty()) return {};
  const size_t rows = values.size() / columns;
  std::vector<PgParam> arrays;
  std::string from = "SELECT * FROM unnest(";
  for (size_t c = 0; c < columns; ++c) {
    bool text = true;
    for (size_t r = 0; r < rows; ++r) {
      const ValueRef& v = values[r * columns + c];
      if (std::holds_alternative<std::monostate>(v)) continue;
      text = std::holds_alternative<std::string_view>(v);
      break;
    }
    std::string array = "{";
    for (size_t r = 0; r < rows; ++r) {
      if (r != 0) array += ',';
      const ValueRef& v = values[r * columns + c];
      if (const auto* i = std::get_if<int64_t>(&v)) {
        encode_int(array, *i);
      } else if (const auto* t = std::get_if<std::string_view>(&v)) {
        array += '"';
        for (char ch : *t) {
          if (ch == '"' || ch == '\\') array += '\\';
          array += ch;
        }
        array += '"';
      } else {
        array += "NULL";
      }
    }
    array += '}';
    arrays.emplace_back(std::move(array));
    from += std::string(c == 0 ? "$" : ",$") + std::to_string(c + 1) +
            (text ? "::text[]" : "::bigint[]");
  }
  from += ")";
  const size_t at = one_row_sql.find("VALUES(");
  const size_t close = one_row_sql.find(')', at);
  if (at == std::string::npos || close == std::string::npos) {
    return Error::make(ErrorCode::kInternal, "ledger: an upsert without VALUES");
  }
  auto done = conn.run(one_row_sql.substr(0, at) + from + one_row_sql.substr(close + 1), arrays);
  if (!done) return done.error();
  return {};
}

Status upsert_deltas(PgConn& conn, const char* table, const char* key,
                     const std::map<std::string, DailyDelta>& deltas, bool with_key_and_rule) {
  std::vector<ValueRef> values;
  size_t columns = 0;
  for (const auto& [k, d] : deltas) {
    const size_t before = values.size();
    values.emplace_back(std::string_view(d.day));
    if (with_key_and_rule) values.emplace_back(std::string_view(d.key_id));
    values.emplace_back(std::string_view(d.team));
    values.emplace_back(std::string_view(d.project));
    values.emplace_back(std::string_view(d.model));
    values.emplace_back(std::string_view(d.target));
    if (with_key_and_rule) values.emplace_back(std::string_view(d.rule_id));
    for (int64_t v : daily_sums(d)) values.emplace_back(v);
    columns = values.size() - before;
  }
  return upsert_unnest(conn, daily_upsert_sql(table, key, 1), values, columns);
}

// The batch's rollups (store.h), one upsert per table in the rows' transaction, then the status
// of its tasks marked before (mark_task's upsert waits for this transaction otherwise).
Status upsert_rollups(PgConn& conn, const Rollups& rollups) {
  const RunSql on_conn = [&conn](const std::string& sql, const std::vector<Value>& params) {
    return query_rows(conn, sql, params);
  };
  auto groups = batch_group_deltas(on_conn, rollups, true);
  if (!groups) return groups.error();
  auto upsert = [&](const auto& deltas, auto sql_of, auto values_of) -> Status {
    std::vector<ValueRef> values;
    size_t columns = 0;
    for (const auto& [k, d] : deltas) {
      const size_t before = values.size();
      values_of(d, values);
      columns = values.size() - before;
    }
    return upsert_unnest(conn, sql_of(1), values, columns);
  };
  for (Status st : {upsert(rollups.daily_key, daily_key_upsert_sql, daily_key_values),
                    upsert(rollups.tasks, task_totals_upsert_sql, task_total_values),
                    upsert(rollups.task_targets, task_targets_upsert_sql, task_target_values),
                    upsert(rollups.untasked, daily_untasked_upsert_sql, daily_untasked_values)}) {
    if (!st) return st;
  }
  std::vector<std::string_view> ids;
  for (const auto& [id, d] : rollups.tasks) ids.push_back(id);
  if (ids.empty()) return {};
  auto done = conn.run(
      "UPDATE task_totals AS t SET status = k.status FROM tasks AS k WHERE k.task_id = t.task_id "
      "AND t.status = 'open' AND t.task_id = ANY($1::text[])",
      {pg_text_array(ids)});
  if (!done) return done.error();
  return upsert_task_groups(on_conn, *groups);
}

// The original requests of the batch's adjustments, and which of its ids exist already.
struct Lookups {
  std::set<std::string> existing;
  std::map<std::string, std::vector<std::string>> originals;  // id -> attribution columns
};

constexpr const char* kOriginalColumns =
    "key_id,team,project,task_id,requested_model,target,upstream_model,rule_id,policy_version";

Result<Lookups> look_up(PgConn& conn, const std::vector<LedgerEntry*>& entries, bool ids_too) {
  std::vector<std::string_view> ids;
  std::vector<std::string_view> adjusted;
  for (const LedgerEntry* e : entries) {
    ids.push_back(e->record.id);
    if (e->kind == EntryKind::kAdjustment) adjusted.push_back(e->adjusts_id);
  }
  Lookups out;
  if (ids_too) {
    auto found =
        conn.run("SELECT id FROM requests WHERE id = ANY($1::text[])", {pg_text_array(ids)});
    if (!found) return found.error();
    for (int i = 0; i < found->rows(); ++i) out.existing.insert(found->text(i, 0));
  }
  if (adjusted.empty()) return out;
  auto orig = conn.run(std::string("SELECT id,") + kOriginalColumns +
                           " FROM requests WHERE kind='request' AND id = ANY($1::text[])",
                       {pg_text_array(adjusted)});
  if (!orig) return orig.error();
  for (int i = 0; i < orig->rows(); ++i) {
    auto& cols = out.originals[orig->text(i, 0)];
    for (int c = 1; c <= 9; ++c) cols.push_back(orig->text(i, c));
  }
  return out;
}

void copy_attribution(RequestRecord& r, const std::vector<std::string>& c) {
  r.key_id = c[0];
  r.team = c[1];
  r.project = c[2];
  r.task_id = c[3];
  r.requested_model = c[4];
  r.target = c[5];
  r.upstream_model = c[6];
  r.rule_id = c[7];
  r.policy_version = c[8];
}

std::vector<std::string> attribution_of(const RequestRecord& r) {
  return {r.key_id, r.team,           r.project, r.task_id,       r.requested_model,
          r.target, r.upstream_model, r.rule_id, r.policy_version};
}

}  // namespace

bool is_pg_url(std::string_view path) {
  return path.rfind("postgresql://", 0) == 0 || path.rfind("postgres://", 0) == 0;
}

Result<PgStore> PgStore::open(const std::string& url, const std::string& currency,
                              const std::string& instance) {
  auto conn = PgConn::connect(url);
  if (!conn) return conn.error();
  PgStore store;
  store.conn_ = std::move(*conn);
  store.instance_ = instance;
  if (Status st = store.migrate(); !st) return st.error();
  auto got = store.conn_.run("SELECT value FROM meta WHERE key='currency'");
  if (!got) return got.error();
  if (got->rows() > 0) {
    store.currency_ = got->text(0, 0);
    if (!currency.empty() && currency != store.currency_) {
      return Error::make(ErrorCode::kUnavailable, "ledger database (PostgreSQL) is kept in " +
                                                      store.currency_ + ", the config says " +
                                                      currency);
    }
  } else {
    std::string wanted = currency.empty() ? "USD" : currency;
    auto put = store.conn_.run(
        "INSERT INTO meta(key,value) VALUES('currency',$1) ON CONFLICT (key) DO NOTHING", {wanted});
    if (!put) return put.error();
    auto again = store.conn_.run("SELECT value FROM meta WHERE key='currency'");
    if (!again) return again.error();
    store.currency_ = again->rows() > 0 ? again->text(0, 0) : wanted;
    if (store.currency_ != wanted && !currency.empty()) {
      return Error::make(ErrorCode::kUnavailable, "ledger database (PostgreSQL) is kept in " +
                                                      store.currency_ + ", the config says " +
                                                      currency);
    }
  }
  return store;
}

Status PgStore::migrate() {
  auto fail = [&](const Error& e) -> Status {
    (void)conn_.exec("ROLLBACK");
    return e;
  };
  if (Status st = conn_.exec("BEGIN"); !st) return st;
  if (auto st = conn_.run(kMigrationLock); !st) return fail(st.error());
  if (Status st = conn_.exec("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT "
                             "NOT NULL)");
      !st) {
    return fail(st.error());
  }
  auto got = conn_.run("SELECT value FROM meta WHERE key='schema_version'");
  if (!got) return fail(got.error());
  int64_t version = got->rows() > 0 ? std::stoll(got->text(0, 0)) : 0;
  if (version > kPgSchemaVersion) {
    return fail(Error::make(ErrorCode::kUnavailable,
                            "ledger database (PostgreSQL) has schema version " +
                                std::to_string(version) + ", newer than this ferry (" +
                                std::to_string(kPgSchemaVersion) + ")"));
  }
  for (int64_t v = version; v < kPgSchemaVersion; ++v) {
    std::string sql = std::string(kPgMigrations[v]) + (v + 1 == 4 ? kBuildRollupsSql : "") +
                      (v + 1 == 6 ? task_groups_migration_sql(true) : "") +
                      (v + 1 == 7 ? task_report_sums_build_sql(true) : "") +
                      (v + 1 == 9 ? task_label_groups_migration_sql(true) : "");
    if (Status st = conn_.exec(sql); !st) {
      return fail(Error::make(ErrorCode::kUnavailable, "ledger migration to version " +
                                                           std::to_string(v + 1) +
                                                           " failed: " + st.error().message));
    }
  }
  auto set = conn_.run(
      "INSERT INTO meta(key,value) VALUES('schema_version',$1) ON CONFLICT (key) DO UPDATE SET "
      "value=excluded.value",
      {std::to_string(kPgSchemaVersion)});
  if (!set) return fail(set.error());
  return conn_.exec("COMMIT");
}

Status PgStore::sync_prices(const PriceCatalog& catalog) {
  int64_t now = unix_micros_now();
  std::vector<PgParam> params;
  size_t rows = 0;
  for (const auto& e : catalog.entries()) {
    for (PgParam p :
         {PgParam(e.version), PgParam(e.model), pg_int(e.effective_from_us),
          pg_int(e.input.micros()), pg_int(e.cached_input.micros()), pg_int(e.output.micros()),
          pg_int(e.reasoning.micros()), pg_int(e.internal ? 1 : 0), pg_int(now)}) {
      params.push_back(std::move(p));
    }
    ++rows;
  }
  if (rows == 0) return {};
  for (size_t begin = 0; begin < rows; begin += kRowsPerInsert) {
    size_t n = std::min(kRowsPerInsert, rows - begin);
    std::vector<PgParam> chunk(params.begin() + static_cast<std::ptrdiff_t>(begin * 9),
                               params.begin() + static_cast<std::ptrdiff_t>((begin + n) * 9));
    auto done = conn_.run(
        "INSERT INTO prices(version,model,effective_from_us,input,cached_input,output,reasoning,"
        "internal,recorded_us) VALUES" +
            pg_value_rows(n, 9, 1) + " ON CONFLICT (version) DO NOTHING",
        chunk);
    if (!done) return done.error();
  }
  return {};
}

Status PgStore::ensure_shares(const std::vector<const BudgetCharge*>& budgets) {
  for (const BudgetCharge* b : budgets) {
    if (Status st = ensure_share(conn_, *b); !st) return st;
  }
  return {};
}

Status PgStore::apply_charges(const std::vector<LedgerEntry*>& entries,
                              const std::vector<Status>& results) {
  // Summed per budget period: one UPDATE of each shared row and lease per batch.
  std::map<std::pair<std::string, int64_t>, std::pair<Money, Money>> sums;  // spent, leased
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!results[i]) continue;
    for (const BudgetCharge& c : entries[i]->charges) {
      auto& [spent, leased] = sums[{c.budget, c.period_start_us}];
      spent += c.amount;
      if (c.from_lease) leased += c.amount;
    }
  }
  for (const auto& [key, amounts] : sums) {
    auto spent = conn_.run(
        "UPDATE budget_shares SET spent = spent + $3 WHERE name=$1 AND period_start_us=$2",
        {key.first, pg_int(key.second), pg_int(amounts.first.micros())});
    if (!spent) return spent.error();
    if (amounts.second == Money()) continue;
    auto leased = conn_.run(
        "UPDATE budget_leases SET amount = GREATEST(amount - $4, 0) WHERE name=$1 AND "
        "period_start_us=$2 AND instance_id=$3",
        {key.first, pg_int(key.second), instance_, pg_int(amounts.second.micros())});
    if (!leased) return leased.error();
  }
  return {};
}

Result<std::vector<Status>> PgStore::append(std::vector<LedgerEntry*>& entries, bool fail_commit) {
  auto done = append_batch(entries, fail_commit, false);
  // A unique violation (SQLSTATE 23505): a row of the batch is there already.
  if (!done && done.error().code == ErrorCode::kInvalidRequest) {
    return append_batch(entries, fail_commit, true);
  }
  return done;
}

// One transaction per batch; see the header. The steps are in order and each is short, but
// they share the transaction's state (head, lookups, rows), hence one function.
Result<std::vector<Status>> PgStore::append_batch(std::vector<LedgerEntry*>& entries,
                                                  bool fail_commit, bool look_up_ids) {
  auto rollback = [&](Error error) -> Result<std::vector<Status>> {
    (void)conn_.exec("ROLLBACK");
    return error;
  };
  if (Status st = conn_.exec("BEGIN"); !st) return st.error();
  // Budget periods first: a shared row created now sums only rows committed before.
  std::vector<const BudgetCharge*> budgets;
  std::set<std::pair<std::string, int64_t>> seen_budgets;
  for (LedgerEntry* e : entries) {
    make_record_storable(*e);
    for (const BudgetCharge& c : e->charges) {
      if (seen_budgets.insert({c.budget, c.period_start_us}).second) budgets.push_back(&c);
    }
  }
  // In one order everywhere (as apply_charges() updates them): no deadlock between writers.
  std::sort(budgets.begin(), budgets.end(), [](const BudgetCharge* a, const BudgetCharge* b) {
    return std::tie(a->budget, a->period_start_us) < std::tie(b->budget, b->period_start_us);
  });
  if (Status st = ensure_shares(budgets); !st) return rollback(st.error());
  auto init = conn_.run(
      "INSERT INTO chain_heads(instance_id,chain_seq,hash) VALUES($1,0,$2) ON CONFLICT DO NOTHING",
      {instance_, std::string(kGenesisHash)});
  if (!init) return rollback(init.error());
  auto head = conn_.run("SELECT chain_seq,hash FROM chain_heads WHERE instance_id=$1 FOR UPDATE",
                        {instance_});
  if (!head) return rollback(head.error());
  int64_t chain_seq = head->integer(0, 0);
  std::string prev_hash = head->text(0, 1);
  auto lookups = look_up(conn_, entries, look_up_ids);
  if (!lookups) return rollback(lookups.error());

  // The rows go out while the next are made (PgConn::copy_put): the server inserts a piece
  // while this thread hashes and encodes the next one.
  static const std::string request_copy = "COPY requests(" + join_names(request_columns()) + "," +
                                          kFactsColumn + "," + kUsageCheckColumn + "," +
                                          kRequestIdColumn + ",hash,instance_id,chain_seq," +
                                          kConstraintColumn + "," + kSchemaHashColumn + "," +
                                          join_names(lever_columns()) + ") FROM STDIN";
  if (Status st = conn_.copy_begin(request_copy); !st) return rollback(st.error());
  BatchRows rows;
  rows.requests.reserve(kCopyPiece + 4096);
  RowScratch scratch;
  std::map<std::string, DailyDelta> daily;
  std::map<std::string, DailyDelta> daily_team;
  Rollups rollups;
  std::vector<Status> results;
  results.reserve(entries.size());
  const size_t columns = request_columns().size();
  for (LedgerEntry* entry : entries) {
    RequestRecord& r = entry->record;
    if (lookups->existing.count(r.id) != 0) {
      results.emplace_back(Error::make(ErrorCode::kInvalidRequest,
                                       "ledger: a row with id '" + r.id + "' exists already", "",
                                       std::string(kDuplicateIdCode)));
      continue;
    }
    if (entry->kind == EntryKind::kAdjustment) {
      auto orig = lookups->originals.find(entry->adjusts_id);
      if (orig == lookups->originals.end()) {
        results.emplace_back(Error::make(
            ErrorCode::kNotFound, "adjustment: no request with id '" + entry->adjusts_id + "'"));
        continue;
      }
      copy_attribution(r, orig->second);
    }
    request_values(*entry, prev_hash, scratch);
    size_t attempt_count = r.attempts.size();
    if (scratch.attempts.size() < attempt_count) scratch.attempts.resize(attempt_count);
    for (size_t i = 0; i < attempt_count; ++i) {
      attempt_values(r.id, i, r.attempts[i], entry->attempt_costs[i], scratch.attempts[i]);
    }
    hash_text(scratch.values, r.request_id, scratch.attempts.data(), attempt_count,
              scratch.hash_text, instance_);
    std::string hash = sha256_hex(scratch.hash_text);
    std::string& out = rows.requests;
    for (size_t i = 0; i < columns; ++i) copy_value(out, scratch.values[i], i == 0);
    copy_text_or_null(out, r.facts_json);
    copy_text_or_null(out, r.usage_check);
    copy_text_or_null(out, r.request_id);
    pg_copy_text(out, hash);
    pg_copy_text(out, instance_);
    pg_copy_int(out, ++chain_seq);
    copy_text_or_null(out, r.constraint_mode);
    copy_text_or_null(out, r.schema_hash);
    scratch.levers.clear();
    lever_values(*entry, scratch.levers);
    for (const ValueRef& v : scratch.levers) copy_value(out, v);
    pg_copy_end(out);
    ++rows.request_rows;
    if (out.size() >= kCopyPiece) {
      (void)conn_.copy_put(out);  // a failure is copy_end's
      out.clear();
    }
    for (size_t a = 0; a < attempt_count; ++a) {
      bool first = true;
      for (const ValueRef& v : scratch.attempts[a]) {
        copy_value(rows.attempts, v, first);
        first = false;
      }
      pg_copy_end(rows.attempts);
      ++rows.attempt_rows;
    }
    std::string& key = scratch.hash_text;  // reused as the group key
    add_to_daily(daily, rollups.last_daily, key,
                 {scratch.day, r.key_id, r.team, r.project, r.upstream_model, r.target, r.rule_id},
                 scratch.day, *entry, r.key_id, r.rule_id);
    add_to_daily(daily_team, rollups.last_daily_team, key,
                 {scratch.day, r.team, r.project, r.upstream_model, r.target}, scratch.day, *entry,
                 "", "");
    add_to_rollups(rollups, key, scratch.day, *entry);
    lookups->existing.insert(r.id);
    if (entry->kind == EntryKind::kRequest) lookups->originals[r.id] = attribution_of(r);
    prev_hash = std::move(hash);
    results.emplace_back();
  }
  (void)conn_.copy_put(rows.requests);
  if (Status st = conn_.copy_end(); !st) return rollback(st.error());
  static const std::string attempt_copy =
      "COPY attempts(" + join_names(attempt_columns()) + ") FROM STDIN";
  for (Status st : {rows.attempt_rows == 0 ? Status{} : conn_.copy_in(attempt_copy, rows.attempts),
                    upsert_deltas(conn_, "daily", kDailyKey, daily, true),
                    upsert_deltas(conn_, "daily_team", kDailyTeamKey, daily_team, false),
                    upsert_rollups(conn_, rollups), apply_charges(entries, results)}) {
    if (!st) return rollback(st.error());
  }
  auto set_head = conn_.run("UPDATE chain_heads SET chain_seq=$2, hash=$3 WHERE instance_id=$1",
                            {instance_, pg_int(chain_seq), prev_hash});
  if (!set_head) return rollback(set_head.error());
  if (fail_commit) {
    return rollback(Error::make(ErrorCode::kUnavailable,
                                "ledger database (PostgreSQL): injected write failure"));
  }
  if (Status st = conn_.exec("COMMIT"); !st) return rollback(st.error());
  return results;
}

Result<Money> PgStore::spent_between(BudgetScope scope, const std::string& match, int64_t start_us,
                                     int64_t end_us) {
  auto got = conn_.run(std::string("SELECT COALESCE(SUM(cost_total),0) FROM requests WHERE "
                                   "ended_us >= $1 AND ended_us < $2 AND ") +
                           scope_column(scope) + " = $3",
                       {pg_int(start_us), pg_int(end_us), match});
  if (!got) return got.error();
  return Money::from_micros(got->integer(0, 0));
}

Result<LeaseGrant> PgStore::lease(const BudgetCharge& budget, Money want, int64_t now_us,
                                  int64_t until_us) {
  auto rollback = [&](Error error) -> Result<LeaseGrant> {
    (void)conn_.exec("ROLLBACK");
    return error;
  };
  if (Status st = conn_.exec("BEGIN"); !st) return st.error();
  if (Status st = ensure_share(conn_, budget); !st) return rollback(st.error());
  PgParam name = budget.budget;
  PgParam start = pg_int(budget.period_start_us);
  auto share = conn_.run(
      "UPDATE budget_shares SET amount_limit=$3 WHERE name=$1 AND period_start_us=$2 "
      "RETURNING spent",
      {name, start, pg_int(budget.limit.micros())});
  if (!share) return rollback(share.error());
  LeaseGrant grant;
  grant.spent = Money::from_micros(share->integer(0, 0));
  auto held = conn_.run(
      "SELECT COALESCE(SUM(amount) FILTER (WHERE instance_id <> $3 AND expires_us > $4),0),"
      "COALESCE(SUM(amount) FILTER (WHERE instance_id = $3 AND expires_us > $4),0),"
      "COUNT(*) FILTER (WHERE instance_id = $3 AND expires_us <= $4) "
      "FROM budget_leases WHERE name=$1 AND period_start_us=$2",
      {name, start, instance_, pg_int(now_us)});
  if (!held) return rollback(held.error());
  Money others = Money::from_micros(held->integer(0, 0));
  Money mine = Money::from_micros(held->integer(0, 1));
  grant.reset = held->integer(0, 2) > 0;  // expired: others may have been granted it since
  Money room = budget.limit - grant.spent - others - mine;
  grant.granted = std::clamp(want, Money(), std::max(room, Money()));
  auto put = conn_.run(
      "INSERT INTO budget_leases(name,period_start_us,instance_id,amount,expires_us) "
      "VALUES($1,$2,$3,$4,$5) ON CONFLICT (name,period_start_us,instance_id) DO UPDATE SET "
      "amount = CASE WHEN budget_leases.expires_us <= $6 THEN 0 ELSE budget_leases.amount END "
      "+ excluded.amount, expires_us = excluded.expires_us",
      {name, start, instance_, pg_int(grant.granted.micros()), pg_int(until_us), pg_int(now_us)});
  if (!put) return rollback(put.error());
  if (Status st = conn_.exec("COMMIT"); !st) return rollback(st.error());
  return grant;
}

namespace {

// The shared bucket's row, created full if missing, locked for the transaction, and the units
// the other instances hold on live leases of it (read after the lock: each holder writes its
// lease under it). Returns {level, updated_us, others' held, this instance's lease expiry}.
struct LockedBucket {
  int64_t level = 0, updated_us = 0, others_held = 0, my_expires_us = 0;
};

Result<LockedBucket> lock_bucket(PgConn& conn, const std::string& name, std::string_view dimension,
                                 int64_t per_minute, const std::string& instance, int64_t now_us) {
  const std::vector<PgParam> key = {name, std::string(dimension), pg_int(per_minute),
                                    pg_int(now_us)};
  auto made = conn.run(
      "INSERT INTO rate_buckets(name,dimension,per_minute,level,updated_us,last_grant) "
      "VALUES($1,$2,$3::bigint,$3::bigint*60000000,$4::bigint,0) ON CONFLICT (name,dimension) "
      "DO NOTHING",
      key);
  if (!made) return made.error();
  auto row = conn.run(
      "SELECT level, updated_us FROM rate_buckets WHERE name=$1 AND dimension=$2 FOR UPDATE",
      {name, std::string(dimension)});
  if (!row) return row.error();
  if (row->rows() == 0) {
    return Error::make(ErrorCode::kUnavailable, "rate bucket '" + name + "' vanished");
  }
  auto held = conn.run(
      "SELECT COALESCE(SUM(held) FILTER (WHERE instance_id <> $3 AND expires_us > $4),0), "
      "COALESCE(MAX(expires_us) FILTER (WHERE instance_id = $3),0) FROM rate_leases WHERE "
      "name=$1 AND dimension=$2",
      {name, std::string(dimension), instance, pg_int(now_us)});
  if (!held) return held.error();
  return LockedBucket{row->integer(0, 0), row->integer(0, 1), held->integer(0, 0),
                      held->integer(0, 1)};
}

// One transaction holding the bucket's row lock: `body` runs on the locked bucket; COMMIT, or
// ROLLBACK on any error.
Status in_locked_bucket(PgConn& conn, const std::string& name, std::string_view dimension,
                        int64_t per_minute, const std::string& instance, int64_t now_us,
                        const std::function<Status(const LockedBucket&)>& body) {
  if (Status st = conn.exec("BEGIN"); !st) return st;
  auto bucket = lock_bucket(conn, name, dimension, per_minute, instance, now_us);
  Status st = bucket ? body(*bucket) : Status(bucket.error());
  if (st) st = conn.exec("COMMIT");
  if (!st) (void)conn.exec("ROLLBACK");
  return st;
}

}  // namespace

Result<RateGrant> PgStore::take_rate(const std::string& name, std::string_view dimension,
                                     int64_t per_minute, int64_t want, int64_t held, int64_t now_us,
                                     int64_t until_us) {
  RateGrant grant;
  Status st = in_locked_bucket(
      conn_, name, dimension, per_minute, instance_, now_us, [&](const LockedBucket& bucket) {
        // One minute's quota in the bucket and on every live lease together: the bucket
        // refills (for the time since it was last read, at most a minute's worth; a clock
        // behind the last reader's refills nothing) only up to the quota less what the
        // instances hold, so units out on leases are never refilled behind them.
        const int64_t capacity = saturating_mul(per_minute, kUnitsPerQuota);
        grant.reset = bucket.my_expires_us <= now_us;  // no live lease: what it held is gone
        const int64_t mine = grant.reset ? 0 : std::clamp<int64_t>(held, 0, capacity);
        const int64_t room = std::max<int64_t>(0, capacity - bucket.others_held - mine);
        const int64_t elapsed = std::clamp<int64_t>(now_us - bucket.updated_us, 0, 60'000'000);
        const int64_t level = std::max<int64_t>(
            0, std::min(saturating_add(bucket.level, saturating_mul(elapsed, per_minute)), room));
        grant.granted = std::clamp<int64_t>(want, 0, level);
        grant.level = level - grant.granted;
        auto put = conn_.run(
            "UPDATE rate_buckets SET per_minute=$3, level=$4, last_grant=$5, updated_us=GREATEST("
            "updated_us,$6::bigint) WHERE name=$1 AND dimension=$2",
            {name, std::string(dimension), pg_int(per_minute), pg_int(grant.level),
             pg_int(grant.granted), pg_int(now_us)});
        if (!put) return Status(put.error());
        auto lease = conn_.run(
            "INSERT INTO rate_leases(name,dimension,instance_id,held,expires_us) VALUES($1,$2,$3,"
            "$4,$5) ON CONFLICT (name,dimension,instance_id) DO UPDATE SET held=excluded.held, "
            "expires_us=excluded.expires_us",
            {name, std::string(dimension), instance_, pg_int(saturating_add(mine, grant.granted)),
             pg_int(until_us)});
        return lease ? Status{} : Status(lease.error());
      });
  if (!st) return st.error();
  return grant;
}

Status PgStore::give_rate(const std::string& name, std::string_view dimension, int64_t per_minute,
                          int64_t units, int64_t now_us) {
  return in_locked_bucket(
      conn_, name, dimension, per_minute, instance_, now_us, [&](const LockedBucket& bucket) {
        // Back into the bucket, never past the quota less what the others hold; this
        // instance's lease is gone (what it used of it stays used).
        const int64_t capacity = saturating_mul(per_minute, kUnitsPerQuota);
        const int64_t room = std::max<int64_t>(0, capacity - bucket.others_held);
        const int64_t level =
            std::max(bucket.level,
                     std::min(saturating_add(bucket.level, std::max<int64_t>(units, 0)), room));
        auto put = conn_.run("UPDATE rate_buckets SET level=$3 WHERE name=$1 AND dimension=$2",
                             {name, std::string(dimension), pg_int(level)});
        if (!put) return Status(put.error());
        auto gone =
            conn_.run("DELETE FROM rate_leases WHERE name=$1 AND dimension=$2 AND instance_id=$3",
                      {name, std::string(dimension), instance_});
        return gone ? Status{} : Status(gone.error());
      });
}

Status PgStore::drop_leases() {
  auto done = conn_.run("DELETE FROM budget_leases WHERE instance_id=$1", {instance_});
  if (!done) return done.error();
  return {};
}

}  // namespace ferry::ledger
