// Task outcomes and the cost of a task: an application marks a task (the ledger rows' task_id)
// completed, failed or abandoned (`POST /v1/tasks/{id}`), once, in the `tasks` table of the
// ledger's database (SQLite or PostgreSQL); reports join it with the rows: cost per task and per
// outcome by team, project, label or day, the top tasks by cost, and one task's requests.
// Every call opens its own connection; any worker thread, never an I/O thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/money.h"
#include "ledger/report.h"

namespace ferry::ledger {

// kOpen is never stored: it is what a task that was never marked shows as.
enum class TaskStatus : uint8_t { kOpen, kCompleted, kFailed, kAbandoned };
std::string_view task_status_name(TaskStatus status);
// "completed", "failed" or "abandoned" (never "open": a task cannot be marked open).
std::optional<TaskStatus> parse_task_status(std::string_view name);

inline constexpr size_t kMaxTaskLabels = 16;
inline constexpr size_t kMaxLabelBytes = 256;
// A label name: 1..64 of [A-Za-z0-9_.-] (it becomes a JSON path in the label reports).
bool is_label_name(std::string_view name);

struct TaskMark {
  std::string task_id;
  TaskStatus status = TaskStatus::kCompleted;
  std::map<std::string, std::string> labels;
  std::string key_id;  // who marked it
  int64_t marked_us = 0;
};

enum class MarkResult : uint8_t { kCreated, kSame, kConflict };
struct MarkOutcome {
  MarkResult result = MarkResult::kCreated;
  TaskMark stored;  // what the ledger holds now (the earlier mark on kSame / kConflict)
};

// Records the outcome once: the same status and labels again is kSame, anything else for a
// task already marked is kConflict (the first mark stays). `db` is a SQLite path or a
// postgresql:// URL.
Result<MarkOutcome> mark_task(const std::string& db, const TaskMark& mark);

// The key ids of the ledger rows of `task_id` (who may mark it besides finance and admins).
Result<std::set<std::string>> task_key_ids(const std::string& db, const std::string& task_id);

// ---- reports (SQLite and PostgreSQL ledgers) -----------------------------------------------

struct TaskReportQuery {
  // team, project, from and to select tasks by the task's own team, project and day (as the
  // groups by team, project and day define them: its rows' smallest team and project, the day
  // it was marked, else its first row's); key, model, target, rule, task and request select
  // the rows (each task's sums are of its matching rows) and read them.
  ReportFilter filter;
  // "" (one group), "team", "project", "day", "month" (the day a task was marked, else its
  // first row's), or "label:NAME".
  std::string by;
  std::set<std::string> local_targets;  // targets answered by the in-process engine
  // Read the rows, not the rollups (task_groups, task_totals; they answer queries without a
  // filter of the rows). Same answer either way.
  bool force_raw = false;
};

struct TaskGroup {
  std::string group;
  TaskStatus status = TaskStatus::kOpen;
  int64_t tasks = 0;
  int64_t requests = 0;
  int64_t tokens = 0;        // input + output of every row
  int64_t local_tokens = 0;  // of the rows a local target answered
  Money cost;
  Money local_cost;
  int64_t local_requests = 0;
  Money per_task() const;  // cost / tasks, rounded half away from zero
};

struct TaskReport {
  std::string by;
  std::string currency;
  std::vector<TaskGroup> rows;  // by group, then status
  bool from_rows = false;       // read the rows (a filter of the rows), not the rollups
};

Result<TaskReport> task_report(const std::string& db, const TaskReportQuery& query);

struct TopTask {
  std::string task_id;
  TaskStatus status = TaskStatus::kOpen;
  std::string labels;  // JSON object text ("{}" when open)
  std::string team, project;
  int64_t requests = 0;
  Money cost;
  Money local_cost;
  int64_t first_us = 0, last_us = 0;
};

struct TopTasks {
  int64_t total = 0;  // tasks matching
  std::vector<TopTask> tasks;
  bool from_rows = false;  // read the rows (a filter of the rows), not the rollups
};

// Tasks by cost, highest first, `limit` from `offset`; `status` keeps one outcome only.
Result<TopTasks> top_tasks(const std::string& db, const TaskReportQuery& query,
                           std::optional<TaskStatus> status, int64_t limit, int64_t offset);

// JSON text of each (money as exact decimal strings).
std::string task_report_json(const TaskReport& report);
std::string task_report_csv(const TaskReport& report);
std::string top_tasks_json(const TopTasks& top, const std::string& currency);
std::string top_tasks_csv(const TopTasks& top);

// The rows of one task, in chain order, with their attempts, the prices of their price
// version and whether each row's hash-chain link verifies. JSON text.
Result<std::string> task_requests_json(const std::string& db, const std::string& task_id,
                                       int64_t limit, int64_t offset);

}  // namespace ferry::ledger
