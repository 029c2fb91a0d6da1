// ferry::ledger::Ledger: the gateway's one entry point to the cost ledger. Admission
// (worst-case budget reservation, queue slot), recording (pricing, then one writer thread
// with a bounded queue that makes each group durable: in the SQLite ledger's row log, one
// write and fdatasync, and an applier thread that commits the log's rows to SQLite in larger
// transactions; or committed directly, SQLite WAL synchronous=FULL, or PostgreSQL),
// adjustments, budget facts for policies. Thread-safe: every method may be called from any
// thread; none blocks on SQLite except flush(), apply_now() and the destructor. Durable
// callbacks run on the writer thread.
//
// YAML (the `ledger:` mapping of the server config; see ledger/ledger.example.yaml):
//   ledger:
//     path: /var/lib/ferry/ledger.db  # required
//     currency: USD                  # optional; fixed when the file is created
//     reference_model: gpu-large     # optional; avoided cost = this model's price for the tokens
//     queue_capacity: 8192           # rows admitted but not yet durable; beyond it: 503
//     max_batch: 4096                # rows per group commit
//     retry_ms: 200                  # wait between retries of a failed commit
//     group_wait_us: 1000            # group commit: while rows arrive faster than this, a
//                                    # group waits up to this long for the rows still in
//                                    # flight (admitted, not yet recorded); 0 = never waits
//     apply_ms: 1000                 # SQLite: rows wait at most this long in the row log
//                                    # (ledger/row_log.h) before their SQLite commit; 0 = no
//                                    # row log: every group is a SQLite commit
//     responses: { keep_days: 30 }   # stored OpenAI Responses kept this long (response_store.h)
//     postgres:                      # optional: the ledger in PostgreSQL instead (no `path`)
//       url: postgresql://ferry@db/ferry   # or url_env: NAME (the variable holding the URL)
//       instance_id: gw-1            # optional: this instance's chain and leases; default a
//                                    # generated id kept in instance_id_file
//       instance_id_file: F          # default: the config file's path + ".instance-id"
//       lease_pct: 5                 # slice of each hard budget leased at a time
//       lease_ttl_ms: 10000          # a crashed instance's leases come back after this
//       lease_refresh_ms: 100        # how often leases are topped up and renewed
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "common/money.h"
#include "ledger/budgets.h"
#include "ledger/prices.h"
#include "ledger/rate_limits.h"
#include "ledger/store.h"
#include "ledger/types.h"

