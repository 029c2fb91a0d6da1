#include "ledger/store.h"

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/sha256.h"
#include "ledger/time_util.h"

namespace ferry::ledger {

namespace {

// Migration i brings the schema from version i to i + 1. Never edit a shipped migration;
// append a new one.
const char* const kMigrations[] = {
    R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE prices (
  version TEXT PRIMARY KEY, model TEXT NOT NULL, effective_from_us INTEGER NOT NULL,
  input INTEGER NOT NULL, cached_input INTEGER NOT NULL, output INTEGER NOT NULL,
  reasoning INTEGER NOT NULL, internal INTEGER NOT NULL, recorded_us INTEGER NOT NULL);
CREATE TABLE requests (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, adjusts_id TEXT, note TEXT,
  started_us INTEGER NOT NULL, ended_us INTEGER NOT NULL, day TEXT NOT NULL,
  key_id TEXT NOT NULL, team TEXT NOT NULL, project TEXT NOT NULL, task_id TEXT NOT NULL,
  trusted_tags TEXT NOT NULL, claimed_tags TEXT NOT NULL,
  requested_model TEXT NOT NULL, target TEXT NOT NULL, upstream_model TEXT NOT NULL,
  rule_id TEXT NOT NULL, policy_version TEXT NOT NULL,
  attempts INTEGER NOT NULL, status TEXT NOT NULL, http_status INTEGER NOT NULL,
  error_code TEXT NOT NULL, stream INTEGER NOT NULL, finish_reason TEXT NOT NULL,
  input_tokens INTEGER NOT NULL, input_source TEXT NOT NULL,
  cached_tokens INTEGER NOT NULL, cached_source TEXT NOT NULL,
  output_tokens INTEGER NOT NULL, output_source TEXT NOT NULL,
  reasoning_tokens INTEGER NOT NULL, reasoning_source TEXT NOT NULL,
  pricing TEXT NOT NULL, price_version TEXT NOT NULL,
  cost_input INTEGER, cost_cached INTEGER, cost_output INTEGER, cost_reasoning INTEGER,
  cost_total INTEGER, avoided_cost INTEGER, avoided_version TEXT NOT NULL,
  queue_us INTEGER NOT NULL, routing_us INTEGER NOT NULL, ttft_us INTEGER NOT NULL,
  total_us INTEGER NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL);
CREATE INDEX requests_task ON requests(task_id, started_us);
CREATE INDEX requests_ended ON requests(ended_us);
CREATE TABLE attempts (
  request_id TEXT NOT NULL, attempt INTEGER NOT NULL,
  target TEXT NOT NULL, upstream_model TEXT NOT NULL, status TEXT NOT NULL,
  http_status INTEGER NOT NULL, error_code TEXT NOT NULL,
  started_us INTEGER NOT NULL, ended_us INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL, input_source TEXT NOT NULL,
  cached_tokens INTEGER NOT NULL, cached_source TEXT NOT NULL,
  output_tokens INTEGER NOT NULL, output_source TEXT NOT NULL,
  reasoning_tokens INTEGER NOT NULL, reasoning_source TEXT NOT NULL,
  pricing TEXT NOT NULL, price_version TEXT NOT NULL,
  cost_input INTEGER, cost_cached INTEGER, cost_output INTEGER, cost_reasoning INTEGER,
  cost_total INTEGER,
  PRIMARY KEY (request_id, attempt)) WITHOUT ROWID;
CREATE TABLE daily (
  day TEXT NOT NULL, key_id TEXT NOT NULL, team TEXT NOT NULL, project TEXT NOT NULL,
  model TEXT NOT NULL, target TEXT NOT NULL, rule_id TEXT NOT NULL,
  requests INTEGER NOT NULL, unpriced INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
  cost_input INTEGER NOT NULL, cost_cached INTEGER NOT NULL, cost_output INTEGER NOT NULL,
  cost_reasoning INTEGER NOT NULL, cost_total INTEGER NOT NULL,
  avoided_total INTEGER NOT NULL, avoided_base INTEGER NOT NULL,
  first_us INTEGER NOT NULL, last_us INTEGER NOT NULL,
  PRIMARY KEY (day, key_id, team, project, model, target, rule_id)) WITHOUT ROWID;
CREATE TRIGGER requests_no_update BEFORE UPDATE ON requests
  BEGIN SELECT RAISE(ABORT, 'ledger rows are append-only; add an adjustment row'); END;
CREATE TRIGGER requests_no_delete BEFORE DELETE ON requests
  BEGIN SELECT RAISE(ABORT, 'ledger rows are append-only; add an adjustment row'); END;
CREATE TRIGGER attempts_no_update BEFORE UPDATE ON attempts
  BEGIN SELECT RAISE(ABORT, 'ledger rows are append-only'); END;
CREATE TRIGGER attempts_no_delete BEFORE DELETE ON attempts
  BEGIN SELECT RAISE(ABORT, 'ledger rows are append-only'); END;
)sql",
};

constexpr int kMigrationCount = static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));
static_assert(kMigrationCount == kSchemaVersion);

