// The ledger in a SQLite file (the embedded, single-machine default): versioned schema and
// migrations, the append path (request, attempt and adjustment rows, the daily aggregates and
// the hash chain in one transaction), WAL checkpoints. Used by one thread at a time.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ledger/sqlite_db.h"
#include "ledger/store.h"

namespace ferry::ledger {

class SqliteStore final : public Store {
 public:
  // Opens or creates the file and migrates it to kSchemaVersion. `currency` "" keeps the
  // file's currency (USD for a new file); a different non-empty currency is refused.
  static Result<SqliteStore> open(const std::string& path, const std::string& currency);

  const std::string& currency() const override { return currency_; }
  Db& db() { return db_; }

  Status sync_prices(const PriceCatalog& catalog) override;
  // One BEGIN IMMEDIATE ... COMMIT (synchronous=FULL). Budget charges are ignored: a SQLite
  // ledger's budgets live in the one process that writes it.
  Result<std::vector<Status>> append(std::vector<LedgerEntry*>& entries,
                                     bool fail_commit = false) override;
  Result<Money> spent_between(BudgetScope scope, const std::string& match, int64_t start_us,
                              int64_t end_us) override;

  // Checkpoints become the caller's job: SQLite stops checkpointing after commits on this
  // connection (the ledger runs them on a thread of their own, so that copying pages into
  // the database file does not stall the writer), and wal_frames() says how many frames the
  // WAL holds after the last commit.
  void take_over_checkpoints();
  int64_t wal_frames() const { return wal_frames_ ? wal_frames_->load() : 0; }
  // A passive checkpoint on this connection: copies what it can without waiting. Ok when
  // another connection is checkpointing (busy).
  Status checkpoint();

 private:
  Status prepare_statements();
  // An adjustment's attribution (key, team, task, model, rule, ...) from the request it adjusts.
  Status copy_original(RequestRecord& r, const std::string& adjusts_id);
  Status append_one(LedgerEntry& entry, std::string& prev_hash, int64_t& last_seq,
                    detail::RowScratch& scratch, std::map<std::string, detail::DailyDelta>& daily,
                    std::map<std::string, detail::DailyDelta>& daily_team,
                    detail::Rollups& rollups);
  // The batch's rollups (store.h), in its transaction.
  Status upsert_rollups(const detail::Rollups& rollups);
  static Status upsert_daily(Stmt& upsert, const detail::DailyDelta& delta, bool with_key_and_rule);

  Db db_;
  std::string currency_;
  Stmt insert_request_;
  Stmt insert_attempt_;
  Stmt upsert_daily_;
  Stmt upsert_daily_team_;
  Stmt upsert_daily_key_;
  Stmt upsert_task_total_;
  Stmt upsert_task_target_;
  Stmt upsert_untasked_;
  Stmt find_original_;
  Stmt head_;
  Stmt set_head_;
  std::unique_ptr<std::atomic<int64_t>> wal_frames_;  // heap: the WAL hook keeps its address
};

}  // namespace ferry::ledger
