#include "ledger/tasks.h"

#include <algorithm>
#include <tuple>

#include <nlohmann/json.hpp>

#include "ledger/any_db.h"
#include "ledger/pg_db.h"
#include "ledger/pg_store.h"
#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
#include "ledger/task_groups.h"
#include "ledger/time_util.h"
#include "ledger/verify.h"

namespace ferry::ledger {

namespace {

constexpr const char* kStatusNames[] = {"open", "completed", "failed", "abandoned"};

std::string labels_text(const std::map<std::string, std::string>& labels) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : labels) j[k] = v;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::map<std::string, std::string> labels_from(const std::string& text) {
  return detail::task_labels_from(text);
}

TaskStatus status_of(const std::string& text) {
  return parse_task_status(text).value_or(TaskStatus::kOpen);
}

MarkOutcome compare(const TaskMark& mark, TaskMark stored) {
  MarkOutcome o;
  o.result = stored.status == mark.status && stored.labels == mark.labels ? MarkResult::kSame
                                                                          : MarkResult::kConflict;
  o.stored = std::move(stored);
  return o;
}

Result<MarkOutcome> mark_sqlite(const std::string& path, const TaskMark& mark) {
  auto db = ledger_db_open(path, false);
  if (!db) return db.error();
  // One write transaction: the check and the insert see the same table.
  if (auto st = db->exec("BEGIN IMMEDIATE"); !st) return st.error();
  auto get = db->prepare("SELECT status, labels, key_id, marked_us FROM tasks WHERE task_id=?");
  if (!get) return get.error();
  get->bind(1, mark.task_id);
  auto found = get->step();
  if (!found) return found.error();
  if (*found) {
    TaskMark stored{mark.task_id, status_of(get->text_at(0)), labels_from(get->text_at(1)),
                    get->text_at(2), get->int_at(3)};
    get->reset();
    (void)db->exec("COMMIT");
    return compare(mark, std::move(stored));
  }
  get->reset();
  auto put = db->prepare(
      "INSERT INTO tasks(task_id,status,labels,key_id,marked_us,day) VALUES(?,?,?,?,?,?)");
  if (!put) return put.error();
  put->bind(1, mark.task_id)
      .bind(2, task_status_name(mark.status))
      .bind(3, labels_text(mark.labels))
      .bind(4, mark.key_id)
      .bind(5, mark.marked_us)
      .bind(6, utc_day(mark.marked_us));
  if (auto st = put->run(); !st) {
    (void)db->exec("ROLLBACK");
    return st.error();
  }
  // The task's sums move from open to its outcome and labels (before the status changes).
  const detail::RunSql on_db = [&db](const std::string& sql, const std::vector<Value>& params) {
    return query_rows(*db, sql, params);
  };
  auto groups =
      detail::mark_group_deltas(on_db, mark.task_id, std::string(task_status_name(mark.status)),
                                utc_day(mark.marked_us), mark.labels);
  if (groups) {
    if (Status st = detail::upsert_task_groups(on_db, *groups); !st) groups = st.error();
  }
  if (!groups) {
    (void)db->exec("ROLLBACK");
    return groups.error();
  }
  // The rollup's copy (a task without rows yet gets it when its first row is rolled up).
  auto rollup = db->prepare("UPDATE task_totals SET status=? WHERE task_id=?");
  if (!rollup) return rollup.error();
  rollup->bind(1, task_status_name(mark.status)).bind(2, mark.task_id);
  if (auto st = rollup->run(); !st) {
    (void)db->exec("ROLLBACK");
    return st.error();
  }
  if (auto st = db->exec("COMMIT"); !st) return st.error();
  return MarkOutcome{MarkResult::kCreated, mark};
}

Result<MarkOutcome> mark_pg(const std::string& url, const TaskMark& mark) {
  auto conn = PgConn::connect(url);
  if (!conn) return conn.error();
  // ON CONFLICT DO NOTHING, then read what is there: concurrent marks on many instances agree
  // on the first one committed.
  // In one transaction with the rollup's copy of the status: an upsert, so that it waits for
  // a writer's uncommitted first row of the task (whose status step ran before this commit).
  if (Status st = conn->exec("BEGIN"); !st) return st.error();
  auto put = conn->run(
      "INSERT INTO tasks(task_id,status,labels,key_id,marked_us,day) VALUES($1,$2,$3,$4,$5,$6) "
      "ON CONFLICT (task_id) DO NOTHING",
      {mark.task_id, std::string(task_status_name(mark.status)), labels_text(mark.labels),
       mark.key_id, pg_int(mark.marked_us), utc_day(mark.marked_us)});
  if (!put) return put.error();
  if (put->affected() == 1) {
    auto rollup = conn->run(
        "INSERT INTO task_totals(task_id,requests,tokens,cost,status) VALUES($1,0,0,0,$2) "
        "ON CONFLICT (task_id) DO UPDATE SET status=excluded.status",
        {mark.task_id, std::string(task_status_name(mark.status))});
    if (!rollup) return rollup.error();
    // That row is locked now (a writer's batch of the task waits, or was waited for): the
    // task's sums move from open to its outcome and labels.
    const detail::RunSql on_conn = [&conn](const std::string& sql,
                                           const std::vector<Value>& params) {
      return query_rows(*conn, sql, params);
    };
    auto groups =
        detail::mark_group_deltas(on_conn, mark.task_id, std::string(task_status_name(mark.status)),
                                  utc_day(mark.marked_us), mark.labels);
    if (!groups) return groups.error();
    if (Status st = detail::upsert_task_groups(on_conn, *groups); !st) return st.error();
    if (Status st = conn->exec("COMMIT"); !st) return st.error();
    return MarkOutcome{MarkResult::kCreated, mark};
  }
  if (Status st = conn->exec("COMMIT"); !st) return st.error();
  auto got = conn->run("SELECT status, labels, key_id, marked_us FROM tasks WHERE task_id=$1",
                       {mark.task_id});
  if (!got) return got.error();
  if (got->rows() == 0) return Error::make(ErrorCode::kInternal, "task mark vanished");
  return compare(mark, TaskMark{mark.task_id, status_of(got->text(0, 0)),
                                labels_from(got->text(0, 1)), got->text(0, 2), got->integer(0, 3)});
}

int64_t num(const Value& v) {
  return value_int(v);
}

std::string text(const Value& v) {
  return value_text(v);
}

// "AND column = ?" for each filter of the rows (key, model, target, rule, task, request).
void add_row_filters(const ReportFilter& f, std::string& sql, std::vector<Value>& params) {
  auto eq = [&](const std::optional<std::string>& value, const char* column) {
    if (!value) return;
    sql += std::string(" AND ") + column + " = ?";
    params.emplace_back(*value);
  };
  eq(f.key_id, "key_id");
  eq(f.task_id, "task_id");
  eq(f.model, "upstream_model");
  eq(f.target, "target");
  eq(f.rule_id, "rule_id");
  eq(f.request_id, "request_id");
}

bool has_row_filter(const ReportFilter& f) {
  return f.key_id || f.task_id || f.model || f.target || f.rule_id || f.request_id;
}

bool has_task_filter(const ReportFilter& f) {
  return f.team || f.project || f.from || f.to;
}

// "AND ... = ?" for each filter of the task's own team, project and day, given the expressions
// of those three where it is added.
void add_task_filters(const ReportFilter& f, const std::string& team, const std::string& project,
                      const std::string& day, std::string& sql, std::vector<Value>& params) {
  for (auto [value, expr] : {std::pair{&f.team, &team}, std::pair{&f.project, &project}}) {
    if (!*value) continue;
    sql += " AND " + *expr + " = ?";
    params.emplace_back(**value);
  }
  for (auto [date, op] : {std::pair{&f.from, ">="}, std::pair{&f.to, "<="}}) {
    if (!*date) continue;
    sql += " AND " + day + " " + op + " ?";
    params.emplace_back(utc_day(days_from_civil(**date) * kMicrosPerDay));
  }
}

// The rollups (task_groups, task_totals, task_targets) answer a query without a filter of the
// rows; the task's own team, project and day are their keys.
bool use_rollup(const TaskReportQuery& q) {
  return !q.force_raw && !has_row_filter(q.filter);
}

std::string in_list(const std::set<std::string>& items, std::vector<Value>& params) {
  std::string out = "(";
  for (const auto& t : items) {
    out += out.size() == 1 ? "?" : ",?";
    params.emplace_back(t);
  }
  return out + ")";
}

// The per-task sums of the rows matching the filter, as a subquery `r` (task_id, team, project,
// day, requests, tokens, cost, status, first_us, last_us, local_requests, local_tokens,
// local_cost; adjustments included, as the rollups have them; status 'open': the `tasks` row
// joined as `t` has the outcome).
std::string per_task_sql(const TaskReportQuery& q, std::vector<Value>& params) {
  std::string local = "0=1";
  if (!q.local_targets.empty()) {
    std::vector<Value> ignored;
    local = "target IN " + in_list(q.local_targets, ignored);
  }
  const std::string request = "CASE WHEN kind='request' THEN 1 ELSE 0 END";
  std::string sql =
      "SELECT task_id, MIN(team) AS team, MIN(project) AS project, MIN(day) AS day, SUM(" +
      request +
      ") AS requests, SUM(input_tokens+output_tokens) AS tokens, "
      "SUM(COALESCE(cost_total,0)) AS cost, 'open' AS status, MIN(started_us) AS "
      "first_us, MAX(ended_us) AS last_us, SUM(CASE WHEN " +
      local + " THEN " + request + " ELSE 0 END) AS local_requests, SUM(CASE WHEN " + local +
      " THEN input_tokens+output_tokens ELSE 0 END) AS local_tokens, SUM(CASE WHEN " + local +
      " THEN COALESCE(cost_total,0) ELSE 0 END) AS local_cost FROM requests WHERE task_id<>''";
  for (int copy = 0; copy < 3; ++copy) {
    for (const auto& t : q.local_targets) params.emplace_back(t);
  }
  add_row_filters(q.filter, sql, params);
  if (has_task_filter(q.filter)) {
    // The tasks whose own team, project and day (from all their rows and their mark) match.
    sql +=
        " AND task_id IN (SELECT a.task_id FROM requests AS a LEFT JOIN tasks AS m ON m.task_id "
        "= a.task_id WHERE a.task_id<>'' GROUP BY a.task_id HAVING 1=1";
    add_task_filters(q.filter, "COALESCE(MIN(a.team),'')", "COALESCE(MIN(a.project),'')",
                     "COALESCE(MAX(m.day), MIN(a.day), '')", sql, params);
    sql += ")";
  }
  return sql + " GROUP BY task_id";
}

// The task's status from the `tasks` row joined as `t` (the rows' path).
constexpr const char* kStatusExpr = "COALESCE(t.status,'open')";

Result<std::string> group_expr(const std::string& by, bool pg, std::vector<Value>& params) {
  if (by.empty()) return std::string("''");
  if (by == "team") return std::string("COALESCE(r.team,'')");
  if (by == "project") return std::string("COALESCE(r.project,'')");
  if (by == "day") return std::string("COALESCE(t.day, r.day, '')");
  if (by == "month") return std::string("substr(COALESCE(t.day, r.day, ''),1,7)");
  if (by.starts_with("label:") && is_label_name(by.substr(6))) {
    if (pg) {
      params.emplace_back(by.substr(6));
      return std::string("COALESCE(t.labels::jsonb ->> ?, '')");
    }
    params.emplace_back("$.\"" + by.substr(6) + "\"");
    return std::string("COALESCE(json_extract(t.labels, ?), '')");
  }
  return Error::make(ErrorCode::kInvalidRequest,
                     "'by' must be team, project, day, month or label:NAME (NAME: 1-64 of "
                     "A-Z a-z 0-9 _ . -), got '" +
                         by + "'",
                     "by", "invalid_value");
}

Result<std::string> currency_of(AnyDb& db) {
  auto rows = db.query("SELECT value FROM meta WHERE key='currency'", {});
  if (!rows) return rows.error();
  return rows->empty() ? std::string() : text(rows->front()[0]);
}

// The column of task_groups a report groups by (label "" rows; a label's rows apart).
Result<std::string> rollup_group(const std::string& by) {
  if (by.empty()) return std::string("''");
  if (by == "team" || by == "project" || by == "day") return by;
  if (by == "month") return std::string("substr(day,1,7)");
  std::vector<Value> ignored;
  return group_expr(by, false, ignored);  // the same error for anything else
}

void add_group_row(std::map<std::pair<std::string, TaskStatus>, TaskGroup>& out,
                   const std::vector<Value>& row, bool targets, int64_t sign = 1) {
  TaskGroup& g = out[{text(row[0]), status_of(text(row[1]))}];
  g.group = text(row[0]);
  g.status = status_of(text(row[1]));
  size_t c = 2;
  if (!targets) {
    g.tasks += sign * num(row[c++]);
    g.requests += sign * num(row[c++]);
    g.tokens += sign * num(row[c++]);
    g.cost = Money::from_micros(g.cost.micros() + sign * num(row[c++]));
  } else {
    g.local_requests += sign * num(row[c++]);
    g.local_tokens += sign * num(row[c++]);
    g.local_cost = Money::from_micros(g.local_cost.micros() + sign * num(row[c++]));
  }
}

// The report from task_groups and task_group_targets (no filter of the rows): a few rows per
// (status, day, team, project), whatever the number of tasks, a filter of the task's team,
// project and day on those keys. A label's report takes its values' groups from the label's
// rows (keyed the same, so filtered the same), and the tasks without the label ("" group) as
// the status' totals less them.
Result<std::vector<TaskGroup>> rollup_report(AnyDb& db, const TaskReportQuery& q) {
  const bool by_label = q.by.starts_with("label:");
  auto group = rollup_group(q.by);
  if (!group) return group.error();
  std::map<std::pair<std::string, TaskStatus>, TaskGroup> groups;
  for (bool targets : {false, true}) {
    if (targets && q.local_targets.empty()) break;
    std::vector<Value> params;
    const std::string table = targets ? "task_group_targets" : "task_groups";
    const std::string sums = targets ? "SUM(requests), SUM(tokens), SUM(cost)"
                                     : "SUM(tasks), SUM(requests), SUM(tokens), SUM(cost)";
    std::string where = targets ? " AND target IN " + in_list(q.local_targets, params) : "";
    std::vector<Value> totals_params = params;
    std::string tasks_where = where;
    add_task_filters(q.filter, "team", "project", "day", tasks_where, totals_params);
    auto totals =
        db.query("SELECT " + (by_label ? std::string("''") : *group) + " AS g, status, " + sums +
                     " FROM " + table + " WHERE label = ''" + tasks_where + " GROUP BY g, status",
                 totals_params);
    if (!totals) return totals.error();
    for (const auto& row : *totals) add_group_row(groups, row, targets);
    if (!by_label) continue;
    std::vector<Value> label_params = {q.by.substr(6)};
    label_params.insert(label_params.end(), totals_params.begin(), totals_params.end());
    auto values =
        db.query("SELECT value, status, " + sums + " FROM " + table +
                     " WHERE label = ? AND value <> ''" + tasks_where + " GROUP BY value, status",
                 label_params);
    if (!values) return values.error();
    for (const auto& row : *values) {
      add_group_row(groups, row, targets);
      std::vector<Value> rest = row;
      rest[0] = std::string();
      add_group_row(groups, rest, targets, -1);
    }
  }
  std::vector<TaskGroup> out;
  for (auto& [key, g] : groups) {
    if (g.tasks > 0) out.push_back(std::move(g));  // a group whose tasks all moved is gone
  }
  return out;
}

// The report from the rows matching the filter, grouped by task then by group.
Result<std::vector<TaskGroup>> raw_report(AnyDb& db, const TaskReportQuery& q,
                                          const std::string& group,
                                          const std::vector<Value>& group_params) {
  std::vector<Value> params = group_params;
  std::string inner = per_task_sql(q, params);
  std::string sql = "SELECT " + group + " AS g, " + std::string(kStatusExpr) +
                    " AS s, COUNT(*), SUM(r.requests), SUM(r.tokens), SUM(r.local_tokens), "
                    "SUM(r.cost), SUM(r.local_cost), SUM(r.local_requests) FROM (" +
                    inner + ") AS r LEFT JOIN tasks AS t ON t.task_id = r.task_id GROUP BY g, s";
  std::vector<TaskGroup> out;
  auto rows = db.query(sql, params);
  if (!rows) return rows.error();
  for (const auto& row : *rows) {
    TaskGroup g;
    g.group = text(row[0]);
    g.status = status_of(text(row[1]));
    g.tasks = num(row[2]);
    g.requests = num(row[3]);
    g.tokens = num(row[4]);
    g.local_tokens = num(row[5]);
    g.cost = Money::from_micros(num(row[6]));
    g.local_cost = Money::from_micros(num(row[7]));
    g.local_requests = num(row[8]);
    out.push_back(std::move(g));
  }
  return out;
}

std::string json_text(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string_view task_status_name(TaskStatus status) {
  return kStatusNames[static_cast<size_t>(status)];
}

std::optional<TaskStatus> parse_task_status(std::string_view name) {
  for (size_t i = 1; i < 4; ++i) {
    if (name == kStatusNames[i]) return static_cast<TaskStatus>(i);
  }
  return std::nullopt;
}

bool is_label_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Money TaskGroup::per_task() const {
  if (tasks == 0) return Money();
  int64_t total = cost.micros();
  int64_t q = total / tasks;
  int64_t r = total % tasks;
  // Half away from zero: |2r| >= tasks rounds the quotient outward.
  if (r != 0 && (r > 0 ? r : -r) >= tasks - (r > 0 ? r : -r)) q += total > 0 ? 1 : -1;
  return Money::from_micros(q);
}

Result<MarkOutcome> mark_task(const std::string& db, const TaskMark& mark) {
  return is_pg_url(db) ? mark_pg(db, mark) : mark_sqlite(db, mark);
}

Result<std::set<std::string>> task_key_ids(const std::string& db, const std::string& task_id) {
  std::set<std::string> out;
  if (is_pg_url(db)) {
    auto conn = PgConn::connect(db);
    if (!conn) return conn.error();
    auto rows = conn->run("SELECT DISTINCT key_id FROM requests WHERE task_id=$1", {task_id});
    if (!rows) return rows.error();
    for (int r = 0; r < rows->rows(); ++r) out.insert(rows->text(r, 0));
    return out;
  }
  auto sdb = ledger_db_open(db, true);
  if (!sdb) return sdb.error();
  auto stmt = sdb->prepare("SELECT DISTINCT key_id FROM requests WHERE task_id=?");
  if (!stmt) return stmt.error();
  stmt->bind(1, task_id);
  for (;;) {
    auto has = stmt->step();
    if (!has) return has.error();
    if (!*has) break;
    out.insert(stmt->text_at(0));
  }
  return out;
}

Result<TaskReport> task_report(const std::string& db_path, const TaskReportQuery& q) {
  std::vector<Value> group_params;
  auto group = group_expr(q.by, is_pg_url(db_path), group_params);
  if (!group) return group.error();
  auto db = AnyDb::open(db_path);
  if (!db) return db.error();
  TaskReport report;
  report.by = q.by;
  auto cur = currency_of(*db);
  if (!cur) return cur.error();
  report.currency = *cur;
  report.from_rows = !use_rollup(q);
  if (!report.from_rows) {
    auto rows = rollup_report(*db, q);
    if (!rows) return rows.error();
    report.rows = std::move(*rows);
  } else {
    auto rows = raw_report(*db, q, *group, group_params);
    if (!rows) return rows.error();
    report.rows = std::move(*rows);
  }
  // By group (bytewise, in both stores), then status.
  std::sort(report.rows.begin(), report.rows.end(), [](const TaskGroup& a, const TaskGroup& b) {
    return std::tie(a.group, a.status) < std::tie(b.group, b.status);
  });
  return report;
}

// The local cost of the listed tasks from task_targets (the rollup's page of top tasks).
Status add_local_costs(AnyDb& db, const TaskReportQuery& q, TopTasks& top) {
  if (top.from_rows || q.local_targets.empty() || top.tasks.empty()) return {};
  std::vector<Value> params;
  std::string sql = "SELECT task_id, SUM(cost) FROM task_targets WHERE target IN " +
                    in_list(q.local_targets, params) + " AND task_id IN (";
  for (size_t i = 0; i < top.tasks.size(); ++i) {
    sql += i == 0 ? "?" : ",?";
    params.emplace_back(top.tasks[i].task_id);
  }
  auto rows = db.query(sql + ") GROUP BY task_id", params);
  if (!rows) return rows.error();
  for (const auto& row : *rows) {
    for (auto& t : top.tasks) {
      if (t.task_id == text(row[0])) t.local_cost = Money::from_micros(num(row[1]));
    }
  }
  return {};
}

// The count, then the page: without a filter of the rows, the count from task_groups and the
// page from task_totals' cost index (by status: its (status, cost) index; a team's or
// project's: its own), the labels of the page's tasks alone joined after the limit (a day
// range: checked on the walk, its day joining the mark); with one, from the rows grouped by
// task.
Result<TopTasks> top_tasks(const std::string& db_path, const TaskReportQuery& q,
                           std::optional<TaskStatus> status, int64_t limit, int64_t offset) {
  auto db = AnyDb::open(db_path);
  if (!db) return db.error();
  const bool rollup = use_rollup(q);
  const std::string status_name = status ? std::string(task_status_name(*status)) : "";
  const char* collate = db->pg() ? " COLLATE \"C\"" : "";
  std::vector<Value> params;
  std::optional<std::vector<Value>> count_params;  // else `params`
  std::string count_sql;
  std::string page_sql;
  if (rollup) {
    count_sql = "SELECT COALESCE(SUM(tasks),0) FROM task_groups WHERE label = ''";
    std::string where = " WHERE requests > 0";
    if (status) {
      count_sql += " AND status = ?";
      where += " AND status = ?";
      params.emplace_back(status_name);
    }
    const std::string columns =
        "SELECT r.task_id, r.status, COALESCE(t.labels,'{}'), r.team, r.project, "
        "r.requests, r.cost, 0, r.first_us, r.last_us FROM ";
    if (has_task_filter(q.filter)) {
      std::vector<Value> counted = params;
      add_task_filters(q.filter, "team", "project", "day", count_sql, counted);
      count_params = std::move(counted);
    }
    if (!q.filter.from && !q.filter.to) {
      // The page's tasks walked (a team's or project's own index) and limited before the
      // join: only they are joined to their marks.
      add_task_filters(q.filter, "team", "project", "day", where, params);
      page_sql = columns + "(SELECT * FROM task_totals" + where + " ORDER BY cost DESC, task_id" +
                 collate +
                 " LIMIT ? OFFSET ?) AS r LEFT JOIN tasks AS t ON t.task_id = r.task_id ORDER "
                 "BY r.cost DESC, r.task_id" +
                 collate;
    } else {
      std::string walk = " WHERE r.requests > 0";
      if (status) walk += " AND r.status = ?";
      // A day range: each task's day is its mark's, else its first row's (the join).
      add_task_filters(q.filter, "r.team", "r.project", "COALESCE(t.day, r.day, '')", walk, params);
      page_sql = columns + "task_totals AS r LEFT JOIN tasks AS t ON t.task_id = r.task_id" + walk +
                 " ORDER BY r.cost DESC, r.task_id" + collate + " LIMIT ? OFFSET ?";
    }
  } else {
    std::string inner = per_task_sql(q, params);
    std::string from = " FROM (" + inner + ") AS r LEFT JOIN tasks AS t ON t.task_id = r.task_id";
    if (status) {
      from += std::string(" WHERE ") + kStatusExpr + " = ?";
      params.emplace_back(status_name);
    }
    count_sql = "SELECT COUNT(*)" + from;
    page_sql = std::string("SELECT r.task_id, ") + kStatusExpr +
               ", COALESCE(t.labels,'{}'), r.team, r.project, r.requests, r.cost, "
               "r.local_cost, r.first_us, r.last_us" +
               from + " ORDER BY r.cost DESC, r.task_id" + collate + " LIMIT ? OFFSET ?";
  }
  TopTasks top;
  top.from_rows = !rollup;
  auto counted = db->query(count_sql, count_params ? *count_params : params);
  if (!counted) return counted.error();
  top.total = counted->empty() ? 0 : num(counted->front()[0]);
  // The rollups' count is exact: past it, no page to walk for (a filter no task matches).
  if (rollup && top.total <= offset) return top;
  params.emplace_back(limit);
  params.emplace_back(offset);
  auto rows = db->query(page_sql, params);
  if (!rows) return rows.error();
  for (const auto& row : *rows) {
    TopTask t;
    t.task_id = text(row[0]);
    t.status = status_of(text(row[1]));
    t.labels = text(row[2]);
    t.team = text(row[3]);
    t.project = text(row[4]);
    t.requests = num(row[5]);
    t.cost = Money::from_micros(num(row[6]));
    t.local_cost = Money::from_micros(num(row[7]));
    t.first_us = num(row[8]);
    t.last_us = num(row[9]);
    top.tasks.push_back(std::move(t));
  }
  if (Status st = add_local_costs(*db, q, top); !st) return st.error();
  return top;
}

std::string task_report_json(const TaskReport& report) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& g : report.rows) {
    rows.push_back({{"group", g.group},
                    {"status", task_status_name(g.status)},
                    {"tasks", g.tasks},
                    {"requests", g.requests},
                    {"cost", g.cost.to_string()},
                    {"cost_per_task", g.per_task().to_string()},
                    {"local_cost", g.local_cost.to_string()},
                    {"local_requests", g.local_requests},
                    {"tokens", g.tokens},
                    {"local_tokens", g.local_tokens}});
  }
  nlohmann::ordered_json j = {{"by", report.by},
                              {"currency", report.currency},
                              {"read", report.from_rows ? "rows" : "rollups"},
                              {"rows", rows}};
  return json_text(j);
}

