#include "ledger/task_groups.h"

#include <algorithm>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

namespace ferry::ledger::detail {

namespace {

constexpr size_t kIdsPerRead = 500;
constexpr size_t kRowsPerUpsert = 50;  // 11 values a row: far below either store's limit

void add_sums(GroupSums& g, const TaskSums& s, int64_t sign, int64_t tasks) {
  g.tasks += tasks;
  g.requests += sign * s.requests;
  g.tokens += sign * s.tokens;
  g.cost += sign * s.cost;
}

// "(?,?,...)" for `ids`, each bound.
std::string in_list(const std::vector<std::string>& ids, size_t begin, size_t n,
                    std::vector<Value>& params) {
  std::string out = "(";
  for (size_t i = begin; i < begin + n; ++i) {
    out += i == begin ? "?" : ",?";
    params.emplace_back(ids[i]);
  }
  return out + ")";
}

// Runs `sql_of(in_list)` over `ids` in chunks, each row to `each`.
template <typename Each>
Status read_by_ids(const RunSql& run, const std::vector<std::string>& ids,
                   const std::function<std::string(const std::string&)>& sql_of, Each each) {
  for (size_t begin = 0; begin < ids.size(); begin += kIdsPerRead) {
    size_t n = std::min(kIdsPerRead, ids.size() - begin);
    std::vector<Value> params;
    std::string list = in_list(ids, begin, n, params);
    auto rows = run(sql_of(list), params);
    if (!rows) return rows.error();
    for (const auto& row : *rows) each(row);
  }
  return {};
}

struct Stored {
  std::string status, team, project, day;  // day: the first row's
  TaskSums sums;
};

struct Mark {
  std::string status, day;
  std::map<std::string, std::string> labels;
};

TaskSums sums_of(const Value& requests, const Value& tokens, const Value& cost) {
  return {value_int(requests), value_int(tokens), value_int(cost)};
}

TaskSums& operator+=(TaskSums& a, const TaskSums& b) {
  a.requests += b.requests;
  a.tokens += b.tokens;
  a.cost += b.cost;
  return a;
}

Status read_targets(const RunSql& run, const std::vector<std::string>& ids,
                    std::map<std::string, std::map<std::string, TaskSums>>& out) {
  return read_by_ids(
      run, ids,
      [](const std::string& list) {
        return "SELECT task_id, target, requests, tokens, cost FROM task_targets WHERE task_id "
               "IN " +
               list;
      },
      [&](const std::vector<Value>& row) {
        out[value_text(row[0])][value_text(row[1])] = sums_of(row[2], row[3], row[4]);
      });
}

}  // namespace

void TaskGroupDeltas::add(const TaskState& task, int64_t sign, bool whole) {
  if (whole && task.sums.requests <= 0) return;  // no request row yet: in no group
  const int64_t tasks = whole ? sign : 0;
  std::vector<std::vector<std::string>> keys = {
      {"", "", task.status, task.day, task.team, task.project}};
  if (task.status != "open") {
    for (const auto& [name, value] : task.labels) {
      keys.push_back({name, value, task.status, task.day, task.team, task.project});
    }
  }
  for (auto& key : keys) {
    add_sums(groups[key], task.sums, sign, tasks);
    key.emplace_back();
    for (const auto& [target, sums] : task.targets) {
      key.back() = target;
      add_sums(targets[key], sums, sign, 0);
    }
  }
}

std::map<std::string, std::string> task_labels_from(const std::string& text) {
  std::map<std::string, std::string> out;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return out;
  for (const auto& [k, v] : j.items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

Result<TaskGroupDeltas> batch_group_deltas(const RunSql& run, const Rollups& rollups, bool pg) {
  TaskGroupDeltas out;
  std::vector<std::string> ids;
  for (const auto& [id, d] : rollups.tasks) ids.push_back(id);
  if (ids.empty()) return out;
  if (pg) {
    // An empty row per new task (as mark_task makes): every writer and mark of the task then
    // waits for the one before it and reads what it committed.
    if (Status st = read_by_ids(
            run, ids,
            [](const std::string& list) {
              // `list` is "(?,...)": the same placeholders as an array.
              return "INSERT INTO task_totals(task_id,requests,tokens,cost) SELECT task_id,0,0,0 "
                     "FROM unnest(ARRAY[" +
                     list.substr(1, list.size() - 2) +
                     "]::text[]) AS n(task_id) ORDER BY task_id COLLATE \"C\" ON CONFLICT "
                     "(task_id) DO NOTHING";
            },
            [](const std::vector<Value>&) {});
        !st) {
      return st.error();
    }
  }
  std::map<std::string, Stored> stored;
  if (Status st = read_by_ids(
          run, ids,
          [pg](const std::string& list) {
            return "SELECT task_id, status, COALESCE(team,''), COALESCE(project,''), "
                   "COALESCE(day,''), requests, tokens, cost FROM task_totals WHERE task_id IN " +
                   list + (pg ? " ORDER BY task_id COLLATE \"C\" FOR UPDATE" : std::string());
          },
          [&](const std::vector<Value>& row) {
            stored[value_text(row[0])] = {value_text(row[1]), value_text(row[2]),
                                          value_text(row[3]), value_text(row[4]),
                                          sums_of(row[5], row[6], row[7])};
          });
      !st) {
    return st.error();
  }
  std::map<std::string, Mark> marks;
  if (Status st = read_by_ids(
          run, ids,
          [](const std::string& list) {
            return "SELECT task_id, status, day, labels FROM tasks WHERE task_id IN " + list;
          },
          [&](const std::vector<Value>& row) {
            marks[value_text(row[0])] = {value_text(row[1]), value_text(row[2]),
                                         task_labels_from(value_text(row[3]))};
          });
      !st) {
    return st.error();
  }
  std::map<std::string, std::map<std::string, TaskSums>> batch_targets;
  for (const auto& [key, d] : rollups.task_targets) {
    batch_targets[d.task_id][d.target] += TaskSums{d.requests, d.tokens, d.cost};
  }
  // Per task: its state before the batch (counted only with a request row) and after.
  std::map<std::string, std::pair<TaskState, TaskState>> moved;
  for (const auto& [id, d] : rollups.tasks) {
    auto s = stored.find(id);
    auto m = marks.find(id);
    const bool counted = s != stored.end() && s->second.sums.requests > 0;
    TaskState now;
    now.status = m != marks.end() ? m->second.status : "open";
    if (m != marks.end()) now.labels = m->second.labels;
    std::string first_day = d.day;
    now.team = d.team;
    now.project = d.project;
    if (counted) {
      now.team = std::min(now.team, s->second.team);
      now.project = std::min(now.project, s->second.project);
      first_day = std::min(first_day, s->second.day);
    }
    now.day = m != marks.end() ? m->second.day : first_day;
    now.sums = TaskSums{d.requests, d.tokens, d.cost};
    now.targets = batch_targets[id];
    if (!counted) {
      out.add(now, 1, true);
      continue;
    }
    TaskState before;
    before.status = s->second.status;
    before.day = m != marks.end() ? m->second.day : s->second.day;
    before.team = s->second.team;
    before.project = s->second.project;
    before.sums = s->second.sums;
    before.labels = now.labels;
    if (std::tie(before.status, before.day, before.team, before.project) ==
        std::tie(now.status, now.day, now.team, now.project)) {
      out.add(now, 1, false);  // the same group: the batch's sums only
      continue;
    }
    moved.emplace(id, std::pair{std::move(before), std::move(now)});
  }
  if (moved.empty()) return out;
  // A task whose group changed (an earlier day, a smaller team or project): moved whole.
  std::vector<std::string> moved_ids;
  for (const auto& [id, states] : moved) moved_ids.push_back(id);
  std::map<std::string, std::map<std::string, TaskSums>> old_targets;
  if (Status st = read_targets(run, moved_ids, old_targets); !st) return st.error();
  for (auto& [id, states] : moved) {
    auto& [before, now] = states;
    before.targets = old_targets[id];
    now.sums += before.sums;
    for (const auto& [target, sums] : before.targets) now.targets[target] += sums;
    out.add(before, -1, true);
    out.add(now, 1, true);
  }
  return out;
}

Result<TaskGroupDeltas> mark_group_deltas(const RunSql& run, const std::string& task_id,
                                          const std::string& status, const std::string& day,
                                          const std::map<std::string, std::string>& labels) {
  TaskGroupDeltas out;
  auto rows = run(
      "SELECT COALESCE(team,''), COALESCE(project,''), COALESCE(day,''), requests, tokens, cost "
      "FROM task_totals WHERE task_id = ?",
      {task_id});
  if (!rows) return rows.error();
  if (rows->empty() || value_int(rows->front()[3]) <= 0) return out;
  const auto& row = rows->front();
  TaskState before;
  before.team = value_text(row[0]);
  before.project = value_text(row[1]);
  before.day = value_text(row[2]);
  before.sums = sums_of(row[3], row[4], row[5]);
  std::map<std::string, std::map<std::string, TaskSums>> targets;
  if (Status st = read_targets(run, {task_id}, targets); !st) return st.error();
  before.targets = targets[task_id];
  TaskState after = before;
  after.status = status;
  after.day = day;
  after.labels = labels;
  out.add(before, -1, true);
  out.add(after, 1, true);
  return out;
}

Status upsert_task_groups(const RunSql& run, const TaskGroupDeltas& deltas) {
  auto upsert = [&](const char* table, const auto& rows, bool with_tasks) -> Status {
    std::vector<const std::pair<const std::vector<std::string>, GroupSums>*> changed;
    for (const auto& entry : rows) {
      const GroupSums& g = entry.second;
      if (g.tasks != 0 || g.requests != 0 || g.tokens != 0 || g.cost != 0) {
        changed.push_back(&entry);
      }
    }
    const std::string columns = with_tasks ? "label,value,status,day,team,project"
                                           : "label,value,status,day,team,project,target";
    const std::string sums = with_tasks ? "tasks,requests,tokens,cost" : "requests,tokens,cost";
    std::string update;
    for (const char* c : {"tasks", "requests", "tokens", "cost"}) {
      if (!with_tasks && std::string_view(c) == "tasks") continue;
      update +=
          std::string(update.empty() ? "" : ", ") + c + "=" + table + "." + c + "+excluded." + c;
    }
    const size_t width = (with_tasks ? 6 : 7) + (with_tasks ? 4 : 3);
    for (size_t begin = 0; begin < changed.size(); begin += kRowsPerUpsert) {
      size_t n = std::min(kRowsPerUpsert, changed.size() - begin);
      std::vector<Value> params;
      std::string values;
      for (size_t i = begin; i < begin + n; ++i) {
        const auto& [key, g] = *changed[i];
        for (const auto& part : key) params.emplace_back(part);
        if (with_tasks) params.emplace_back(g.tasks);
        for (int64_t v : {g.requests, g.tokens, g.cost}) params.emplace_back(v);
        values += std::string(i == begin ? "" : ",") + "(" + join_placeholders(width) + ")";
      }
      auto done =
          run(std::string("INSERT INTO ") + table + "(" + columns + "," + sums + ") VALUES" +
                  values + " ON CONFLICT(" + columns + ") DO UPDATE SET " + update,
              params);
      if (!done) return done.error();
    }
    return {};
  };
  if (Status st = upsert("task_groups", deltas.groups, true); !st) return st;
  return upsert("task_group_targets", deltas.targets, false);
}

std::string task_groups_migration_sql(bool pg) {
  const std::string integer = pg ? "BIGINT" : "INTEGER";
  const std::string keyed = pg ? ")" : ") WITHOUT ROWID";
  const std::string group =
      "label TEXT NOT NULL, value TEXT NOT NULL, status TEXT NOT NULL, day TEXT NOT NULL, "
      "team TEXT NOT NULL, project TEXT NOT NULL, ";
  auto sums = [&](bool tasks) {
    std::string out;
    for (const char* c : {"tasks", "requests", "tokens", "cost"}) {
      if (tasks || std::string_view(c) != "tasks")
        out += std::string(c) + " " + integer + " NOT NULL, ";
    }
    return out;
  };
  return "DROP TABLE IF EXISTS task_groups;\nDROP TABLE IF EXISTS task_group_targets;\n"
         "CREATE TABLE task_groups (" +
         group + sums(true) + "PRIMARY KEY (label, value, status, day, team, project)" + keyed +
         ";\nCREATE TABLE task_group_targets (" + group + "target TEXT NOT NULL, " + sums(false) +
         "PRIMARY KEY (label, value, status, day, team, project, target)" + keyed +
         ";\nCREATE INDEX IF NOT EXISTS task_targets_task ON task_targets(task_id);\n" +
         task_groups_build_sql(pg);
}

namespace {

// The rollup's rows of the tasks' (status, day, team, project): label "".
std::string plain_groups_build_sql() {
  const std::string group =
      "r.status, COALESCE(t.day, r.day, ''), COALESCE(r.team, ''), COALESCE(r.project, '')";
  return "INSERT INTO task_groups(label,value,status,day,team,project,tasks,requests,tokens,cost)"
         " SELECT '', '', " +
         group +
         ", COUNT(*), SUM(r.requests), SUM(r.tokens), SUM(r.cost) FROM task_totals AS r LEFT "
         "JOIN tasks AS t ON t.task_id = r.task_id WHERE r.requests > 0 GROUP BY 3, 4, 5, 6;\n"
         "INSERT INTO task_group_targets(label,value,status,day,team,project,target,requests,"
         "tokens,cost) SELECT '', '', " +
         group +
         ", x.target, SUM(x.requests), SUM(x.tokens), SUM(x.cost) FROM task_targets AS x JOIN "
         "task_totals AS r ON r.task_id = x.task_id LEFT JOIN tasks AS t ON t.task_id = "
         "r.task_id WHERE r.requests > 0 GROUP BY 3, 4, 5, 6, 7;\n";
}

}  // namespace

std::string task_groups_build_sql(bool pg) {
  return plain_groups_build_sql() + task_label_groups_build_sql(pg);
}

std::string task_label_groups_build_sql(bool pg) {
  // A marked task's labels as rows (key, value) of text values, each in the task's own
  // (status, day, team, project): a marked task's day is its mark's.
  const std::string labels = pg ? "jsonb_each(t.labels::jsonb) AS j" : "json_each(t.labels) AS j";
  const std::string value = pg ? "(j.value #>> '{}')" : "j.value";
  const std::string is_text = pg ? "jsonb_typeof(j.value) = 'string'" : "j.type = 'text'";
  const std::string group =
      "r.status, COALESCE(t.day, r.day, ''), COALESCE(r.team, ''), COALESCE(r.project, '')";
  return "INSERT INTO task_groups(label,value,status,day,team,project,tasks,requests,tokens,cost)"
         " SELECT j.key, " +
         value + ", " + group +
         ", COUNT(*), SUM(r.requests), SUM(r.tokens), SUM(r.cost) FROM task_totals AS r JOIN "
         "tasks AS t ON t.task_id = r.task_id, " +
         labels + " WHERE r.requests > 0 AND " + is_text +
         " GROUP BY 1, 2, 3, 4, 5, 6;\n"
         "INSERT INTO task_group_targets(label,value,status,day,team,project,target,requests,"
         "tokens,cost) SELECT j.key, " +
         value + ", " + group +
         ", x.target, SUM(x.requests), SUM(x.tokens), SUM(x.cost) FROM task_targets AS x JOIN "
         "task_totals AS r ON r.task_id = x.task_id JOIN tasks AS t ON t.task_id = r.task_id, " +
         labels + " WHERE r.requests > 0 AND " + is_text + " GROUP BY 1, 2, 3, 4, 5, 6, 7;\n";
}

std::string task_label_groups_migration_sql(bool pg) {
  return "DELETE FROM task_groups WHERE label <> '';\n"
         "DELETE FROM task_group_targets WHERE label <> '';\n" +
         task_label_groups_build_sql(pg);
}

}  // namespace ferry::ledger::detail
