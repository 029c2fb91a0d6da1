#include "ledger/verify.h"

#include <array>
#include <map>
#include <set>
#include <tuple>

#include "ledger/pg_db.h"
#include "ledger/pg_store.h"
#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
#include "ledger/store.h"

namespace ferry::ledger {

namespace {

constexpr size_t kMaxProblems = 50;

class Checker {
 public:
  explicit Checker(VerifyResult& result) : result_(result) {}
  void problem(const std::string& text) {
    ++result_.problem_count;
    if (result_.problems.size() < kMaxProblems) result_.problems.push_back(text);
  }

 private:
  VerifyResult& result_;
};

int column_index(const std::vector<std::string>& columns, const char* name) {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] == name) return static_cast<int>(i);
  }
  return -1;
}

bool is_null(const Value& v) {
  return std::holds_alternative<std::monostate>(v);
}
int64_t as_int(const Value& v) {
  const auto* i = std::get_if<int64_t>(&v);
  return i != nullptr ? *i : 0;
}
std::string as_text(const Value& v) {
  const auto* s = std::get_if<std::string>(&v);
  return s != nullptr ? *s : "";
}

constexpr std::array<const char*, 4> kCostParts = {"cost_input", "cost_cached", "cost_output",
                                                   "cost_reasoning"};
constexpr std::array<const char*, 4> kTokenKinds = {"input_tokens", "cached_tokens",
                                                    "output_tokens", "reasoning_tokens"};

// Checks the cost columns of one row (request or attempt): all NULL when unpriced, otherwise
// all set and the total equal to the parts. Only adjustments may be negative (a credit): a
// request that cost less than nothing is a defect (e.g. an overflowed price x tokens).
void check_costs(const std::vector<std::string>& columns, const std::vector<Value>& values,
                 const std::string& what, bool credit_allowed, Checker& check) {
  std::string pricing = as_text(values[column_index(columns, "pricing")]);
  const Value& total = values[column_index(columns, "cost_total")];
  if (pricing == "unpriced") {
    bool all_null = is_null(total);
    for (const char* part : kCostParts)
      all_null = all_null && is_null(values[column_index(columns, part)]);
    if (!all_null) check.problem(what + ": unpriced but has a cost");
    return;
  }
  if (pricing != "priced" && pricing != "internal") {
    check.problem(what + ": unknown pricing '" + pricing + "'");
    return;
  }
  __int128 sum = 0;  // four int64 parts cannot overflow it
  for (const char* part : kCostParts) {
    const Value& v = values[column_index(columns, part)];
    if (is_null(v)) check.problem(what + ": priced but " + part + " is missing");
    if (!credit_allowed && as_int(v) < 0) {
      check.problem(what + ": negative " + part + " " + std::to_string(as_int(v)));
    }
    sum += as_int(v);
  }
  if (is_null(total) || as_int(total) != sum) {
    check.problem(what + ": cost_total " + std::to_string(as_int(total)) + " != sum of parts" +
                  (sum >= INT64_MIN && sum <= INT64_MAX
                       ? " " + std::to_string(static_cast<int64_t>(sum))
                       : std::string(" (beyond int64)")));
  }
  if (!credit_allowed && as_int(total) < 0) {
    check.problem(what + ": negative cost_total " + std::to_string(as_int(total)));
  }
}

// What a ledger file's schema version holds (verify never migrates or writes): before version 2
// no facts column and no daily_team table; before 3 no usage_check column; before 4 no
// request_id; daily's refused, shadows and unpriced_served came with a later migration.
struct Schema {
  bool facts = false;
  bool usage_check = false;
  bool request_id = false;
  bool constraint = false;
  bool levers = false;
  bool served = false;
};

