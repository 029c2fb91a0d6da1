#include "replay/replay.h"

#include <algorithm>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "ledger/history.h"

namespace ferry::replay {

namespace {

using policies::Decision;
using policies::Facts;

struct CellKey {
  std::string from;
  std::string to;
  bool operator<(const CellKey& o) const { return std::tie(from, to) < std::tie(o.from, o.to); }
};

bool ran(const ledger::RecordedRequest& r) {
  return r.status != ledger::RequestStatus::kRefused && !r.target.empty();
}

// The cost of the recorded tokens on `target` now; nullopt when it cannot be priced.
std::optional<Money> cost_on(const std::string& target, const ledger::RecordedRequest& r,
                             const ledger::PriceCatalog& prices, int64_t at_us) {
  if (target == kReplayRejected) return Money();  // refused: nothing runs, nothing is spent
  ledger::Cost cost = prices.price(target, r.tokens, at_us);
  if (cost.pricing == ledger::Pricing::kUnpriced) return std::nullopt;
  return cost.total();
}

}  // namespace

Result<ReplayResult> replay_ledger(const policies::Policy& policy, const std::string& ledger_path,
                                   const ledger::PriceCatalog& prices,
                                   const ReplayOptions& options) {
  ReplayResult result;
  result.policy_version = policy.short_version();
  auto currency = ledger::ledger_currency(ledger_path);
  if (!currency) return currency.error();
  result.currency = *currency;
  int64_t at = options.prices_at_us != 0 ? options.prices_at_us : unix_micros_now();
  result.prices_at_us = at;
  std::map<CellKey, ReplayCell> cells;
  ledger::HistoryQuery query;
  query.from_us = options.from_us;
  query.to_us = options.to_us;
  auto st = ledger::for_each_request(ledger_path, query, [&](const ledger::RecordedRequest& r) {
    ++result.rows;
    if (options.progress) options.progress(static_cast<uint64_t>(result.rows));
    if (r.facts_json.empty()) {
      ++result.without_facts;
      return true;
    }
    auto parsed = nlohmann::json::parse(r.facts_json, nullptr, false);
    Result<Facts> facts =
        parsed.is_discarded()
            ? Result<Facts>(Error::make(ErrorCode::kInvalidRequest, "facts: not valid JSON"))
            : policies::facts_from_json(parsed);
    if (!facts) {
      if (result.unreadable_facts++ == 0) {
        result.first_facts_error = r.id + ": " + facts.error().message;
      }
      return true;
    }
    Decision decision = policy.decide(*facts);
    CellKey key;
    key.from = ran(r) ? r.target : kReplayRejected;
    key.to =
        decision.reject || decision.route.empty() ? kReplayRejected : decision.route.front().ref;
    ReplayCell& cell = cells[key];
    ++cell.requests;
    ++result.replayed;
    if (key.from != key.to) ++result.moved;
    // A request that never ran has no tokens: what it would cost elsewhere is unknown.
    bool would_run_unseen = !ran(r) && key.to != kReplayRejected;
    std::optional<Money> old_cost = cost_on(key.from, r, prices, at);
    std::optional<Money> new_cost = cost_on(key.to, r, prices, at);
    if (would_run_unseen || !old_cost || !new_cost) {
      ++cell.unpriced;
      ++result.unpriced;
      return true;
    }
    cell.old_cost += *old_cost;
    cell.new_cost += *new_cost;
    return true;
  });
  if (!st) return st.error();
  for (auto& [key, cell] : cells) {
    cell.from = key.from;
    cell.to = key.to;
    result.old_cost += cell.old_cost;
    result.new_cost += cell.new_cost;
    result.cells.push_back(std::move(cell));
  }
  return result;
}

nlohmann::json replay_to_json(const ReplayResult& r) {
  using nlohmann::json;
  auto money = [](bool priced, Money m) { return priced ? json(m.to_string()) : json(nullptr); };
  json out;
  out["policy_version"] = r.policy_version;
  out["currency"] = r.currency;
  out["rows"] = r.rows;
  out["without_facts"] = r.without_facts;
  out["unreadable_facts"] = r.unreadable_facts;
  if (!r.first_facts_error.empty()) out["first_facts_error"] = r.first_facts_error;
  out["replayed"] = r.replayed;
  out["moved"] = r.moved;
  out["unpriced"] = r.unpriced;
  out["prices_at"] = format_utc_micros(r.prices_at_us);
  bool any_priced = r.replayed > r.unpriced;
  out["old_cost"] = money(any_priced, r.old_cost);
  out["new_cost"] = money(any_priced, r.new_cost);
  out["difference"] = money(any_priced, r.difference());
  json cells = json::array();
  for (const auto& c : r.cells) {
    bool priced = c.requests > c.unpriced;
    cells.push_back({{"from", c.from},
                     {"to", c.to},
                     {"moved", c.moved()},
                     {"requests", c.requests},
                     {"unpriced", c.unpriced},
                     {"old_cost", money(priced, c.old_cost)},
                     {"new_cost", money(priced, c.new_cost)},
                     {"difference", money(priced, c.difference())}});
  }
  out["matrix"] = std::move(cells);
  return out;
}

std::string replay_to_text(const ReplayResult& r) {
  std::string out;
  out += "replayed " + std::to_string(r.replayed) + " of " + std::to_string(r.rows) +
         " requests with policy " + r.policy_version;
  if (r.without_facts > 0)
    out += " (" + std::to_string(r.without_facts) + " recorded without facts)";
  out += "\n";
  if (r.unreadable_facts > 0) {
    out += std::to_string(r.unreadable_facts) +
           " with unreadable facts, first: " + r.first_facts_error + "\n";
  }
  out += "would move: " + std::to_string(r.moved) + "\n\n";
  std::vector<std::vector<std::string>> lines = {
      {"from", "to", "requests", "unpriced", "old_cost", "new_cost", "difference"}};
  auto money = [](bool priced, Money m) { return priced ? m.to_string() : std::string("n/a"); };
  for (const auto& c : r.cells) {
    bool priced = c.requests > c.unpriced;
    lines.push_back({c.from, c.moved() ? c.to : c.to + " (stays)", std::to_string(c.requests),
                     std::to_string(c.unpriced), money(priced, c.old_cost),
                     money(priced, c.new_cost), money(priced, c.difference())});
  }
  bool any_priced = r.replayed > r.unpriced;
  lines.push_back({"TOTAL", "", std::to_string(r.replayed), std::to_string(r.unpriced),
                   money(any_priced, r.old_cost), money(any_priced, r.new_cost),
                   money(any_priced, r.difference())});
  std::vector<size_t> widths(lines.front().size(), 0);
  for (const auto& line : lines) {
    for (size_t i = 0; i < line.size(); ++i) widths[i] = std::max(widths[i], line[i].size());
  }
  for (size_t li = 0; li < lines.size(); ++li) {
    std::string text;
    for (size_t i = 0; i < lines[li].size(); ++i) {
      const std::string& cell = lines[li][i];
      std::string pad(widths[i] - cell.size(), ' ');
      text += (i == 0 ? "" : "  ") + (i < 2 ? cell + pad : pad + cell);
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
    if (li == 0 || li + 2 == lines.size()) {
      size_t total = 0;
      for (size_t w : widths) total += w + 2;
      out += std::string(total - 2, '-') + "\n";
    }
  }
  out += "costs: the recorded tokens at the prices in effect at " +
         format_utc_micros(r.prices_at_us) + ", in " + r.currency +
         "; unpriced requests (no current price, or never ran) are left out of the sums\n";
  return out;
}

}  // namespace ferry::replay
