#include "ledger/ledger.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <utility>

#include "common/clock.h"
#include "common/ids.h"
#include "common/saturating.h"
#include "common/yaml_util.h"

#include "ledger/journal.h"
#include "ledger/pg_store.h"
#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
#include "ledger/sqlite_store.h"
#include "ledger/store.h"

namespace ferry::ledger {

namespace detail {

// State shared by the ledger and the admissions it handed out (which may outlive it).
struct Core {
  Core(std::vector<BudgetDef> defs, std::vector<RateLimitDef> limits)
      : book(std::move(defs)), rates(std::move(limits)) {}
  BudgetBook book;
  RateBook rates;
  std::atomic<int64_t> pending{0};
  // Rows announced since start (admissions let through, records and adjustments without one):
  // the writer tells by it whether the clients it answered last have come back (gather()).
  std::atomic<int64_t> announced{0};
  std::atomic<int64_t> hard_refusals{0};
  std::atomic<int64_t> rate_refusals{0};
  std::atomic<int64_t> soft_exceeded{0};
};

}  // namespace detail

namespace {
// Names the calling thread (what `top -H` and /proc/<pid>/task/<tid>/comm show; at most 15
// characters): bench/full_threads.sh reads each thread's CPU by it.
void name_thread(const char* name) {
  (void)pthread_setname_np(pthread_self(), name);
}

// Rows in the apply queue past which the applier commits them without waiting for apply_ms.
constexpr size_t kApplyRows = 1024;
}  // namespace

struct Ledger::Item {
  LedgerEntry entry;
  std::optional<Reservation> reservation;
  std::optional<RateHold> rate;
  DurableCallback on_durable;
  // The caller chose the row's id (it may repeat one): committed to the store directly, so a
  // duplicate is refused to its caller. A generated UUIDv7 cannot repeat: the row log.
  bool id_given = false;
};

namespace {

PgLedgerConfig parse_pg_config(const YAML::Node& node, const std::string& file) {
  yaml::Map map(node, file, "ledger.postgres");
  map.allow_only({"url", "url_env", "instance_id", "instance_id_file", "lease_pct", "lease_ttl_ms",
                  "lease_refresh_ms", "journal", "on_store_down"});
  PgLedgerConfig pg;
  auto url = map.opt_str("url");
  auto url_env = map.opt_str("url_env");
  if (url.has_value() == url_env.has_value()) map.fail("url", "give exactly one of url, url_env");
  if (url) {
    pg.url = *url;
  } else {
    const char* value = std::getenv(url_env->c_str());
    if (value == nullptr || *value == '\0') {
      map.fail("url_env", "the environment variable " + *url_env + " is not set");
    }
    pg.url = value;
  }
  if (!is_pg_url(pg.url)) map.fail(url ? "url" : "url_env", "must be a postgresql:// URL");
  pg.instance_id = map.opt_str("instance_id").value_or("");
  pg.instance_id_file = map.opt_str("instance_id_file").value_or(file + ".instance-id");
  pg.lease_pct = map.integer_or("lease_pct", pg.lease_pct, 1, 100);
  pg.lease_ttl_ms = map.integer_or("lease_ttl_ms", pg.lease_ttl_ms, 1000, 3600000);
  pg.lease_refresh_ms = map.integer_or("lease_refresh_ms", pg.lease_refresh_ms, 10, 10000);
  if (pg.lease_refresh_ms * 4 > pg.lease_ttl_ms) {
    map.fail("lease_refresh_ms", "must be at most a quarter of lease_ttl_ms");
  }
  // The journal: beside the config file unless named (relative to the config file), or off.
  std::string journal = map.opt_str("journal").value_or(file + ".journal.db");
  if (journal.empty()) map.fail("journal", "must be a file path, or off");
  if (journal != "off") {
    std::filesystem::path p(journal);
    if (p.is_relative() && map.opt_str("journal"))
      p = std::filesystem::path(file).parent_path() / p;
    pg.journal = p.string();
  }
  std::string down = map.opt_str("on_store_down").value_or("serve_within_lease");
  if (down != "serve_within_lease" && down != "refuse") {
    map.fail("on_store_down", "must be serve_within_lease or refuse, got '" + down + "'");
  }
  pg.refuse_when_down = down == "refuse";
  return pg;
}

// This instance's id: configured, or generated once and kept in a file beside the config.
Result<std::string> instance_id(const PgLedgerConfig& pg) {
  if (!pg.instance_id.empty()) return pg.instance_id;
  std::ifstream in(pg.instance_id_file);
  std::string id;
  if (in && std::getline(in, id) && !id.empty()) return id;
  id = make_uuid_v7();
  std::ofstream out(pg.instance_id_file, std::ios::trunc);
  out << id << "\n";
  if (!out.flush()) {
    return Error::make(ErrorCode::kUnavailable,
                       "ledger: cannot write the instance id file " + pg.instance_id_file +
                           " (set ledger.postgres.instance_id or instance_id_file)");
  }
  return id;
}

}  // namespace

LedgerConfig parse_ledger_config(const YAML::Node& node, const std::string& file) {
  yaml::Map map(node, file, "ledger");
  map.allow_only({"path", "currency", "reference_model", "queue_capacity", "max_batch", "retry_ms",
                  "group_wait_us", "apply_ms", "responses", "postgres"});
  LedgerConfig config;
  if (node["postgres"]) {
    if (node["path"]) map.fail("path", "give either path (SQLite) or postgres, not both");
    config.postgres = parse_pg_config(node["postgres"], file);
    config.path = config.postgres->url;
  } else {
    config.path = map.str("path");
    if (config.path.empty()) map.fail("path", "must not be empty");
    // A server names its PostgreSQL ledger under `postgres`, where its instance id (its own
    // hash chain) is configured; a URL as the path would share one chain between instances.
    if (is_pg_url(config.path)) {
      map.fail("path",
               "is a PostgreSQL URL: configure it as ledger.postgres.url (with its "
               "instance_id) instead");
    }
  }
  config.currency = map.opt_str("currency").value_or("");
  config.reference_model = map.opt_str("reference_model").value_or("");
  config.queue_capacity = map.integer_or("queue_capacity", config.queue_capacity, 1, 1 << 24);
  config.max_batch = map.integer_or("max_batch", config.max_batch, 1, 1 << 20);
  config.retry_ms = map.integer_or("retry_ms", config.retry_ms, 1, 60000);
  config.group_wait_us = map.integer_or("group_wait_us", config.group_wait_us, 0, 100000);
  config.apply_ms = map.integer_or("apply_ms", config.apply_ms, 0, 60000);
  if (auto responses = map.opt_map("responses")) {  // stored Responses (ledger/response_store.h)
    responses->allow_only({"keep_days"});
    config.responses_keep_days =
        responses->integer_or("keep_days", config.responses_keep_days, 1, 3650);
  }
  return config;
}

Admission& Admission::operator=(Admission&& other) noexcept {
  if (this != &other) {
    give_back();
    core_ = std::move(other.core_);
    reservation_ = std::move(other.reservation_);
    rate_ = std::move(other.rate_);
  }
  return *this;
}

Admission::~Admission() {
  give_back();
}

void Admission::give_back() {
  if (!core_) return;
  core_->book.release(reservation_);
  if (rate_) core_->rates.release(*rate_, unix_micros_now());
  core_->pending.fetch_sub(1);
  core_.reset();
}

Ledger::Ledger(LedgerConfig config, PriceCatalog prices)
    : config_(std::move(config)), prices_(std::move(prices)) {}

Result<std::unique_ptr<Ledger>> Ledger::open(LedgerConfig config, PriceCatalog prices,
                                             std::vector<BudgetDef> budgets,
                                             std::vector<RateLimitDef> rate_limits) {
  std::unique_ptr<Store> store;
  std::unique_ptr<PgStore> lease_store;
  std::unique_ptr<Journal> journal;
  std::unique_ptr<RowLog> row_log;
  if (!config.postgres && is_pg_url(config.path)) {
    // A URL given as the path (`ferry ledger adjust --db postgresql://...`): its own chain.
    config.postgres = PgLedgerConfig{};
    config.postgres->url = config.path;
    config.postgres->instance_id = "ferry-cli";
  }
  if (config.postgres) {
    auto id = instance_id(*config.postgres);
    if (!id) return id.error();
    config.postgres->instance_id = *id;
    auto pg = PgStore::open(config.postgres->url, config.currency, *id);
    if (!pg) return pg.error();
    auto leases = PgStore::open(config.postgres->url, config.currency, *id);
    if (!leases) return leases.error();
    // What a previous run of this instance held died with it: nothing of it is in flight.
    if (auto st = leases->drop_leases(); !st) return st.error();
    store = std::make_unique<PgStore>(std::move(*pg));
    lease_store = std::make_unique<PgStore>(std::move(*leases));
    if (!config.postgres->journal.empty()) {
      auto j = Journal::open(config.postgres->journal);
      if (!j) {
        return Error::make(ErrorCode::kUnavailable, "ledger: cannot open the journal " +
                                                        config.postgres->journal + ": " +
                                                        j.error().message);
      }
      journal = std::make_unique<Journal>(std::move(*j));
    }
  } else {
    if (config.apply_ms > 0) {
      // A server restarting while a CLI applies the log it left: wait for it a little. A
      // ledger of this process holds it for as long as it is open: no wait for that one.
      bool held_here = false;
      for (int tries = 0; tries < 20 && !row_log && !held_here; ++tries) {
        auto opened = RowLog::open(config.path);
        if (opened) {
          row_log = std::move(*opened);
        } else if (opened.error().type_code != "row_log_locked") {
          return opened.error();
        } else if (row_log_owned_here(config.path)) {
          held_here = true;
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }
      if (!row_log) {
        std::cerr << "ferry: the ledger's row log " << config.path << "-rowlog is held by "
                  << (held_here ? "another ledger of this process" : "another process")
                  << "; committing each group to SQLite\n";
      }
    }
    // Without the log: what a log of this file holds (a killed server's) goes in first.
    if (!row_log) {
      if (Status st = catch_up_row_log(config.path); !st) return st.error();
    }
    auto sqlite = SqliteStore::open(config.path, config.currency);
    if (!sqlite) return sqlite.error();
    if (row_log) {
      // Rows a crash left in the log: applied before anything reads the file (budgets below).
      auto contents = row_log->read_all();
      if (!contents) return contents.error();
      for (const std::string& note : contents->notes) std::cerr << "ferry: " << note << "\n";
      auto applied =
          apply_log_rows(*sqlite, contents->entries, static_cast<size_t>(config.max_batch));
      if (!applied) {
        return Error::make(ErrorCode::kUnavailable,
                           "ledger: cannot apply the " + std::to_string(contents->entries.size()) +
                               " rows of its row log: " + applied.error().message);
      }
      row_log->remove_before(contents->last_segment + 1);
      if (Status st = row_log->start_segment(contents->last_segment); !st) return st.error();
    }
    store = std::make_unique<SqliteStore>(std::move(*sqlite));
  }
  if (auto st = store->sync_prices(prices); !st) return st.error();
  std::unique_ptr<Ledger> ledger(new Ledger(std::move(config), std::move(prices)));
  ledger->currency_ = store->currency();
  ledger->core_ = std::make_shared<detail::Core>(std::move(budgets), std::move(rate_limits));
  // Budget state is rebuilt from the ledger: the cost of every row that ended in each
  // budget's current period.
  int64_t now = unix_micros_now();
  const auto& defs = ledger->core_->book.defs();
  for (size_t i = 0; i < defs.size(); ++i) {
    PeriodBounds bounds = budget_period_at(defs[i], now);
    auto spent = store->spent_between(defs[i].scope, defs[i].match, bounds.start_us, bounds.end_us);
    if (!spent) return spent.error();
    ledger->core_->book.set_spent(i, bounds, *spent);
  }
  ledger->store_ = std::move(store);
  ledger->lease_store_ = std::move(lease_store);
  if (journal) ledger->journal_pending_.store(journal->pending());
  ledger->journal_ = std::move(journal);
  ledger->row_log_ = std::move(row_log);
  ledger->start_threads();
  if (ledger->row_log_) {
    Ledger* owner = ledger.get();
    register_row_log_owner(ledger->config_.path, [owner] { return owner->apply_now(); });
  }
  return ledger;
}

void Ledger::start_threads() {
  if (lease_store_) {
    core_->book.set_shared(true);
    core_->rates.set_shared(true);
    lease_pass(unix_micros_now());  // the first leases before the first admission
    leaser_ = std::thread([this] { leaser_loop(); });
  } else {
    sqlite_ = static_cast<SqliteStore*>(store_.get());
    sqlite_->take_over_checkpoints();
    checkpointer_ = std::thread([this] { checkpointer_loop(); });
  }
  if (row_log_) applier_ = std::thread([this] { applier_loop(); });
  writer_ = std::thread([this] { writer_loop(); });
}

void Ledger::stop_writing() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  checkpoint_wake_.notify_all();
  wake_leaser_.notify_all();
  if (leaser_.joinable()) leaser_.join();
  if (writer_.joinable()) writer_.join();
}

Ledger::~Ledger() {
  // No reader asks this ledger to apply its log any more (waits for one that is asking).
  if (row_log_) unregister_row_log_owner(config_.path);
  stop_writing();
  if (applier_.joinable()) {
    {
      std::lock_guard lock(mu_);
      applier_stopping_ = true;
    }
    apply_wake_.notify_all();
    applier_.join();
    // Every logged row is in SQLite: the log starts empty next time. (Rows the applier could
    // not commit stay in their segments and are applied at the next start.)
    std::lock_guard lock(mu_);
    if (applied_ == logged_) row_log_->remove_before(row_log_->segment() + 1);
  }
  if (checkpointer_.joinable()) checkpointer_.join();
  // Every row is written: what this instance still holds goes back to the others.
  if (lease_store_) {
    (void)lease_store_->drop_leases();
    give_back_rate_leases();
  }
}

Money Ledger::worst_case(const std::vector<std::string>& targets, int64_t prompt_tokens,
                         int64_t max_tokens) const {
  int64_t now = unix_micros_now();
  Money worst;
  for (const auto& target : targets) {
    auto cost = prices_.worst_case(target, prompt_tokens, max_tokens, now);
    if (cost && *cost > worst) worst = *cost;
  }
  return worst;
}

Result<Admission> Ledger::admit(const Subject& subject, Money worst_case, int64_t tokens,
                                AdmitScope scope) {
  if (auto st = health(); !st) return st.error();
  if (core_->pending.fetch_add(1) >= config_.queue_capacity) {
    core_->pending.fetch_sub(1);
    return Error::make(ErrorCode::kUnavailable,
                       "ledger queue is full (" + std::to_string(config_.queue_capacity) +
                           " requests not yet recorded); refusing unbilled traffic",
                       "", "ledger_unavailable");
  }
  const int64_t now = unix_micros_now();
  std::optional<RateHold> rate;
  if (scope.rate_limits && !core_->rates.empty()) {
    auto held = core_->rates.reserve(subject, tokens, now);
    if (!held) {
      core_->pending.fetch_sub(1);
      core_->rate_refusals.fetch_add(1);
      return held.error();
    }
    if (!held->limits.empty()) rate = std::move(*held);
  }
  auto reservation = scope.budgets ? core_->book.reserve(subject, worst_case, now)
                                   : Result<Reservation>(Reservation{});
  if (!reservation) {
    if (rate) core_->rates.release(*rate, now);
    core_->pending.fetch_sub(1);
    core_->hard_refusals.fetch_add(1);
    return reservation.error();
  }
  if (!reservation->soft_exceeded.empty()) core_->soft_exceeded.fetch_add(1);
  core_->announced.fetch_add(1, std::memory_order_relaxed);
  Admission admission;
  admission.core_ = core_;
  admission.reservation_ = std::move(*reservation);
  admission.rate_ = std::move(rate);
  return admission;
}

namespace {

TokenSource weaker(TokenSource a, TokenSource b) {
  auto rank = [](TokenSource s) {
    switch (s) {
      case TokenSource::kNone:
        return 0;
      case TokenSource::kBackend:
        return 1;
      case TokenSource::kTokenizer:
        return 2;
      case TokenSource::kEstimate:
        return 3;
    }
    return 0;
  };
  return rank(a) >= rank(b) ? a : b;
}

void add_count(TokenCount& sum, const TokenCount& part) {
  sum.count += part.count;
  sum.source = weaker(sum.source, part.source);
}

bool has_tokens(const Tokens& t) {
  return t.input.count + t.cached_input.count + t.output.count + t.reasoning.count > 0;
}

// What the levers avoided, at the answering target's prices: the trimmed tokens as uncached
// input, a cache hit's answer as it was billed when it was made. Unset when unpriced.
void price_levers(LedgerEntry& entry, const RequestRecord& record, const PriceCatalog& prices,
                  int64_t at) {
  if (entry.kind != EntryKind::kRequest) return;
  if (record.trimmed_tokens >= 0) {
    Tokens trimmed;
    trimmed.input = {record.trimmed_tokens, TokenSource::kTokenizer};
    Cost cost = prices.price(record.target, trimmed, at);
    if (cost.pricing != Pricing::kUnpriced) entry.trim_avoided = cost.total();
  }
  if (record.cache == "hit") {  // "miss" and "bypass" avoided nothing
    Cost cost = prices.price(record.target, record.cache_tokens, at);
    if (cost.pricing != Pricing::kUnpriced) entry.cache_avoided = cost.total();
  }
}

// Prices a request into `entry` (as made: empty), which then takes the record (moved once, not
// through a returned entry); with attempts, the request's tokens and cost are the sums of theirs.
void price_request(LedgerEntry& entry, RequestRecord& record, const PriceCatalog& prices,
                   const std::string& reference_model) {
  int64_t at = record.started_us;
  if (record.attempts.empty()) {
    entry.cost = prices.price(record.target, record.tokens, at);
  } else {
    Tokens sum;
    Cost total;
    bool any_unpriced = false;
    bool all_internal = true;
    std::vector<std::string> versions;
    for (const auto& attempt : record.attempts) {
      Cost cost = prices.price(attempt.target, attempt.tokens, at);
      add_count(sum.input, attempt.tokens.input);
      add_count(sum.cached_input, attempt.tokens.cached_input);
      add_count(sum.output, attempt.tokens.output);
      add_count(sum.reasoning, attempt.tokens.reasoning);
      if (cost.pricing == Pricing::kUnpriced) {
        // No tokens at an unknown price is still exactly nothing.
        any_unpriced = any_unpriced || has_tokens(attempt.tokens);
      } else {
        total.input += cost.input;
        total.cached_input += cost.cached_input;
        total.output += cost.output;
        total.reasoning += cost.reasoning;
        all_internal = all_internal && cost.pricing == Pricing::kInternal;
        if (std::find(versions.begin(), versions.end(), cost.price_version) == versions.end()) {
          versions.push_back(cost.price_version);
        }
      }
      entry.attempt_costs.push_back(std::move(cost));
    }
    record.tokens = sum;
    if (any_unpriced) {
      total = Cost{};
    } else {
      total.pricing = versions.empty() || !all_internal ? Pricing::kPriced : Pricing::kInternal;
      for (const auto& v : versions)
        total.price_version += (total.price_version.empty() ? "" : ",") + v;
    }
    entry.cost = std::move(total);
  }
  if (!reference_model.empty() && entry.kind == EntryKind::kRequest) {
    Cost reference = prices.price(reference_model, record.tokens, at);
    if (reference.pricing != Pricing::kUnpriced && entry.cost.pricing != Pricing::kUnpriced) {
      entry.avoided = reference.total();
      entry.avoided_version = reference.price_version;
    }
  }
  price_levers(entry, record, prices, at);
  entry.record = std::move(record);
}

}  // namespace

std::string Ledger::record(RequestRecord record, Admission admission, DurableCallback on_durable) {
  auto item = std::make_unique<Item>();
  item->id_given = !record.id.empty();
  if (record.id.empty()) record.id = make_uuid_v7();
  price_request(item->entry, record, prices_, config_.reference_model);
  item->on_durable = std::move(on_durable);
  if (admission.valid()) {
    item->reservation = std::move(admission.reservation_);
    item->rate = std::move(admission.rate_);
    admission.rate_.reset();
    admission.core_.reset();  // the queue slot moves to the item
  } else {
    core_->pending.fetch_add(1);
    core_->announced.fetch_add(1, std::memory_order_relaxed);
  }
  return enqueue(std::move(item));
}

std::string Ledger::record(RequestRecord record, DurableCallback on_durable) {
  return this->record(std::move(record), Admission(), std::move(on_durable));
}

std::string Ledger::adjust(Adjustment adjustment, DurableCallback on_durable) {
  auto item = std::make_unique<Item>();
  LedgerEntry& entry = item->entry;
  entry.kind = EntryKind::kAdjustment;
  entry.adjusts_id = std::move(adjustment.adjusts_id);
  entry.note = std::move(adjustment.note);
  entry.record.id = adjustment.id.empty() ? make_uuid_v7() : std::move(adjustment.id);
  int64_t at = adjustment.at_us != 0 ? adjustment.at_us : unix_micros_now();
  entry.record.started_us = at;
  entry.record.ended_us = at;
  entry.record.http_status = 0;
  entry.cost.pricing = Pricing::kPriced;
  entry.cost.input = adjustment.input;
  entry.cost.cached_input = adjustment.cached_input;
  entry.cost.output = adjustment.output;
  entry.cost.reasoning = adjustment.reasoning;
  item->on_durable = std::move(on_durable);
  core_->pending.fetch_add(1);
  core_->announced.fetch_add(1, std::memory_order_relaxed);
  return enqueue(std::move(item));
}

std::string Ledger::enqueue(std::unique_ptr<Item> item) {
  std::string id = item->entry.record.id;
  bool wake;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(item));
    // A gathering writer is woken once, by the row that completes its group (or its timer).
    wake = !gathering_ || queue_.size() >= gather_rows_;
  }
  if (wake) wake_.notify_one();
  return id;
}