Result<Schema> read_schema(Db& db) {
  Schema schema;
  auto version = db.prepare("PRAGMA user_version");
  if (!version) return version.error();
  auto got = version->step();
  if (!got) return got.error();
  schema.facts = *got && version->int_at(0) >= 2;
  schema.usage_check = *got && version->int_at(0) >= 3;
  schema.request_id = *got && version->int_at(0) >= 4;
  schema.constraint = *got && version->int_at(0) >= 6;
  schema.levers = *got && version->int_at(0) >= 8;
  auto served = db.prepare("SELECT 1 FROM pragma_table_info('daily') WHERE name='refused'");
  if (!served) return served.error();
  auto found = served->step();
  if (!found) return found.error();
  schema.served = *found;
  return schema;
}

// The rows in one of two queries with the same columns and not in the other.
Result<int64_t> count_difference(Db& db, const std::string& a, const std::string& b) {
  auto diff = db.prepare("SELECT (SELECT COUNT(*) FROM (" + a + " EXCEPT " + b +
                         ")) + (SELECT COUNT(*) FROM (" + b + " EXCEPT " + a + "))");
  if (!diff) return diff.error();
  auto got = diff->step();
  if (!got) return got.error();
  return diff->int_at(0);
}

// The prepared statements of the walk over the requests.
struct Statements {
  Stmt rows;      // seq, hash, facts, usage_check, request_id, then request_columns()
  Stmt attempts;  // attempt_columns() of one request, in order
  Stmt original;  // the seq of a request by id
};

// The walk's select list (seq, hash, facts, usage_check, request_id, request_columns(), the
// constraint columns), without FROM.
std::string walk_select(const Schema& schema) {
  std::string select = std::string("SELECT seq,hash,") + (schema.facts ? kFactsColumn : "NULL") +
                       "," + (schema.usage_check ? kUsageCheckColumn : "NULL") + "," +
                       (schema.request_id ? kRequestIdColumn : "NULL");
  for (const auto& c : request_columns()) select += "," + c;
  select += schema.constraint ? std::string(",") + kConstraintColumn + "," + kSchemaHashColumn
                              : std::string(",NULL,NULL");
  for (const auto& c : lever_columns()) select += "," + (schema.levers ? c : std::string("NULL"));
  return select;
}

Result<Statements> prepare_walk(Db& db, const Schema& schema, const char* where = "") {
  std::string select = walk_select(schema);
  auto rows = db.prepare(select + " FROM requests" + where + " ORDER BY seq");
  if (!rows) return rows.error();
  const auto& acols = attempt_columns();
  std::string aselect = "SELECT ";
  for (size_t i = 0; i < acols.size(); ++i) aselect += (i == 0 ? "" : ",") + acols[i];
  auto attempts = db.prepare(aselect + " FROM attempts WHERE request_id=? ORDER BY attempt");
  if (!attempts) return attempts.error();
  auto original = db.prepare("SELECT seq FROM requests WHERE id=? AND kind='request'");
  if (!original) return original.error();
  return Statements{std::move(rows).value(), std::move(attempts).value(),
                    std::move(original).value()};
}

// The lever columns of a row (read by `at(i)`, i over lever_columns()), behind their marker
// when one is set (store.h).
template <typename At>
void append_levers(std::vector<Value>& values, At&& at) {
  std::vector<Value> levers;
  bool any = false;
  for (size_t i = 0; i < lever_columns().size(); ++i) {
    levers.push_back(at(static_cast<int>(i)));
    any = any || !std::holds_alternative<std::monostate>(levers.back());
  }
  if (!any) return;
  values.emplace_back(std::in_place_type<std::string>, kLeversColumn);
  for (auto& v : levers) values.push_back(std::move(v));
}

