#include "common/ids.h"

#include <gtest/gtest.h>

#include <set>

namespace ferry {
namespace {

TEST(Ids, UuidV7HasVersionAndVariant) {
  std::string id = make_uuid_v7();
  ASSERT_EQ(id.size(), 36u);
  EXPECT_EQ(id[14], '7');
  EXPECT_TRUE(id[19] == '8' || id[19] == '9' || id[19] == 'a' || id[19] == 'b');
}

TEST(Ids, RequestIdsAreUnique) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(seen.insert(make_request_id()).second);
}

}  // namespace
}  // namespace ferry