std::string join_placeholders(size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += i == 0 ? "?" : ",?";
  return out;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ",") + name;
  return out;
}

Value money_or_null(const Cost& cost, Money part) {
  if (cost.pricing == Pricing::kUnpriced) return std::monostate{};
  return part.micros();
}

void push_tokens(std::vector<Value>& v, const Tokens& t) {
  for (const TokenCount* c : {&t.input, &t.cached_input, &t.output, &t.reasoning}) {
    v.emplace_back(c->count);
    v.emplace_back(std::string(token_source_name(c->source)));
  }
}

void push_cost(std::vector<Value>& v, const Cost& cost) {
  v.emplace_back(std::string(pricing_name(cost.pricing)));
  v.emplace_back(cost.price_version);
  v.push_back(money_or_null(cost, cost.input));
  v.push_back(money_or_null(cost, cost.cached_input));
  v.push_back(money_or_null(cost, cost.output));
  v.push_back(money_or_null(cost, cost.reasoning));
  v.push_back(money_or_null(cost, cost.total()));
}

std::vector<Value> request_values(const LedgerEntry& e, const std::string& prev_hash) {
  const RequestRecord& r = e.record;
  std::vector<Value> v;
  v.reserve(request_columns().size());
  v.emplace_back(r.id);
  v.emplace_back(std::string(e.kind == EntryKind::kRequest ? "request" : "adjustment"));
  if (e.kind == EntryKind::kAdjustment) {
    v.emplace_back(e.adjusts_id);
    v.emplace_back(e.note);
  } else {
    v.emplace_back(std::monostate{});
    v.emplace_back(std::monostate{});
  }
  v.emplace_back(r.started_us);
  v.emplace_back(r.ended_us);
  v.emplace_back(utc_day(r.started_us));
  v.emplace_back(r.key_id);
  v.emplace_back(r.team);
  v.emplace_back(r.project);
  v.emplace_back(r.task_id);
  v.emplace_back(nlohmann::json(r.trusted_tags).dump());
  v.emplace_back(nlohmann::json(r.claimed_tags).dump());
  v.emplace_back(r.requested_model);
  v.emplace_back(r.target);
  v.emplace_back(r.upstream_model);
  v.emplace_back(r.rule_id);
  v.emplace_back(r.policy_version);
  v.emplace_back(static_cast<int64_t>(std::max<size_t>(1, r.attempts.size())));
  v.emplace_back(std::string(request_status_name(r.status)));
  v.emplace_back(static_cast<int64_t>(r.http_status));
  v.emplace_back(r.error_code);
  v.emplace_back(static_cast<int64_t>(r.stream ? 1 : 0));
  v.emplace_back(r.finish_reason);
  push_tokens(v, r.tokens);
  push_cost(v, e.cost);
  if (e.avoided) {
    v.emplace_back(e.avoided->micros());
  } else {
    v.emplace_back(std::monostate{});
  }
  v.emplace_back(e.avoided_version);
  v.emplace_back(r.timings.queue_us);
  v.emplace_back(r.timings.routing_us);
  v.emplace_back(r.timings.ttft_us);
  v.emplace_back(r.timings.total_us);
  v.emplace_back(prev_hash);
  return v;
}