// The hashed values of the current request row: its columns, then the facts and the usage
// check where set (see store.h).
std::vector<Value> row_values(const Stmt& rows) {
  const size_t n = request_columns().size();
  std::vector<Value> values;
  values.reserve(n + 3);
  for (size_t i = 0; i < n; ++i) values.push_back(rows.value_at(static_cast<int>(i + 5)));
  if (!rows.is_null(2)) values.push_back(rows.value_at(2));
  if (!rows.is_null(3)) {
    values.emplace_back(std::in_place_type<std::string>, kUsageCheckColumn);
    values.push_back(rows.value_at(3));
  }
  if (!rows.is_null(static_cast<int>(n + 5))) {
    values.emplace_back(std::in_place_type<std::string>, kConstraintColumn);
    values.push_back(rows.value_at(static_cast<int>(n + 5)));
    if (!rows.is_null(static_cast<int>(n + 6))) {
      values.push_back(rows.value_at(static_cast<int>(n + 6)));
    }
  }
  append_levers(values, [&](int i) { return rows.value_at(static_cast<int>(n + 7) + i); });
  return values;
}

Result<std::vector<std::vector<Value>>> read_attempts(Stmt& attempts, const std::string& id) {
  const size_t n = attempt_columns().size();
  std::vector<std::vector<Value>> out;
  attempts.bind(1, id);
  for (;;) {
    auto has = attempts.step();
    if (!has) return has.error();
    if (!*has) break;
    std::vector<Value> av;
    for (size_t i = 0; i < n; ++i) av.push_back(attempts.value_at(static_cast<int>(i)));
    out.push_back(std::move(av));
  }
  attempts.reset();
  return out;
}

// A request's attempts: each one's costs, and token and cost totals equal to their sums.
void check_attempts(const std::vector<Value>& values,
                    const std::vector<std::vector<Value>>& attempt_values, const std::string& what,
                    bool adjustment, Checker& check) {
  const auto& rcols = request_columns();
  const auto& acols = attempt_columns();
  for (size_t a = 0; a < attempt_values.size(); ++a) {
    check_costs(acols, attempt_values[a], what + " attempt " + std::to_string(a + 1), adjustment,
                check);
  }
  auto check_sums = [&](const auto& names) {
    for (const char* name : names) {
      int64_t sum = 0;
      for (const auto& av : attempt_values) sum += as_int(av[column_index(acols, name)]);
      if (sum != as_int(values[column_index(rcols, name)])) {
        check.problem(what + ": " + name + " != sum over its attempts");
      }
    }
  };
  check_sums(kTokenKinds);
  if (as_text(values[column_index(rcols, "pricing")]) != "unpriced") check_sums(kCostParts);
}

// Walks the requests in order: the hash chain, each row's hash over it and its attempts, costs
// and sums, adjustments pointing at an earlier request. Sets result.head.
Status check_rows(Statements& st, VerifyResult& result, Checker& check) {
  const auto& rcols = request_columns();
  std::string prev_hash = kGenesisHash;
  int64_t last_seq = 0;
  for (;;) {
    auto has = st.rows.step();
    if (!has) return has.error();
    if (!*has) break;
    ++result.rows;
    const int64_t seq = st.rows.int_at(0);
    const std::string hash = st.rows.text_at(1);
    const std::vector<Value> values = row_values(st.rows);
    const std::string request_id = st.rows.is_null(4) ? "" : st.rows.text_at(4);
    const std::string id = as_text(values[column_index(rcols, "id")]);
    const std::string what = "row " + std::to_string(seq) + " (" + id + ")";
    if (as_text(values[column_index(rcols, "prev_hash")]) != prev_hash) {
      check.problem(what +
                    ": prev_hash does not match the previous row's hash (row missing, "
                    "reordered or altered)");
    }
    auto attempt_values = read_attempts(st.attempts, id);
    if (!attempt_values) return attempt_values.error();
    result.attempts += static_cast<int64_t>(attempt_values->size());
    if (row_hash(values, *attempt_values, request_id) != hash) {
      check.problem(what + ": hash mismatch (the row or its attempts were altered)");
    }
    const bool adjustment = as_text(values[column_index(rcols, "kind")]) == "adjustment";
    check_costs(rcols, values, what, adjustment, check);
    if (!attempt_values->empty()) check_attempts(values, *attempt_values, what, adjustment, check);
    if (adjustment) {
      ++result.adjustments;
      st.original.bind(1, as_text(values[column_index(rcols, "adjusts_id")]));
      auto found = st.original.step();
      if (!found) return found.error();
      if (!*found || st.original.int_at(0) >= seq) {
        check.problem(what + ": adjusts a request that does not precede it");
      }
      st.original.reset();
    }
    prev_hash = hash;
    last_seq = seq;
  }
  result.head = std::to_string(last_seq) + ":" + prev_hash;
  return {};
}

