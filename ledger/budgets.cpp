#include "ledger/budgets.h"

#include <algorithm>
#include <set>

#include "common/yaml_util.h"

namespace ferry::ledger {

std::string_view budget_scope_name(BudgetScope scope) {
  switch (scope) {
    case BudgetScope::kKey:
      return "key";
    case BudgetScope::kTeam:
      return "team";
    case BudgetScope::kProject:
      return "project";
  }
  return "?";
}

std::string_view budget_period_name(BudgetPeriod period) {
  switch (period) {
    case BudgetPeriod::kDay:
      return "day";
    case BudgetPeriod::kWeek:
      return "week";
    case BudgetPeriod::kMonth:
      return "month";
  }
  return "?";
}

BudgetScope parse_scope(const yaml::Map& map) {
  std::string scope = map.str("scope");
  if (scope == "key") return BudgetScope::kKey;
  if (scope == "team") return BudgetScope::kTeam;
  if (scope != "project") map.fail("scope", "must be key, team or project, found '" + scope + "'");
  return BudgetScope::kProject;
}

std::vector<BudgetDef> parse_budgets(const YAML::Node& budgets, const std::string& file) {
  std::vector<BudgetDef> out;
  if (!budgets || budgets.IsNull()) return out;
  if (!budgets.IsSequence()) {
    throw yaml::YamlError(file, budgets.Mark(), "budgets must be a list of budget entries");
  }
  std::set<std::string> names;
  for (const auto& item : budgets) {
    yaml::Map map(item, file, "budget");
    map.allow_only({"name", "scope", "match", "amount", "period", "timezone", "mode"});
    BudgetDef def;
    def.name = map.str("name");
    if (def.name.empty()) map.fail("name", "must not be empty");
    if (!names.insert(def.name).second)
      map.fail("name", "duplicate budget name '" + def.name + "'");
    def.scope = parse_scope(map);
    def.match = map.str("match");
    std::string amount = map.str("amount");
    auto money = Money::parse(amount);
    if (!money || money->micros() < 0) {
      map.fail("amount", "must be a non-negative decimal amount with at most 6 fractional digits");
    }
    def.amount = *money;
    std::string period = map.str("period");
    if (period == "day") {
      def.period = BudgetPeriod::kDay;
    } else if (period == "week") {
      def.period = BudgetPeriod::kWeek;
    } else if (period == "month") {
      def.period = BudgetPeriod::kMonth;
    } else {
      map.fail("period", "must be day, week or month, found '" + period + "'");
    }
    if (auto tz = map.opt_str("timezone")) {
      auto zone = TimeZone::load(*tz);
      if (!zone) map.fail("timezone", zone.error().message);
      def.zone = *zone;
    }
    std::string mode = map.opt_str("mode").value_or("hard");
    if (mode != "hard" && mode != "soft") map.fail("mode", "must be hard or soft");
    def.hard = mode == "hard";
    out.push_back(std::move(def));
  }
  return out;
}

bool scope_applies(BudgetScope scope, const std::string& match, const Subject& subject) {
  switch (scope) {
    case BudgetScope::kKey:
      return subject.key_id == match;
    case BudgetScope::kTeam:
      return subject.team == match;
    case BudgetScope::kProject:
      return subject.project == match;
  }
  return false;
}

bool budget_applies(const BudgetDef& def, const Subject& subject) {
  return scope_applies(def.scope, def.match, subject);
}

PeriodBounds budget_period_at(const BudgetDef& def, int64_t at_us) {
  CivilDate today = def.zone.local_date(at_us);
  CivilDate first = today;
  CivilDate next = today;
  switch (def.period) {
    case BudgetPeriod::kDay:
      next = civil_from_days(days_from_civil(today) + 1);
      break;
    case BudgetPeriod::kWeek: {
      int64_t days = days_from_civil(today);
      // 1970-01-01 was a Thursday; weekday 0 = Monday.
      int64_t weekday = floor_div(days + 3, 7) * -7 + days + 3;
      first = civil_from_days(days - weekday);
      next = civil_from_days(days - weekday + 7);
      break;
    }
    case BudgetPeriod::kMonth:
      first.day = 1;
      next = CivilDate{today.month == 12 ? today.year + 1 : today.year,
                       today.month == 12 ? 1 : today.month + 1, 1};
      break;
  }
  return PeriodBounds{def.zone.local_midnight(first), def.zone.local_midnight(next)};
}

BudgetBook::BudgetBook(std::vector<BudgetDef> defs) : defs_(std::move(defs)) {
  states_.resize(defs_.size());
  for (size_t i = 0; i < defs_.size(); ++i) states_[i].def = &defs_[i];
}

void BudgetBook::roll(size_t index, int64_t now_us) {
  BudgetState& state = states_[index];
  if (state.bounds.end_us != 0 && now_us >= state.bounds.start_us && now_us < state.bounds.end_us) {
    return;
  }
  PeriodBounds bounds = budget_period_at(defs_[index], now_us);
  if (bounds.start_us != state.bounds.start_us) {
    state.bounds = bounds;
    state.spent = Money();
    state.lease = Money();
    state.lease_until_us = 0;
    state.wanted = Money();
  }
}

double BudgetBook::left_pct_locked(size_t index) const {
  const BudgetState& state = states_[index];
  int64_t amount = defs_[index].amount.micros();
  if (amount <= 0) return 0.0;
  // In Money: saturating, since a reservation may be Money::max().
  int64_t left = (defs_[index].amount - state.spent - state.reserved).micros();
  double pct = 100.0 * static_cast<double>(left) / static_cast<double>(amount);
  return std::clamp(pct, 0.0, 100.0);
}

Result<Reservation> BudgetBook::reserve(const Subject& subject, Money worst_case, int64_t now_us) {
  Reservation reservation;
  reservation.amount = worst_case;
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < defs_.size(); ++i) {
    if (!budget_applies(defs_[i], subject)) continue;
    roll(i, now_us);
    BudgetState& state = states_[i];
    // Money saturates: a worst case too large to hold (Money::max()) is over every budget.
    bool over =
        worst_case >= Money::max() || state.spent + state.reserved + worst_case > defs_[i].amount;
    if (!over && shared_ && defs_[i].hard &&
        (now_us >= state.lease_until_us || state.reserved + worst_case > state.lease)) {
      state.wanted += worst_case;
      // An expired lease is one the store could not renew (it is down, or slow): the shared
      // figure cannot be checked, so the hard budget admits nothing rather than overspend.
      const std::string why =
          now_us >= state.lease_until_us
              ? "this instance's lease on the shared budget has expired and could not be "
                "renewed (is the ledger's database reachable?)"
              : "this instance's share of the shared budget is in use (leased " +
                    state.lease.to_string() + ", reserved " + state.reserved.to_string() +
                    "; this request may cost up to " + worst_case.to_string() +
                    "); more is being leased";
      Error error = Error::make(ErrorCode::kRateLimited,
                                "budget '" + defs_[i].name + "': " + why + ", retry shortly",
                                defs_[i].name, "budget_exceeded");
      error.retry_after_s = 1;
      return error;
    }
    if (over && defs_[i].hard) {
      const BudgetDef& def = defs_[i];
      Error error =
          Error::make(ErrorCode::kRateLimited,
                      "budget '" + def.name + "' (" + std::string(budget_scope_name(def.scope)) +
                          " " + def.match + ", " + std::string(budget_period_name(def.period)) +
                          ") is exhausted: spent " + state.spent.to_string() + " and reserved " +
                          state.reserved.to_string() + " of " + def.amount.to_string() +
                          "; this request may cost up to " + worst_case.to_string() +
                          "; resets at " + format_local_time(state.bounds.end_us, def.zone),
                      def.name, "budget_exceeded");
      return error;
    }
    if (over) reservation.soft_exceeded.push_back(defs_[i].name);
    reservation.budgets.push_back(static_cast<uint32_t>(i));
  }
  for (uint32_t i : reservation.budgets) states_[i].reserved += worst_case;
  for (uint32_t i : reservation.budgets) {
    double pct = left_pct_locked(i);
    if (!reservation.left_pct || pct < *reservation.left_pct) reservation.left_pct = pct;
  }
  return reservation;
}