std::vector<Value> attempt_values(const std::string& request_id, size_t index,
                                  const AttemptRecord& a, const Cost& cost) {
  std::vector<Value> v;
  v.reserve(attempt_columns().size());
  v.emplace_back(request_id);
  v.emplace_back(static_cast<int64_t>(index + 1));
  v.emplace_back(a.target);
  v.emplace_back(a.upstream_model);
  v.emplace_back(std::string(request_status_name(a.status)));
  v.emplace_back(static_cast<int64_t>(a.http_status));
  v.emplace_back(a.error_code);
  v.emplace_back(a.started_us);
  v.emplace_back(a.ended_us);
  push_tokens(v, a.tokens);
  push_cost(v, cost);
  return v;
}

}  // namespace

const std::vector<std::string>& request_columns() {
  static const std::vector<std::string> kColumns = {
      "id", "kind", "adjusts_id", "note", "started_us", "ended_us", "day", "key_id", "team",
      "project", "task_id", "trusted_tags", "claimed_tags", "requested_model", "target",
      "upstream_model", "rule_id", "policy_version", "attempts", "status", "http_status",
      "error_code", "stream", "finish_reason", "input_tokens", "input_source", "cached_tokens",
      "cached_source", "output_tokens", "output_source", "reasoning_tokens", "reasoning_source",
      "pricing", "price_version", "cost_input", "cost_cached", "cost_output", "cost_reasoning",
      "cost_total", "avoided_cost", "avoided_version", "queue_us", "routing_us", "ttft_us",
      "total_us", "prev_hash"};
  return kColumns;
}

const std::vector<std::string>& attempt_columns() {
  static const std::vector<std::string> kColumns = {
      "request_id", "attempt", "target", "upstream_model", "status", "http_status", "error_code",
      "started_us", "ended_us", "input_tokens", "input_source", "cached_tokens", "cached_source",
      "output_tokens", "output_source", "reasoning_tokens", "reasoning_source", "pricing",
      "price_version", "cost_input", "cost_cached", "cost_output", "cost_reasoning",
      "cost_total"};
  return kColumns;
}

std::string canonical_values(const std::vector<Value>& values) {
  std::string out;
  out.reserve(512);
  for (const Value& value : values) {
    if (const auto* i = std::get_if<int64_t>(&value)) {
      out += 'I';
      out += std::to_string(*i);
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      out += 'T';
      out += std::to_string(s->size());
      out += ':';
      out += *s;
    } else {
      out += 'N';
    }
    out += ';';
  }
  return out;
}

std::string row_hash(const std::vector<Value>& request,
                     const std::vector<std::vector<Value>>& attempts) {
  std::string text = "ferry-ledger-v1\n" + canonical_values(request);
  for (const auto& attempt : attempts) {
    text += 'A';
    text += canonical_values(attempt);
  }
  return sha256_hex(text);
}

