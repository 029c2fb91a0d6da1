// Budgets per key, team or project over a day, week or month in a time zone, hard or soft,
// and the in-memory book that reserves worst cases and settles actual costs. BudgetBook is
// thread-safe: one mutex makes every reservation atomic with respect to the others.
//
// YAML (a list under `budgets:` in the server config; see ledger/ledger.example.yaml):
//   budgets:
//     - name: research-monthly   # unique; named in 429 errors and headers
//       scope: team              # key | team | project
//       match: research          # the key id, team or project it applies to
//       amount: 500.00           # exact decimal in the ledger currency
//       period: month            # day | week (starts Monday) | month
//       timezone: Europe/Berlin  # optional, default UTC; UTC, +HH:MM, -HH:MM or IANA name
//       mode: hard               # hard (refuse with 429) | soft (header + metric only)
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "common/money.h"
#include "common/yaml_util.h"
#include "ledger/time_util.h"

namespace ferry::ledger {

enum class BudgetScope : uint8_t { kKey, kTeam, kProject };
enum class BudgetPeriod : uint8_t { kDay, kWeek, kMonth };
std::string_view budget_scope_name(BudgetScope scope);
std::string_view budget_period_name(BudgetPeriod period);

struct BudgetDef {
  std::string name;
  BudgetScope scope = BudgetScope::kTeam;
  std::string match;
  Money amount;
  BudgetPeriod period = BudgetPeriod::kMonth;
  TimeZone zone = TimeZone::utc();
  bool hard = true;
};

// A budget's or rate limit's `scope:` (key | team | project). Throws yaml::YamlError.
BudgetScope parse_scope(const ferry::yaml::Map& map);

// Parses the `budgets:` list. Throws ferry::yaml::YamlError (control plane).
std::vector<BudgetDef> parse_budgets(const YAML::Node& budgets, const std::string& file);

// Who a request is billed to.
struct Subject {
  std::string key_id;
  std::string team;
  std::string project;
};

bool budget_applies(const BudgetDef& def, const Subject& subject);
// A key, team or project scope and its match against a subject (budgets and rate limits).
bool scope_applies(BudgetScope scope, const std::string& match, const Subject& subject);

struct PeriodBounds {
  int64_t start_us = 0;  // inclusive
  int64_t end_us = 0;    // exclusive: when the budget resets
};
PeriodBounds budget_period_at(const BudgetDef& def, int64_t at_us);

// A worst case held against every budget that applies to a subject.
struct Reservation {
  Money amount;
  std::vector<uint32_t> budgets;           // indexes into the book's definitions
  std::vector<std::string> soft_exceeded;  // soft budgets this request goes past
  std::optional<double> left_pct;          // lowest budget_left_pct after reserving
};

struct BudgetState {
  const BudgetDef* def = nullptr;
  PeriodBounds bounds;
  Money spent;     // settled cost in the current period (shared: every instance's)
  Money reserved;  // worst cases of requests still running (here)
  // Shared budgets (a PostgreSQL ledger), hard ones: the slice of the budget this instance
  // holds in the database, admitted against locally, and until when it may admit under it.
  Money lease;
  int64_t lease_until_us = 0;
  Money wanted;  // worst cases refused for want of lease since the last grant
};

class BudgetBook {
 public:
  explicit BudgetBook(std::vector<BudgetDef> defs);

  const std::vector<BudgetDef>& defs() const { return defs_; }

  // Reserves `worst_case` against every applying budget, or refuses with kRateLimited
  // (type_code "budget_exceeded", param = the budget's name) when a hard budget would go past
  // its amount. Atomic with respect to every other call.
  Result<Reservation> reserve(const Subject& subject, Money worst_case, int64_t now_us);

  // Ends a reservation: drops its worst case and adds the actual cost to the budgets whose
  // current period contains `cost_at_us`.
  void settle(const Reservation& reservation, Money actual, int64_t cost_at_us, int64_t now_us);
  void release(const Reservation& reservation);

  // Adds a cost that had no reservation (adjustments, records without admission, rebuild).
  void add_spent(const Subject& subject, Money amount, int64_t cost_at_us, int64_t now_us);
  // Sets a budget's spent amount for the period containing now (rebuild from the ledger).
  void set_spent(size_t index, PeriodBounds bounds, Money spent);

  // Shared budgets (ledger/pg_store.h): a hard budget admits against this instance's lease
  // only (reserved + worst case <= lease, while the lease is valid); a request refused for
  // want of lease gets 429 with retry_after_s 1 and counts in `wanted`. Settling consumes
  // the lease by the actual cost, as the row's transaction does in the database.
  void set_shared(bool shared);
  bool shared() const { return shared_; }
  // A grant from the database for the period starting at `period_start_us` (ignored when the
  // book has rolled past it), valid until `until_us`; clears `wanted`. `reset`: the lease had
  // expired in the database, so the grant replaces it instead of adding to it.
  void add_lease(size_t index, int64_t period_start_us, Money grant, int64_t until_us, bool reset);
  // The shared spent figure read from the database (every instance's committed rows).
  void set_shared_spent(size_t index, int64_t period_start_us, Money spent);

  // Lowest remaining share (0..100) among the budgets that apply; nullopt when none does.
  std::optional<double> left_pct(const Subject& subject, int64_t now_us);

  std::vector<BudgetState> snapshot(int64_t now_us);

 private:
  void roll(size_t index, int64_t now_us);  // requires mu_
  double left_pct_locked(size_t index) const;

  std::vector<BudgetDef> defs_;
  bool shared_ = false;  // set before use
  std::mutex mu_;
  std::vector<BudgetState> states_;  // guarded by mu_
};

}  // namespace ferry::ledger
