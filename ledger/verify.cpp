#include "ledger/verify.h"

#include <array>
#include <tuple>

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

}  // namespace

Result<VerifyResult> verify_ledger(const std::string& db_path) {
  auto db = Db::open(db_path, true);
  if (!db) return db.error();
  VerifyResult result;
  Checker check(result);
  // One read transaction: a consistent snapshot even while ferry is writing.
  if (auto st = db->exec("BEGIN"); !st) return st.error();
  const auto& rcols = request_columns();
  const auto& acols = attempt_columns();
  // A file not yet migrated to version 2 (verify never writes) has no facts column and no
  // daily_team table; before version 3, no usage_check column; before 4, no request_id.
  bool has_facts = false;
  bool has_usage_check = false;
  bool has_request_id = false;
  bool has_served = false;  // daily's refused, shadows and unpriced_served (a later migration)
  {
    auto version = db->prepare("PRAGMA user_version");
    if (!version) return version.error();
    auto got = version->step();
    if (!got) return got.error();
    has_facts = *got && version->int_at(0) >= 2;
    has_usage_check = *got && version->int_at(0) >= 3;
    has_request_id = *got && version->int_at(0) >= 4;
    auto served = db->prepare("SELECT 1 FROM pragma_table_info('daily') WHERE name='refused'");
    if (!served) return served.error();
    auto found = served->step();
    if (!found) return found.error();
    has_served = *found;
  }
  std::string select = std::string("SELECT seq,hash,") + (has_facts ? kFactsColumn : "NULL") + "," +
                       (has_usage_check ? kUsageCheckColumn : "NULL") + "," +
                       (has_request_id ? kRequestIdColumn : "NULL");
  for (const auto& c : rcols) select += "," + c;
  auto rows = db->prepare(select + " FROM requests ORDER BY seq");
  if (!rows) return rows.error();
  std::string aselect = "SELECT ";
  for (size_t i = 0; i < acols.size(); ++i) aselect += (i == 0 ? "" : ",") + acols[i];
  auto attempts = db->prepare(aselect + " FROM attempts WHERE request_id=? ORDER BY attempt");
  if (!attempts) return attempts.error();
  auto original = db->prepare("SELECT seq FROM requests WHERE id=? AND kind='request'");
  if (!original) return original.error();

  std::string prev_hash = kGenesisHash;
  int64_t last_seq = 0;
  const int id_col = column_index(rcols, "id");
  for (;;) {
    auto has = rows->step();
    if (!has) return has.error();
    if (!*has) break;
    ++result.rows;
    int64_t seq = rows->int_at(0);
    std::string hash = rows->text_at(1);
    std::vector<Value> values;
    values.reserve(rcols.size() + 1);
    for (size_t i = 0; i < rcols.size(); ++i) {
      values.push_back(rows->value_at(static_cast<int>(i + 5)));
    }
    // The facts and the usage check, where set, are hashed after the columns, then the
    // request id (see store.h).
    if (!rows->is_null(2)) values.push_back(rows->value_at(2));
    if (!rows->is_null(3)) {
      values.emplace_back(std::in_place_type<std::string>, kUsageCheckColumn);
      values.push_back(rows->value_at(3));
    }
    std::string request_id = rows->is_null(4) ? "" : rows->text_at(4);
    std::string id = as_text(values[id_col]);
    std::string what = "row " + std::to_string(seq) + " (" + id + ")";
    if (as_text(values[column_index(rcols, "prev_hash")]) != prev_hash) {
      check.problem(what +
                    ": prev_hash does not match the previous row's hash (row missing, "
                    "reordered or altered)");
    }
    // Attempts, in order.
    std::vector<std::vector<Value>> attempt_values;
    attempts->bind(1, id);
    for (;;) {
      auto ahas = attempts->step();
      if (!ahas) return ahas.error();
      if (!*ahas) break;
      std::vector<Value> av;
      for (size_t i = 0; i < acols.size(); ++i)
        av.push_back(attempts->value_at(static_cast<int>(i)));
      attempt_values.push_back(std::move(av));
    }
    attempts->reset();
    result.attempts += static_cast<int64_t>(attempt_values.size());
    if (row_hash(values, attempt_values, request_id) != hash) {
      check.problem(what + ": hash mismatch (the row or its attempts were altered)");
    }
    const bool adjustment = as_text(values[column_index(rcols, "kind")]) == "adjustment";
    check_costs(rcols, values, what, adjustment, check);
    if (!attempt_values.empty()) {
      for (size_t a = 0; a < attempt_values.size(); ++a) {
        check_costs(acols, attempt_values[a], what + " attempt " + std::to_string(a + 1),
                    adjustment, check);
      }
      for (const char* kind : kTokenKinds) {
        int64_t sum = 0;
        for (const auto& av : attempt_values) sum += as_int(av[column_index(acols, kind)]);
        if (sum != as_int(values[column_index(rcols, kind)])) {
          check.problem(what + ": " + kind + " != sum over its attempts");
        }
      }
      if (as_text(values[column_index(rcols, "pricing")]) != "unpriced") {
        for (const char* part : kCostParts) {
          int64_t sum = 0;
          for (const auto& av : attempt_values) sum += as_int(av[column_index(acols, part)]);
          if (sum != as_int(values[column_index(rcols, part)])) {
            check.problem(what + ": " + part + " != sum over its attempts");
          }
        }
      }
    }
    if (as_text(values[column_index(rcols, "kind")]) == "adjustment") {
      ++result.adjustments;
      original->bind(1, as_text(values[column_index(rcols, "adjusts_id")]));
      auto found = original->step();
      if (!found) return found.error();
      if (!*found || original->int_at(0) >= seq) {
        check.problem(what + ": adjusts a request that does not precede it");
      }
      original->reset();
    }
    prev_hash = hash;
    last_seq = seq;
  }
  result.head = std::to_string(last_seq) + ":" + prev_hash;
  if (result.rows > 0) {
    auto head = db->prepare("SELECT value FROM meta WHERE key='chain_head'");
    if (!head) return head.error();
    auto found = head->step();
    if (!found) return found.error();
    if (!*found || head->text_at(0) != result.head) {
      check.problem("chain head recorded at the last commit (" +
                    (*found ? head->text_at(0) : std::string("none")) +
                    ") differs from the last row (" + result.head + "): rows were removed");
    }
  }
  // The daily aggregate must equal the rows, group by group.
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
  auto diff =
      db->prepare(std::string("SELECT (SELECT COUNT(*) FROM (") + kRawDaily + " EXCEPT " + kDaily +
                  ")) + (SELECT COUNT(*) FROM (" + kDaily + " EXCEPT " + kRawDaily + "))");
  if (!diff) return diff.error();
  auto got = diff->step();
  if (!got) return got.error();
  if (diff->int_at(0) != 0) {
    check.problem("daily aggregate differs from the rows in " + std::to_string(diff->int_at(0)) +
                  " group(s)");
  }
  // What was not served (the `refused` columns), group by group, as reports count it.
  if (has_served) {
    const char* kRawServed =
        "SELECT day,key_id,team,project,upstream_model,target,rule_id,"
        "SUM(kind='request' AND status='refused'),"
        "SUM(kind='request' AND status<>'refused' AND instr(trusted_tags,'\"shadow\"')>0),"
        "SUM(kind='request' AND status<>'refused' AND instr(trusted_tags,'\"shadow\"')=0 "
        "AND pricing='unpriced') "
        "FROM requests GROUP BY day,key_id,team,project,upstream_model,target,rule_id";
    const char* kServed =
        "SELECT day,key_id,team,project,model,target,rule_id,refused,shadows,unpriced_served "
        "FROM daily";
    const char* kTeamFromDaily =
        "SELECT day,team,project,model,target,SUM(refused),SUM(shadows),SUM(unpriced_served) "
        "FROM daily GROUP BY day,team,project,model,target";
    const char* kTeamServed =
        "SELECT day,team,project,model,target,refused,shadows,unpriced_served FROM daily_team";
    for (auto [a, b, what] :
         {std::tuple{kRawServed, kServed, "daily aggregate differs from the rows"},
          std::tuple{kTeamFromDaily, kTeamServed,
                     "daily_team aggregate differs from the daily aggregate"}}) {
      auto served_diff =
          db->prepare(std::string("SELECT (SELECT COUNT(*) FROM (") + a + " EXCEPT " + b +
                      ")) + (SELECT COUNT(*) FROM (" + b + " EXCEPT " + a + "))");
      if (!served_diff) return served_diff.error();
      auto served_got = served_diff->step();
      if (!served_got) return served_got.error();
      if (served_diff->int_at(0) != 0) {
        check.problem(std::string(what) + " in refused/shadow counts in " +
                      std::to_string(served_diff->int_at(0)) + " group(s)");
      }
    }
  }
  // daily_team (schema 2) must equal the daily aggregate without key and rule.
  if (has_facts) {
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
    auto team_diff = db->prepare(std::string("SELECT (SELECT COUNT(*) FROM (") + kFromDaily +
                                 " EXCEPT " + kTeam + ")) + (SELECT COUNT(*) FROM (" + kTeam +
                                 " EXCEPT " + kFromDaily + "))");
    if (!team_diff) return team_diff.error();
    auto team_got = team_diff->step();
    if (!team_got) return team_got.error();
    if (team_diff->int_at(0) != 0) {
      check.problem("daily_team aggregate differs from the daily aggregate in " +
                    std::to_string(team_diff->int_at(0)) + " group(s)");
    }
  }
  (void)db->exec("COMMIT");
  return result;
}

}  // namespace ferry::ledger