Result<Store> Store::open(const std::string& path, const std::string& currency) {
  auto db = Db::open(path, false);
  if (!db) return db.error();
  Store store;
  store.db_ = std::move(*db);
  // A larger page cache keeps the index pages of a busy ledger in memory (64 MiB).
  (void)store.db_.exec("PRAGMA cache_size=-65536");
  auto version_stmt = store.db_.prepare("PRAGMA user_version");
  if (!version_stmt) return version_stmt.error();
  auto has_row = version_stmt->step();
  if (!has_row) return has_row.error();
  int64_t version = version_stmt->int_at(0);
  version_stmt->reset();
  if (version > kSchemaVersion) {
    return Error::make(ErrorCode::kUnavailable,
                       "ledger database " + path + " has schema version " +
                           std::to_string(version) + ", newer than this ferry (" +
                           std::to_string(kSchemaVersion) + ")");
  }
  for (int64_t v = version; v < kSchemaVersion; ++v) {
    std::string sql = std::string("BEGIN IMMEDIATE;") + kMigrations[v] +
                      "PRAGMA user_version=" + std::to_string(v + 1) + "; COMMIT;";
    auto st = store.db_.exec(sql);
    if (!st) {
      (void)store.db_.exec("ROLLBACK");
      return Error::make(ErrorCode::kUnavailable, "ledger migration to version " +
                                                      std::to_string(v + 1) + " failed: " +
                                                      st.error().message);
    }
  }
  // Currency: fixed at creation.
  auto get = store.db_.prepare("SELECT value FROM meta WHERE key='currency'");
  if (!get) return get.error();
  auto found = get->step();
  if (!found) return found.error();
  if (*found) {
    store.currency_ = get->text_at(0);
    if (!currency.empty() && currency != store.currency_) {
      return Error::make(ErrorCode::kUnavailable,
                         "ledger database " + path + " is kept in " + store.currency_ +
                             ", the config says " + currency);
    }
  } else {
    store.currency_ = currency.empty() ? "USD" : currency;
    auto put = store.db_.prepare("INSERT INTO meta(key, value) VALUES('currency', ?)");
    if (!put) return put.error();
    put->bind(1, store.currency_);
    if (auto st = put->run(); !st) return st.error();
  }
  get->reset();
  if (auto st = store.prepare_statements(); !st) return st.error();
  return store;
}

Status Store::prepare_statements() {
  auto ins = db_.prepare("INSERT INTO requests(" + join_names(request_columns()) +
                         ",hash) VALUES(" + join_placeholders(request_columns().size() + 1) + ")");
  if (!ins) return ins.error();
  insert_request_ = std::move(*ins);
  auto att = db_.prepare("INSERT INTO attempts(" + join_names(attempt_columns()) + ") VALUES(" +
                         join_placeholders(attempt_columns().size()) + ")");
  if (!att) return att.error();
  insert_attempt_ = std::move(*att);
  auto daily = db_.prepare(
      "INSERT INTO daily(day,key_id,team,project,model,target,rule_id,requests,unpriced,"
      "input_tokens,cached_tokens,output_tokens,reasoning_tokens,cost_input,cost_cached,"
      "cost_output,cost_reasoning,cost_total,avoided_total,avoided_base,first_us,last_us) "
      "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
      "ON CONFLICT(day,key_id,team,project,model,target,rule_id) DO UPDATE SET "
      "requests=requests+excluded.requests, unpriced=unpriced+excluded.unpriced, "
      "input_tokens=input_tokens+excluded.input_tokens, "
      "cached_tokens=cached_tokens+excluded.cached_tokens, "
      "output_tokens=output_tokens+excluded.output_tokens, "
      "reasoning_tokens=reasoning_tokens+excluded.reasoning_tokens, "
      "cost_input=cost_input+excluded.cost_input, cost_cached=cost_cached+excluded.cost_cached, "
      "cost_output=cost_output+excluded.cost_output, "
      "cost_reasoning=cost_reasoning+excluded.cost_reasoning, "
      "cost_total=cost_total+excluded.cost_total, "
      "avoided_total=avoided_total+excluded.avoided_total, "
      "avoided_base=avoided_base+excluded.avoided_base, "
      "first_us=min(first_us,excluded.first_us), last_us=max(last_us,excluded.last_us)");
  if (!daily) return daily.error();
  upsert_daily_ = std::move(*daily);
  auto orig = db_.prepare(
      "SELECT key_id,team,project,task_id,requested_model,target,upstream_model,rule_id,"
      "policy_version FROM requests WHERE id=? AND kind='request'");
  if (!orig) return orig.error();
  find_original_ = std::move(*orig);
  auto head = db_.prepare("SELECT seq, hash FROM requests ORDER BY seq DESC LIMIT 1");
  if (!head) return head.error();
  head_ = std::move(*head);
  auto set_head = db_.prepare(
      "INSERT INTO meta(key,value) VALUES('chain_head',?) "
      "ON CONFLICT(key) DO UPDATE SET value=excluded.value");
  if (!set_head) return set_head.error();
  set_head_ = std::move(*set_head);
  return {};
}

