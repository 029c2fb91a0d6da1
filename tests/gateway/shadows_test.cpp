// ShadowTracker: the bound on shadow copies in flight, ids released on end, and shutdown's
// cancel_all() reaching every running copy once and refusing new ones.
#include "gateway/shadows.h"

#include <gtest/gtest.h>

#include <vector>

namespace ferry::gateway {
namespace {

TEST(ShadowTracker, RefusesCopiesBeyondItsLimitUntilOneEnds) {
  ShadowTracker shadows(2);
  auto a = shadows.begin([] {});
  auto b = shadows.begin([] {});
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(shadows.in_flight(), 2u);
  EXPECT_FALSE(shadows.begin([] {}));
  shadows.end(*a);
  EXPECT_EQ(shadows.in_flight(), 1u);
  auto c = shadows.begin([] {});
  ASSERT_TRUE(c);
  EXPECT_EQ(shadows.in_flight(), 2u);
}

TEST(ShadowTracker, CancelAllCancelsEachRunningCopyOnceAndClosesTheDoor) {
  ShadowTracker shadows(8);
  std::vector<int> cancelled(3, 0);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(*shadows.begin([&cancelled, i] { ++cancelled[i]; }));
  shadows.end(ids[1]);  // finished before shutdown: not cancelled
  shadows.cancel_all();
  EXPECT_EQ(cancelled, (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(shadows.in_flight(), 2u);  // still running until they end
  EXPECT_FALSE(shadows.begin([] {}));  // shutting down: no new copies
  shadows.cancel_all();
  EXPECT_EQ(cancelled, (std::vector<int>{1, 0, 1}));  // once each
  shadows.end(ids[0]);
  shadows.end(ids[2]);
  EXPECT_EQ(shadows.in_flight(), 0u);
}

TEST(ShadowTracker, ACancelMayEndItsCopyAtOnce) {
  ShadowTracker shadows(4);
  uint64_t id = 0;
  id = *shadows.begin([&] { shadows.end(id); });  // no deadlock: called outside the lock
  shadows.cancel_all();
  EXPECT_EQ(shadows.in_flight(), 0u);
}

}  // namespace
}  // namespace ferry::gateway