namespace detail {

GatherPlan plan_gather(int64_t window_ns, int64_t gap_ns, int64_t queued, int64_t pending,
                       int64_t returning) {
  if (window_ns <= 0 || gap_ns < 0 || gap_ns > window_ns / 2) return {};
  const int64_t expected = std::max<int64_t>(0, pending - queued) + std::max<int64_t>(0, returning);
  if (expected <= 0) return {};
  // expected * gap * 3 / 2, at most the window (and without overflow).
  const int64_t gap = std::max<int64_t>(gap_ns, 1);
  const int64_t pace_ns =
      expected >= window_ns / gap ? window_ns : std::min(window_ns, expected * gap / 2 * 3);
  return {static_cast<size_t>(queued + expected), pace_ns};
}

}  // namespace detail

void Ledger::gather(std::unique_lock<std::mutex>& lock, int64_t gap_ns, int64_t answered,
                    int64_t announced_then) {
  if (flushing_ > 0 || stopping_ || journal_pending_.load() > 0 || !healthy_.load()) return;
  // Nothing is being written now: `pending` is the queue and the rows admitted, not recorded.
  // Of the clients answered last, those not yet come back (each new row is counted as one).
  const int64_t returning = answered - (core_->announced.load() - announced_then);
  const detail::GatherPlan plan =
      detail::plan_gather(config_.group_wait_us * 1000, gap_ns, static_cast<int64_t>(queue_.size()),
                          core_->pending.load(), returning);
  if (plan.wait_ns <= 0) return;
  gather_rows_ = plan.rows;
  gathering_ = true;
  wake_.wait_for(lock, std::chrono::nanoseconds(plan.wait_ns),
                 [&] { return stopping_ || flushing_ > 0 || queue_.size() >= gather_rows_; });
  gathering_ = false;
}