Status Store::sync_prices(const PriceCatalog& catalog) {
  auto stmt = db_.prepare(
      "INSERT OR IGNORE INTO prices(version,model,effective_from_us,input,cached_input,output,"
      "reasoning,internal,recorded_us) VALUES(?,?,?,?,?,?,?,?,?)");
  if (!stmt) return stmt.error();
  if (auto st = db_.exec("BEGIN IMMEDIATE"); !st) return st;
  int64_t now = unix_micros_now();
  for (const auto& e : catalog.entries()) {
    stmt->bind(1, e.version).bind(2, e.model).bind(3, e.effective_from_us);
    stmt->bind(4, e.input.micros()).bind(5, e.cached_input.micros()).bind(6, e.output.micros());
    stmt->bind(7, e.reasoning.micros()).bind(8, int64_t{e.internal ? 1 : 0}).bind(9, now);
    if (auto st = stmt->run(); !st) {
      (void)db_.exec("ROLLBACK");
      return st;
    }
  }
  return db_.exec("COMMIT");
}

Status Store::append_one(LedgerEntry& entry, std::string& prev_hash, int64_t& last_seq) {
  RequestRecord& r = entry.record;
  if (entry.kind == EntryKind::kAdjustment) {
    find_original_.bind(1, entry.adjusts_id);
    auto found = find_original_.step();
    if (!found) return found.error();
    if (!*found) {
      find_original_.reset();
      return Error::make(ErrorCode::kNotFound,
                         "adjustment: no request with id '" + entry.adjusts_id + "'");
    }
    r.key_id = find_original_.text_at(0);
    r.team = find_original_.text_at(1);
    r.project = find_original_.text_at(2);
    r.task_id = find_original_.text_at(3);
    r.requested_model = find_original_.text_at(4);
    r.target = find_original_.text_at(5);
    r.upstream_model = find_original_.text_at(6);
    r.rule_id = find_original_.text_at(7);
    r.policy_version = find_original_.text_at(8);
    find_original_.reset();
  }
  std::vector<Value> values = request_values(entry, prev_hash);
  std::vector<std::vector<Value>> attempts;
  for (size_t i = 0; i < r.attempts.size(); ++i) {
    attempts.push_back(attempt_values(r.id, i, r.attempts[i], entry.attempt_costs[i]));
  }
  std::string hash = row_hash(values, attempts);
  for (size_t i = 0; i < values.size(); ++i) insert_request_.bind_value(static_cast<int>(i + 1), values[i]);
  insert_request_.bind(static_cast<int>(values.size() + 1), hash);
  auto st = insert_request_.run();
  insert_request_.reset();
  if (!st) {
    // A constraint (duplicate id) refuses this row alone; anything else fails the batch.
    if ((insert_request_.last_error_code() & 0xff) == SQLITE_CONSTRAINT) {
      Error error = st.error();
      error.code = ErrorCode::kInvalidRequest;
      return error;
    }
    return st;
  }
  for (const auto& attempt : attempts) {
    for (size_t i = 0; i < attempt.size(); ++i) insert_attempt_.bind_value(static_cast<int>(i + 1), attempt[i]);
    auto ast = insert_attempt_.run();
    insert_attempt_.reset();
    if (!ast) return ast;
  }
  bool is_request = entry.kind == EntryKind::kRequest;
  bool unpriced = entry.cost.pricing == Pricing::kUnpriced;
  Money total = unpriced ? Money() : entry.cost.total();
  int p = 1;
  upsert_daily_.bind(p++, std::get<std::string>(values[6]));
  upsert_daily_.bind(p++, r.key_id);
  upsert_daily_.bind(p++, r.team);
  upsert_daily_.bind(p++, r.project);
  upsert_daily_.bind(p++, r.upstream_model);
  upsert_daily_.bind(p++, r.target);
  upsert_daily_.bind(p++, r.rule_id);
  upsert_daily_.bind(p++, int64_t{is_request ? 1 : 0});
  upsert_daily_.bind(p++, int64_t{is_request && unpriced ? 1 : 0});
  upsert_daily_.bind(p++, r.tokens.input.count);
  upsert_daily_.bind(p++, r.tokens.cached_input.count);
  upsert_daily_.bind(p++, r.tokens.output.count);
  upsert_daily_.bind(p++, r.tokens.reasoning.count);
  upsert_daily_.bind(p++, unpriced ? 0 : entry.cost.input.micros());
  upsert_daily_.bind(p++, unpriced ? 0 : entry.cost.cached_input.micros());
  upsert_daily_.bind(p++, unpriced ? 0 : entry.cost.output.micros());
  upsert_daily_.bind(p++, unpriced ? 0 : entry.cost.reasoning.micros());
  upsert_daily_.bind(p++, total.micros());
  upsert_daily_.bind(p++, entry.avoided ? entry.avoided->micros() : 0);
  upsert_daily_.bind(p++, entry.avoided ? total.micros() : 0);
  upsert_daily_.bind(p++, r.started_us);
  upsert_daily_.bind(p++, r.ended_us);
  auto dst = upsert_daily_.run();
  upsert_daily_.reset();
  if (!dst) return dst;
  prev_hash = hash;
  ++last_seq;
  return {};
}

