// Admin endpoints apart from sockets: query strings and export filters (their routes and
// roles: endpoints_test.cpp).
#include "gateway/admin.h"

#include <gtest/gtest.h>

namespace ferry::gateway {
namespace {

TEST(AdminQuery, DecodesPercentAndPlus) {
  auto q = parse_query("team=a%20b&by=team,day&x=1+2&empty=&=skip");
  EXPECT_EQ(q["team"], "a b");
  EXPECT_EQ(q["by"], "team,day");
  EXPECT_EQ(q["x"], "1 2");
  EXPECT_EQ(q["empty"], "");
  EXPECT_EQ(q.count(""), 0u);
}

TEST(AdminQuery, ExportFilterValidatesDatesAndKeys) {
  auto f = export_filter("from=2026-01-01&to=2026-01-31&team=x%27%3B%20DROP%20TABLE");
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->team);
  EXPECT_EQ(*f->team, "x'; DROP TABLE");  // kept as a value; report binds it as a parameter
  ASSERT_TRUE(f->from);
  auto bad = export_filter("from=yesterday");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().param, "from");
  auto unknown = export_filter("teem=x");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().param, "teem");
}

TEST(AdminQuery, InvalidUtf8IsRefusedNamingTheField) {
  EXPECT_TRUE(check_utf8_input("task=caf%C3%A9&by=task", "{}"));
  auto name = check_utf8_input("%ff=1", "");
  ASSERT_FALSE(name);
  EXPECT_EQ(name.error().param, "query");
  auto value = check_utf8_input("from=%ff", "");
  ASSERT_FALSE(value);
  EXPECT_EQ(value.error().param, "from");
  auto body = check_utf8_input("", "targets: {}\n# \xff\n");
  ASSERT_FALSE(body);
  EXPECT_EQ(body.error().param, "body");
  auto filter = export_filter("task=%ed%a0%80");  // a surrogate: not UTF-8
  ASSERT_FALSE(filter);
  EXPECT_EQ(filter.error().param, "task");
}

}  // namespace
}  // namespace ferry::gateway