void Ledger::writer_loop() {
  name_thread("ledger-writer");
  std::vector<std::unique_ptr<Item>> taken;
  std::vector<LedgerEntry*> entries;
  // The rows' recent arrival gap: an average over groups, 1/8 weight each (-1: none yet).
  int64_t gap_ns = -1;
  auto last_take = std::chrono::steady_clock::now();
  int64_t answered = 0;        // the last group's rows
  int64_t announced_then = 0;  // core_->announced when they were answered
  for (;;) {
    {
      std::unique_lock lock(mu_);
      auto ready = [&] { return stopping_ || !queue_.empty(); };
      if (journal_pending_.load() > 0) {
        // Rows wait in the journal: shipped batch after batch while the store answers, and
        // tried again every retry_ms while it does not, new rows or not.
        const auto pause =
            std::chrono::microseconds(std::max<int64_t>(0, next_ship_us_ - unix_micros_now()));
        if (!wake_.wait_for(lock, pause, ready)) {
          lock.unlock();
          (void)ship_journal();
          continue;
        }
      } else {
        wake_.wait(lock, ready);
      }
      if (queue_.empty()) break;  // stopping and drained (a journal keeps its rows for later)
      gather(lock, gap_ns, answered, announced_then);
      const auto now = std::chrono::steady_clock::now();
      // After an idle spell the gap counts as at most 8 windows, so that a burst is seen soon.
      const int64_t sample = std::min<int64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_take).count() /
              static_cast<int64_t>(queue_.size()),
          std::max<int64_t>(config_.group_wait_us, 1000) * 8000);
      gap_ns = gap_ns < 0 ? sample : gap_ns + (sample - gap_ns) / 8;
      last_take = now;
      taken.swap(queue_);
      writing_ = true;
    }
    for (size_t begin = 0; begin < taken.size(); begin += static_cast<size_t>(config_.max_batch)) {
      size_t end = std::min(taken.size(), begin + static_cast<size_t>(config_.max_batch));
      entries.clear();
      bool to_log = row_log_ != nullptr;
      for (size_t i = begin; i < end; ++i) {
        if (lease_store_) taken[i]->entry.charges = charges_for(*taken[i]);
        entries.push_back(&taken[i]->entry);
        to_log = to_log && taken[i]->entry.kind != EntryKind::kAdjustment && !taken[i]->id_given;
      }
      Result<std::vector<Status>> result = std::vector<Status>{};
      int failures_while_stopping = 0;
      for (;;) {
        int inject = inject_failures_.load();
        bool fail = inject > 0 && inject_failures_.compare_exchange_strong(inject, inject - 1);
        result = to_log ? log_batch(entries, fail) : direct_batch(entries, fail);
        if (result) break;
        write_failures_.fetch_add(1);
        {
          std::lock_guard lock(mu_);
          unhealthy_reason_ = result.error().message;
          healthy_.store(false);
          if (stopping_ && ++failures_while_stopping >= 3) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(config_.retry_ms));
      }
      if (result) healthy_.store(true);  // written to the store or the row log, or journaled
      batches_.fetch_add(1);
      const bool logged = to_log && result;
      if (logged) {
        // Counted before the callbacks: a reader that a callback's client asks next waits
        // for these rows too (apply_now), though they reach the applier just after.
        std::lock_guard lock(mu_);
        logged_ += static_cast<int64_t>(end - begin);
      }
      if (begin == 0) announced_then = core_->announced.load();  // before any is answered
      int64_t now = unix_micros_now();
      for (size_t i = begin; i < end; ++i) {
        Item& item = *taken[i];
        Status status = result ? (*result)[i - begin] : Status(result.error());
        const RequestRecord& r = item.entry.record;
        Money actual =
            item.entry.cost.pricing == Pricing::kUnpriced ? Money() : item.entry.cost.total();
        // Money was spent upstream whether or not the row could be kept: budgets count it.
        if (item.reservation) {
          core_->book.settle(*item.reservation, actual, r.ended_us, now);
        } else if (status) {
          core_->book.add_spent(Subject{r.key_id, r.team, r.project}, actual, r.ended_us, now);
        }
        if (item.rate) settle_rate(*item.rate, r, now);
        (status ? rows_committed_ : rows_refused_).fetch_add(1);
        core_->pending.fetch_sub(1);
        if (item.on_durable) item.on_durable(status);
      }
      if (logged) {
        std::lock_guard lock(mu_);
        if (apply_queue_.empty()) {
          apply_due_ =
              std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.apply_ms);
        }
        for (size_t i = begin; i < end; ++i) {
          taken[i]->on_durable = nullptr;
          apply_queue_.push_back(std::move(taken[i]));
        }
        // One wake-up when the queue starts (the applier's timer), then only when it is full or
        // a reader waits.
        if (apply_queue_.size() == end - begin || apply_queue_.size() >= kApplyRows ||
            apply_target_ > applied_) {
          apply_wake_.notify_one();
        }
      }
    }
    answered = static_cast<int64_t>(taken.size());
    taken.clear();
    {
      std::lock_guard lock(mu_);
      writing_ = false;
    }
    idle_.notify_all();
  }
  {
    std::lock_guard lock(mu_);
    writing_ = false;
  }
  idle_.notify_all();
}

