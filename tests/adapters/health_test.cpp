// Circuit breaker: opens after consecutive failures, one probe after the cool-down.
#include <gtest/gtest.h>

#include "adapters/health.h"

namespace ferry::adapters {
namespace {

class FakeClock {
 public:
  SteadyTime now() const { return t_; }
  void advance(std::chrono::milliseconds d) { t_ += d; }
  CircuitBreaker::Clock fn() {
    return [this] { return now(); };
  }

 private:
  SteadyTime t_{std::chrono::seconds(1000)};
};

BreakerOptions options() {
  BreakerOptions o;
  o.failure_threshold = 3;
  o.cool_down = std::chrono::milliseconds(1000);
  return o;
}

TEST(CircuitBreaker, StaysClosedBelowTheThreshold) {
  FakeClock clock;
  CircuitBreaker b(options(), clock.fn());
  b.record_failure();
  b.record_failure();
  b.record_success();  // resets the count
  b.record_failure();
  b.record_failure();
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  EXPECT_TRUE(b.allow_request());
  EXPECT_TRUE(b.healthy());
}

TEST(CircuitBreaker, OpensAfterConsecutiveFailuresAndRefuses) {
  FakeClock clock;
  CircuitBreaker b(options(), clock.fn());
  for (int i = 0; i < 3; ++i) b.record_failure();
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  EXPECT_FALSE(b.healthy());
  EXPECT_FALSE(b.allow_request());
  clock.advance(std::chrono::milliseconds(999));
  EXPECT_FALSE(b.allow_request());
  EXPECT_EQ(b.snapshot().refused_total, 2u);
  EXPECT_EQ(b.snapshot().opened_total, 1u);
}

TEST(CircuitBreaker, OneProbeAfterTheCoolDownThenClosesOnSuccess) {
  FakeClock clock;
  CircuitBreaker b(options(), clock.fn());
  for (int i = 0; i < 3; ++i) b.record_failure();
  clock.advance(std::chrono::milliseconds(1000));
  EXPECT_TRUE(b.healthy());  // a probe is due: the policy may route there again
  EXPECT_TRUE(b.allow_request());
  EXPECT_EQ(b.state(), BreakerState::kHalfOpen);
  EXPECT_FALSE(b.allow_request());  // only one probe at a time
  EXPECT_FALSE(b.healthy());
  b.record_success();
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  EXPECT_TRUE(b.allow_request());
  EXPECT_EQ(b.snapshot().consecutive_failures, 0);
  EXPECT_EQ(b.snapshot().probes_total, 1u);
}

TEST(CircuitBreaker, FailedProbeOpensForAnotherCoolDown) {
  FakeClock clock;
  CircuitBreaker b(options(), clock.fn());
  for (int i = 0; i < 3; ++i) b.record_failure();
  clock.advance(std::chrono::milliseconds(1500));
  ASSERT_TRUE(b.allow_request());
  b.record_failure();
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  clock.advance(std::chrono::milliseconds(999));
  EXPECT_FALSE(b.allow_request());
  clock.advance(std::chrono::milliseconds(1));
  EXPECT_TRUE(b.allow_request());
  EXPECT_EQ(b.snapshot().opened_total, 2u);
}

TEST(CircuitBreaker, LostProbeIsReplacedAfterACoolDown) {
  FakeClock clock;
  CircuitBreaker b(options(), clock.fn());
  for (int i = 0; i < 3; ++i) b.record_failure();
  clock.advance(std::chrono::milliseconds(1000));
  ASSERT_TRUE(b.allow_request());  // this probe never reports back
  clock.advance(std::chrono::milliseconds(500));
  EXPECT_FALSE(b.allow_request());
  clock.advance(std::chrono::milliseconds(500));
  EXPECT_TRUE(b.allow_request());
}

TEST(CircuitBreaker, LateSuccessWhileOpenDoesNotClose) {
  FakeClock clock;
  CircuitBreaker b(options(), clock.fn());
  for (int i = 0; i < 3; ++i) b.record_failure();
  b.record_success();
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  EXPECT_EQ(breaker_state_name(b.state()), "open");
}

}  // namespace
}  // namespace ferry::adapters