namespace ferry::ledger {

// The PostgreSQL store (ledger/pg_store.h): many instances share one ledger and its budgets.
struct PgLedgerConfig {
  std::string url;  // resolved: `url`, or the value of the `url_env` variable
  std::string instance_id;
  std::string instance_id_file;
  int64_t lease_pct = 5;
  int64_t lease_ttl_ms = 10000;
  int64_t lease_refresh_ms = 100;
  // The local journal (ledger/journal.h) rows go to while the database cannot be reached;
  // "" = none (rows then wait in memory and new traffic is refused, as with a lost SQLite).
  std::string journal;
  // While the database is unreachable: false = keep serving, hard budgets only within the
  // leases already held (`on_store_down: serve_within_lease`); true = refuse new traffic.
  bool refuse_when_down = false;
};

struct LedgerConfig {
  std::string path;      // the SQLite file; with `postgres`, the database URL (reports, verify)
  std::string currency;  // "" = the file's currency (USD for a new file)
  std::string reference_model;  // "" = no avoided cost
  int64_t queue_capacity = 8192;
  int64_t max_batch = 4096;
  int64_t retry_ms = 200;
  // Group commit (the writer's `gather`): the most a group waits for rows in flight. It waits
  // only while the recent rows came at least two to this window, so a slow stream of rows is
  // never held back.
  int64_t group_wait_us = 1000;
  // SQLite: the row log's rows are committed to the file when this old, or 1,024 of them, or
  // when a reader asks (apply_now). 0: no row log (the CLI's short-lived ledgers). Each apply
  // has a fixed cost (~300 us, from the two figures that follow: the transaction, the WAL's
  // sync): at 200 req/s a 100 ms interval cost 23-24 us a row, 1,000 ms 8-11 (bench/README, issue
  // 17 session 23). Readers in this process never wait for it (apply_now); only another process's
  // readers see rows this late.
  int64_t apply_ms = 1000;
  int64_t responses_keep_days = 30;  // ledger/response_store.h
  std::optional<PgLedgerConfig> postgres;
};

// Parses the `ledger:` mapping. Throws ferry::yaml::YamlError (control plane).
LedgerConfig parse_ledger_config(const YAML::Node& node, const std::string& file);

// Called once, on the writer thread, when a row is durable (ok) or cannot be written (error).
// Must not block: post onto your own executor.
using DurableCallback = std::function<void(const Status&)>;

// A correction of an earlier request: amounts are deltas (negative for refunds).
struct Adjustment {
  std::string adjusts_id;  // the request row being corrected
  Money input;
  Money cached_input;
  Money output;
  Money reasoning;
  std::string note;   // why; kept in the row
  std::string id;     // "" = a new UUIDv7
  int64_t at_us = 0;  // 0 = now
};

struct LedgerStats {
  int64_t rows_committed = 0;
  int64_t rows_refused = 0;  // single rows the store refused (duplicate id, unknown original)
  int64_t batches = 0;       // group commits
  int64_t write_failures = 0;
  int64_t pending = 0;        // admitted or queued, not yet durable
  int64_t hard_refusals = 0;  // 429s from hard budgets
  int64_t rate_refusals = 0;  // 429s from rate limits
  int64_t soft_exceeded = 0;  // admissions past a soft budget
  bool healthy = true;
  bool store_down = false;      // the PostgreSQL store cannot be reached (rows go to the journal)
  int64_t journal_pending = 0;  // rows kept in the journal, not yet shipped
  int64_t journal_shipped = 0;  // rows shipped from the journal since start
  int64_t log_rows = 0;         // rows durable in the row log, not yet committed to SQLite
};

class Store;
class Journal;
class RowLog;
class SqliteStore;
class PgStore;

namespace detail {
struct Core;

// Group commit: how long the writer waits before taking a group, and for how many rows. While
// rows arrive at least two to the window (`gap_ns`, the recent arrival gap), it waits for the
// rows in flight (`pending` admitted or queued, less the `queued`) and for the `returning`
// ones (the clients of the last group, answered and not yet back: in a closed loop they send
// again), at the recent pace and a half again, at most `window_ns`. Otherwise, or with nothing
// on its way, it does not wait (wait_ns 0).
struct GatherPlan {
  size_t rows = 0;  // the queue length that ends the wait
  int64_t wait_ns = 0;
};
GatherPlan plan_gather(int64_t window_ns, int64_t gap_ns, int64_t queued, int64_t pending,
                       int64_t returning);
}  // namespace detail

// A request's place in the ledger: a queue slot and the worst case reserved against its
// budgets. Move-only; destroying it without record() gives both back.
class Admission {
 public:
  Admission() = default;
  Admission(Admission&& other) noexcept = default;
  Admission& operator=(Admission&& other) noexcept;
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  ~Admission();

  bool valid() const { return core_ != nullptr; }
  Money reserved() const { return reservation_.amount; }
  // Soft budgets this request goes past: the gateway sets a header and counts a metric.
  const std::vector<std::string>& soft_exceeded() const { return reservation_.soft_exceeded; }
  // Lowest budget_left_pct among the applying budgets after this reservation.
  std::optional<double> budget_left_pct() const { return reservation_.left_pct; }
  // The rate limits this request counts against (null without any): the x-ratelimit-* headers.
  const RateHold* rate() const { return rate_ ? &*rate_ : nullptr; }

 private:
  friend class Ledger;
  void give_back();
  std::shared_ptr<detail::Core> core_;
  Reservation reservation_;
  std::optional<RateHold> rate_;
};

// What an admission takes from (Ledger::admit).
struct AdmitScope {
  bool budgets = true;
  bool rate_limits = true;
};

class Ledger {
 public:
  // Opens (creating or migrating) the file, records the price versions, rebuilds budget
  // state from the rows of each budget's current period and starts the writer thread.
  static Result<std::unique_ptr<Ledger>> open(LedgerConfig config, PriceCatalog prices,
                                              std::vector<BudgetDef> budgets,
                                              std::vector<RateLimitDef> rate_limits = {});
  ~Ledger();  // drains the queue (every accepted row is written) and stops the writer

