// Replay: re-decides the requests recorded in a ledger with another policy, from the facts
// each was routed on, and prices what would move at current prices: how many requests would
// go elsewhere, from which target to which, and what that would cost. Reads the ledger file
// (its own read-only connection) and is otherwise pure; any worker thread, never an I/O one.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "common/money.h"
#include "ledger/prices.h"
#include "policies/policy.h"

namespace ferry::replay {

// The pseudo-target of requests that were, or would be, refused before running.
inline constexpr const char* kReplayRejected = "(rejected)";

struct ReplayOptions {
  std::optional<int64_t> from_us;  // requests that ended at or after (unix micros)
  std::optional<int64_t> to_us;    // requests that ended before
  int64_t prices_at_us = 0;        // the instant whose prices are current; 0 = now
  std::function<void(uint64_t rows_read)> progress;  // after each row, when set
};

// The requests recorded on one target that the new policy sends to one target.
// Costs price the recorded tokens (all kinds, summed over attempts) at the current price of
// each side. A request with a side that cannot be priced (a target without a current price,
// or one that never ran and would now: there are no tokens to price) is counted in
// `unpriced` and left out of both sums, never counted as zero.
struct ReplayCell {
  std::string from;  // recorded target (config model name), or kReplayRejected
  std::string to;    // the new decision's first hop (config model name), or kReplayRejected
  int64_t requests = 0;
  int64_t unpriced = 0;
  Money old_cost;  // on `from`, over the priced requests
  Money new_cost;  // on `to`, over the priced requests
  Money difference() const { return new_cost - old_cost; }
  bool moved() const { return from != to; }
};

struct ReplayResult {
  std::string policy_version;  // the new policy's short version
  std::string currency;
  int64_t prices_at_us = 0;      // the instant whose prices were used
  int64_t rows = 0;              // request rows in the range
  int64_t without_facts = 0;     // recorded without facts: cannot be replayed
  int64_t unreadable_facts = 0;  // facts that no longer parse; the first error below
  std::string first_facts_error;
  int64_t replayed = 0;
  int64_t moved = 0;              // replayed requests whose target changes
  int64_t unpriced = 0;           // replayed requests left out of the cost sums
  std::vector<ReplayCell> cells;  // every (from, to) pair seen, sorted by from then to
  Money old_cost;                 // sums over the cells
  Money new_cost;
  Money difference() const { return new_cost - old_cost; }
};

// Err when the ledger cannot be read.
Result<ReplayResult> replay_ledger(const policies::Policy& policy, const std::string& ledger_path,
                                   const ledger::PriceCatalog& prices,
                                   const ReplayOptions& options = {});

// Money as exact decimal strings; an unpriced-only cell has null costs.
nlohmann::json replay_to_json(const ReplayResult& result);
std::string replay_to_text(const ReplayResult& result);

}  // namespace ferry::replay