namespace {
// WAL frames (pages) after which the checkpointer thread copies them into the database file:
// SQLite's own auto-checkpoint size.
constexpr int64_t kCheckpointFrames = 1000;
// WAL frames after which the writer checkpoints itself: the checkpointer never empties the
// WAL while commits keep coming, and only an empty WAL starts over (about 64 MiB).
constexpr int64_t kCatchUpFrames = 16384;
}  // namespace

void Ledger::after_commit() {
  int64_t frames = sqlite_->wal_frames();
  if (frames >= kCatchUpFrames) {
    // Waits for a running background pass, then copies the rest: the WAL is then complete
    // in the database file and the next transaction writes it from the start again.
    std::lock_guard checkpointing(checkpoint_mu_);
    (void)sqlite_->checkpoint();  // a failed checkpoint loses nothing; the next one retries
  } else if (frames >= kCheckpointFrames) {
    {
      std::lock_guard lock(mu_);
      checkpoint_due_ = true;
    }
    checkpoint_wake_.notify_one();
  }
}

void Ledger::checkpointer_loop() {
  name_thread("ledger-ckpt");
  // Without its connection, the writer's catch-up checkpoints still bound the WAL.
  auto db = Db::open(config_.path, false);
  for (;;) {
    bool checkpoint = false;
    bool spare = false;
    {
      std::unique_lock lock(mu_);
      checkpoint_wake_.wait(lock, [&] { return stopping_ || checkpoint_due_ || spare_due_; });
      if (stopping_) return;
      checkpoint = std::exchange(checkpoint_due_, false);
      spare = std::exchange(spare_due_, false);
    }
    if (spare) {
      if (Status st = row_log_->prepare_spare(); !st) {
        std::cerr << "ferry: " << st.error().message
                  << " (its segments grow as they are written instead)\n";
      }
    }
    if (checkpoint && db) {
      std::lock_guard checkpointing(checkpoint_mu_);
      (void)sqlite3_wal_checkpoint_v2(db->raw(), "main", SQLITE_CHECKPOINT_PASSIVE, nullptr,
                                      nullptr);
    }
  }
}

