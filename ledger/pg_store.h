// The ledger in PostgreSQL, shared by many ferry instances: versioned schema (migrations run
// at start under an advisory lock; a newer schema is refused), batched append (multi-row
// COPY in one transaction per batch, synchronous commit), one hash chain per instance, and
// the shared budget tables (spent per period, leases per instance). A PgStore owns one
// connection and is used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ledger/pg_db.h"
#include "ledger/store.h"

namespace ferry::ledger {

// 1: the first PostgreSQL schema (the rows of SQLite schema 5, plus instance_id/chain_seq,
// chain_heads, budget_shares, budget_leases).
// 2: the tasks table; 3: the cost levers' columns; 4: the rollups and api_keys;
// 5: rate_buckets (shared rate limits); 6: task_groups and task_group_targets;
// 7: task_totals' report sums and daily_untasked (SQLite's 11); 8: task_totals'
// team and project cost indexes (SQLite's 12); 9: task_groups' label rows keyed by day, team
// and project (SQLite's 13); 10: rate_leases (each instance's units on a shared rate bucket).
constexpr int kPgSchemaVersion = 10;

// True for a postgresql:// or postgres:// URL (where a ledger path may name either store).
bool is_pg_url(std::string_view path);

// A lease transaction's outcome for one budget period.
struct LeaseGrant {
  Money granted;       // added to this instance's lease
  bool reset = false;  // this instance's lease had expired: the local lease starts over at granted
  Money spent;         // the period's shared spent figure (every instance's rows)
};

// A rate bucket's lease outcome (ledger/rate_limits.h units).
struct RateGrant {
  int64_t granted = 0;  // taken out of the database bucket for this instance
  int64_t level = 0;    // the database bucket after it
  bool reset = false;   // this instance had no live lease: what it held locally is gone
};

class PgStore final : public Store {
 public:
  // Connects, migrates to kPgSchemaVersion and checks the currency (as SqliteStore::open).
  // `instance` names this instance's hash chain and leases.
  static Result<PgStore> open(const std::string& url, const std::string& currency,
                              const std::string& instance);

  const std::string& currency() const override { return currency_; }
  Status sync_prices(const PriceCatalog& catalog) override;
  // One transaction: the chain head of this instance (locked), the originals of adjustments,
  // the rows and attempts by COPY (the rows sent while they are made), one upsert per
  // aggregate and rollup, the budget charges, the new head, COMMIT. Returns once COMMIT has
  // returned (synchronous_commit on). A row whose id exists already is found by the unique
  // index (the batch is then redone with a lookup of its ids, refusing those rows alone):
  // such a row comes only from a journal shipping a batch twice, so no batch pays a lookup.
  Result<std::vector<Status>> append(std::vector<LedgerEntry*>& entries,
                                     bool fail_commit = false) override;
  Result<Money> spent_between(BudgetScope scope, const std::string& match, int64_t start_us,
                              int64_t end_us) override;

  // Leases: takes up to `want` more of the budget's period (never past its limit counting
  // every instance's unexpired leases and the spent figure) and renews this instance's lease
  // until `until_us`. One transaction; the budget's row is locked while it runs.
  Result<LeaseGrant> lease(const BudgetCharge& budget, Money want, int64_t now_us,
                           int64_t until_us);
  // Gives every lease of this instance back (start and clean shutdown).
  Status drop_leases();
  // Rate limits: takes up to `want` units out of the shared bucket of limit `name` (created
  // full, refilled as it is read) and records this instance's lease on it: `held` (the units
  // it still holds, unless its lease is no longer live) plus the grant, until `until_us`. The
  // bucket and the live leases together never hold more than one minute's quota: it refills
  // only up to the quota less the leases' units. One transaction under the bucket's row lock.
  Result<RateGrant> take_rate(const std::string& name, std::string_view dimension,
                              int64_t per_minute, int64_t want, int64_t held, int64_t now_us,
                              int64_t until_us);
  // Puts units this instance leased and did not use back (clean shutdown), never past the
  // quota less the others' leases, and ends its lease.
  Status give_rate(const std::string& name, std::string_view dimension, int64_t per_minute,
                   int64_t units, int64_t now_us);

  PgConn& conn() { return conn_; }

 private:
  Status migrate();
  // append() once; `look_up_ids`: refuse the rows whose id exists (else the COPY fails on them).
  Result<std::vector<Status>> append_batch(std::vector<LedgerEntry*>& entries, bool fail_commit,
                                           bool look_up_ids);
  Status ensure_shares(const std::vector<const BudgetCharge*>& budgets);
  Status apply_charges(const std::vector<LedgerEntry*>& entries,
                       const std::vector<Status>& results);

  PgConn conn_;
  std::string currency_;
  std::string instance_;
};

}  // namespace ferry::ledger
