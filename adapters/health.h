// Passive circuit breaking for one HTTP backend: consecutive failures open the breaker for a
// cool-down, then a single probe request half-opens it. Thread-safe: every method locks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string_view>

#include "common/clock.h"

namespace ferry::adapters {

struct BreakerOptions {
  int failure_threshold = 5;                    // consecutive failures that open it
  std::chrono::milliseconds cool_down{10'000};  // open -> a probe is allowed
};

enum class BreakerState { kClosed, kOpen, kHalfOpen };
std::string_view breaker_state_name(BreakerState state);

struct BreakerSnapshot {  // for /metrics
  BreakerState state = BreakerState::kClosed;
  int consecutive_failures = 0;
  uint64_t opened_total = 0;   // times it opened
  uint64_t refused_total = 0;  // requests refused while open
  uint64_t probes_total = 0;   // probes granted
};

// The gateway calls allow_request() before sending to the backend, then exactly one of
// record_success() / record_failure() for each allowed request (failure = connection error,
// 5xx, timeout). healthy() is the policy's `healthy` fact: true when a request would be let
// through now (closed, or open with the cool-down over so that a probe is due).
class CircuitBreaker {
 public:
  using Clock = std::function<SteadyTime()>;

  explicit CircuitBreaker(BreakerOptions options = {}, Clock clock = {});

  bool allow_request();
  void record_success();
  void record_failure();

  bool healthy() const;
  BreakerState state() const;
  BreakerSnapshot snapshot() const;

 private:
  bool probe_due(SteadyTime now) const;  // caller holds mu_

  BreakerOptions options_;
  Clock clock_;
  mutable std::mutex mu_;
  BreakerState state_ = BreakerState::kClosed;
  int consecutive_failures_ = 0;
  SteadyTime opened_at_{};
  SteadyTime probe_started_{};
  BreakerSnapshot counters_;
};

}  // namespace ferry::adapters
