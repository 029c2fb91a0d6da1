#include "ledger/journal.h"

#include <utility>

#include "ledger/byte_codec.h"

namespace ferry::ledger {

namespace {

// A field added to one of these structs must be written and read below too, or a row kept in
// the journal would reach the database without it: the sizes stop the build until it is.
static_assert(sizeof(RequestRecord) == 880,
              "a new RequestRecord field goes into the journal codec");
static_assert(sizeof(AttemptRecord) == 184,
              "a new AttemptRecord field goes into the journal codec");
static_assert(sizeof(LedgerEntry) == 1152, "a new LedgerEntry field goes into the journal codec");
static_assert(sizeof(Cost) == 72, "a new Cost field goes into the journal codec");
static_assert(sizeof(BudgetCharge) == 112, "a new BudgetCharge field goes into the journal codec");

constexpr char kCodecVersion = 1;

using Writer = ByteWriter;
using Reader = ByteReader;

constexpr auto kLastStatus = static_cast<uint8_t>(RequestStatus::kRefused);

void write_attempt(Writer& w, const AttemptRecord& a) {
  w.str(a.target);
  w.str(a.upstream_model);
  w.u8(static_cast<uint8_t>(a.status));
  w.i64(a.http_status);
  w.str(a.error_code);
  w.tokens(a.tokens);
  w.i64(a.started_us);
  w.i64(a.ended_us);
}

AttemptRecord read_attempt(Reader& r) {
  AttemptRecord a;
  a.target = r.str();
  a.upstream_model = r.str();
  a.status = r.small_enum<RequestStatus>(kLastStatus);
  a.http_status = r.int32();
  a.error_code = r.str();
  a.tokens = r.tokens();
  a.started_us = r.i64();
  a.ended_us = r.i64();
  return a;
}

void write_record(Writer& w, const RequestRecord& r) {
  for (const std::string* s : {&r.id, &r.request_id}) w.str(*s);
  w.i64(r.started_us);
  w.i64(r.ended_us);
  for (const std::string* s : {&r.key_id, &r.team, &r.project, &r.task_id}) w.str(*s);
  w.strs(r.trusted_tags);
  w.strs(r.claimed_tags);
  for (const std::string* s :
       {&r.requested_model, &r.target, &r.upstream_model, &r.rule_id, &r.policy_version}) {
    w.str(*s);
  }
  w.u8(static_cast<uint8_t>(r.status));
  w.i64(r.http_status);
  w.str(r.error_code);
  w.u8(r.stream ? 1 : 0);
  w.str(r.finish_reason);
  w.tokens(r.tokens);
  w.i64(static_cast<int64_t>(r.attempts.size()));
  for (const AttemptRecord& a : r.attempts) write_attempt(w, a);
  for (int64_t v :
       {r.timings.queue_us, r.timings.routing_us, r.timings.ttft_us, r.timings.total_us}) {
    w.i64(v);
  }
  for (const std::string* s : {&r.facts_json, &r.usage_check, &r.constraint_mode, &r.schema_hash})
    w.str(*s);
  w.i64(r.trimmed_tokens);
  w.str(r.cache);
  w.tokens(r.cache_tokens);
  w.str(r.reasoning_budget);
}

RequestRecord read_record(Reader& in) {
  RequestRecord r;
  for (std::string* s : {&r.id, &r.request_id}) *s = in.str();
  r.started_us = in.i64();
  r.ended_us = in.i64();
  for (std::string* s : {&r.key_id, &r.team, &r.project, &r.task_id}) *s = in.str();
  r.trusted_tags = in.strs();
  r.claimed_tags = in.strs();
  for (std::string* s :
       {&r.requested_model, &r.target, &r.upstream_model, &r.rule_id, &r.policy_version}) {
    *s = in.str();
  }
  r.status = in.small_enum<RequestStatus>(kLastStatus);
  r.http_status = in.int32();
  r.error_code = in.str();
  r.stream = in.small_enum<uint8_t>(1) != 0;
  r.finish_reason = in.str();
  r.tokens = in.tokens();
  r.attempts.resize(in.count(8));
  for (AttemptRecord& a : r.attempts) a = read_attempt(in);
  for (int64_t* v :
       {&r.timings.queue_us, &r.timings.routing_us, &r.timings.ttft_us, &r.timings.total_us}) {
    *v = in.i64();
  }
  for (std::string* s : {&r.facts_json, &r.usage_check, &r.constraint_mode, &r.schema_hash})
    *s = in.str();
  r.trimmed_tokens = in.i64();
  r.cache = in.str();
  r.cache_tokens = in.tokens();
  r.reasoning_budget = in.str();
  return r;
}

void write_charge(Writer& w, const BudgetCharge& c) {
  w.str(c.budget);
  w.i64(c.period_start_us);
  w.i64(c.period_end_us);
  w.money(c.limit);
  w.u8(static_cast<uint8_t>(c.scope));
  w.str(c.match);
  w.money(c.amount);
  w.u8(c.from_lease ? 1 : 0);
}

BudgetCharge read_charge(Reader& r) {
  BudgetCharge c;
  c.budget = r.str();
  c.period_start_us = r.i64();
  c.period_end_us = r.i64();
  c.limit = r.money();
  c.scope = r.small_enum<BudgetScope>(static_cast<uint8_t>(BudgetScope::kProject));
  c.match = r.str();
  c.amount = r.money();
  c.from_lease = r.small_enum<uint8_t>(1) != 0;
  return c;
}

}  // namespace

std::string encode_entry(const LedgerEntry& e) {
  std::string out;
  encode_entry_to(e, out);
  return out;
}

void encode_entry_to(const LedgerEntry& e, std::string& out) {
  Writer w(out);
  w.u8(kCodecVersion);
  w.u8(static_cast<uint8_t>(e.kind));
  write_record(w, e.record);
  w.str(e.adjusts_id);
  w.str(e.note);
  w.cost(e.cost);
  w.i64(static_cast<int64_t>(e.attempt_costs.size()));
  for (const Cost& c : e.attempt_costs) w.cost(c);
  w.u8(e.avoided.has_value() ? 1 : 0);
  if (e.avoided) w.money(*e.avoided);
  w.str(e.avoided_version);
  for (const std::optional<Money>* m : {&e.trim_avoided, &e.cache_avoided}) {
    w.u8(m->has_value() ? 1 : 0);
    if (m->has_value()) w.money(**m);
  }
  w.i64(static_cast<int64_t>(e.charges.size()));
  for (const BudgetCharge& c : e.charges) write_charge(w, c);
}

Result<LedgerEntry> decode_entry(std::string_view bytes) {
  Reader in(bytes);
  if (in.u8() != kCodecVersion) {
    return Error::make(ErrorCode::kInternal, "journal: an entry of an unknown codec version");
  }
  LedgerEntry e;
  e.kind = in.small_enum<EntryKind>(static_cast<uint8_t>(EntryKind::kAdjustment));
  e.record = read_record(in);
  e.adjusts_id = in.str();
  e.note = in.str();
  e.cost = in.cost();
  e.attempt_costs.resize(in.count(8));
  for (Cost& c : e.attempt_costs) c = in.cost();
  if (in.small_enum<uint8_t>(1) != 0) e.avoided = in.money();
  e.avoided_version = in.str();
  for (std::optional<Money>* m : {&e.trim_avoided, &e.cache_avoided}) {
    if (in.small_enum<uint8_t>(1) != 0) *m = in.money();
  }
  e.charges.resize(in.count(8));
  for (BudgetCharge& c : e.charges) c = read_charge(in);
  if (!in.ok() || !in.at_end()) {
    return Error::make(ErrorCode::kInternal, "journal: a truncated or damaged entry");
  }
  return e;
}

Result<Journal> Journal::open(const std::string& path) {
  auto db = Db::open(path, false);
  if (!db) return db.error();
  Journal j;
  j.db_ = std::move(*db);
  j.path_ = path;
  // `rows`: what is still to ship, in order; `refused`: what the database refused for good.
  if (Status st = j.db_.exec(
          "CREATE TABLE IF NOT EXISTS rows(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT "
          "NULL, entry BLOB NOT NULL);"
          "CREATE TABLE IF NOT EXISTS refused(seq INTEGER PRIMARY KEY, id TEXT NOT NULL, entry "
          "BLOB NOT NULL, reason TEXT NOT NULL, at_us INTEGER NOT NULL)");
      !st) {
    return st.error();
  }
  auto count = j.db_.prepare("SELECT count(*) FROM rows");
  if (!count) return count.error();
  auto row = count->step();
  if (!row) return row.error();
  j.pending_ = *row ? count->int_at(0) : 0;
  return j;
}

Status Journal::append(const std::vector<LedgerEntry*>& entries) {
  if (Status st = db_.exec("BEGIN IMMEDIATE"); !st) return st;
  auto insert = db_.prepare("INSERT INTO rows(id, entry) VALUES(?1, ?2)");
  if (!insert) {
    (void)db_.exec("ROLLBACK");
    return insert.error();
  }
  for (const LedgerEntry* e : entries) {
    std::string bytes = encode_entry(*e);
    insert->bind(1, e->record.id).bind(2, bytes);
    if (Status st = insert->run(); !st) {
      (void)db_.exec("ROLLBACK");
      return st;
    }
  }
  if (Status st = db_.exec("COMMIT"); !st) {
    (void)db_.exec("ROLLBACK");
    return st;
  }
  pending_ += static_cast<int64_t>(entries.size());
  return {};
}

Result<std::vector<JournalRow>> Journal::oldest(size_t limit) {
  auto select = db_.prepare("SELECT seq, entry FROM rows ORDER BY seq LIMIT ?1");
  if (!select) return select.error();
  select->bind(1, static_cast<int64_t>(limit));
  std::vector<JournalRow> out;
  std::vector<std::pair<int64_t, std::string>> damaged;
  for (;;) {
    auto row = select->step();
    if (!row) return row.error();
    if (!*row) break;
    auto entry = decode_entry(select->text_at(1));
    if (!entry) {
      damaged.emplace_back(select->int_at(0), entry.error().message);
    } else {
      out.push_back(JournalRow{select->int_at(0), std::move(*entry)});
    }
  }
  select->reset();
  // A row that cannot be read back is set aside (kept, with why), not retried forever.
  for (const auto& [seq, why] : damaged) {
    if (Status st = set_aside(seq, why); !st) return st.error();
  }
  return out;
}

Status Journal::remove(const std::vector<int64_t>& seqs) {
  if (Status st = db_.exec("BEGIN IMMEDIATE"); !st) return st;
  auto del = db_.prepare("DELETE FROM rows WHERE seq = ?1");
  if (!del) {
    (void)db_.exec("ROLLBACK");
    return del.error();
  }
  for (int64_t seq : seqs) {
    del->bind(1, seq);
    if (Status st = del->run(); !st) {
      (void)db_.exec("ROLLBACK");
      return st;
    }
  }
  if (Status st = db_.exec("COMMIT"); !st) {
    (void)db_.exec("ROLLBACK");
    return st;
  }
  pending_ -= static_cast<int64_t>(seqs.size());
  return {};
}

Status Journal::set_aside(int64_t seq, std::string_view reason) {
  if (Status st = db_.exec("BEGIN IMMEDIATE"); !st) return st;
  auto move = db_.prepare(
      "INSERT INTO refused(seq, id, entry, reason, at_us) SELECT seq, id, entry, ?2, "
      "CAST(strftime('%s','now') AS INTEGER) * 1000000 FROM rows WHERE seq = ?1");
  auto del = db_.prepare("DELETE FROM rows WHERE seq = ?1");
  Status st = !move ? Status(move.error()) : !del ? Status(del.error()) : Status();
  if (st) st = move->bind(1, seq).bind(2, reason).run();
  if (st) st = del->bind(1, seq).run();
  if (st) st = db_.exec("COMMIT");
  if (!st) {
    (void)db_.exec("ROLLBACK");
    return st;
  }
  --pending_;
  return {};
}

}  // namespace ferry::ledger