  // Stops the writer as the destructor does, and returns once every row queued was written (a
  // store that keeps failing refuses them after three more tries) and every callback ran. For
  // an owner whose callbacks wake coroutines of event loops it is about to destroy (the
  // server): called after the loops stopped and before they go, so that no callback reaches a
  // loop that is gone. Nothing may record after it. Idempotent.
  void stop_writing();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // The worst case over the candidate targets: prompt tokens at the input price plus
  // max_tokens at the output price of the most expensive one. Unpriced targets count zero.
  Money worst_case(const std::vector<std::string>& targets, int64_t prompt_tokens,
                   int64_t max_tokens) const;

  // Takes a queue slot, one request and `tokens` (prompt + output reserved) from every applying
  // rate limit, and reserves `worst_case` against every applying budget, atomically.
  // kUnavailable (503) when the ledger cannot write or its queue is full; kRateLimited (429,
  // type_code "budget_exceeded", param = budget name) past a hard budget, or (type_code
  // "rate_limit_exceeded", param = limit name, retry_after_s) past a rate limit. Non-blocking.
  // The record's tokens correct the rate limits' count when it settles. `scope` leaves out the
  // budgets (nothing reserved, never refused by one: a response-cache hit) or the rate limits.
  Result<Admission> admit(const Subject& subject, Money worst_case, int64_t tokens = 0,
                          AdmitScope scope = {});

  // Prices the record and queues it; `on_durable` runs once it is committed. Settles the
  // admission's reservation to the actual cost at commit. Returns the row id. Non-blocking.
  std::string record(RequestRecord record, Admission admission, DurableCallback on_durable);
  // The same without an admission (e.g. a request refused before admission).
  std::string record(RequestRecord record, DurableCallback on_durable);

  // Queues an adjustment row pointing at an earlier request. Returns its id.
  std::string adjust(Adjustment adjustment, DurableCallback on_durable);

  // The policy fact: lowest remaining share (0..100) of the budgets that apply, or nullopt.
  std::optional<double> budget_left_pct(const Subject& subject);
  std::vector<BudgetState> budgets();
  const std::vector<RateLimitDef>& rate_limits() const;
  // The applying rate limits' state for `subject` now, taking nothing (a 429's headers); null
  // when none applies.
  std::optional<RateHold> rate_views(const Subject& subject);

  // Ok, or kUnavailable with the reason the ledger cannot write.
  Status health() const;
  LedgerStats stats() const;

  // Blocks until every queued row is durable (and, with a row log, committed in SQLite). Not
  // for I/O threads (tests, CLI, shutdown).
  void flush();
  // With a row log: blocks until every row reported durable so far is committed in SQLite
  // (readers call it through catch_up_row_log). Err: the log's rows cannot be applied.
  Status apply_now();
  // True when rows are made durable in the row log (ledger/row_log.h).
  bool has_row_log() const { return row_log_ != nullptr; }

  const PriceCatalog& prices() const { return prices_; }
  const LedgerConfig& config() const { return config_; }
  const std::string& currency() const { return currency_; }

  // Fault injection for tests: the next `count` group commits fail and are retried.
  void inject_commit_failures(int count) { inject_failures_.store(count); }

 private:
  struct Item;
  Ledger(LedgerConfig config, PriceCatalog prices);
  std::string enqueue(std::unique_ptr<Item> item);
  void writer_loop();
  // Before a group is taken (mu_ held by `lock`): waits as detail::plan_gather says, or until
  // flush() or the destructor asks; `answered` rows were answered last, when
  // core_->announced was `announced_then`.
  void gather(std::unique_lock<std::mutex>& lock, int64_t gap_ns, int64_t answered,
              int64_t announced_then);
  void checkpointer_loop();
  void after_commit();
  void start_threads();
  // PostgreSQL: tops up and renews this instance's budget leases (its own connection).
  void leaser_loop();
  void lease_pass(int64_t now_us);
  void rate_lease_pass(int64_t now_us);
  void give_back_rate_leases();
  void settle_rate(const RateHold& hold, const RequestRecord& r, int64_t now_us);
  std::vector<BudgetCharge> charges_for(const Item& item) const;
  // The writer's batch append: to the store, or to the journal while the store is down or
  // the journal still holds older rows (shipped first, so each instance's chain keeps order).
  Result<std::vector<Status>> append_batch(std::vector<LedgerEntry*>& entries, bool fail);
  Result<std::vector<Status>> keep_in_journal(std::vector<LedgerEntry*>& entries);
  // Ships journal rows to the store, oldest first; true when the journal is empty after it.
  bool ship_journal();
  void set_store_down(bool down, const std::string& reason);
  // The row log: the batch written and synced (an injected failure writes nothing).
  Result<std::vector<Status>> log_batch(std::vector<LedgerEntry*>& entries, bool fail);
  // A batch committed to the store by the writer itself (no row log, or an adjustment: its
  // original must be found, so the log is applied first).
  Result<std::vector<Status>> direct_batch(std::vector<LedgerEntry*>& entries, bool fail);
  // Waits until the applier has committed `target` rows (or failed); mu_ held by `lock`.
  Status wait_applied(std::unique_lock<std::mutex>& lock, int64_t target);
  void applier_loop();

