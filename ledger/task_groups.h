// The task reports' rollup (SQLite schema 10, PostgreSQL 6): `task_groups` holds the sums of
// the tasks of each (status, day, team, project), and of each label value in each of those
// (label, value, status, day, team, project; SQLite schema 13, PostgreSQL 9);
// `task_group_targets` the same sums per target (the share answered locally). The writer keeps
// them in the rows' transaction (a batch adds its rows to their tasks' groups; a task whose
// group changes moves whole) and mark_task in the mark's (a task moves from open to its
// outcome, and into its labels' groups). Every function runs on the connection it is given,
// inside that connection's transaction.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "ledger/any_db.h"
#include "ledger/store.h"

namespace ferry::ledger::detail {

// Runs one statement (? placeholders) on the caller's connection.
using RunSql =
    std::function<Result<Rows>(const std::string& sql, const std::vector<Value>& params)>;

struct TaskSums {
  int64_t requests = 0, tokens = 0, cost = 0;
};

// One task as the rollup counts it: the group it is in and its sums. A task without a request
// row (only a mark so far) is in no group.
struct TaskState {
  std::string status = "open";
  std::string day;  // the day it was marked, else its first row's
  std::string team, project;
  TaskSums sums;
  std::map<std::string, std::string> labels;  // a marked task's
  std::map<std::string, TaskSums> targets;    // by target
};

struct GroupSums {
  int64_t tasks = 0, requests = 0, tokens = 0, cost = 0;
};

// What a transaction adds to the rollup's rows, by key.
struct TaskGroupDeltas {
  // (label, value, status, day, team, project): label "" for the groups by status, day, team
  // and project; a label's groups the same keys, so a label's report takes a filter of the
  // task's team, project and day.
  std::map<std::vector<std::string>, GroupSums> groups;
  std::map<std::vector<std::string>, GroupSums> targets;  // the same key, then the target
  // Adds (sign 1) or takes away (-1) a task's sums; `whole` counts the task itself too
  // (false: the state is a delta of a task already counted in the same group).
  void add(const TaskState& task, int64_t sign, bool whole);
};

// A mark's labels (a JSON object of strings) as a map; anything else is no labels.
std::map<std::string, std::string> task_labels_from(const std::string& text);

// The group deltas of a batch's task rollups, read before they are upserted (task_totals, the
// marks and, for a task whose group changes, its task_targets). With `pg`, the batch's
// task_totals rows are inserted empty if missing and locked first, so that writers of many
// instances and mark_task never count a task from a stale read.
Result<TaskGroupDeltas> batch_group_deltas(const RunSql& run, const Rollups& rollups, bool pg);
// A mark of an unmarked task: its sums move from open to the mark's status, day and labels.
Result<TaskGroupDeltas> mark_group_deltas(const RunSql& run, const std::string& task_id,
                                          const std::string& status, const std::string& day,
                                          const std::map<std::string, std::string>& labels);
Status upsert_task_groups(const RunSql& run, const TaskGroupDeltas& deltas);

// SQLite schema 10's and PostgreSQL schema 6's migration (never edit it; add a migration):
// both tables (derived, so dropped and made again), an index of task_targets by task (a task
// that changes group moves its targets' sums), then task_groups_build_sql().
std::string task_groups_migration_sql(bool pg);
// Fills both tables from task_totals, task_targets and tasks (the migration; the bench's fill).
std::string task_groups_build_sql(bool pg);
// The label rows of both tables alone (part of task_groups_build_sql).
std::string task_label_groups_build_sql(bool pg);
// SQLite schema 13's and PostgreSQL schema 9's migration: the label rows (before, keyed by
// label, value and status alone) made again keyed by the task's day, team and project too.
std::string task_label_groups_migration_sql(bool pg);

}  // namespace ferry::ledger::detail