Result<std::vector<Status>> Ledger::log_batch(std::vector<LedgerEntry*>& entries, bool fail) {
  if (fail) return Error::make(ErrorCode::kUnavailable, "ledger row log: injected write failure");
  if (Status st = row_log_->append(entries); !st) return st.error();
  // A growing segment is left for a pre-sized one as soon as a spare is ready.
  if (row_log_->size() >= kRowLogSegmentBytes ||
      (!row_log_->presized() && row_log_->spare_ready())) {
    // Rows logged so far are in older segments: removed once the applier has committed them.
    // A segment that cannot be started leaves the rows in the current one (it grows).
    if (row_log_->start_segment(row_log_->segment())) {
      std::lock_guard lock(mu_);
      mark_rows_ = logged_ + static_cast<int64_t>(entries.size());
      mark_segment_ = row_log_->segment();
    }
  }
  if (row_log_->wants_spare()) {
    {
      std::lock_guard lock(mu_);
      spare_due_ = true;
    }
    checkpoint_wake_.notify_one();
  }
  return std::vector<Status>(entries.size());
}

Result<std::vector<Status>> Ledger::direct_batch(std::vector<LedgerEntry*>& entries, bool fail) {
  if (row_log_) {
    // An adjustment names a row that may still wait in the log: the log is applied first.
    std::unique_lock lock(mu_);
    if (Status st = wait_applied(lock, logged_); !st) return st.error();
  }
  std::lock_guard store_lock(store_mu_);
  auto result = append_batch(entries, fail);
  if (result && sqlite_ != nullptr) after_commit();
  return result;
}