  LedgerConfig config_;
  PriceCatalog prices_;
  std::string currency_;
  std::shared_ptr<detail::Core> core_;
  std::unique_ptr<Store> store_;          // used by the writer thread only
  SqliteStore* sqlite_ = nullptr;         // store_ when it is SQLite (checkpoints)
  std::unique_ptr<PgStore> lease_store_;  // used by the leaser thread only
  std::unique_ptr<Journal> journal_;      // PostgreSQL with a journal; the writer thread only
  std::atomic<bool> store_down_{false};
  std::atomic<int64_t> journal_pending_{0};
  std::atomic<int64_t> journal_shipped_{0};
  int64_t next_ship_us_ = 0;  // writer thread: no shipping attempt before this time
  std::thread leaser_;
  std::condition_variable wake_leaser_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  // Items are heap-allocated so that queueing moves a pointer, not a record, under mu_.
  std::vector<std::unique_ptr<Item>> queue_;  // guarded by mu_
  bool writing_ = false;                      // guarded by mu_
  bool stopping_ = false;                     // guarded by mu_
  bool gathering_ = false;                    // guarded by mu_: the writer waits in gather()
  size_t gather_rows_ = 0;                    // guarded by mu_: ... until the queue has these
  int flushing_ = 0;                          // guarded by mu_: flush() callers waiting
  std::string unhealthy_reason_;              // guarded by mu_
  std::atomic<bool> healthy_{true};
  std::atomic<int> inject_failures_{0};
  std::atomic<int64_t> rows_committed_{0};
  std::atomic<int64_t> rows_refused_{0};
  std::atomic<int64_t> batches_{0};
  std::atomic<int64_t> write_failures_{0};
  std::thread writer_;
  // Checkpoints run on their own thread and connection (WAL frames into the database file),
  // so commits do not wait for them; the writer catches up itself when the WAL grows past a
  // bound (see after_commit()).
  // The same thread prepares the row log's spare segments (RowLog::prepare_spare), off the
  // writer's path.
  std::condition_variable checkpoint_wake_;
  bool checkpoint_due_ = false;  // guarded by mu_
  bool spare_due_ = false;       // guarded by mu_
  std::mutex checkpoint_mu_;     // held while either connection checkpoints
  std::thread checkpointer_;

  // The row log (SQLite, apply_ms > 0, its lock taken): the writer appends each group to it;
  // the applier commits the logged rows to SQLite and removes the segments they fill.
  std::unique_ptr<RowLog> row_log_;
  std::mutex store_mu_;  // store_ (and its checkpoints) between the writer and the applier
  std::thread applier_;
  std::condition_variable apply_wake_;
  std::condition_variable applied_cv_;
  std::vector<std::unique_ptr<Item>> apply_queue_;   // guarded by mu_: logged, not yet applied
  std::chrono::steady_clock::time_point apply_due_;  // guarded by mu_: the oldest's deadline
  int64_t logged_ = 0;             // guarded by mu_: rows made durable in the log since start
  int64_t applied_ = 0;            // guarded by mu_: of them, committed in SQLite (or refused)
  int64_t apply_target_ = 0;       // guarded by mu_: a reader waits until applied_ reaches it
  int64_t mark_rows_ = 0;          // guarded by mu_: rows logged before segment mark_segment_
  uint64_t mark_segment_ = 0;      // guarded by mu_
  uint64_t removed_before_ = 0;    // applier thread: segments below this are removed
  bool applier_stopping_ = false;  // guarded by mu_
  std::atomic<bool> apply_healthy_{true};
  std::string apply_error_;  // guarded by mu_
};

}  // namespace ferry::ledger