// The chain head recorded at the last commit must be the last row's: rows cut off the end
// leave a consistent chain otherwise.
Status check_chain_head(Db& db, VerifyResult& result, Checker& check) {
  if (result.rows == 0) return {};
  auto head = db.prepare("SELECT value FROM meta WHERE key='chain_head'");
  if (!head) return head.error();
  auto found = head->step();
  if (!found) return found.error();
  if (!*found || head->text_at(0) != result.head) {
    check.problem("chain head recorded at the last commit (" +
                  (*found ? head->text_at(0) : std::string("none")) +
                  ") differs from the last row (" + result.head + "): rows were removed");
  }
  return {};
}

// One aggregate table against what it sums, as a query pair: a problem when they differ.
Status check_same(Db& db, const std::string& sums, const std::string& table,
                  const std::string& problem, Checker& check) {
  auto groups = count_difference(db, sums, table);
  if (!groups) return groups.error();
  if (*groups != 0) check.problem(problem + " in " + std::to_string(*groups) + " group(s)");
  return {};
}

// The daily aggregates equal the rows, group by group: daily's totals and (later schemas) its
// refused/shadow counts, and daily_team (schema 2) equal to daily without key and rule.
Status check_aggregates(Db& db, const Schema& schema, Checker& check) {
  const char* kRawDaily =
      "SELECT day,key_id,team,project,upstream_model,target,rule_id,SUM(kind='request'),"
      "SUM(kind='request' AND pricing='unpriced'),SUM(input_tokens),SUM(cached_tokens),"
      "SUM(output_tokens),SUM(reasoning_tokens),SUM(COALESCE(cost_input,0)),"
      "SUM(COALESCE(cost_cached,0)),SUM(COALESCE(cost_output,0)),"
      "SUM(COALESCE(cost_reasoning,0)),SUM(COALESCE(cost_total,0)),"
      "SUM(COALESCE(avoided_cost,0)),"
      "SUM(CASE WHEN avoided_cost IS NOT NULL THEN COALESCE(cost_total,0) ELSE 0 END) "
      "FROM requests GROUP BY day,key_id,team,project,upstream_model,target,rule_id";
  const char* kDaily =
      "SELECT day,key_id,team,project,model,target,rule_id,requests,unpriced,input_tokens,"
      "cached_tokens,output_tokens,reasoning_tokens,cost_input,cost_cached,cost_output,"
      "cost_reasoning,cost_total,avoided_total,avoided_base FROM daily";
  if (Status s = check_same(db, kRawDaily, kDaily, "daily aggregate differs from the rows", check);
      !s) {
    return s;
  }
  // What was not served (the `refused` columns), group by group, as reports count it.
  if (schema.served) {
    const std::string shadow = shadow_row_sql(/*pg=*/false);
    const std::string kRawServed =
        "SELECT day,key_id,team,project,upstream_model,target,rule_id,"
        "SUM(kind='request' AND status='refused'),"
        "SUM(kind='request' AND status<>'refused' AND " +
        shadow +
        "),"
        "SUM(kind='request' AND status<>'refused' AND NOT " +
        shadow +
        " AND pricing='unpriced') "
        "FROM requests GROUP BY day,key_id,team,project,upstream_model,target,rule_id";
    const char* kServed =
        "SELECT day,key_id,team,project,model,target,rule_id,refused,shadows,unpriced_served "
        "FROM daily";
    const char* kTeamFromDaily =
        "SELECT day,team,project,model,target,SUM(refused),SUM(shadows),SUM(unpriced_served) "
        "FROM daily GROUP BY day,team,project,model,target";
    const char* kTeamServed =
        "SELECT day,team,project,model,target,refused,shadows,unpriced_served FROM daily_team";
    if (Status s =
            check_same(db, kRawServed, kServed,
                       "daily aggregate differs from the rows in refused/shadow counts", check);
        !s) {
      return s;
    }
    if (Status s = check_same(
            db, kTeamFromDaily, kTeamServed,
            "daily_team aggregate differs from the daily aggregate in refused/shadow counts",
            check);
        !s) {
      return s;
    }
  }
  if (!schema.facts) return {};
  const char* kFromDaily =
      "SELECT day,team,project,model,target,SUM(requests),SUM(unpriced),SUM(input_tokens),"
      "SUM(cached_tokens),SUM(output_tokens),SUM(reasoning_tokens),SUM(cost_input),"
      "SUM(cost_cached),SUM(cost_output),SUM(cost_reasoning),SUM(cost_total),"
      "SUM(avoided_total),SUM(avoided_base),MIN(first_us),MAX(last_us) FROM daily "
      "GROUP BY day,team,project,model,target";
  const char* kTeam =
      "SELECT day,team,project,model,target,requests,unpriced,input_tokens,cached_tokens,"
      "output_tokens,reasoning_tokens,cost_input,cost_cached,cost_output,cost_reasoning,"
      "cost_total,avoided_total,avoided_base,first_us,last_us FROM daily_team";
  return check_same(db, kFromDaily, kTeam, "daily_team aggregate differs from the daily aggregate",
                    check);
}