Status Ledger::wait_applied(std::unique_lock<std::mutex>& lock, int64_t target) {
  if (applied_ >= target) return {};
  apply_target_ = std::max(apply_target_, target);
  apply_wake_.notify_one();
  applied_cv_.wait(lock, [&] { return applied_ >= target || !apply_healthy_.load(); });
  if (applied_ >= target) return {};
  return Error::make(ErrorCode::kUnavailable,
                     "the ledger's rows are durable in its row log but cannot be committed to " +
                         config_.path + ": " + apply_error_,
                     "", "ledger_unavailable");
}

Status Ledger::apply_now() {
  if (!row_log_) return {};
  std::unique_lock lock(mu_);
  return wait_applied(lock, logged_);
}

void Ledger::applier_loop() {
  name_thread("ledger-applier");
  std::vector<std::unique_ptr<Item>> taken;
  std::vector<LedgerEntry*> entries;
  std::unique_lock lock(mu_);
  for (;;) {
    apply_wake_.wait(lock, [&] { return applier_stopping_ || !apply_queue_.empty(); });
    if (apply_queue_.empty()) break;  // stopping, every logged row applied
    // Due when the oldest row has waited apply_ms, the queue is full, a reader waits, or the
    // ledger stops.
    apply_wake_.wait_until(lock, apply_due_, [&] {
      return applier_stopping_ || apply_queue_.size() >= kApplyRows || apply_target_ > applied_;
    });
    taken.swap(apply_queue_);
    lock.unlock();
    bool applied_all = true;
    for (size_t begin = 0; begin < taken.size() && applied_all;
         begin += static_cast<size_t>(config_.max_batch)) {
      size_t end = std::min(taken.size(), begin + static_cast<size_t>(config_.max_batch));
      entries.clear();
      for (size_t i = begin; i < end; ++i) entries.push_back(&taken[i]->entry);
      int failures_while_stopping = 0;
      for (;;) {
        Result<std::vector<Status>> result = std::vector<Status>{};
        {
          std::lock_guard store_lock(store_mu_);
          result = store_->append(entries);
          if (result) after_commit();
        }
        if (result) {
          apply_healthy_.store(true);
          // A refused row is one already there (its id): a reader in another process applied
          // it from the log (catch_up_row_log). Generated ids never repeat otherwise.
          std::lock_guard relock(mu_);
          applied_ += static_cast<int64_t>(end - begin);
          break;
        }
        write_failures_.fetch_add(1);
        {
          std::lock_guard relock(mu_);
          apply_error_ = result.error().message;
          apply_healthy_.store(false);
          // Rows that cannot be committed now stay in the log: applied at the next start.
          if (applier_stopping_ && ++failures_while_stopping >= 3) applied_all = false;
        }
        applied_cv_.notify_all();
        if (!applied_all) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(config_.retry_ms));
      }
    }
    taken.clear();
    lock.lock();
    if (!applied_all) break;
    if (applied_ >= mark_rows_ && mark_segment_ > removed_before_) {
      removed_before_ = mark_segment_;
      row_log_->remove_before(removed_before_);
    }
    applied_cv_.notify_all();
  }
  applied_cv_.notify_all();
}

