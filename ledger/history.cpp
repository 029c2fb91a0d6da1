#include "ledger/history.h"

#include <vector>

#include "ledger/pg_db.h"
#include "ledger/pg_store.h"
#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
#include "ledger/store.h"

namespace ferry::ledger {

namespace {

Result<bool> has_facts_column(Db& db) {
  auto version = db.prepare("PRAGMA user_version");
  if (!version) return version.error();
  auto got = version->step();
  if (!got) return got.error();
  return *got && version->int_at(0) >= 2;
}

// One row of the history SELECT below, read through `integer(column)` and `text(column)`
// (a SQLite statement's row or a PostgreSQL result's).
template <typename Integer, typename Text>
void read_request(const Integer& integer, const Text& text, RecordedRequest& r) {
  auto tokens = [&](int column) {
    return TokenCount{integer(column),
                      parse_token_source(text(column + 1)).value_or(TokenSource::kNone)};
  };
  r.seq = integer(0);
  r.id = text(1);
  r.started_us = integer(2);
  r.ended_us = integer(3);
  r.key_id = text(4);
  r.team = text(5);
  r.project = text(6);
  r.task_id = text(7);
  r.requested_model = text(8);
  r.target = text(9);
  r.upstream_model = text(10);
  r.rule_id = text(11);
  r.policy_version = text(12);
  r.status = parse_request_status(text(13)).value_or(RequestStatus::kError);
  r.http_status = static_cast<int>(integer(14));
  r.stream = integer(15) != 0;
  r.tokens.input = tokens(16);
  r.tokens.cached_input = tokens(18);
  r.tokens.output = tokens(20);
  r.tokens.reasoning = tokens(22);
  std::string pricing = text(24);
  r.cost = Cost{};
  if (pricing != "unpriced") {
    r.cost.pricing = pricing == "internal" ? Pricing::kInternal : Pricing::kPriced;
    r.cost.price_version = text(25);
    r.cost.input = Money::from_micros(integer(26));
    r.cost.cached_input = Money::from_micros(integer(27));
    r.cost.output = Money::from_micros(integer(28));
    r.cost.reasoning = Money::from_micros(integer(29));
  }
  r.facts_json = text(30);
}

// The history SELECT (columns in read_request's order); `facts` is the facts column or NULL.
std::string history_select(const char* facts) {
  return std::string(
             "SELECT seq,id,started_us,ended_us,key_id,team,project,task_id,"
             "requested_model,target,upstream_model,rule_id,policy_version,status,"
             "http_status,stream,input_tokens,input_source,cached_tokens,cached_source,"
             "output_tokens,output_source,reasoning_tokens,reasoning_source,pricing,"
             "price_version,cost_input,cost_cached,cost_output,cost_reasoning,") +
         facts + " FROM requests WHERE kind='request'";
}

// " AND ended_us >= ?" / " AND ended_us < ?" for the bounds the query has (to `params`).
void add_range(const HistoryQuery& query, std::string& sql, std::vector<int64_t>& params) {
  if (query.from_us) {
    sql += " AND ended_us >= ?";
    params.push_back(*query.from_us);
  }
  if (query.to_us) {
    sql += " AND ended_us < ?";
    params.push_back(*query.to_us);
  }
}

std::vector<PgParam> pg_params(const std::vector<int64_t>& params) {
  std::vector<PgParam> out;
  for (int64_t p : params) out.push_back(pg_int(p));
  return out;
}

// The same history from a PostgreSQL ledger, through a cursor (a batch of rows in memory at a
// time, however long the history), in one read-only transaction (one snapshot).
Status for_each_pg_request(const std::string& url, const HistoryQuery& query,
                           const std::function<bool(const RecordedRequest&)>& visit) {
  auto conn = PgConn::connect(url);
  if (!conn) return conn.error();
  std::string sql = history_select(kFactsColumn);
  std::vector<int64_t> params;
  add_range(query, sql, params);
  if (query.with_facts_only) sql += std::string(" AND ") + kFactsColumn + " IS NOT NULL";
  sql += " ORDER BY ended_us, instance_id, chain_seq";
  if (Status st = conn->exec("BEGIN READ ONLY"); !st) return st;
  auto declared =
      conn->run("DECLARE history NO SCROLL CURSOR FOR " + detail::numbered_placeholders(sql),
                pg_params(params));
  if (!declared) return declared.error();
  RecordedRequest r;
  for (;;) {
    auto rows = conn->run("FETCH 10000 FROM history");
    if (!rows) return rows.error();
    if (rows->rows() == 0) break;
    for (int i = 0; i < rows->rows(); ++i) {
      read_request([&](int c) { return rows->integer(i, c); },
                   [&](int c) { return rows->text(i, c); }, r);
      if (!visit(r)) return conn->exec("COMMIT");
    }
  }
  return conn->exec("COMMIT");
}

}  // namespace

Result<int64_t> count_requests(const std::string& db_path, const HistoryQuery& query) {
  if (is_pg_url(db_path)) {
    auto conn = PgConn::connect(db_path);
    if (!conn) return conn.error();
    std::string sql = "SELECT COUNT(*) FROM requests WHERE kind='request'";
    std::vector<int64_t> params;
    add_range(query, sql, params);
    auto rows = conn->run(detail::numbered_placeholders(sql), pg_params(params));
    if (!rows) return rows.error();
    return rows->integer(0, 0);
  }
  auto db = ledger_db_open(db_path, true);
  if (!db) return db.error();
  std::string sql = "SELECT COUNT(*) FROM requests WHERE kind='request'";
  std::vector<int64_t> params;
  add_range(query, sql, params);
  auto stmt = db->prepare(sql);
  if (!stmt) return stmt.error();
  for (size_t i = 0; i < params.size(); ++i) stmt->bind(static_cast<int>(i + 1), params[i]);
  auto has = stmt->step();
  if (!has) return has.error();
  return *has ? stmt->int_at(0) : 0;
}

Status for_each_request(const std::string& db_path, const HistoryQuery& query,
                        const std::function<bool(const RecordedRequest&)>& visit) {
  if (is_pg_url(db_path)) return for_each_pg_request(db_path, query, visit);
  auto db = ledger_db_open(db_path, true);
  if (!db) return db.error();
  auto with_facts = has_facts_column(*db);
  if (!with_facts) return with_facts.error();
  if (!*with_facts && query.with_facts_only) return {};  // schema 1: no row has facts
  std::string sql = history_select(*with_facts ? kFactsColumn : "NULL");
  std::vector<int64_t> params;
  add_range(query, sql, params);
  if (query.with_facts_only) sql += std::string(" AND ") + kFactsColumn + " IS NOT NULL";
  sql += " ORDER BY ended_us, seq";  // the order of the requests_ended index: no sort
  auto stmt = db->prepare(sql);
  if (!stmt) return stmt.error();
  for (size_t i = 0; i < params.size(); ++i) stmt->bind(static_cast<int>(i + 1), params[i]);
  RecordedRequest r;
  for (;;) {
    auto has = stmt->step();
    if (!has) return has.error();
    if (!*has) return {};
    read_request([&](int c) { return stmt->int_at(c); }, [&](int c) { return stmt->text_at(c); },
                 r);
    if (!visit(r)) return {};
  }
}

Result<std::string> ledger_currency(const std::string& db_path) {
  if (is_pg_url(db_path)) {
    auto conn = PgConn::connect(db_path);
    if (!conn) return conn.error();
    auto rows = conn->run("SELECT value FROM meta WHERE key='currency'");
    if (!rows) return rows.error();
    return rows->rows() > 0 ? rows->text(0, 0) : std::string();
  }
  auto db = ledger_db_open(db_path, true);
  if (!db) return db.error();
  auto stmt = db->prepare("SELECT value FROM meta WHERE key='currency'");
  if (!stmt) return stmt.error();
  auto found = stmt->step();
  if (!found) return found.error();
  return *found ? stmt->text_at(0) : std::string();
}

}  // namespace ferry::ledger