// ---------------------------------------------------------------------------------------
// PostgreSQL: one chain per instance (instance_id, chain_seq), its head in chain_heads.

struct PgChain {
  std::string instance;
  int64_t seq = 0;
  std::string hash = kGenesisHash;
};

// The attempts of every row (or of the one request `only`), by request id.
Result<std::map<std::string, std::vector<std::vector<Value>>>> pg_attempts(
    PgConn& conn, const std::string* only = nullptr) {
  std::string select = "SELECT " + detail::join_names(attempt_columns()) + " FROM attempts" +
                       (only ? " WHERE request_id=$1" : "") + " ORDER BY request_id, attempt";
  auto rows = only ? conn.run(select, {PgParam(*only)}) : conn.run(select);
  if (!rows) return rows.error();
  std::map<std::string, std::vector<std::vector<Value>>> out;
  const int n = static_cast<int>(attempt_columns().size());
  for (int r = 0; r < rows->rows(); ++r) {
    std::vector<Value> values;
    for (int c = 0; c < n; ++c) values.push_back(rows->value(r, c));
    out[rows->text(r, 0)].push_back(std::move(values));
  }
  return out;
}

// The columns a row's hash covers, in pg_row_values' order: seq, hash, facts, usage_check,
// request_id, instance_id, chain_seq, then the request columns, constraint, schema hash and
// levers.
std::string pg_row_select() {
  return "SELECT seq,hash,facts,usage_check,request_id,instance_id,chain_seq," +
         detail::join_names(request_columns()) + "," + kConstraintColumn + "," + kSchemaHashColumn +
         "," + detail::join_names(lever_columns()) + " FROM requests";
}

// The values a row's hash is over, from row `r` of a pg_row_select().
std::vector<Value> pg_row_values(const PgRows& rows, int r) {
  const auto& rcols = request_columns();
  std::vector<Value> values;
  for (size_t i = 0; i < rcols.size(); ++i)
    values.push_back(rows.value(r, static_cast<int>(i) + 7));
  if (!rows.is_null(r, 2)) values.push_back(rows.text(r, 2));
  if (!rows.is_null(r, 3)) {
    values.emplace_back(std::in_place_type<std::string>, kUsageCheckColumn);
    values.push_back(rows.text(r, 3));
  }
  const int constraint = static_cast<int>(rcols.size()) + 7;  // then schema_hash
  if (!rows.is_null(r, constraint)) {
    values.emplace_back(std::in_place_type<std::string>, kConstraintColumn);
    values.push_back(rows.text(r, constraint));
    if (!rows.is_null(r, constraint + 1)) values.push_back(rows.text(r, constraint + 1));
  }
  append_levers(values, [&](int i) { return rows.value(r, constraint + 2 + i); });
  return values;
}

