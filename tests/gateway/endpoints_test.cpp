// The endpoint table apart from sockets: which method and path find which endpoint, the
// methods a path allows (405) or none (404), HEAD, and the roles each endpoint needs.
#include "gateway/endpoints.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace ferry::gateway {
namespace {

const Endpoint* lookup(std::string_view method, std::string_view path, std::string& allow) {
  return find_endpoint(method, path, allow);
}

TEST(Endpoints, AdminPathsAndMethods) {
  std::string allow;
  const Endpoint* e = lookup("GET", "/admin/policy", allow);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->admin, AdminRoute::kPolicyGet);
  e = lookup("PUT", "/admin/policy", allow);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->admin, AdminRoute::kPolicyPut);
  EXPECT_EQ(lookup("DELETE", "/admin/policy", allow), nullptr);
  EXPECT_EQ(allow, "GET, PUT");  // 405 with Allow
  e = lookup("POST", "/admin/route/explain", allow);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->admin, AdminRoute::kRouteExplain);
  e = lookup("GET", "/v1/ledger/export.csv", allow);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->admin, AdminRoute::kLedgerExport);
  EXPECT_EQ(e->handler, Handler::kExport);
  e = lookup("GET", "/v1/chat/completions", allow);
  EXPECT_EQ(e, nullptr);
  EXPECT_EQ(allow, "POST");
}

TEST(Endpoints, UnknownPathsAllowNothing) {
  std::string allow = "stale";
  EXPECT_EQ(lookup("GET", "/v2/chat", allow), nullptr);
  EXPECT_EQ(allow, "");  // 404
  // The open endpoints answer GET and HEAD only; anything else there is an unknown URL.
  EXPECT_EQ(lookup("POST", "/healthz", allow), nullptr);
  EXPECT_EQ(allow, "");
}

TEST(Endpoints, HeadIsGetWhereTheReplyIsDirect) {
  std::string allow;
  for (const char* path : {"/healthz", "/readyz", "/metrics", "/v1/models", "/v1/models/x"}) {
    const Endpoint* e = lookup("HEAD", path, allow);
    ASSERT_NE(e, nullptr) << path;
    EXPECT_EQ(e->method, "GET") << path;
  }
  for (const char* path : {"/v1/ledger/report", "/v1/ledger/export.csv", "/admin/policy"}) {
    EXPECT_EQ(lookup("HEAD", path, allow), nullptr) << path;
    EXPECT_FALSE(allow.empty()) << path;
  }
  EXPECT_EQ(lookup("HEAD", "/v1/chat/completions", allow), nullptr);
  EXPECT_EQ(allow, "POST");
}

TEST(Endpoints, OneModelIsAPrefix) {
  std::string allow;
  const Endpoint* e = lookup("GET", "/v1/models/some/model", allow);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->handler, Handler::kModel);
  e = lookup("GET", "/v1/models", allow);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->handler, Handler::kModels);
}

TEST(Endpoints, EveryMethodAndPathIsListedOnce) {
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& e : endpoint_table()) {
    EXPECT_TRUE(seen.emplace(std::string(e.method), std::string(e.path)).second)
        << e.method << " " << e.path;
    bool worker = e.handler == Handler::kAdmin || e.handler == Handler::kExport;
    EXPECT_EQ(worker, e.admin != AdminRoute::kNone) << e.path;
  }
}

TEST(Endpoints, RolesAreEnforced) {
  Principal app{"a", "", "", config::Role::kApp, {}};
  Principal finance{"f", "", "", config::Role::kFinance, {}};
  Principal admin{"x", "", "", config::Role::kAdmin, {}};
  std::string allow;
  const Endpoint& report = *lookup("GET", "/v1/ledger/report", allow);
  const Endpoint& export_csv = *lookup("GET", "/v1/ledger/export.csv", allow);
  const Endpoint& policy_put = *lookup("PUT", "/admin/policy", allow);
  const Endpoint& explain = *lookup("POST", "/admin/route/explain", allow);
  const Endpoint& chat = *lookup("POST", "/v1/chat/completions", allow);
  EXPECT_FALSE(authorize(report, app));
  EXPECT_EQ(authorize(report, app).error().code, ErrorCode::kForbidden);
  EXPECT_TRUE(authorize(report, finance));
  EXPECT_TRUE(authorize(export_csv, admin));
  EXPECT_FALSE(authorize(policy_put, finance));
  EXPECT_FALSE(authorize(explain, app));
  EXPECT_TRUE(authorize(policy_put, admin));
  EXPECT_TRUE(authorize(chat, app));
}

}  // namespace
}  // namespace ferry::gateway