Result<std::vector<Status>> Store::append(std::vector<LedgerEntry*>& entries, bool fail_commit) {
  if (auto st = db_.exec("BEGIN IMMEDIATE"); !st) return st.error();
  auto rollback = [&](Error error) -> Result<std::vector<Status>> {
    (void)db_.exec("ROLLBACK");
    return error;
  };
  // Read the chain head inside the transaction: another process (the CLI) may have appended.
  std::string prev_hash = kGenesisHash;
  int64_t last_seq = 0;
  auto has_head = head_.step();
  if (!has_head) return rollback(has_head.error());
  if (*has_head) {
    last_seq = head_.int_at(0);
    prev_hash = head_.text_at(1);
  }
  head_.reset();
  std::vector<Status> results;
  results.reserve(entries.size());
  for (LedgerEntry* entry : entries) {
    auto st = append_one(*entry, prev_hash, last_seq);
    if (!st && st.error().code == ErrorCode::kUnavailable) return rollback(st.error());
    results.push_back(std::move(st));
  }
  set_head_.bind(1, std::to_string(last_seq) + ":" + prev_hash);
  if (auto st = set_head_.run(); !st) return rollback(st.error());
  set_head_.reset();
  if (fail_commit) {
    return rollback(Error::make(ErrorCode::kUnavailable, "ledger database: injected write failure"));
  }
  if (auto st = db_.exec("COMMIT"); !st) return rollback(st.error());
  return results;
}

Result<Money> Store::spent_between(BudgetScope scope, const std::string& match, int64_t start_us,
                                   int64_t end_us) {
  const char* column = scope == BudgetScope::kKey    ? "key_id"
                       : scope == BudgetScope::kTeam ? "team"
                                                     : "project";
  auto stmt = db_.prepare(std::string("SELECT COALESCE(SUM(cost_total),0) FROM requests "
                                      "WHERE ended_us >= ? AND ended_us < ? AND ") +
                          column + " = ?");
  if (!stmt) return stmt.error();
  stmt->bind(1, start_us).bind(2, end_us).bind(3, match);
  auto row = stmt->step();
  if (!row) return row.error();
  return Money::from_micros(stmt->int_at(0));
}

}  // namespace ferry::ledger