// Walks every chain: links, hashes (over the instance too), costs, attempts, adjustments.
Status pg_check_rows(PgConn& conn, std::map<std::string, PgChain>& chains, VerifyResult& result,
                     Checker& check) {
  const auto& rcols = request_columns();
  auto attempts = pg_attempts(conn);
  if (!attempts) return attempts.error();
  auto rows = conn.run(pg_row_select() + " ORDER BY instance_id, chain_seq");
  if (!rows) return rows.error();
  std::map<std::string, int64_t> request_seq;  // id -> seq, for adjustments
  for (int r = 0; r < rows->rows(); ++r) {
    if (rows->text(r, 8) == "request") request_seq[rows->text(r, 7)] = rows->integer(r, 0);
  }
  const std::vector<std::vector<Value>> none;
  for (int r = 0; r < rows->rows(); ++r) {
    ++result.rows;
    const std::vector<Value> values = pg_row_values(*rows, r);
    const std::string instance = rows->text(r, 5);
    const std::string id = as_text(values[0]);
    PgChain& chain = chains[instance];
    chain.instance = instance;
    const std::string what =
        "instance " + instance + " row " + std::to_string(rows->integer(r, 6)) + " (" + id + ")";
    if (rows->integer(r, 6) != chain.seq + 1 ||
        as_text(values[column_index(rcols, "prev_hash")]) != chain.hash) {
      check.problem(what +
                    ": does not follow the previous row of its chain (row missing, "
                    "reordered or altered)");
    }
    auto found = attempts->find(id);
    const auto& attempt_values = found != attempts->end() ? found->second : none;
    result.attempts += static_cast<int64_t>(attempt_values.size());
    std::string request_id = rows->is_null(r, 4) ? "" : rows->text(r, 4);
    if (row_hash(values, attempt_values, request_id, instance) != rows->text(r, 1)) {
      check.problem(what + ": hash mismatch (the row or its attempts were altered)");
    }
    const bool adjustment = as_text(values[column_index(rcols, "kind")]) == "adjustment";
    check_costs(rcols, values, what, adjustment, check);
    if (!attempt_values.empty()) check_attempts(values, attempt_values, what, adjustment, check);
    if (adjustment) {
      ++result.adjustments;
      auto orig = request_seq.find(as_text(values[column_index(rcols, "adjusts_id")]));
      if (orig == request_seq.end()) check.problem(what + ": adjusts an unknown request");
    }
    chain.seq = rows->integer(r, 6);
    chain.hash = rows->text(r, 1);
  }
  return {};
}

// Each chain's recorded head equals its last row; a head without rows is a removed chain.
Status pg_check_heads(PgConn& conn, std::map<std::string, PgChain>& chains, VerifyResult& result,
                      Checker& check) {
  auto heads = conn.run("SELECT instance_id, chain_seq, hash FROM chain_heads ORDER BY 1");
  if (!heads) return heads.error();
  std::set<std::string> with_head;
  for (int r = 0; r < heads->rows(); ++r) {
    std::string instance = heads->text(r, 0);
    with_head.insert(instance);
    const PgChain& chain = chains[instance];
    std::string recorded = std::to_string(heads->integer(r, 1)) + ":" + heads->text(r, 2);
    std::string last = std::to_string(chain.seq) + ":" + chain.hash;
    if (recorded != last) {
      check.problem("instance " + instance + ": chain head recorded at the last commit (" +
                    recorded + ") differs from its last row (" + last + "): rows were removed");
    }
    result.head += (result.head.empty() ? "" : " ") + instance + "=" + last;
  }
  for (const auto& [instance, chain] : chains) {
    if (with_head.count(instance) == 0) {
      check.problem("instance " + instance + ": rows without a recorded chain head");
    }
  }
  return {};
}

