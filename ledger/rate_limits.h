// Rate limits (requests and tokens per minute per key, team or project) and the in-memory book
// that admits against them: one token bucket per limit and dimension. RateBook is thread-safe:
// one mutex makes every admission atomic with respect to the others.
//
// YAML (a list under `rate_limits:` in the server config; needs a `ledger:` section):
//   rate_limits:
//     - name: research-rate       # unique; named in 429 errors
//       scope: team               # key | team | project
//       match: research           # the key id, team or project it applies to
//       requests_per_minute: 600  # at least one of the two
//       tokens_per_minute: 200000 # prompt tokens (exact count) + the output reserved
//       cache_hits: count         # count | requests_only | free: what a response-cache hit uses
//
// A bucket holds one minute's quota and refills continuously (limit / 60 s), so a minute never
// admits more than the limit plus what refilled within it. Tokens are taken at admission as the
// exact prompt count plus the output reserved (max_tokens, or what the context leaves) and
// corrected at settle to what the row billed. With a PostgreSQL ledger the bucket is shared:
// it lives in the database (rate_buckets) and each instance admits against a slice it leased
// from it (as budgets do), so admission never waits for the database.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "ledger/budgets.h"  // BudgetScope, Subject

namespace ferry::ledger {

enum class RateDimension : uint8_t { kRequests, kTokens };
std::string_view rate_dimension_name(RateDimension dimension);

// What a response-cache hit (RequestRecord::cache == "hit") uses of a limit.
enum class CacheHits : uint8_t { kCount, kRequestsOnly, kFree };

struct RateLimitDef {
  std::string name;
  BudgetScope scope = BudgetScope::kKey;
  std::string match;
  int64_t requests_per_minute = 0;  // 0: no request limit
  int64_t tokens_per_minute = 0;    // 0: no token limit
  CacheHits cache_hits = CacheHits::kCount;
  int64_t per_minute(RateDimension d) const {
    return d == RateDimension::kRequests ? requests_per_minute : tokens_per_minute;
  }
};

// Parses the `rate_limits:` list. Throws ferry::yaml::YamlError (control plane).
std::vector<RateLimitDef> parse_rate_limits(const YAML::Node& limits, const std::string& file);

// A bucket's quota is kept in scaled units: one request or token is kUnitsPerQuota units, so a
// limit of L per minute refills exactly L units per microsecond (integers, no rounding).
constexpr int64_t kUnitsPerQuota = 60'000'000;
constexpr int64_t kMaxPerMinute = 10'000'000'000;  // 6e17 units: far from int64's end

// What x-ratelimit-* headers say for one dimension: the tightest applying limit.
struct RateView {
  int64_t limit = 0;
  int64_t remaining = 0;
  int64_t reset_ms = 0;  // until the bucket is full again
};

// What one admission took from the applying limits.
struct RateHold {
  int64_t tokens = 0;            // reserved at admission (prompt + output reserved)
  std::vector<uint32_t> limits;  // indexes into the book's definitions
  std::optional<RateView> requests;
  std::optional<RateView> tokens_view;
};

// One bucket's state. Local (SQLite): `level` is the bucket itself. Shared (PostgreSQL): `level`
// is the slice this instance leased, `shared_level` the database bucket as last read.
struct RateState {
  int64_t level = 0;  // units; may go below zero after a settle that took more than reserved
  int64_t updated_us = 0;
  int64_t lease_until_us = 0;
  int64_t shared_level = 0;
  int64_t wanted = 0;  // units refused for want of lease since the last grant
};

// "1s", "6m0s", "250ms": a duration as OpenAI's x-ratelimit-reset-* headers write it.
std::string format_reset(int64_t ms);

class RateBook {
 public:
  explicit RateBook(std::vector<RateLimitDef> defs);
  const std::vector<RateLimitDef>& defs() const { return defs_; }
  bool empty() const { return defs_.empty(); }

  // Takes one request and `tokens` from every applying limit, or refuses with kRateLimited
  // (type_code "rate_limit_exceeded", param = the limit's name, retry_after_s when waiting
  // helps). Atomic with respect to every other call.
  Result<RateHold> reserve(const Subject& subject, int64_t tokens, int64_t now_us);
  // Ends a hold: the tokens reserved are corrected to `actual` (given back, or taken).
  void settle(const RateHold& hold, int64_t actual_tokens, bool cache_hit, int64_t now_us);
  // A hold that never reached a backend (refused by a budget after the rate admission).
  void release(const RateHold& hold, int64_t now_us);
  // The tightest applying limit of each dimension for `subject`, taking nothing: what a 429's
  // x-ratelimit-* headers say (limits and views only; tokens 0).
  RateHold views(const Subject& subject, int64_t now_us);

  // Shared (PostgreSQL): admission takes from leased slices only.
  void set_shared(bool shared);
  bool shared() const { return shared_; }
  // Index of the bucket of limit `limit`, dimension `d` (two per limit).
  static size_t bucket(size_t limit, RateDimension d) {
    return limit * 2 + (d == RateDimension::kTokens ? 1 : 0);
  }
  // A grant of `units` from the database bucket, valid until `until_us`; `shared_level` is the
  // database bucket after it. Clears `wanted`. `reset`: the database no longer counted what
  // this instance held (its lease had lapsed), so the slice starts over at `units`.
  void add_lease(size_t bucket, int64_t units, int64_t shared_level, int64_t until_us, bool reset);
  // Takes every leased unit back (given back to the database at shutdown).
  int64_t take_lease(size_t bucket);
  std::vector<RateState> snapshot();

 private:
  int64_t capacity(size_t bucket) const;
  void refill(size_t bucket, int64_t now_us);  // requires mu_ (local only)
  std::optional<Error> check(size_t limit, RateDimension d, int64_t units, int64_t now_us);
  RateView view(size_t bucket, int64_t now_us) const;     // requires mu_
  void fill_views(RateHold& hold, int64_t now_us) const;  // requires mu_; from hold.limits

  std::vector<RateLimitDef> defs_;
  bool shared_ = false;  // set before use
  std::mutex mu_;
  std::vector<RateState> states_;  // guarded by mu_; two per limit (requests, tokens)
};

}  // namespace ferry::ledger
