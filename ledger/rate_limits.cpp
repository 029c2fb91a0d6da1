#include "ledger/rate_limits.h"

#include <algorithm>
#include <set>

#include "common/saturating.h"
#include "common/yaml_util.h"

namespace ferry::ledger {

std::string_view rate_dimension_name(RateDimension dimension) {
  return dimension == RateDimension::kRequests ? "requests" : "tokens";
}

std::vector<RateLimitDef> parse_rate_limits(const YAML::Node& limits, const std::string& file) {
  std::vector<RateLimitDef> out;
  if (!limits || limits.IsNull()) return out;
  if (!limits.IsSequence()) {
    throw yaml::YamlError(file, limits.Mark(), "rate_limits must be a list of rate limit entries");
  }
  std::set<std::string> names;
  for (const auto& item : limits) {
    yaml::Map map(item, file, "rate limit");
    map.allow_only(
        {"name", "scope", "match", "requests_per_minute", "tokens_per_minute", "cache_hits"});
    RateLimitDef def;
    def.name = map.str("name");
    if (def.name.empty()) map.fail("name", "must not be empty");
    if (!names.insert(def.name).second)
      map.fail("name", "duplicate rate limit name '" + def.name + "'");
    def.scope = parse_scope(map);
    def.match = map.str("match");
    def.requests_per_minute = map.integer_or("requests_per_minute", 0, 1, kMaxPerMinute);
    def.tokens_per_minute = map.integer_or("tokens_per_minute", 0, 1, kMaxPerMinute);
    if (def.requests_per_minute == 0 && def.tokens_per_minute == 0) {
      map.fail_here("give requests_per_minute, tokens_per_minute or both");
    }
    std::string hits = map.opt_str("cache_hits").value_or("count");
    if (hits == "count") {
      def.cache_hits = CacheHits::kCount;
    } else if (hits == "requests_only") {
      def.cache_hits = CacheHits::kRequestsOnly;
    } else if (hits == "free") {
      def.cache_hits = CacheHits::kFree;
    } else {
      map.fail("cache_hits", "must be count, requests_only or free, found '" + hits + "'");
    }
    out.push_back(std::move(def));
  }
  return out;
}

std::string format_reset(int64_t ms) {
  if (ms < 1000) return std::to_string(std::max<int64_t>(ms, 0)) + "ms";
  int64_t minutes = ms / 60000;
  int64_t rest = ms % 60000;
  std::string seconds = std::to_string(rest / 1000);
  if (rest % 1000 != 0) {
    std::string frac = std::to_string(1000 + rest % 1000).substr(1);
    while (!frac.empty() && frac.back() == '0') frac.pop_back();
    seconds += "." + frac;
  }
  return (minutes > 0 ? std::to_string(minutes) + "m" : "") + seconds + "s";
}

RateBook::RateBook(std::vector<RateLimitDef> defs) : defs_(std::move(defs)) {
  states_.resize(defs_.size() * 2);
}

int64_t RateBook::capacity(size_t bucket) const {
  const RateLimitDef& def = defs_[bucket / 2];
  int64_t per_minute = bucket % 2 == 0 ? def.requests_per_minute : def.tokens_per_minute;
  return per_minute * kUnitsPerQuota;  // at most 6e17 (kMaxPerMinute)
}

void RateBook::refill(size_t bucket, int64_t now_us) {
  RateState& s = states_[bucket];
  int64_t cap = capacity(bucket);
  if (s.updated_us == 0) {
    s.level = cap;
  } else {
    // A full minute refills the bucket: elapsed beyond it adds nothing (and cannot overflow).
    int64_t elapsed = std::clamp<int64_t>(now_us - s.updated_us, 0, kUnitsPerQuota);
    s.level = std::min(cap, saturating_add(s.level, elapsed * (cap / kUnitsPerQuota)));
  }
  s.updated_us = std::max(s.updated_us, now_us);
}

RateView RateBook::view(size_t bucket, int64_t now_us) const {
  const RateState& s = states_[bucket];
  int64_t cap = capacity(bucket);
  int64_t per_minute = cap / kUnitsPerQuota;
  int64_t have = shared_ ? saturating_add(std::max<int64_t>(s.level, 0), s.shared_level) : s.level;
  have = std::clamp<int64_t>(have, 0, cap);
  (void)now_us;
  // Refilling per_minute units a microsecond: (cap - have) / per_minute microseconds, rounded up.
  int64_t missing_us = (cap - have + per_minute - 1) / per_minute;
  return RateView{per_minute, have / kUnitsPerQuota, (missing_us + 999) / 1000};
}

std::optional<Error> RateBook::check(size_t limit, RateDimension d, int64_t units, int64_t now_us) {
  const RateLimitDef& def = defs_[limit];
  const size_t b = bucket(limit, d);
  const int64_t cap = capacity(b);
  const int64_t per_minute = def.per_minute(d);
  const std::string what = std::string(rate_dimension_name(d)) + " per minute";
  const std::string head = "rate limit '" + def.name + "' (" +
                           std::string(budget_scope_name(def.scope)) + " " + def.match + ", " +
                           std::to_string(per_minute) + " " + what + ")";
  if (units > cap) {
    // Waiting never helps: the request alone needs more than a whole minute's quota.
    return Error::make(ErrorCode::kRateLimited,
                       head + ": this request needs " + std::to_string(units / kUnitsPerQuota) +
                           " tokens (the prompt plus the output reserved), more than the limit; "
                           "lower max_tokens or shorten the prompt",
                       def.name, "rate_limit_exceeded");
  }
  RateState& s = states_[b];
  if (!shared_) refill(b, now_us);
  if (shared_ && now_us >= s.lease_until_us) {
    s.wanted = saturating_add(s.wanted, units);
    Error e = Error::make(ErrorCode::kRateLimited,
                          head +
                              ": this instance's lease on the shared limit has expired and "
                              "could not be renewed (is the ledger's database reachable?), "
                              "retry shortly",
                          def.name, "rate_limit_exceeded");
    e.retry_after_s = 1;
    return e;
  }
  if (s.level >= units) return std::nullopt;
  int64_t have = s.level;
  if (shared_) {
    s.wanted = saturating_add(s.wanted, units - std::max<int64_t>(s.level, 0));
    have = saturating_add(std::max<int64_t>(s.level, 0), s.shared_level);
  }
  // Seconds until the bucket holds enough again, rounded up (at least 1).
  int64_t wait_us = have >= units ? 0 : (units - have + per_minute - 1) / per_minute;
  Error e = Error::make(ErrorCode::kRateLimited,
                        head + " reached: retry after the Retry-After header's seconds", def.name,
                        "rate_limit_exceeded");
  e.retry_after_s = std::max<int64_t>(1, (wait_us + 999'999) / 1'000'000);
  return e;
}

Result<RateHold> RateBook::reserve(const Subject& subject, int64_t tokens, int64_t now_us) {
  RateHold hold;
  hold.tokens = std::max<int64_t>(tokens, 0);
  const int64_t token_units = saturating_mul(hold.tokens, kUnitsPerQuota);
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < defs_.size(); ++i) {
    if (!scope_applies(defs_[i].scope, defs_[i].match, subject)) continue;
    for (RateDimension d : {RateDimension::kRequests, RateDimension::kTokens}) {
      if (defs_[i].per_minute(d) == 0) continue;
      int64_t units = d == RateDimension::kRequests ? kUnitsPerQuota : token_units;
      if (auto refused = check(i, d, units, now_us)) return *refused;
    }
    hold.limits.push_back(static_cast<uint32_t>(i));
  }
  for (uint32_t i : hold.limits) {
    states_[bucket(i, RateDimension::kRequests)].level -=
        defs_[i].requests_per_minute > 0 ? kUnitsPerQuota : 0;
    if (defs_[i].tokens_per_minute > 0)
      states_[bucket(i, RateDimension::kTokens)].level -= token_units;
  }
  fill_views(hold, now_us);
  return hold;
}

// The headers show the tightest applying limit of each dimension.
void RateBook::fill_views(RateHold& hold, int64_t now_us) const {
  for (uint32_t i : hold.limits) {
    for (RateDimension d : {RateDimension::kRequests, RateDimension::kTokens}) {
      if (defs_[i].per_minute(d) == 0) continue;
      RateView v = view(bucket(i, d), now_us);
      auto& slot = d == RateDimension::kRequests ? hold.requests : hold.tokens_view;
      if (!slot || v.remaining < slot->remaining) slot = v;
    }
  }
}

RateHold RateBook::views(const Subject& subject, int64_t now_us) {
  RateHold hold;
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < defs_.size(); ++i) {
    if (!scope_applies(defs_[i].scope, defs_[i].match, subject)) continue;
    if (!shared_) {
      refill(bucket(i, RateDimension::kRequests), now_us);
      refill(bucket(i, RateDimension::kTokens), now_us);
    }
    hold.limits.push_back(static_cast<uint32_t>(i));
  }
  fill_views(hold, now_us);
  return hold;
}

void RateBook::settle(const RateHold& hold, int64_t actual_tokens, bool cache_hit, int64_t now_us) {
  std::lock_guard lock(mu_);
  for (uint32_t i : hold.limits) {
    const RateLimitDef& def = defs_[i];
    int64_t counted = cache_hit && def.cache_hits != CacheHits::kCount ? 0 : actual_tokens;
    int64_t give_back[2] = {cache_hit && def.cache_hits == CacheHits::kFree ? 1 : 0,
                            hold.tokens - std::max<int64_t>(counted, 0)};
    for (RateDimension d : {RateDimension::kRequests, RateDimension::kTokens}) {
      if (def.per_minute(d) == 0) continue;
      const size_t b = bucket(i, d);
      if (!shared_) refill(b, now_us);
      int64_t delta =
          saturating_mul(give_back[d == RateDimension::kTokens ? 1 : 0], kUnitsPerQuota);
      // Never more than a full bucket, never below an empty one by more than a bucket.
      int64_t cap = capacity(b);
      states_[b].level = std::clamp(saturating_add(states_[b].level, delta), -cap, cap);
    }
  }
}

void RateBook::release(const RateHold& hold, int64_t now_us) {
  std::lock_guard lock(mu_);
  for (uint32_t i : hold.limits) {
    for (RateDimension d : {RateDimension::kRequests, RateDimension::kTokens}) {
      if (defs_[i].per_minute(d) == 0) continue;
      const size_t b = bucket(i, d);
      if (!shared_) refill(b, now_us);
      int64_t units = d == RateDimension::kRequests ? kUnitsPerQuota
                                                    : saturating_mul(hold.tokens, kUnitsPerQuota);
      states_[b].level = std::min(capacity(b), saturating_add(states_[b].level, units));
    }
  }
}

void RateBook::set_shared(bool shared) {
  std::lock_guard lock(mu_);
  shared_ = shared;
}

void RateBook::add_lease(size_t bucket, int64_t units, int64_t shared_level, int64_t until_us,
                         bool reset) {
  std::lock_guard lock(mu_);
  RateState& s = states_[bucket];
  // A settle may have left the level below zero: that debt stays (it was admitted).
  if (reset) s.level = std::min<int64_t>(s.level, 0);
  s.level = std::min(capacity(bucket), saturating_add(s.level, units));
  s.shared_level = shared_level;
  s.lease_until_us = until_us;
  s.wanted = 0;
}

int64_t RateBook::take_lease(size_t bucket) {
  std::lock_guard lock(mu_);
  RateState& s = states_[bucket];
  int64_t units = std::max<int64_t>(s.level, 0);
  s.level -= units;
  s.lease_until_us = 0;
  return units;
}

std::vector<RateState> RateBook::snapshot() {
  std::lock_guard lock(mu_);
  return states_;
}

}  // namespace ferry::ledger