std::string task_report_csv(const TaskReport& report) {
  std::string out =
      "group,status,tasks,requests,cost,cost_per_task,local_cost,local_requests,tokens,"
      "local_tokens\n";
  for (const auto& g : report.rows) {
    out += csv_field(g.group, true) + "," + std::string(task_status_name(g.status)) + "," +
           std::to_string(g.tasks) + "," + std::to_string(g.requests) + "," + g.cost.to_string() +
           "," + g.per_task().to_string() + "," + g.local_cost.to_string() + "," +
           std::to_string(g.local_requests) + "," + std::to_string(g.tokens) + "," +
           std::to_string(g.local_tokens) + "\n";
  }
  return out;
}

std::string top_tasks_json(const TopTasks& top, const std::string& currency) {
  nlohmann::ordered_json tasks = nlohmann::ordered_json::array();
  for (const auto& t : top.tasks) {
    tasks.push_back({{"task", t.task_id},
                     {"status", task_status_name(t.status)},
                     {"labels", nlohmann::ordered_json::parse(t.labels, nullptr, false)},
                     {"team", t.team},
                     {"project", t.project},
                     {"requests", t.requests},
                     {"cost", t.cost.to_string()},
                     {"local_cost", t.local_cost.to_string()},
                     {"first_us", t.first_us},
                     {"last_us", t.last_us}});
  }
  nlohmann::ordered_json j = {{"currency", currency},
                              {"total", top.total},
                              {"read", top.from_rows ? "rows" : "rollups"},
                              {"tasks", tasks}};
  return json_text(j);
}