Result<std::vector<Status>> Ledger::append_batch(std::vector<LedgerEntry*>& entries, bool fail) {
  if (!journal_) return store_->append(entries, fail);
  if (journal_->pending() > 0) {
    // Older rows ship first; while the store stays down, tried once per retry_ms only, so
    // the rows of a batch are kept without waiting on a connection attempt each time.
    if (unix_micros_now() < next_ship_us_ || !ship_journal()) return keep_in_journal(entries);
    // The journal is empty now: this batch goes to the store.
  }
  auto result = store_->append(entries, fail);
  if (result || fail) return result;  // an injected failure tests the retry path itself
  set_store_down(true, result.error().message);
  return keep_in_journal(entries);
}

Result<std::vector<Status>> Ledger::keep_in_journal(std::vector<LedgerEntry*>& entries) {
  if (Status st = journal_->append(entries); !st) {
    return Error::make(ErrorCode::kUnavailable, "the ledger store is down and its journal " +
                                                    journal_->path() +
                                                    " cannot keep rows: " + st.error().message);
  }
  journal_pending_.store(journal_->pending());
  return std::vector<Status>(entries.size());
}

bool Ledger::ship_journal() {
  // One batch a call: new rows are kept in the journal meanwhile, never queued behind a long
  // drain (a queue that filled while old rows ship would refuse traffic).
  if (journal_->pending() > 0) {
    // Any failure here is tried again after retry_ms (never in a tight loop).
    const int64_t retry_at = unix_micros_now() + config_.retry_ms * 1000;
    // While the store is down each retry sends the oldest row alone (a probe: nothing more
    // is read and decoded for a connection attempt that fails); the batches follow once it
    // answers.
    auto rows = journal_->oldest(store_down_.load() ? 1 : static_cast<size_t>(config_.max_batch));
    if (!rows) {
      next_ship_us_ = retry_at;
      return false;
    }
    std::vector<LedgerEntry*> entries;
    entries.reserve(rows->size());
    for (JournalRow& row : *rows) entries.push_back(&row.entry);
    auto result = store_->append(entries);
    if (!result) {
      set_store_down(true, result.error().message);
      next_ship_us_ = retry_at;
      return false;
    }
    // Shipped, or there already (a batch whose COMMIT reached the database before the
    // connection broke): either way the row is in the store exactly once.
    std::vector<int64_t> shipped;
    for (size_t i = 0; i < rows->size(); ++i) {
      const Status& st = (*result)[i];
      if (st || st.error().type_code == kDuplicateIdCode) {
        shipped.push_back((*rows)[i].seq);
      } else if (Status aside = journal_->set_aside((*rows)[i].seq, st.error().message); !aside) {
        next_ship_us_ = retry_at;
        return false;
      } else {
        rows_refused_.fetch_add(1);
      }
    }
    if (Status st = journal_->remove(shipped); !st) {  // shipped again later: duplicates then
      next_ship_us_ = retry_at;
      return false;
    }
    journal_shipped_.fetch_add(static_cast<int64_t>(shipped.size()));
    journal_pending_.store(journal_->pending());
  }
  set_store_down(false, "");
  return journal_->pending() == 0;
}

void Ledger::set_store_down(bool down, const std::string& reason) {
  store_down_.store(down);
  if (!down) return;
  write_failures_.fetch_add(1);
  std::lock_guard lock(mu_);
  unhealthy_reason_ = reason;
}

std::vector<BudgetCharge> Ledger::charges_for(const Item& item) const {
  std::vector<BudgetCharge> out;
  const RequestRecord& r = item.entry.record;
  const Cost& cost = item.entry.cost;
  Money actual = cost.pricing == Pricing::kUnpriced ? Money() : cost.total();
  Subject subject{r.key_id, r.team, r.project};
  const auto& defs = core_->book.defs();
  for (size_t i = 0; i < defs.size(); ++i) {
    if (!budget_applies(defs[i], subject)) continue;
    bool leased = defs[i].hard && item.reservation &&
                  std::find(item.reservation->budgets.begin(), item.reservation->budgets.end(),
                            static_cast<uint32_t>(i)) != item.reservation->budgets.end();
    if (actual == Money() && !leased) continue;
    PeriodBounds bounds = budget_period_at(defs[i], r.ended_us);
    out.push_back(BudgetCharge{defs[i].name, bounds.start_us, bounds.end_us, defs[i].amount,
                               defs[i].scope, defs[i].match, actual, leased});
  }
  return out;
}

void Ledger::leaser_loop() {
  const auto every = std::chrono::milliseconds(config_.postgres->lease_refresh_ms);
  std::unique_lock lock(mu_);
  while (!wake_leaser_.wait_for(lock, every, [&] { return stopping_; })) {
    lock.unlock();
    lease_pass(unix_micros_now());
    lock.lock();
  }
}

// One pass over the budgets: each hard one's lease is topped up to a slice (plus what was
// refused for want of it) when less than half a slice is free, and renewed; every budget's
// shared spent figure is read back. A failed pass leaves the leases to expire locally (no
// admission under them past lease_until_us), so a lost database refuses rather than overspends.
void Ledger::lease_pass(int64_t now_us) {
  const PgLedgerConfig& pg = *config_.postgres;
  std::vector<BudgetState> states = core_->book.snapshot(now_us);
  for (size_t i = 0; i < states.size(); ++i) {
    const BudgetDef& def = *states[i].def;
    const BudgetState& state = states[i];
    Money want;
    if (def.hard) {
      Money slice = std::max(Money::from_micros(1),
                             Money::from_micros(def.amount.micros() / 100 * pg.lease_pct));
      Money free = state.lease - state.reserved;
      if (free < Money::from_micros(slice.micros() / 2) + state.wanted) {
        want = slice + state.wanted - free;
      }
    }
    BudgetCharge budget{def.name,
                        state.bounds.start_us,
                        state.bounds.end_us,
                        def.amount,
                        def.scope,
                        def.match,
                        Money(),
                        false};
    int64_t until = now_us + pg.lease_ttl_ms * 1000;
    auto grant = lease_store_->lease(budget, want, now_us, until);
    if (!grant) continue;
    // Admits under it only until half the time to live: it is renewed long before then.
    core_->book.add_lease(i, state.bounds.start_us, grant->granted, now_us + pg.lease_ttl_ms * 500,
                          grant->reset);
    core_->book.set_shared_spent(i, state.bounds.start_us, grant->spent);
  }
  rate_lease_pass(now_us);
}

