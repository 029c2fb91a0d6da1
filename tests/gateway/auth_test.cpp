#include "gateway/auth.h"

#include <gtest/gtest.h>

#include "common/sha256.h"

namespace ferry::gateway {
namespace {

config::AuthConfig two_keys() {
  config::AuthConfig auth;
  auth.keys.push_back(
      {"app-1", sha256_hex("sk-app"), "search", "p1", config::Role::kApp, {"gold"}});
  auth.keys.push_back({"fin", sha256_hex("sk-fin"), "finance", "", config::Role::kFinance, {}});
  return auth;
}

TEST(Auth, KnownKeyMapsToItsPrincipal) {
  Authenticator a(two_keys());
  auto p = a.authenticate("Bearer sk-app");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->key_id, "app-1");
  EXPECT_EQ(p->team, "search");
  EXPECT_EQ(p->tags, std::vector<std::string>{"gold"});
  EXPECT_EQ(a.authenticate("Bearer sk-fin")->role, config::Role::kFinance);
}

TEST(Auth, MissingMalformedOrWrongKeysAreRefused) {
  Authenticator a(two_keys());
  EXPECT_EQ(a.authenticate("").error().code, ErrorCode::kUnauthorized);
  EXPECT_EQ(a.authenticate("Basic abc").error().code, ErrorCode::kUnauthorized);
  EXPECT_EQ(a.authenticate("Bearer ").error().code, ErrorCode::kUnauthorized);
  EXPECT_EQ(a.authenticate("Bearer sk-nope").error().code, ErrorCode::kUnauthorized);
}

TEST(Auth, RepeatedKeysKeepTheirPrincipalAndWrongKeysStayRefused) {
  config::AuthConfig cfg;
  cfg.keys.push_back(
      config::ApiKey{"k1", sha256_hex("secret-one"), "t1", "p1", config::Role::kApp, {}});
  cfg.keys.push_back(
      config::ApiKey{"k2", sha256_hex("secret-two"), "t2", "p2", config::Role::kAdmin, {}});
  Authenticator auth(cfg);
  for (int i = 0; i < 3; ++i) {
    auto a = auth.authenticate("Bearer secret-one");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->key_id, "k1");
    auto b = auth.authenticate("Bearer secret-two");
    ASSERT_TRUE(b);
    EXPECT_EQ(b->key_id, "k2");
    EXPECT_EQ(b->role, config::Role::kAdmin);
    EXPECT_FALSE(auth.authenticate("Bearer secret-one2"));
    EXPECT_FALSE(auth.authenticate("Bearer secret-on"));
  }
}

TEST(Auth, NoKeysMeansAnonymous) {
  Authenticator a(config::AuthConfig{});
  EXPECT_FALSE(a.enabled());
  EXPECT_EQ(a.authenticate("")->key_id, "anonymous");
}

TEST(Auth, TheBearerSchemeIsCaseInsensitive) {
  Authenticator a(two_keys());
  for (const char* h : {"bearer sk-app", "BEARER sk-app", "bEaReR sk-app"}) {
    auto p = a.authenticate(h);
    ASSERT_TRUE(p) << h;
    EXPECT_EQ(p->key_id, "app-1") << h;
  }
  EXPECT_FALSE(a.authenticate("bearers sk-app"));
  EXPECT_FALSE(a.authenticate("bearer"));
}

}  // namespace
}  // namespace ferry::gateway