std::string top_tasks_csv(const TopTasks& top) {
  std::string out = "task,status,team,project,requests,cost,local_cost\n";
  for (const auto& t : top.tasks) {
    out += csv_field(t.task_id, true) + "," + std::string(task_status_name(t.status)) + "," +
           csv_field(t.team, true) + "," + csv_field(t.project, true) + "," +
           std::to_string(t.requests) + "," + t.cost.to_string() + "," + t.local_cost.to_string() +
           "\n";
  }
  return out;
}

namespace {

constexpr const char* kDrillColumns[] = {"seq",
                                         "id",
                                         "request_id",
                                         "started_us",
                                         "ended_us",
                                         "key_id",
                                         "team",
                                         "project",
                                         "requested_model",
                                         "target",
                                         "upstream_model",
                                         "rule_id",
                                         "policy_version",
                                         "attempts",
                                         "status",
                                         "http_status",
                                         "input_tokens",
                                         "cached_tokens",
                                         "output_tokens",
                                         "reasoning_tokens",
                                         "pricing",
                                         "price_version",
                                         "cost_input",
                                         "cost_cached",
                                         "cost_output",
                                         "cost_reasoning",
                                         "cost_total"};

bool is_money_column(std::string_view name) {
  return name.starts_with("cost_");
}

// One row as JSON: integers, text, money as exact decimal strings (either store's values).
nlohmann::ordered_json row_object(const std::vector<Value>& row,
                                  const std::vector<std::string>& names, size_t from = 0) {
  nlohmann::ordered_json o;
  for (size_t i = 0; i < names.size() && from + i < row.size(); ++i) {
    const Value& v = row[from + i];
    if (std::holds_alternative<std::monostate>(v)) {
      o[names[i]] = nullptr;
    } else if (is_money_column(names[i])) {
      o[names[i]] = Money::from_micros(value_int(v)).to_string();
    } else if (std::holds_alternative<int64_t>(v)) {
      o[names[i]] = std::get<int64_t>(v);
    } else {
      o[names[i]] = value_text(v);
    }
  }
  return o;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

}  // namespace

// Three reads whatever the page size (its rows, their attempts, their prices), then the chain
// links of the page's rows; either store.
Result<std::string> task_requests_json(const std::string& db_path, const std::string& task_id,
                                       int64_t limit, int64_t offset) {
  const std::vector<std::string> names(std::begin(kDrillColumns), std::end(kDrillColumns));
  const std::string page = "SELECT id FROM requests WHERE task_id=? ORDER BY seq LIMIT ? OFFSET ?";
  const std::vector<Value> params = {task_id, limit, offset};
  auto db = AnyDb::open(db_path);
  if (!db) return db.error();
  auto got = db->query(
      "SELECT " + joined(names) + " FROM requests WHERE task_id=? ORDER BY seq LIMIT ? OFFSET ?",
      params);
  if (!got) return got.error();
  const std::vector<std::string> anames = {
      "attempt",    "target",       "upstream_model", "status",        "http_status",
      "error_code", "input_tokens", "output_tokens",  "price_version", "cost_total"};
  auto attempts =
      db->query("SELECT request_id," + joined(anames) + " FROM attempts WHERE request_id IN (" +
                    page + ") ORDER BY request_id, attempt",
                params);
  if (!attempts) return attempts.error();
  std::map<std::string, nlohmann::ordered_json> attempts_of;
  for (const auto& a : *attempts) {
    auto& list = attempts_of[value_text(a[0])];
    if (list.is_null()) list = nlohmann::ordered_json::array();
    list.push_back(row_object(a, anames, 1));
  }
  const std::vector<std::string> pnames = {"version", "model",     "input",   "cached_input",
                                           "output",  "reasoning", "internal"};
  auto prices = db->query("SELECT " + joined(pnames) +
                              " FROM prices WHERE version IN (SELECT price_version FROM requests "
                              "WHERE task_id=? ORDER BY seq LIMIT ? OFFSET ?)",
                          params);
  if (!prices) return prices.error();
  std::map<std::string, nlohmann::ordered_json> price_of;
  for (const auto& p : *prices) {
    nlohmann::ordered_json po = row_object(p, pnames);
    // Prices are per million tokens, in micro-units: exact decimal strings too.
    for (const char* k : {"input", "cached_input", "output", "reasoning"}) {
      if (po[k].is_number_integer()) po[k] = Money::from_micros(po[k].get<int64_t>()).to_string();
    }
    price_of[value_text(p[0])] = po;
  }
  std::vector<int64_t> seqs;
  for (const auto& r : *got) seqs.push_back(value_int(r[0]));
  auto links = verify_links(db_path, seqs);
  if (!links) return links.error();
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& row : *got) {
    nlohmann::ordered_json r = row_object(row, names);
    auto a = attempts_of.find(r["id"].get<std::string>());
    r["attempt_list"] = a != attempts_of.end() ? a->second : nlohmann::ordered_json::array();
    const auto& version = r["price_version"];
    auto p = version.is_string() ? price_of.find(version.get<std::string>()) : price_of.end();
    r["prices"] = p != price_of.end() ? p->second : nlohmann::ordered_json();
    auto link = links->find(r["seq"].get<int64_t>());
    r["chain_verifies"] = link != links->end() && link->second;
    out.push_back(std::move(r));
  }
  nlohmann::ordered_json j = {{"task", task_id}, {"requests", out}};
  return json_text(j);
}

}  // namespace ferry::ledger