std::optional<double> Ledger::budget_left_pct(const Subject& subject) {
  return core_->book.left_pct(subject, unix_micros_now());
}

std::vector<BudgetState> Ledger::budgets() {
  return core_->book.snapshot(unix_micros_now());
}

const std::vector<RateLimitDef>& Ledger::rate_limits() const {
  return core_->rates.defs();
}

std::optional<RateHold> Ledger::rate_views(const Subject& subject) {
  if (core_->rates.empty()) return std::nullopt;
  RateHold hold = core_->rates.views(subject, unix_micros_now());
  if (hold.limits.empty()) return std::nullopt;
  return hold;
}

void Ledger::settle_rate(const RateHold& hold, const RequestRecord& r, int64_t now_us) {
  // What the row billed; for a response-cache hit (whose own tokens are zero), what the answer
  // cost when it was made (each limit's cache_hits says what of it counts).
  const bool hit = r.cache == "hit";
  const Tokens& t = hit ? r.cache_tokens : r.tokens;
  int64_t used = saturating_add(saturating_add(t.input.count, t.cached_input.count),
                                saturating_add(t.output.count, t.reasoning.count));
  core_->rates.settle(hold, used, hit, now_us);
}

// One pass over the rate buckets (PostgreSQL): a bucket whose free slice is under half a slice
// (plus what was refused for want of it) takes more from the database bucket; every pass
// renews the local lease and reads the shared level back. A failed pass lets the lease expire.
void Ledger::rate_lease_pass(int64_t now_us) {
  const PgLedgerConfig& pg = *config_.postgres;
  const auto& defs = core_->rates.defs();
  if (defs.empty()) return;
  std::vector<RateState> states = core_->rates.snapshot();
  for (size_t i = 0; i < defs.size(); ++i) {
    for (RateDimension d : {RateDimension::kRequests, RateDimension::kTokens}) {
      const int64_t per_minute = defs[i].per_minute(d);
      if (per_minute == 0) continue;
      const size_t b = RateBook::bucket(i, d);
      const RateState& s = states[b];
      const int64_t slice =
          std::max(kUnitsPerQuota, per_minute * kUnitsPerQuota / 100 * pg.lease_pct);
      int64_t want = 0;
      if (s.level < slice / 2 + s.wanted) want = slice + s.wanted - std::max<int64_t>(s.level, 0);
      // The database counts what this instance holds for the lease's whole time to live; it
      // admits under it for half of that.
      auto grant = lease_store_->take_rate(defs[i].name, rate_dimension_name(d), per_minute, want,
                                           std::max<int64_t>(s.level, 0), now_us,
                                           now_us + pg.lease_ttl_ms * 1000);
      if (!grant) continue;
      core_->rates.add_lease(b, grant->granted, grant->level, now_us + pg.lease_ttl_ms * 500,
                             grant->reset);
    }
  }
}

void Ledger::give_back_rate_leases() {
  const auto& defs = core_->rates.defs();
  for (size_t i = 0; i < defs.size(); ++i) {
    for (RateDimension d : {RateDimension::kRequests, RateDimension::kTokens}) {
      if (defs[i].per_minute(d) == 0) continue;
      int64_t units = core_->rates.take_lease(RateBook::bucket(i, d));
      if (units > 0) {
        (void)lease_store_->give_rate(defs[i].name, rate_dimension_name(d), defs[i].per_minute(d),
                                      units, unix_micros_now());
      }
    }
  }
}

Status Ledger::health() const {
  const bool refuse_down =
      config_.postgres && config_.postgres->refuse_when_down && store_down_.load();
  if (healthy_.load() && !refuse_down && apply_healthy_.load()) return {};
  std::lock_guard lock(mu_);
  if (healthy_.load() && !refuse_down) {
    return Error::make(ErrorCode::kUnavailable,
                       "the ledger cannot commit its row log to " + config_.path + " (" +
                           apply_error_ + "); refusing unbilled traffic",
                       "", "ledger_unavailable");
  }
  return Error::make(
      ErrorCode::kUnavailable,
      "the ledger cannot record requests (" + unhealthy_reason_ + "); refusing unbilled traffic",
      "", "ledger_unavailable");
}

LedgerStats Ledger::stats() const {
  LedgerStats s;
  s.rows_committed = rows_committed_.load();
  s.rows_refused = rows_refused_.load();
  s.batches = batches_.load();
  s.write_failures = write_failures_.load();
  s.pending = core_->pending.load();
  s.hard_refusals = core_->hard_refusals.load();
  s.rate_refusals = core_->rate_refusals.load();
  s.soft_exceeded = core_->soft_exceeded.load();
  s.healthy = healthy_.load();
  s.store_down = store_down_.load();
  s.journal_pending = journal_pending_.load();
  s.journal_shipped = journal_shipped_.load();
  if (row_log_) {
    std::lock_guard lock(mu_);
    s.log_rows = logged_ - applied_;
  }
  return s;
}

void Ledger::flush() {
  std::unique_lock lock(mu_);
  ++flushing_;  // no group waits for rows in flight while someone waits for the queue
  if (gathering_) wake_.notify_all();
  idle_.wait(lock, [&] { return queue_.empty() && !writing_; });
  --flushing_;
  if (row_log_) (void)wait_applied(lock, logged_);
}

}  // namespace ferry::ledger
