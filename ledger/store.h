// The ledger's SQLite file: versioned schema and migrations, the append path (request rows,
// attempt rows, adjustment rows, the daily aggregates and the hash chain), and the canonical
// row encoding the chain hashes. A Store is used by one thread at a time (the writer thread,
// or a CLI/bench/test thread that owns it).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/money.h"
#include "ledger/budgets.h"
#include "ledger/prices.h"
#include "ledger/sqlite_db.h"
#include "ledger/types.h"

namespace ferry::ledger {

// 1: the first schema; 2: requests.facts (the routing facts, for replay) and daily_team;
// 3: requests.usage_check (backend usage ferry did not bill as reported).
// 4: requests.request_id (the gateway's x-request-id) and its index;
// 5: daily/daily_team refused, shadows and unpriced_served (reports count served requests).
constexpr int kSchemaVersion = 6;
// The trusted tag of a shadow copy's row; reports count these apart from served requests.
inline constexpr std::string_view kShadowTag = "shadow";
constexpr const char* kGenesisHash =
    "0000000000000000000000000000000000000000000000000000000000000000";

enum class EntryKind : uint8_t { kRequest, kAdjustment };

// A row ready to append: the record plus everything the ledger computed for it.
struct LedgerEntry {
  EntryKind kind = EntryKind::kRequest;
  RequestRecord record;             // for adjustments the store fills the dimensions in
  std::string adjusts_id;           // adjustments: the original request's id
  std::string note;                 // adjustments: why
  Cost cost;                        // the request's cost (sum of its attempts when it has some)
  std::vector<Cost> attempt_costs;  // one per record.attempts
  std::optional<Money> avoided;     // what the reference target would have charged
  std::string avoided_version;      // the reference price version used
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

// The canonical encoding of one row's values: each value as N; I<int>; or T<len>:<bytes>;
std::string canonical_values(const std::vector<Value>& values);
// hash = sha256(tag + canonical(request) + "A" + canonical(attempt) ...), lower-case hex.
// `request` is the request_columns() values, then the facts when the row has them, then
// kUsageCheckColumn and the usage check when it has one.
// `request_id` is "" when the row has none.
std::string row_hash(const std::vector<Value>& request,
                     const std::vector<std::vector<Value>>& attempts,
                     std::string_view request_id = "");

namespace detail {
struct RowScratch;
struct DailyDelta;
}  // namespace detail

class Store {
 public:
  // Opens or creates the file and migrates it to kSchemaVersion. `currency` "" keeps the
  // file's currency (USD for a new file); a different non-empty currency is refused.
  static Result<Store> open(const std::string& path, const std::string& currency);

  const std::string& currency() const { return currency_; }
  Db& db() { return db_; }

  // Records every price version of the catalog (each once) so past periods can be re-priced.
  Status sync_prices(const PriceCatalog& catalog);

  // Appends the entries in one transaction (BEGIN IMMEDIATE ... COMMIT). Err: the
  // transaction failed and nothing was written. Ok: one Status per entry (an entry can be
  // refused alone, e.g. a duplicate id or an adjustment of an unknown request).
  // `fail_commit` rolls back instead of committing (fault injection for tests).
  Result<std::vector<Status>> append(std::vector<LedgerEntry*>& entries, bool fail_commit = false);

  // Checkpoints become the caller's job: SQLite stops checkpointing after commits on this
  // connection (the ledger runs them on a thread of their own, so that copying pages into
  // the database file does not stall the writer), and wal_frames() says how many frames the
  // WAL holds after the last commit.
  void take_over_checkpoints();
  int64_t wal_frames() const { return wal_frames_ ? wal_frames_->load() : 0; }
  // A passive checkpoint on this connection: copies what it can without waiting. Ok when
  // another connection is checkpointing (busy).
  Status checkpoint();

  // Sum of cost_total of rows whose ended_us lies in [start, end) for a budget's scope.
  Result<Money> spent_between(BudgetScope scope, const std::string& match, int64_t start_us,
                              int64_t end_us);

 private:
  Status prepare_statements();
  // An adjustment's attribution (key, team, task, model, rule, ...) from the request it adjusts.
  Status copy_original(RequestRecord& r, const std::string& adjusts_id);
  Status append_one(LedgerEntry& entry, std::string& prev_hash, int64_t& last_seq,
                    detail::RowScratch& scratch, std::map<std::string, detail::DailyDelta>& daily,
                    std::map<std::string, detail::DailyDelta>& daily_team);
  static Status upsert_daily(Stmt& upsert, const detail::DailyDelta& delta, bool with_key_and_rule);

  Db db_;
  std::string currency_;
  Stmt insert_request_;
  Stmt insert_attempt_;
  Stmt upsert_daily_;
  Stmt upsert_daily_team_;
  Stmt find_original_;
  Stmt head_;
  Stmt set_head_;
  std::unique_ptr<std::atomic<int64_t>> wal_frames_;  // heap: the WAL hook keeps its address
};

}  // namespace ferry::ledger