Status pg_check_aggregates(PgConn& conn, Checker& check) {
  const char* kRaw =
      "SELECT day,key_id,team,project,upstream_model,target,rule_id,"
      "SUM((kind='request')::int),SUM((kind='request' AND pricing='unpriced')::int),"
      "SUM(input_tokens),SUM(cached_tokens),SUM(output_tokens),SUM(reasoning_tokens),"
      "SUM(COALESCE(cost_input,0)),SUM(COALESCE(cost_cached,0)),SUM(COALESCE(cost_output,0)),"
      "SUM(COALESCE(cost_reasoning,0)),SUM(COALESCE(cost_total,0)),SUM(COALESCE(avoided_cost,0)),"
      "SUM(CASE WHEN avoided_cost IS NOT NULL THEN COALESCE(cost_total,0) ELSE 0 END),"
      "SUM((kind='request' AND status='refused')::int) "
      "FROM requests GROUP BY day,key_id,team,project,upstream_model,target,rule_id";
  const char* kDaily =
      "SELECT day,key_id,team,project,model,target,rule_id,requests,unpriced,input_tokens,"
      "cached_tokens,output_tokens,reasoning_tokens,cost_input,cost_cached,cost_output,"
      "cost_reasoning,cost_total,avoided_total,avoided_base,refused FROM daily";
  const char* kFromDaily =
      "SELECT day,team,project,model,target,SUM(requests),SUM(unpriced),SUM(cost_total),"
      "SUM(refused),SUM(shadows),SUM(unpriced_served) FROM daily GROUP BY 1,2,3,4,5";
  const char* kTeam =
      "SELECT day,team,project,model,target,requests,unpriced,cost_total,refused,shadows,"
      "unpriced_served FROM daily_team";
  for (auto [a, b, what] :
       {std::tuple{kRaw, kDaily, "daily aggregate differs from the rows"},
        std::tuple{kFromDaily, kTeam, "daily_team aggregate differs from the daily aggregate"}}) {
    auto diff = conn.run(std::string("SELECT (SELECT COUNT(*) FROM (") + a + " EXCEPT " + b +
                         ") x) + (SELECT COUNT(*) FROM (" + b + " EXCEPT " + a + ") y)");
    if (!diff) return diff.error();
    if (diff->integer(0, 0) != 0) {
      check.problem(std::string(what) + " in " + std::to_string(diff->integer(0, 0)) + " group(s)");
    }
  }
  return {};
}

}  // namespace

Result<VerifyResult> verify_pg_ledger(const std::string& url) {
  auto conn = PgConn::connect(url);
  if (!conn) return conn.error();
  VerifyResult result;
  Checker check(result);
  // One snapshot of every table, even while instances write.
  if (Status st = conn->exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); !st) {
    return st.error();
  }
  std::map<std::string, PgChain> chains;
  if (Status s = pg_check_rows(*conn, chains, result, check); !s) return s.error();
  if (Status s = pg_check_heads(*conn, chains, result, check); !s) return s.error();
  if (Status s = pg_check_aggregates(*conn, check); !s) return s.error();
  (void)conn->exec("COMMIT");
  return result;
}

Result<VerifyResult> verify_ledger(const std::string& db_path) {
  if (is_pg_url(db_path)) return verify_pg_ledger(db_path);
  auto db = ledger_db_open(db_path, true);
  if (!db) return db.error();
  VerifyResult result;
  Checker check(result);
  // One read transaction: a consistent snapshot even while ferry is writing.
  if (auto st = db->exec("BEGIN"); !st) return st.error();
  auto schema = read_schema(*db);
  if (!schema) return schema.error();
  auto statements = prepare_walk(*db, *schema);
  if (!statements) return statements.error();
  if (Status s = check_rows(*statements, result, check); !s) return s.error();
  if (Status s = check_chain_head(*db, result, check); !s) return s.error();
  if (Status s = check_aggregates(*db, *schema, check); !s) return s.error();
  (void)db->exec("COMMIT");
  return result;
}

}  // namespace ferry::ledger

