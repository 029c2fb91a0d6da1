#include "ledger/report.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "ledger/pg_db.h"
#include "ledger/pg_store.h"
#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
#include "ledger/store.h"

namespace ferry::ledger {

namespace {

struct ByInfo {
  ReportBy by;
  const char* name;
  const char* raw_expr;    // over `requests`
  const char* daily_expr;  // over `daily`; nullptr: needs the rows
  bool in_daily_team;      // `daily_team` has it (same expression as over `daily`)
  bool in_daily_key;       // `daily_key` has it
};

constexpr ByInfo kBy[] = {
    {ReportBy::kTask, "task", "task_id", nullptr, false, false},
    {ReportBy::kTeam, "team", "team", "team", true, true},
    {ReportBy::kProject, "project", "project", "project", true, true},
    {ReportBy::kKey, "key", "key_id", "key_id", false, true},
    {ReportBy::kModel, "model", "upstream_model", "model", true, false},
    {ReportBy::kTarget, "target", "target", "target", true, false},
    {ReportBy::kRule, "rule", "rule_id", "rule_id", false, false},
    {ReportBy::kDay, "day", "day", "day", true, true},
    {ReportBy::kMonth, "month", "substr(day,1,7)", "substr(day,1,7)", true, true},
};

// The smallest table that can answer: daily_team (no key, rule or task), daily_key (no model,
// target, rule or task), daily (no task), task_totals and daily_untasked (by task alone, no
// filter), or the rows.
enum class Source : uint8_t { kRows, kDaily, kDailyTeam, kDailyKey, kTaskTotals };

const ByInfo& info(ReportBy by) {
  for (const auto& i : kBy) {
    if (i.by == by) return i;
  }
  return kBy[1];
}

std::string day_text(CivilDate d) {
  int64_t us = days_from_civil(d) * kMicrosPerDay;
  return utc_day(us);
}

// The rows' request id column; NULL in a file before schema version 4 (read-only here, so
// never migrated), whose rows have none.
Result<std::string> request_id_expr(Db& db) {
  auto has = db.prepare(std::string("SELECT 1 FROM pragma_table_info('requests') WHERE name='") +
                        kRequestIdColumn + "'");
  if (!has) return has.error();
  auto found = has->step();
  if (!found) return found.error();
  return std::string(*found ? kRequestIdColumn : "NULL");
}

// Appends "AND column = ?" fragments for the filters present; values go to `params`. Columns
// are qualified with `table` when given (a join). A request id filter needs the rows (`raw`)
// and `request_id` (request_id_expr).
void add_filters(const ReportFilter& f, bool raw, std::string& sql, std::vector<Value>& params,
                 const std::string& table = "", const std::string& request_id = kRequestIdColumn) {
  const std::string prefix = table.empty() ? "" : table + ".";
  auto eq = [&](const std::optional<std::string>& value, const char* column) {
    if (!value) return;
    sql += " AND " + prefix + column + " = ?";
    params.emplace_back(*value);
  };
  eq(f.key_id, "key_id");
  eq(f.team, "team");
  eq(f.project, "project");
  eq(f.task_id, "task_id");
  eq(f.model, raw ? "upstream_model" : "model");
  eq(f.target, "target");
  eq(f.rule_id, "rule_id");
  if (f.request_id) {
    // NULL (an old file) is no column: it matches nothing and takes no prefix.
    sql += " AND " + (request_id == "NULL" ? request_id : prefix + request_id) + " = ?";
    params.emplace_back(*f.request_id);
  }
  if (f.from) {
    sql += " AND " + prefix + "day >= ?";
    params.emplace_back(day_text(*f.from));
  }
  if (f.to) {
    sql += " AND " + prefix + "day <= ?";
    params.emplace_back(day_text(*f.to));
  }
}

// Filter values as libpq parameters (integers as decimal text).
std::vector<PgParam> to_pg_params(const std::vector<Value>& params) {
  std::vector<PgParam> out;
  for (const Value& v : params) {
    const auto* text = std::get_if<std::string>(&v);
    out.emplace_back(text != nullptr ? PgParam(*text) : pg_int(std::get<int64_t>(v)));
  }
  return out;
}

Money rounded_div(Money total, int64_t count) {
  if (count <= 0) return Money();
  int64_t q = total.micros() / count;
  int64_t r = total.micros() % count;
  if (r * 2 >= count) ++q;
  if (r * 2 <= -count) --q;
  return Money::from_micros(q);
}

// One group of a report statement from its columns: the `n` group values, then the columns
// in the order both report SELECTs list them. `num(i)`/`text(i)` read column i.
template <typename Num, typename Text>
ReportRow group_row(int n, const Num& num, const Text& text) {
  ReportRow row;
  for (int i = 0; i < n; ++i) row.group.push_back(text(i));
  row.requests = num(n);
  row.unpriced_requests = num(n + 1);
  row.input_tokens = num(n + 2);
  row.cached_tokens = num(n + 3);
  row.output_tokens = num(n + 4);
  row.reasoning_tokens = num(n + 5);
  row.cost_input = Money::from_micros(num(n + 6));
  row.cost_cached = Money::from_micros(num(n + 7));
  row.cost_output = Money::from_micros(num(n + 8));
  row.cost_reasoning = Money::from_micros(num(n + 9));
  row.total = Money::from_micros(num(n + 10));
  row.avoided = Money::from_micros(num(n + 11));
  row.avoided_base = Money::from_micros(num(n + 12));
  row.first_us = num(n + 13);
  row.last_us = num(n + 14);
  row.refused_requests = num(n + 15);
  row.shadow_requests = num(n + 16);
  return row;
}

Result<std::vector<ReportRow>> read_groups(Stmt& stmt, int n) {
  std::vector<ReportRow> rows;
  for (;;) {
    auto has = stmt.step();
    if (!has) return has.error();
    if (!*has) break;
    rows.push_back(group_row(
        n, [&](int i) { return stmt.int_at(i); }, [&](int i) { return stmt.text_at(i); }));
  }
  return rows;
}

// Adds a chunk's partial group into the merged one: every column is a SUM (exact, refused on
// overflow as SQLite's SUM refuses it), MIN(started_us) or MAX(ended_us); nothing is an average
// or a distinct count (average() is derived from the sums). False on overflow.
bool merge_group(ReportRow& into, const ReportRow& part) {
  bool overflow = false;
  auto sum = [&overflow](int64_t& a, int64_t b) { overflow |= __builtin_add_overflow(a, b, &a); };
  auto sum_money = [&sum](Money& a, Money b) {
    int64_t m = a.micros();
    sum(m, b.micros());
    a = Money::from_micros(m);
  };
  sum(into.requests, part.requests);
  sum(into.unpriced_requests, part.unpriced_requests);
  sum(into.refused_requests, part.refused_requests);
  sum(into.shadow_requests, part.shadow_requests);
  sum(into.input_tokens, part.input_tokens);
  sum(into.cached_tokens, part.cached_tokens);
  sum(into.output_tokens, part.output_tokens);
  sum(into.reasoning_tokens, part.reasoning_tokens);
  sum_money(into.cost_input, part.cost_input);
  sum_money(into.cost_cached, part.cost_cached);
  sum_money(into.cost_output, part.cost_output);
  sum_money(into.cost_reasoning, part.cost_reasoning);
  sum_money(into.total, part.total);
  sum_money(into.avoided, part.avoided);
  sum_money(into.avoided_base, part.avoided_base);
  into.first_us = std::min(into.first_us, part.first_us);
  into.last_us = std::max(into.last_us, part.last_us);
  return !overflow;
}

}  // namespace

std::string_view report_by_name(ReportBy by) {
  return info(by).name;
}

std::optional<ReportBy> parse_report_by(std::string_view name) {
  for (const auto& i : kBy) {
    if (name == i.name) return i.by;
  }
  return std::nullopt;
}

std::optional<std::vector<ReportBy>> parse_report_by_list(std::string_view names) {
  std::vector<ReportBy> out;
  size_t pos = 0;
  while (pos <= names.size()) {
    size_t comma = names.find(',', pos);
    if (comma == std::string_view::npos) comma = names.size();
    auto by = parse_report_by(names.substr(pos, comma - pos));
    if (!by || std::find(out.begin(), out.end(), *by) != out.end()) return std::nullopt;
    out.push_back(*by);
    pos = comma + 1;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<ReportFormat> parse_report_format(std::string_view name) {
  if (name == "table") return ReportFormat::kTable;
  if (name == "csv") return ReportFormat::kCsv;
  if (name == "json") return ReportFormat::kJson;
  return std::nullopt;
}

Money ReportRow::average() const {
  return rounded_div(total, requests);
}

void ReportRow::add(const ReportRow& o) {
  if (o.requests > 0 || o.first_us != 0) {
    first_us = first_us == 0 ? o.first_us : std::min(first_us, o.first_us);
    last_us = std::max(last_us, o.last_us);
  }
  requests += o.requests;
  unpriced_requests += o.unpriced_requests;
  refused_requests += o.refused_requests;
  shadow_requests += o.shadow_requests;
  input_tokens += o.input_tokens;
  cached_tokens += o.cached_tokens;
  output_tokens += o.output_tokens;
  reasoning_tokens += o.reasoning_tokens;
  cost_input += o.cost_input;
  cost_cached += o.cost_cached;
  cost_output += o.cost_output;
  cost_reasoning += o.cost_reasoning;
  total += o.total;
  avoided += o.avoided;
  avoided_base += o.avoided_base;
}

namespace {

// Whether `sql` finds a row.
Result<bool> finds_row(Db& db, const char* sql) {
  auto stmt = db.prepare(sql);
  if (!stmt) return stmt.error();
  auto found = stmt->step();
  if (!found) return found.error();
  return *found;
}

bool no_filter(const ReportFilter& f) {
  return !f.key_id && !f.team && !f.project && !f.task_id && !f.model && !f.target && !f.rule_id &&
         !f.request_id && !f.from && !f.to;
}

// The smallest source that answers `query` in a current schema (PostgreSQL's, SQLite's 11).
Source current_source(const ReportQuery& query) {
  if (!query.force_raw && query.by == std::vector<ReportBy>{ReportBy::kTask} &&
      no_filter(query.filter)) {
    return Source::kTaskTotals;
  }
  bool raw =
      query.force_raw || query.filter.task_id.has_value() || query.filter.request_id.has_value();
  for (ReportBy by : query.by) raw = raw || info(by).daily_expr == nullptr;
  bool team_ok =
      !raw && !query.force_full_aggregate && !query.filter.key_id && !query.filter.rule_id;
  for (ReportBy by : query.by) team_ok = team_ok && info(by).in_daily_team;
  bool key_ok = !raw && !query.force_full_aggregate && !query.filter.model &&
                !query.filter.target && !query.filter.rule_id;
  for (ReportBy by : query.by) key_ok = key_ok && info(by).in_daily_key;
  return raw       ? Source::kRows
         : team_ok ? Source::kDailyTeam
         : key_ok  ? Source::kDailyKey
                   : Source::kDaily;
}

// The smallest source that answers `query` in this file (older files lack daily_team or the
// `refused` columns, which tell served rows).
Result<Source> choose_source(Db& db, const ReportQuery& query) {
  Source wanted = current_source(query);
  if (wanted == Source::kTaskTotals) {  // schema 11; an older file answers from the rows
    auto found =
        finds_row(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name='daily_untasked'");
    if (!found) return found.error();
    return *found ? wanted : Source::kRows;
  }
  bool raw = wanted == Source::kRows;
  bool team_ok = wanted == Source::kDailyTeam;
  if (wanted == Source::kDailyKey) {  // schema 9; an older file answers from `daily`
    auto found =
        finds_row(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name='daily_key'");
    if (!found) return found.error();
    if (*found) return wanted;
  }
  if (team_ok) {
    auto found =
        finds_row(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name='daily_team'");
    if (!found) return found.error();
    team_ok = *found;
  }
  if (!raw) {
    auto found = finds_row(db, "SELECT 1 FROM pragma_table_info('daily') WHERE name='refused'");
    if (!found) return found.error();
    raw = !*found;
    team_ok = team_ok && !raw;
  }
  return raw ? Source::kRows : team_ok ? Source::kDailyTeam : Source::kDaily;
}

// The report's SELECT up to its WHERE (filters are appended): the group expressions, then the
// columns in read_groups' order.
std::string report_select(const ReportQuery& query, Source source, bool postgres = false) {
  const bool raw = source == Source::kRows;
  // SUM(condition) as a count, in both dialects.
  auto count = [](const std::string& cond) {
    return "SUM(CASE WHEN " + cond + " THEN 1 ELSE 0 END)";
  };
  const std::string shadow = shadow_row_sql(postgres);
  std::string select;
  for (ReportBy by : query.by) {
    const ByInfo& b = info(by);
    select += std::string(raw ? b.raw_expr : b.daily_expr) + ",";
  }
  if (raw) {
    // Served = a request row neither refused nor a shadow copy (see ledger/store.cpp).
    const std::string served = "kind='request' AND status<>'refused' AND NOT " + shadow;
    return "SELECT " + select + count(served) + ", " + count(served + " AND pricing='unpriced'") +
           ", "
           "SUM(input_tokens), SUM(cached_tokens), SUM(output_tokens), SUM(reasoning_tokens), "
           "SUM(COALESCE(cost_input,0)), SUM(COALESCE(cost_cached,0)), "
           "SUM(COALESCE(cost_output,0)), SUM(COALESCE(cost_reasoning,0)), "
           "SUM(COALESCE(cost_total,0)), SUM(COALESCE(avoided_cost,0)), "
           "SUM(CASE WHEN avoided_cost IS NOT NULL THEN COALESCE(cost_total,0) ELSE 0 END), "
           "MIN(started_us), MAX(ended_us), " +
           count("kind='request' AND status='refused'") + ", " +
           count("kind='request' AND status<>'refused' AND " + shadow) + " FROM requests WHERE 1=1";
  }
  return "SELECT " + select +
         "SUM(requests)-SUM(refused)-SUM(shadows), SUM(unpriced_served), SUM(input_tokens), "
         "SUM(cached_tokens), "
         "SUM(output_tokens), SUM(reasoning_tokens), SUM(cost_input), SUM(cost_cached), "
         "SUM(cost_output), SUM(cost_reasoning), SUM(cost_total), SUM(avoided_total), "
         "SUM(avoided_base), MIN(first_us), MAX(last_us), SUM(refused), SUM(shadows) FROM " +
         (source == Source::kDailyTeam  ? "daily_team"
          : source == Source::kDailyKey ? "daily_key"
                                        : "daily") +
         " WHERE 1=1";
}

// The report by task from the rollups, whole (no filter): a group per task_totals row that has
// ledger rows (a task marked before any has none), and the rows without a task id (the group
// "", one group of all its days: no row when it has none) from daily_untasked; ordered bytewise
// as the rows' report is. Columns in read_groups' order.
std::string task_rollup_sql(bool postgres) {
  return std::string(
             "SELECT * FROM (SELECT task_id, requests-refused-shadows, unpriced_served, "
             "input_tokens, cached_tokens, output_tokens, reasoning_tokens, cost_input, "
             "cost_cached, cost_output, cost_reasoning, cost, avoided_total, avoided_base, "
             "first_us, last_us, refused, shadows FROM task_totals WHERE first_us IS NOT NULL "
             "UNION ALL SELECT substr(day,1,0), SUM(requests)-SUM(refused)-SUM(shadows), "
             "SUM(unpriced_served), SUM(input_tokens), SUM(cached_tokens), SUM(output_tokens), "
             "SUM(reasoning_tokens), SUM(cost_input), SUM(cost_cached), SUM(cost_output), "
             "SUM(cost_reasoning), SUM(cost_total), SUM(avoided_total), SUM(avoided_base), "
             "MIN(first_us), MAX(last_us), SUM(refused), SUM(shadows) FROM daily_untasked "
             "GROUP BY substr(day,1,0)) AS g ORDER BY task_id") +
         (postgres ? " COLLATE \"C\"" : "");
}

void bind_all(Stmt& stmt, const std::vector<Value>& params) {
  for (size_t i = 0; i < params.size(); ++i) stmt.bind_value(static_cast<int>(i + 1), params[i]);
}

// The same aggregate over consecutive seq ranges, merged by group (std::map orders the groups
// bytewise, as SQLite's BINARY collation does; the row columns are NOT NULL). One read
// transaction: every chunk sees the same snapshot. A task or request-id filter still finds its
// rows by index in each range.
Result<std::vector<ReportRow>> read_chunked(Db& db, const std::string& sql,
                                            const std::string& order,
                                            const std::vector<Value>& params, int n,
                                            int64_t chunk_rows, const ReportProgress& progress) {
  auto begin = db.exec("BEGIN");
  if (!begin) return begin.error();
  auto bounds = db.prepare(  // apart: each is then one b-tree probe, not a scan
      "SELECT (SELECT MIN(seq) FROM requests), (SELECT MAX(seq) FROM requests)");
  if (!bounds) return bounds.error();
  auto has = bounds->step();
  if (!has) return has.error();
  std::vector<ReportRow> rows;
  if (!*has || bounds->is_null(0)) return rows;
  std::map<std::vector<std::string>, ReportRow> merged;
  const int64_t lo = bounds->int_at(0);
  const int64_t hi = bounds->int_at(1);
  const int64_t total = hi - lo + 1;
  const int64_t size = chunk_rows > 0
                           ? chunk_rows
                           : std::max<int64_t>(1, (total + kReportChunks - 1) / kReportChunks);
  auto stmt = db.prepare(sql + " AND seq BETWEEN ? AND ?" + order);
  if (!stmt) return stmt.error();
  for (int64_t from = lo;;) {
    const int64_t to = hi - from < size ? hi : from + size - 1;
    stmt->reset();  // clears the bindings too
    bind_all(*stmt, params);
    stmt->bind(static_cast<int>(params.size() + 1), from);
    stmt->bind(static_cast<int>(params.size() + 2), to);
    auto part = read_groups(*stmt, n);
    if (!part) return part.error();
    for (auto& row : *part) {
      auto [it, fresh] = merged.try_emplace(row.group, row);
      if (!fresh && !merge_group(it->second, row)) {
        return Error::make(ErrorCode::kUnavailable, "report: integer overflow in a sum");
      }
    }
    if (progress) progress(to - lo + 1, total);
    if (to == hi) break;
    from = to + 1;
  }
  for (auto& [key, row] : merged) rows.push_back(std::move(row));
  return rows;
}

// The same report on PostgreSQL: the same SELECTs (its schema has daily_team and the served
// counts from the start), groups ordered bytewise (COLLATE "C") as in SQLite. A sum beyond
// int64 (PostgreSQL sums BIGINT into NUMERIC) is an error, never a wrapped figure.
Result<Report> run_pg_report(const std::string& url, const ReportQuery& query) {
  auto conn = PgConn::connect(url);
  if (!conn) return conn.error();
  Source source = current_source(query);
  if (source == Source::kTaskTotals) {  // schema 7; an older database answers from the rows
    auto version = conn->run("SELECT value FROM meta WHERE key='schema_version'");
    if (!version) return version.error();
    if (version->rows() == 0 || std::atoi(version->text(0, 0).c_str()) < 7) source = Source::kRows;
  }
  bool raw = source == Source::kRows;
  Report report;
  report.by = query.by;
  report.from_aggregate = !raw;
  auto cur = conn->run("SELECT value FROM meta WHERE key='currency'");
  if (!cur) return cur.error();
  report.currency = cur->rows() > 0 ? cur->text(0, 0) : "";
  const bool rollup = source == Source::kTaskTotals;
  std::string sql = rollup ? task_rollup_sql(true) : report_select(query, source, true);
  std::vector<Value> params;
  if (!rollup) add_filters(query.filter, raw, sql, params);
  const int n = static_cast<int>(query.by.size());
  std::string group;
  std::string order;
  for (int i = 0; i < n; ++i) {
    group += (i == 0 ? "" : ",") + std::to_string(i + 1);
    const ByInfo& b = info(query.by[static_cast<size_t>(i)]);
    order += std::string(i == 0 ? "" : ",") + "(" + (raw || rollup ? b.raw_expr : b.daily_expr) +
             ") COLLATE \"C\"";
  }
  std::vector<PgParam> pg_params = to_pg_params(params);
  auto rows = conn->run(
      rollup ? sql
             : detail::numbered_placeholders(sql + " GROUP BY " + group + " ORDER BY " + order),
      pg_params);
  if (!rows) return rows.error();
  bool overflow = false;
  report.rows.reserve(static_cast<size_t>(rows->rows()));
  for (int r = 0; r < rows->rows(); ++r) {
    report.rows.push_back(group_row(
        n,
        [&](int i) {
          std::string text = rows->text(r, i);
          int64_t value = 0;
          auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
          overflow |= ec != std::errc() || end != text.data() + text.size();
          return value;
        },
        [&](int i) { return rows->text(r, i); }));
  }
  if (overflow) return Error::make(ErrorCode::kUnavailable, "report: integer overflow in a sum");
  for (const auto& row : report.rows) report.totals.add(row);
  return report;
}

Result<Report> run_report_groups(const std::string& db_path, const ReportQuery& query,
                                 const ReportProgress& progress);

// The savings by lever's SELECT over the rows (both dialects); `col` names a lever column
// ("NULL" in a file from before they existed).
template <typename Col>
std::string savings_select(Col&& col) {
  auto count = [](const std::string& cond) {
    return "SUM(CASE WHEN " + cond + " THEN 1 ELSE 0 END)";
  };
  const std::string capped = col("reasoning_budget") + " IS NOT NULL AND " +
                             col("reasoning_budget") + " NOT LIKE 'dropped%'";
  return "SELECT " + count("avoided_cost IS NOT NULL") +
         ", COALESCE(SUM(avoided_cost),0) - COALESCE(SUM(CASE WHEN avoided_cost IS NOT NULL THEN "
         "COALESCE(cost_total,0) ELSE 0 END),0), " +
         count(col("cache") + "='hit'") + ", COALESCE(SUM(" + col("cache_tokens") +
         "),0), COALESCE(SUM(" + col("cache_avoided") + "),0), " +
         count(col("trimmed_tokens") + " > 0") + ", COALESCE(SUM(" + col("trimmed_tokens") +
         "),0), COALESCE(SUM(" + col("trim_avoided") + "),0), " + count(capped) +
         ", COALESCE(SUM(CASE WHEN " + capped +
         " THEN reasoning_tokens ELSE 0 END),0) FROM requests WHERE kind='request'";
}

template <typename Num>
LeverSavings savings_row(const Num& num) {
  LeverSavings s;
  s.local_requests = num(0);
  s.local_saved = Money::from_micros(num(1));
  s.cache_hits = num(2);
  s.cache_tokens = num(3);
  s.cache_avoided = Money::from_micros(num(4));
  s.trimmed_requests = num(5);
  s.trimmed_tokens = num(6);
  s.trim_avoided = Money::from_micros(num(7));
  s.reasoning_capped = num(8);
  s.reasoning_tokens = num(9);
  return s;
}

Result<LeverSavings> sqlite_savings(Db& db, const ReportFilter& filter,
                                    const std::string& request_id) {
  auto version = db.prepare("PRAGMA user_version");
  if (!version) return version.error();
  auto got = version->step();
  if (!got) return got.error();
  const bool has_levers = *got && version->int_at(0) >= 8;
  std::string sql = savings_select(
      [&](const char* c) { return has_levers ? std::string(c) : std::string("NULL"); });
  std::vector<Value> params;
  add_filters(filter, true, sql, params, "", request_id);
  auto stmt = db.prepare(sql);
  if (!stmt) return stmt.error();
  bind_all(*stmt, params);
  auto row = stmt->step();
  if (!row) return row.error();
  return savings_row([&](int i) { return stmt->is_null(i) ? 0 : stmt->int_at(i); });
}

Result<LeverSavings> pg_savings(PgConn& conn, const ReportFilter& filter) {
  std::string sql = savings_select([](const char* c) { return std::string(c); });
  std::vector<Value> params;
  add_filters(filter, true, sql, params);
  std::vector<PgParam> pg_params = to_pg_params(params);
  auto rows = conn.run(detail::numbered_placeholders(sql), pg_params);
  if (!rows) return rows.error();
  bool overflow = false;
  LeverSavings s = savings_row([&](int i) {
    std::string text = rows->text(0, i);
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    overflow |= ec != std::errc() || end != text.data() + text.size();
    return value;
  });
  if (overflow) return Error::make(ErrorCode::kUnavailable, "report: integer overflow in a sum");
  return s;
}

}  // namespace

Result<Report> run_report(const std::string& db_path, const ReportQuery& query,
                          const ReportProgress& progress) {
  auto report = run_report_groups(db_path, query, progress);
  if (!report || !query.levers) return report;
  if (is_pg_url(db_path)) {
    auto conn = PgConn::connect(db_path);
    if (!conn) return conn.error();
    auto levers = pg_savings(*conn, query.filter);
    if (!levers) return levers.error();
    report->levers = *levers;
    return report;
  }
  auto db = ledger_db_open(db_path, true);
  if (!db) return db.error();
  std::string request_id = kRequestIdColumn;
  if (query.filter.request_id) {
    auto expr = request_id_expr(*db);
    if (!expr) return expr.error();
    request_id = *expr;
  }
  auto levers = sqlite_savings(*db, query.filter, request_id);
  if (!levers) return levers.error();
  report->levers = *levers;
  return report;
}

namespace {

Result<Report> run_report_groups(const std::string& db_path, const ReportQuery& query,
                                 const ReportProgress& progress) {
  if (query.by.empty()) {
    return Error::make(ErrorCode::kInvalidRequest, "report: at least one --by dimension", "by");
  }
  if (is_pg_url(db_path)) return run_pg_report(db_path, query);
  auto db = ledger_db_open(db_path, true);
  if (!db) return db.error();
  auto source = choose_source(*db, query);
  if (!source) return source.error();
  const bool raw = *source == Source::kRows;
  Report report;
  report.by = query.by;
  report.from_aggregate = !raw;
  {
    auto cur = db->prepare("SELECT value FROM meta WHERE key='currency'");
    if (!cur) return cur.error();
    auto found = cur->step();
    if (!found) return found.error();
    report.currency = *found ? cur->text_at(0) : "";
  }
  const bool rollup = *source == Source::kTaskTotals;
  std::string sql = rollup ? task_rollup_sql(false) : report_select(query, *source);
  std::vector<Value> params;
  std::string request_id = kRequestIdColumn;
  if (query.filter.request_id) {
    auto expr = request_id_expr(*db);
    if (!expr) return expr.error();
    request_id = *expr;
  }
  if (!rollup) add_filters(query.filter, raw, sql, params, "", request_id);
  const int n = static_cast<int>(query.by.size());
  std::string group;
  for (int i = 0; i < n; ++i) group += (i == 0 ? "" : ",") + std::to_string(i + 1);
  const std::string order = " GROUP BY " + group + " ORDER BY " + group;
  // Reading the rows in seq ranges (for progress).
  if (raw && (query.chunk_rows > 0 || progress)) {
    auto rows = read_chunked(*db, sql, order, params, n, query.chunk_rows, progress);
    if (!rows) return rows.error();
    report.rows = std::move(*rows);
  } else {
    auto stmt = db->prepare(rollup ? sql : sql + order);
    if (!stmt) return stmt.error();
    bind_all(*stmt, params);
    auto rows = read_groups(*stmt, n);
    if (!rows) return rows.error();
    report.rows = std::move(*rows);
  }
  for (const auto& row : report.rows) report.totals.add(row);
  return report;
}

}  // namespace

std::string csv_field(std::string_view text, bool is_text) {
  std::string value(text);
  if (is_text && !value.empty() &&
      (value[0] == '=' || value[0] == '+' || value[0] == '-' || value[0] == '@' ||
       value[0] == '\t' || value[0] == '\r')) {
    value.insert(value.begin(), '\'');
  }
  if (value.find_first_of(",\"\r\n") == std::string::npos) return value;
  std::string out = "\"";
  for (char c : value) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

namespace {

struct Column {
  std::string name;
  std::string (*get)(const ReportRow&);
  bool savings_only;
};

std::string time_or_empty(int64_t us) {
  return us == 0 ? "" : format_utc_micros(us);
}

const std::vector<Column>& value_columns() {
  static const std::vector<Column> kColumns = {
      {"requests", [](const ReportRow& r) { return std::to_string(r.requests); }, false},
      {"unpriced_requests", [](const ReportRow& r) { return std::to_string(r.unpriced_requests); },
       false},
      {"refused_requests", [](const ReportRow& r) { return std::to_string(r.refused_requests); },
       false},
      {"shadow_requests", [](const ReportRow& r) { return std::to_string(r.shadow_requests); },
       false},
      {"input_tokens", [](const ReportRow& r) { return std::to_string(r.input_tokens); }, false},
      {"cached_input_tokens", [](const ReportRow& r) { return std::to_string(r.cached_tokens); },
       false},
      {"output_tokens", [](const ReportRow& r) { return std::to_string(r.output_tokens); }, false},
      {"reasoning_tokens", [](const ReportRow& r) { return std::to_string(r.reasoning_tokens); },
       false},
      {"cost_input", [](const ReportRow& r) { return r.cost_input.to_string(); }, false},
      {"cost_cached_input", [](const ReportRow& r) { return r.cost_cached.to_string(); }, false},
      {"cost_output", [](const ReportRow& r) { return r.cost_output.to_string(); }, false},
      {"cost_reasoning", [](const ReportRow& r) { return r.cost_reasoning.to_string(); }, false},
      {"cost_total", [](const ReportRow& r) { return r.total.to_string(); }, false},
      {"avg_per_request", [](const ReportRow& r) { return r.average().to_string(); }, false},
      {"first_request", [](const ReportRow& r) { return time_or_empty(r.first_us); }, false},
      {"last_request", [](const ReportRow& r) { return time_or_empty(r.last_us); }, false},
      {"actual_compared", [](const ReportRow& r) { return r.avoided_base.to_string(); }, true},
      {"avoided_cost", [](const ReportRow& r) { return r.avoided.to_string(); }, true},
      {"saved", [](const ReportRow& r) { return r.saved().to_string(); }, true},
  };
  return kColumns;
}

}  // namespace

namespace {

nlohmann::ordered_json row_json(const Report& report, const ReportRow& r, bool with_group,
                                bool savings) {
  nlohmann::ordered_json j;
  if (with_group) {
    for (size_t i = 0; i < report.by.size(); ++i) {
      j[std::string(report_by_name(report.by[i]))] = r.group[i];
    }
  }
  j["requests"] = r.requests;
  j["unpriced_requests"] = r.unpriced_requests;
  j["refused_requests"] = r.refused_requests;
  j["shadow_requests"] = r.shadow_requests;
  j["tokens"] = {{"input", r.input_tokens},
                 {"cached_input", r.cached_tokens},
                 {"output", r.output_tokens},
                 {"reasoning", r.reasoning_tokens}};
  j["cost"] = {{"input", r.cost_input.to_string()},
               {"cached_input", r.cost_cached.to_string()},
               {"output", r.cost_output.to_string()},
               {"reasoning", r.cost_reasoning.to_string()},
               {"total", r.total.to_string()}};
  j["avg_per_request"] = r.average().to_string();
  j["first_request"] = time_or_empty(r.first_us);
  j["last_request"] = time_or_empty(r.last_us);
  if (savings) {
    j["savings"] = {{"actual_compared", r.avoided_base.to_string()},
                    {"avoided_cost", r.avoided.to_string()},
                    {"saved", r.saved().to_string()}};
  }
  return j;
}

std::string report_json(const Report& report, bool savings) {
  nlohmann::ordered_json out;
  out["currency"] = report.currency;
  nlohmann::ordered_json by = nlohmann::ordered_json::array();
  for (ReportBy b : report.by) by.push_back(std::string(report_by_name(b)));
  out["by"] = by;
  out["groups"] = nlohmann::ordered_json::array();
  for (const auto& r : report.rows) out["groups"].push_back(row_json(report, r, true, savings));
  out["totals"] = row_json(report, report.totals, false, savings);
  if (savings && report.levers) {
    const LeverSavings& l = *report.levers;
    out["savings_by_lever"] = {
        {"local", {{"requests", l.local_requests}, {"avoided_cost", l.local_saved.to_string()}}},
        {"cache",
         {{"hits", l.cache_hits},
          {"tokens", l.cache_tokens},
          {"avoided_cost", l.cache_avoided.to_string()}}},
        {"trim",
         {{"requests", l.trimmed_requests},
          {"tokens", l.trimmed_tokens},
          {"avoided_cost", l.trim_avoided.to_string()}}},
        {"reasoning", {{"capped_requests", l.reasoning_capped}, {"tokens", l.reasoning_tokens}}},
        {"total_avoided", l.total().to_string()}};
  }
  // Rows written by an older ferry can hold bytes that are not UTF-8 (a task header stored
  // unchecked): they are shown as U+FFFD rather than failing the report.
  return out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

// The cells of a table or CSV report: the header, a line per group, the totals.
std::vector<std::vector<std::string>> report_cells(const Report& report, bool savings) {
  std::vector<const Column*> columns;
  for (const auto& c : value_columns()) {
    if (!c.savings_only || savings) columns.push_back(&c);
  }
  std::vector<std::vector<std::string>> cells;
  cells.reserve(report.rows.size() + 2);
  std::vector<std::string> header;
  for (ReportBy b : report.by) header.emplace_back(report_by_name(b));
  for (const Column* c : columns) header.push_back(c->name);
  cells.push_back(header);
  auto add_row = [&](const ReportRow& r, bool is_total) {
    std::vector<std::string> line;
    line.reserve(report.by.size() + columns.size());
    for (size_t i = 0; i < report.by.size(); ++i) {
      line.push_back(is_total ? (i == 0 ? "TOTAL" : "") : r.group[i]);
    }
    for (const Column* c : columns) line.push_back(c->get(r));
    cells.push_back(std::move(line));
  };
  for (const auto& r : report.rows) add_row(r, false);
  add_row(report.totals, true);
  return cells;
}

// Aligned columns (group values left, figures right), rules under the header and above the
// totals.
std::string table_text(const std::vector<std::vector<std::string>>& cells, size_t dims) {
  std::vector<size_t> widths(cells.front().size(), 0);
  for (const auto& line : cells) {
    for (size_t i = 0; i < line.size(); ++i) widths[i] = std::max(widths[i], line[i].size());
  }
  size_t line_width = 0;
  for (size_t w : widths) line_width += w + 2;
  std::string out;
  out.reserve((cells.size() + 2) * (line_width + 1));  // one allocation for a report by task
  for (size_t li = 0; li < cells.size(); ++li) {
    const auto& line = cells[li];
    for (size_t i = 0; i < line.size(); ++i) {
      const size_t pad = widths[i] - line[i].size();
      if (i != 0) out.append(2, ' ');
      if (i >= dims) out.append(pad, ' ');
      out += line[i];
      if (i < dims) out.append(pad, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
    if (li == 0 || li + 2 == cells.size()) {
      size_t total = 0;
      for (size_t w : widths) total += w + 2;
      out += std::string(total - 2, '-') + "\n";
    }
  }
  return out;
}

}  // namespace

std::string format_report(const Report& report, ReportFormat format, bool savings) {
  if (format == ReportFormat::kJson) return report_json(report, savings);
  const std::vector<std::vector<std::string>> cells = report_cells(report, savings);
  const size_t dims = report.by.size();
  if (format == ReportFormat::kCsv) {
    std::string out;
    for (const auto& line : cells) {
      for (size_t i = 0; i < line.size(); ++i) {
        out += (i == 0 ? "" : ",") + csv_field(line[i], i < dims);
      }
      out += "\n";
    }
    return out;
  }
  std::string out = table_text(cells, dims) + "currency: " + report.currency + "\n";
  if (savings && report.levers) {
    const LeverSavings& l = *report.levers;
    out += "\nsavings by lever:\n";
    out += table_text(
        {{"lever", "requests", "tokens", "avoided_cost"},
         {"local", std::to_string(l.local_requests), "", l.local_saved.to_string()},
         {"cache", std::to_string(l.cache_hits), std::to_string(l.cache_tokens),
          l.cache_avoided.to_string()},
         {"trim", std::to_string(l.trimmed_requests), std::to_string(l.trimmed_tokens),
          l.trim_avoided.to_string()},
         {"reasoning", std::to_string(l.reasoning_capped), std::to_string(l.reasoning_tokens), ""},
         {"total", "", "", l.total().to_string()}},
        1);
  }
  return out;
}

namespace {

// CSV lines after a header, handed to `sink` in chunks of about `chunk_bytes`; money columns as
// exact decimals. One writer for both stores: each hands it a row's cells as Values.
class CsvChunks {
 public:
  CsvChunks(const std::vector<std::string>& columns,
            const std::function<bool(std::string_view chunk)>& sink, size_t chunk_bytes)
      : columns_(columns), sink_(sink), chunk_bytes_(chunk_bytes) {
    buffer_.reserve(chunk_bytes + 4096);
    for (size_t i = 0; i < columns.size(); ++i) buffer_ += (i == 0 ? "" : ",") + columns[i];
    buffer_ += "\n";
  }

  // Appends one line, cell i from `cell(i)`; false once the sink asked to stop.
  template <typename Cell>
  bool add(const Cell& cell) {
    static const std::set<std::string> kMoney = {"cost_input",     "cost_cached", "cost_output",
                                                 "cost_reasoning", "cost_total",  "avoided_cost"};
    for (size_t i = 0; i < columns_.size(); ++i) {
      if (i != 0) buffer_ += ',';
      Value v = cell(static_cast<int>(i));
      if (const auto* n = std::get_if<int64_t>(&v)) {
        buffer_ +=
            kMoney.count(columns_[i]) ? Money::from_micros(*n).to_string() : std::to_string(*n);
      } else if (const auto* t = std::get_if<std::string>(&v)) {
        buffer_ += csv_field(*t, true);
      }  // NULL: an empty cell
    }
    buffer_ += '\n';
    if (buffer_.size() < chunk_bytes_) return true;
    bool more = sink_(buffer_);
    buffer_.clear();
    return more;
  }

  void finish() {
    if (!buffer_.empty()) sink_(buffer_);
    buffer_.clear();
  }

 private:
  const std::vector<std::string>& columns_;
  const std::function<bool(std::string_view chunk)>& sink_;
  size_t chunk_bytes_;
  std::string buffer_;
};

// Streams the rows of `stmt` (its columns named by `columns`) as CSV after a header line.
Status stream_csv(Stmt& stmt, const std::vector<std::string>& columns,
                  const std::function<bool(std::string_view chunk)>& sink, size_t chunk_bytes) {
  CsvChunks out(columns, sink, chunk_bytes);
  for (;;) {
    auto has = stmt.step();
    if (!has) return has.error();
    if (!*has) break;
    if (!out.add([&](int c) { return stmt.is_null(c) ? Value{} : stmt.value_at(c); })) return {};
  }
  out.finish();
  return {};
}

// The same from a PostgreSQL ledger: through a cursor (a batch of rows in memory at a time) in
// one read-only transaction, so the export is one snapshot however long it runs.
Status stream_pg_csv(const std::string& url, const std::string& sql,
                     const std::vector<Value>& params, const std::vector<std::string>& columns,
                     const std::function<bool(std::string_view chunk)>& sink, size_t chunk_bytes) {
  auto conn = PgConn::connect(url);
  if (!conn) return conn.error();
  if (Status st = conn->exec("BEGIN READ ONLY"); !st) return st;
  auto declared =
      conn->run("DECLARE export_rows NO SCROLL CURSOR FOR " + detail::numbered_placeholders(sql),
                to_pg_params(params));
  if (!declared) return declared.error();
  CsvChunks out(columns, sink, chunk_bytes);
  for (;;) {
    auto rows = conn->run("FETCH 10000 FROM export_rows");
    if (!rows) return rows.error();
    if (rows->rows() == 0) break;
    for (int r = 0; r < rows->rows(); ++r) {
      if (!out.add([&](int c) { return rows->value(r, c); })) return conn->exec("COMMIT");
    }
  }
  out.finish();
  return conn->exec("COMMIT");
}

// The request export's statement (without ORDER BY) and its columns; `request_id` as
// request_id_expr gives it (PostgreSQL's schema always has the column).
std::string export_select(const ReportFilter& filter, const std::string& request_id,
                          std::vector<std::string>& columns, std::vector<Value>& params) {
  columns = {"seq"};
  for (const auto& c : request_columns()) columns.push_back(c);
  columns.push_back("hash");
  columns.push_back(kRequestIdColumn);
  std::string sql = "SELECT ";
  for (size_t i = 0; i + 1 < columns.size(); ++i) sql += (i == 0 ? "" : ",") + columns[i];
  sql += "," + request_id + " FROM requests WHERE 1=1";
  add_filters(filter, true, sql, params, "", request_id);
  return sql;
}

// The attempts export's statement: the filter reads the request's columns (qualified:
// attempts has a target too).
std::string export_attempts_select(const ReportFilter& filter, const std::string& request_id,
                                   std::vector<std::string>& columns, std::vector<Value>& params) {
  columns = {"request_seq"};
  std::string sql = "SELECT requests.seq";
  for (const auto& c : attempt_columns()) {
    columns.push_back(c);
    sql += ",a." + c;
  }
  sql += " FROM attempts AS a JOIN requests ON requests.id = a.request_id WHERE 1=1";
  add_filters(filter, true, sql, params, "requests", request_id);
  return sql;
}

// Runs `select` (export_select or export_attempts_select) ordered by `order` on either store.
template <typename Select>
Status run_export(const std::string& db_path, const ReportFilter& filter, const Select& select,
                  const char* order, const std::function<bool(std::string_view chunk)>& sink,
                  size_t chunk_bytes) {
  std::vector<std::string> columns;
  std::vector<Value> params;
  if (is_pg_url(db_path)) {
    std::string sql = select(filter, kRequestIdColumn, columns, params) + order;
    return stream_pg_csv(db_path, sql, params, columns, sink, chunk_bytes);
  }
  auto db = ledger_db_open(db_path, true);
  if (!db) return db.error();
  auto request_id = request_id_expr(*db);
  if (!request_id) return request_id.error();
  std::string sql = select(filter, *request_id, columns, params) + order;
  auto stmt = db->prepare(sql);
  if (!stmt) return stmt.error();
  bind_all(*stmt, params);
  return stream_csv(*stmt, columns, sink, chunk_bytes);
}

}  // namespace

Status export_csv(const std::string& db_path, const ReportFilter& filter,
                  const std::function<bool(std::string_view chunk)>& sink, size_t chunk_bytes) {
  return run_export(db_path, filter, export_select, " ORDER BY seq", sink, chunk_bytes);
}

Status export_attempts_csv(const std::string& db_path, const ReportFilter& filter,
                           const std::function<bool(std::string_view chunk)>& sink,
                           size_t chunk_bytes) {
  return run_export(db_path, filter, export_attempts_select, " ORDER BY requests.seq, a.attempt",
                    sink, chunk_bytes);
}

Result<int64_t> count_export_rows(const std::string& db_path, const ReportFilter& filter,
                                  bool attempts) {
  std::string sql = attempts ? "SELECT COUNT(*) FROM attempts AS a JOIN requests ON "
                               "requests.id = a.request_id WHERE 1=1"
                             : "SELECT COUNT(*) FROM requests WHERE 1=1";
  std::vector<Value> params;
  if (is_pg_url(db_path)) {
    add_filters(filter, true, sql, params, "requests");
    auto conn = PgConn::connect(db_path);
    if (!conn) return conn.error();
    auto rows = conn->run(detail::numbered_placeholders(sql), to_pg_params(params));
    if (!rows) return rows.error();
    return rows->rows() > 0 ? rows->integer(0, 0) : 0;
  }
  auto db = ledger_db_open(db_path, true);
  if (!db) return db.error();
  auto request_id = request_id_expr(*db);
  if (!request_id) return request_id.error();
  add_filters(filter, true, sql, params, "requests", *request_id);
  auto stmt = db->prepare(sql);
  if (!stmt) return stmt.error();
  bind_all(*stmt, params);
  auto has = stmt->step();
  if (!has) return has.error();
  return *has ? stmt->int_at(0) : 0;
}

}  // namespace ferry::ledger
