// The ledger's store interface (Store: schema, append path, budget spent figures) and what
// its two implementations share: column lists, the canonical row encoding the hash chain
// covers, row values and daily aggregate deltas. A Store is used by one thread at a time
// (the writer thread, or a CLI/bench/test thread that owns it).
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/money.h"
#include "common/tags.h"  // kShadowTag
#include "ledger/budgets.h"
#include "ledger/prices.h"
#include "ledger/sqlite_db.h"  // Value, ValueRef
#include "ledger/types.h"

namespace ferry::ledger {

// 1: the first schema; 2: requests.facts (the routing facts, for replay) and daily_team;
// 3: requests.usage_check (backend usage ferry did not bill as reported).
// 4: requests.request_id (the gateway's x-request-id) and its index;
// 5: daily/daily_team refused, shadows and unpriced_served (reports count served requests).
// 6: requests.constraint_mode and schema_hash; 7: the tasks table (task outcomes);
// 8: the cost levers' columns (lever_columns()).
// 9: the rollups daily_key, task_totals and task_targets (detail::Rollups), built from the rows.
// 10: task_groups and task_group_targets (ledger/task_groups.h), built from the rollups.
// 11: task_totals' report sums (kTaskReportSums) and daily_untasked: the report by task reads
// them (detail::task_report_sums_build_sql fills them from the rows).
// 12: task_totals' team and project cost indexes (top tasks of one team or project).
// 13: task_groups' label rows keyed by the task's day, team and project too (a label's report
// with those filters reads the rollup).
constexpr int kSchemaVersion = 13;
// SQL that is true for a row whose trusted_tags (the JSON array tags_json writes: no spaces, a
// quote inside a tag escaped) has the element "shadow" itself, as is_shadow decides for the
// daily sums. The element is `"shadow"` right after `[` or `,`; a tag merely containing the text
// (`x"shadow`, written `"x\"shadow"`) never has an unescaped quote there. SQLite's instr, or
// PostgreSQL's strpos with `pg`.
std::string shadow_row_sql(bool pg);
// The type_code of a row refused because a row with its id exists already (a journal shipping
// a row twice counts it once).
inline constexpr std::string_view kDuplicateIdCode = "duplicate_id";
constexpr const char* kGenesisHash =
    "0000000000000000000000000000000000000000000000000000000000000000";

enum class EntryKind : uint8_t { kRequest, kAdjustment };

// A budget's share of one row's cost, applied in the row's transaction by stores that keep
// budgets shared across instances (PostgreSQL): the period's spent figure grows by `amount`
// and, when the request was admitted under this instance's lease, the lease shrinks by it.
struct BudgetCharge {
  std::string budget;  // BudgetDef::name
  int64_t period_start_us = 0;
  int64_t period_end_us = 0;
  Money limit;
  BudgetScope scope = BudgetScope::kTeam;
  std::string match;
  Money amount;
  bool from_lease = false;
};

// A row ready to append: the record plus everything the ledger computed for it.
struct LedgerEntry {
  EntryKind kind = EntryKind::kRequest;
  RequestRecord record;                // for adjustments the store fills the dimensions in
  std::string adjusts_id;              // adjustments: the original request's id
  std::string note;                    // adjustments: why
  Cost cost;                           // the request's cost (sum of its attempts when it has some)
  std::vector<Cost> attempt_costs;     // one per record.attempts
  std::optional<Money> avoided;        // what the reference target would have charged
  std::string avoided_version;         // the reference price version used
  std::optional<Money> trim_avoided;   // the input price of the tokens trimming removed
  std::optional<Money> cache_avoided;  // what a cache hit's answer cost when it was made
  std::vector<BudgetCharge> charges;   // shared budgets only (see BudgetCharge)
};

// The column lists, in insert and hash order (the hash column itself excluded).
const std::vector<std::string>& request_columns();
const std::vector<std::string>& attempt_columns();
// The request's routing facts (JSON), or NULL. Not in request_columns(): a row hashes it
// after them, and only when it is set, so rows without facts hash as in schema version 1.
constexpr const char* kFactsColumn = "facts";
// RequestRecord::usage_check, or NULL. Like the facts, hashed only where set: after the facts,
// behind the marker value kUsageCheckColumn (so a row without facts cannot be mistaken for one).
constexpr const char* kUsageCheckColumn = "usage_check";
// The gateway's request id, or NULL. Like the facts, not in request_columns(): a row that has
// one hashes it last, after an 'R' marker, so rows without one hash as before.
constexpr const char* kRequestIdColumn = "request_id";
// RequestRecord::constraint_mode and schema_hash, or NULL: hashed only where set, after the
// usage check, behind the marker value kConstraintColumn.
constexpr const char* kConstraintColumn = "constraint_mode";
constexpr const char* kSchemaHashColumn = "schema_hash";
// The cost levers' columns (RequestRecord::trimmed_tokens ...), NULL when unused: hashed only
// when one is set, after the constraint, behind the marker value kLeversColumn.
const std::vector<std::string>& lever_columns();
constexpr const char* kLeversColumn = "levers";

// The canonical encoding of one row's values: each value as N; I<int>; or T<len>:<bytes>;
std::string canonical_values(const std::vector<Value>& values);
// hash = sha256(tag + canonical(request) + "A" + canonical(attempt) ...), lower-case hex.
// `request` is the request_columns() values, then the facts when the row has them, then
// kUsageCheckColumn and the usage check when it has one.
// `request_id` is "" when the row has none.
// `chain` is the instance of a PostgreSQL row (hashed after an 'C' marker), "" in SQLite.
std::string row_hash(const std::vector<Value>& request,
                     const std::vector<std::vector<Value>>& attempts,
                     std::string_view request_id = "", std::string_view chain = "");

// The ledger's storage: one implementation per database (SqliteStore in sqlite_store.h, the
// embedded default; PgStore in pg_store.h, shared by many instances). Both write the same
// rows, hashed the same way (row_hash), with money as integer micro-units.
class Store {
 public:
  virtual ~Store() = default;
  virtual const std::string& currency() const = 0;
  // Records every price version of the catalog (each once) so past periods can be re-priced.
  virtual Status sync_prices(const PriceCatalog& catalog) = 0;
  // Appends the entries in one transaction. Err: the transaction failed and nothing was
  // written. Ok: one Status per entry (an entry can be refused alone, e.g. a duplicate id or
  // an adjustment of an unknown request). `fail_commit` rolls back instead of committing
  // (fault injection for tests). The rows are durable when it returns Ok.
  virtual Result<std::vector<Status>> append(std::vector<LedgerEntry*>& entries,
                                             bool fail_commit = false) = 0;
  // Sum of cost_total of rows whose ended_us lies in [start, end) for a budget's scope.
  virtual Result<Money> spent_between(BudgetScope scope, const std::string& match, int64_t start_us,
                                      int64_t end_us) = 0;
};

// What both stores share: the row values, the hash text, the daily aggregates' deltas.
namespace detail {

// One row's column values as references into the entry and the strings here (no copies).
struct RowScratch {
  std::string day;
  std::string trusted_tags;
  std::string claimed_tags;
  std::string hash_text;  // the bytes the row hash covers
  std::vector<ValueRef> values;
  std::vector<ValueRef> levers;                 // lever_values(), for the stores' own columns
  std::vector<std::vector<ValueRef>> attempts;  // grown, never shrunk: reused across rows
};

// The daily aggregate's deltas of one batch, one per group, upserted once per group at the
// end of the batch (in the same transaction) rather than once per row.
struct DailyDelta {
  std::string day, key_id, team, project, model, target, rule_id;
  int64_t requests = 0, unpriced = 0;
  int64_t refused = 0, shadows = 0, unpriced_served = 0;  // the migration that added `refused`
  int64_t input_tokens = 0, cached_tokens = 0, output_tokens = 0, reasoning_tokens = 0;
  int64_t cost_input = 0, cost_cached = 0, cost_output = 0, cost_reasoning = 0, cost_total = 0;
  int64_t avoided_total = 0, avoided_base = 0;
  int64_t first_us = 0, last_us = 0;
};

// The aggregates' group columns; the sums follow them in every aggregate table.
constexpr const char* kDailyKey = "day,key_id,team,project,model,target,rule_id";
constexpr const char* kDailyTeamKey = "day,team,project,model,target";

std::string join_placeholders(size_t count);
std::string join_names(const std::vector<std::string>& names);
// The SQL with SQLite's ? placeholders numbered as PostgreSQL's $1, $2, ... (for SQL built
// once for both stores; no ? is ever in its text otherwise).
std::string numbered_placeholders(const std::string& sql);
// `rows` groups of `columns` PostgreSQL placeholders, numbered from `first`: ($1,$2),($3,$4)
std::string pg_value_rows(size_t rows, size_t columns, size_t first);
void encode_int(std::string& out, int64_t value);
// The lever_columns() values of an entry (NULLs when it pulled no lever), appended to `out`.
void lever_values(const LedgerEntry& e, std::vector<ValueRef>& out);
// In request_columns() order; then the facts and the usage check when the entry has them.
void request_values(const LedgerEntry& e, std::string_view prev_hash, RowScratch& s);
void attempt_values(std::string_view request_id, size_t index, const AttemptRecord& a,
                    const Cost& cost, std::vector<ValueRef>& v);
// The bytes a row's hash covers; `chain` is the PostgreSQL row's instance ("" in SQLite).
void hash_text(const std::vector<ValueRef>& request, std::string_view request_id,
               const std::vector<ValueRef>* attempts, size_t attempt_count, std::string& out,
               std::string_view chain = "");
// The aggregate upsert (see store.cpp); `pg_rows` 0 for SQLite.
std::string daily_upsert_sql(const char* table, const char* key, size_t pg_rows);
void daily_key(std::string& key, std::initializer_list<std::string_view> parts);

// The group of the row before in one map of a batch's deltas: a row whose group columns equal
// that row's (most rows of a batch) adds to its delta without building its key or searching
// the map. A delta's address in the std::map stays valid while the batch lasts.
template <class Delta>
struct LastGroup {
  std::vector<std::string> parts;  // the group columns of the row before
  Delta* delta = nullptr;
};

// The delta of the group `parts` names (daily_key() is its key in `deltas`), made empty when
// it is new (`fresh`).
template <class Delta>
Delta& group_delta(std::map<std::string, Delta>& deltas, LastGroup<Delta>& last, std::string& key,
                   std::initializer_list<std::string_view> parts, bool& fresh) {
  if (last.delta != nullptr &&
      std::equal(parts.begin(), parts.end(), last.parts.begin(), last.parts.end(),
                 [](std::string_view a, const std::string& b) { return a == b; })) {
    fresh = false;
    return *last.delta;
  }
  daily_key(key, parts);
  auto [it, inserted] = deltas.try_emplace(key);
  fresh = inserted;
  last.parts.assign(parts.begin(), parts.end());
  last.delta = &it->second;
  return it->second;
}

// Adds one appended row to the delta of its group (`group`: the table's key columns' values;
// `key_id`/`rule_id` "" for daily_team); `key` is scratch space for the group's key.
void add_to_daily(std::map<std::string, DailyDelta>& deltas, LastGroup<DailyDelta>& last,
                  std::string& key, std::initializer_list<std::string_view> group,
                  const std::string& day, const LedgerEntry& entry, const std::string& key_id,
                  const std::string& rule_id);
// The values one delta binds, after its group columns, in daily_upsert_sql() order.
std::vector<int64_t> daily_sums(const DailyDelta& d);

// ---- the rollups of schema 9, kept by the writer in the rows' transaction ----------------
// `daily_key`: the daily sums by key (the spend pages by key, a row a key a day where `daily`
// holds one per key, model, target and rule). `task_totals`: one row per task id (every row
// with a task id, adjustments included: requests counts request rows, tokens input + output,
// cost the priced total), its team, project and day the smallest of its rows', its status
// copied from `tasks` (the top tasks and the report by outcome read it without the rows).
// `task_targets`: the same sums per task and target (the share answered locally).
// Schema 11 (SQLite; PostgreSQL's 7): task_totals also keeps the report's sums
// (kTaskReportSums, as `daily` keeps them), and `daily_untasked` the daily sums of the rows
// without a task id, so that `ferry ledger report --by task` reads no row.
constexpr const char* kDailyKeyKey = "day,key_id,team,project";
// task_totals' report sums (schema 11), in task_total_values() order after `cost`; task_totals'
// `requests` and `cost` are daily's `requests` and `cost_total`.
inline constexpr const char* kTaskReportSums[] = {
    "unpriced_served", "refused",          "shadows",     "input_tokens", "cached_tokens",
    "output_tokens",   "reasoning_tokens", "cost_input",  "cost_cached",  "cost_output",
    "cost_reasoning",  "avoided_total",    "avoided_base"};

struct TaskDelta {
  std::string task_id, target, team, project, day;
  int64_t requests = 0, tokens = 0, cost = 0, first_us = 0, last_us = 0;
  DailyDelta sums;  // task_totals only: the report's sums (kTaskReportSums)
};

struct Rollups {
  std::map<std::string, DailyDelta> daily_key;
  std::map<std::string, TaskDelta> tasks;         // by task id
  std::map<std::string, TaskDelta> task_targets;  // by task id and target
  std::map<std::string, DailyDelta> untasked;     // by day: the rows without a task id
  // The group of the row before in each map of the batch: these four, and the stores' own
  // `daily` and `daily_team` maps (kept beside them for the same batch).
  LastGroup<DailyDelta> last_daily_key, last_untasked, last_daily, last_daily_team;
  LastGroup<TaskDelta> last_task_target;
};

// Adds one appended row (its values already computed: `day`) to the batch's rollups; `key` is
// scratch space for the group keys.
void add_to_rollups(Rollups& rollups, std::string& key, const std::string& day,
                    const LedgerEntry& entry);
// The upserts of `rows` deltas (`pg_rows` 0: SQLite's one row of ? placeholders) and the values
// one delta binds, in order.
std::string task_totals_upsert_sql(size_t pg_rows);
std::string task_targets_upsert_sql(size_t pg_rows);
std::string daily_key_upsert_sql(size_t pg_rows);
std::string daily_untasked_upsert_sql(size_t pg_rows);
void task_total_values(const TaskDelta& d, std::vector<ValueRef>& out);
void task_target_values(const TaskDelta& d, std::vector<ValueRef>& out);
void daily_key_values(const DailyDelta& d, std::vector<ValueRef>& out);
void daily_untasked_values(const DailyDelta& d, std::vector<ValueRef>& out);
// Copies the status of `count` task ids (bound as ?) from `tasks` into task_totals: a task
// marked before its first row was rolled up.
std::string task_status_sql(size_t count);
// The rollups built from the rows and the daily aggregate (schema 9's migration, both stores).
extern const char* const kBuildRollupsSql;
// Schema 11's fill (SQLite's; PostgreSQL's 7): task_totals' report sums and daily_untasked from
// the rows, as the writer keeps them. `pg`: PostgreSQL's dialect.
std::string task_report_sums_build_sql(bool pg);

}  // namespace detail

}  // namespace ferry::ledger
