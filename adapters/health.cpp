#include "adapters/health.h"

namespace ferry::adapters {

std::string_view breaker_state_name(BreakerState state) {
  switch (state) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half_open";
  }
  return "closed";
}

CircuitBreaker::CircuitBreaker(BreakerOptions options, Clock clock)
    : options_(options), clock_(std::move(clock)) {
  if (!clock_) clock_ = [] { return std::chrono::steady_clock::now(); };
  if (options_.failure_threshold < 1) options_.failure_threshold = 1;
}

bool CircuitBreaker::probe_due(SteadyTime now) const {
  switch (state_) {
    case BreakerState::kClosed:
      return false;
    case BreakerState::kOpen:
      return now - opened_at_ >= options_.cool_down;
    // A probe that never reported back (cancelled, lost) is replaced after a cool-down.
    case BreakerState::kHalfOpen:
      return now - probe_started_ >= options_.cool_down;
  }
  return false;
}

bool CircuitBreaker::allow_request() {
  SteadyTime now = clock_();
  std::lock_guard lock(mu_);
  if (state_ == BreakerState::kClosed) return true;
  if (probe_due(now)) {
    state_ = BreakerState::kHalfOpen;
    probe_started_ = now;
    ++counters_.probes_total;
    return true;
  }
  ++counters_.refused_total;
  return false;
}

void CircuitBreaker::record_success() {
  std::lock_guard lock(mu_);
  // A late success while open (from a request sent before it opened) proves little; only
  // the probe closes the breaker.
  if (state_ == BreakerState::kOpen) return;
  state_ = BreakerState::kClosed;
  consecutive_failures_ = 0;
}

void CircuitBreaker::record_failure() {
  SteadyTime now = clock_();
  std::lock_guard lock(mu_);
  switch (state_) {
    case BreakerState::kClosed:
      if (++consecutive_failures_ >= options_.failure_threshold) {
        state_ = BreakerState::kOpen;
        opened_at_ = now;
        ++counters_.opened_total;
      }
      break;
    case BreakerState::kHalfOpen:  // the probe failed: open for another cool-down
      state_ = BreakerState::kOpen;
      opened_at_ = now;
      ++consecutive_failures_;
      ++counters_.opened_total;
      break;
    case BreakerState::kOpen:
      ++consecutive_failures_;
      break;
  }
}

bool CircuitBreaker::healthy() const {
  SteadyTime now = clock_();
  std::lock_guard lock(mu_);
  return state_ == BreakerState::kClosed || probe_due(now);
}

BreakerState CircuitBreaker::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

BreakerSnapshot CircuitBreaker::snapshot() const {
  std::lock_guard lock(mu_);
  BreakerSnapshot s = counters_;
  s.state = state_;
  s.consecutive_failures = consecutive_failures_;
  return s;
}

}  // namespace ferry::adapters
