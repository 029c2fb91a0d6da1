#include "ledger/history.h"

#include <vector>

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

TokenCount token_count(const Stmt& row, int column) {
  return TokenCount{row.int_at(column),
                    parse_token_source(row.text_at(column + 1)).value_or(TokenSource::kNone)};
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

}  // namespace

Result<int64_t> count_requests(const std::string& db_path, const HistoryQuery& query) {
  auto db = Db::open(db_path, true);
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
  auto db = Db::open(db_path, true);
  if (!db) return db.error();
  auto with_facts = has_facts_column(*db);
  if (!with_facts) return with_facts.error();
  if (!*with_facts && query.with_facts_only) return {};  // schema 1: no row has facts
  std::string sql = std::string(
                        "SELECT seq,id,started_us,ended_us,key_id,team,project,task_id,"
                        "requested_model,target,upstream_model,rule_id,policy_version,status,"
                        "http_status,stream,input_tokens,input_source,cached_tokens,cached_source,"
                        "output_tokens,output_source,reasoning_tokens,reasoning_source,pricing,"
                        "price_version,cost_input,cost_cached,cost_output,cost_reasoning,") +
                    (*with_facts ? kFactsColumn : "NULL") + " FROM requests WHERE kind='request'";
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
    r.seq = stmt->int_at(0);
    r.id = stmt->text_at(1);
    r.started_us = stmt->int_at(2);
    r.ended_us = stmt->int_at(3);
    r.key_id = stmt->text_at(4);
    r.team = stmt->text_at(5);
    r.project = stmt->text_at(6);
    r.task_id = stmt->text_at(7);
    r.requested_model = stmt->text_at(8);
    r.target = stmt->text_at(9);
    r.upstream_model = stmt->text_at(10);
    r.rule_id = stmt->text_at(11);
    r.policy_version = stmt->text_at(12);
    r.status = parse_request_status(stmt->text_at(13)).value_or(RequestStatus::kError);
    r.http_status = static_cast<int>(stmt->int_at(14));
    r.stream = stmt->int_at(15) != 0;
    r.tokens.input = token_count(*stmt, 16);
    r.tokens.cached_input = token_count(*stmt, 18);
    r.tokens.output = token_count(*stmt, 20);
    r.tokens.reasoning = token_count(*stmt, 22);
    std::string pricing = stmt->text_at(24);
    r.cost = Cost{};
    if (pricing != "unpriced") {
      r.cost.pricing = pricing == "internal" ? Pricing::kInternal : Pricing::kPriced;
      r.cost.price_version = stmt->text_at(25);
      r.cost.input = Money::from_micros(stmt->int_at(26));
      r.cost.cached_input = Money::from_micros(stmt->int_at(27));
      r.cost.output = Money::from_micros(stmt->int_at(28));
      r.cost.reasoning = Money::from_micros(stmt->int_at(29));
    }
    r.facts_json = stmt->text_at(30);
    if (!visit(r)) return {};
  }
}

Result<std::string> ledger_currency(const std::string& db_path) {
  auto db = Db::open(db_path, true);
  if (!db) return db.error();
  auto stmt = db->prepare("SELECT value FROM meta WHERE key='currency'");
  if (!stmt) return stmt.error();
  auto found = stmt->step();
  if (!found) return found.error();
  return *found ? stmt->text_at(0) : std::string();
}

}  // namespace ferry::ledger