void BudgetBook::settle(const Reservation& reservation, Money actual, int64_t cost_at_us,
                        int64_t now_us) {
  std::lock_guard lock(mu_);
  for (uint32_t i : reservation.budgets) {
    roll(i, now_us);
    BudgetState& state = states_[i];
    state.reserved -= reservation.amount;
    if (cost_at_us >= state.bounds.start_us && cost_at_us < state.bounds.end_us) {
      state.spent += actual;
      // As the row's transaction does to the lease in the database (never below zero).
      if (shared_ && defs_[i].hard) state.lease = std::max(Money(), state.lease - actual);
    }
  }
}

void BudgetBook::set_shared(bool shared) {
  std::lock_guard lock(mu_);
  shared_ = shared;
}

void BudgetBook::add_lease(size_t index, int64_t period_start_us, Money grant, int64_t until_us,
                           bool reset) {
  std::lock_guard lock(mu_);
  BudgetState& state = states_[index];
  if (state.bounds.start_us != period_start_us) return;
  state.lease = reset ? grant : state.lease + grant;
  state.lease_until_us = until_us;
  state.wanted = Money();
}

void BudgetBook::set_shared_spent(size_t index, int64_t period_start_us, Money spent) {
  std::lock_guard lock(mu_);
  BudgetState& state = states_[index];
  if (state.bounds.start_us == period_start_us) state.spent = spent;
}

void BudgetBook::release(const Reservation& reservation) {
  std::lock_guard lock(mu_);
  for (uint32_t i : reservation.budgets) states_[i].reserved -= reservation.amount;
}

void BudgetBook::add_spent(const Subject& subject, Money amount, int64_t cost_at_us,
                           int64_t now_us) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < defs_.size(); ++i) {
    if (!budget_applies(defs_[i], subject)) continue;
    roll(i, now_us);
    BudgetState& state = states_[i];
    if (cost_at_us >= state.bounds.start_us && cost_at_us < state.bounds.end_us) {
      state.spent += amount;
    }
  }
}

void BudgetBook::set_spent(size_t index, PeriodBounds bounds, Money spent) {
  std::lock_guard lock(mu_);
  states_[index].bounds = bounds;
  states_[index].spent = spent;
}

std::optional<double> BudgetBook::left_pct(const Subject& subject, int64_t now_us) {
  std::optional<double> lowest;
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < defs_.size(); ++i) {
    if (!budget_applies(defs_[i], subject)) continue;
    roll(i, now_us);
    double pct = left_pct_locked(i);
    if (!lowest || pct < *lowest) lowest = pct;
  }
  return lowest;
}

std::vector<BudgetState> BudgetBook::snapshot(int64_t now_us) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < defs_.size(); ++i) roll(i, now_us);
  return states_;
}

}  // namespace ferry::ledger