namespace ferry::ledger {

namespace {

// verify_links on PostgreSQL: each row's hash (over its instance too) and its prev_hash against
// the row before it in its instance's chain.
Result<std::map<int64_t, bool>> verify_pg_links(const std::string& url,
                                                const std::vector<int64_t>& seqs) {
  std::map<int64_t, bool> out;
  auto conn = PgConn::connect(url);
  if (!conn) return conn.error();
  if (Status st = conn->exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); !st) {
    return st.error();
  }
  const auto& rcols = request_columns();
  const std::string select = pg_row_select() + " WHERE seq=$1";
  for (int64_t seq : seqs) {
    auto rows = conn->run(select, {pg_int(seq)});
    if (!rows) return rows.error();
    if (rows->rows() == 0) continue;
    const std::vector<Value> values = pg_row_values(*rows, 0);
    const std::string id = as_text(values[0]);
    const std::string instance = rows->text(0, 5);
    const int64_t chain_seq = rows->integer(0, 6);
    auto attempts = pg_attempts(*conn, &id);
    if (!attempts) return attempts.error();
    const auto found = attempts->find(id);
    const std::vector<std::vector<Value>> none;
    std::string prev_hash(kGenesisHash);
    if (chain_seq > 1) {
      auto prev = conn->run("SELECT hash FROM requests WHERE instance_id=$1 AND chain_seq=$2",
                            {PgParam(instance), pg_int(chain_seq - 1)});
      if (!prev) return prev.error();
      prev_hash = prev->rows() > 0 ? prev->text(0, 0) : std::string();
    }
    const std::string request_id = rows->is_null(0, 4) ? "" : rows->text(0, 4);
    out[seq] = row_hash(values, found != attempts->end() ? found->second : none, request_id,
                        instance) == rows->text(0, 1) &&
               as_text(values[column_index(rcols, "prev_hash")]) == prev_hash;
  }
  (void)conn->exec("COMMIT");
  return out;
}

}  // namespace

// Each row: its hash again, and its prev_hash against the row before it in the chain.
Result<std::map<int64_t, bool>> verify_links(const std::string& db_path,
                                             const std::vector<int64_t>& seqs) {
  std::map<int64_t, bool> out;
  if (seqs.empty()) return out;
  if (is_pg_url(db_path)) return verify_pg_links(db_path, seqs);
  auto db = ledger_db_open(db_path, true);
  if (!db) return db.error();
  if (auto st = db->exec("BEGIN"); !st) return st.error();
  auto schema = read_schema(*db);
  if (!schema) return schema.error();
  auto st = prepare_walk(*db, *schema, " WHERE seq=?");
  if (!st) return st.error();
  auto before = db->prepare("SELECT hash FROM requests WHERE seq<? ORDER BY seq DESC LIMIT 1");
  if (!before) return before.error();
  const auto& rcols = request_columns();
  for (int64_t seq : seqs) {
    st->rows.bind(1, seq);
    auto has = st->rows.step();
    if (!has) return has.error();
    if (!*has) {
      st->rows.reset();
      continue;
    }
    const std::string hash = st->rows.text_at(1);
    const std::vector<Value> values = row_values(st->rows);
    const std::string request_id = st->rows.is_null(4) ? "" : st->rows.text_at(4);
    st->rows.reset();
    auto attempt_values = read_attempts(st->attempts, as_text(values[column_index(rcols, "id")]));
    if (!attempt_values) return attempt_values.error();
    before->bind(1, seq);
    auto prev = before->step();
    if (!prev) return prev.error();
    const std::string prev_hash = *prev ? before->text_at(0) : std::string(kGenesisHash);
    before->reset();
    out[seq] = row_hash(values, *attempt_values, request_id) == hash &&
               as_text(values[column_index(rcols, "prev_hash")]) == prev_hash;
  }
  (void)db->exec("COMMIT");
  return out;
}

}  // namespace ferry::ledger
