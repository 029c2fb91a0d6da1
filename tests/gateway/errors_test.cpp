#include "gateway/errors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ferry::gateway {
namespace {

TEST(Errors, StatusesFollowOpenAi) {
  EXPECT_EQ(http_status_for(Error::make(ErrorCode::kInvalidRequest, "")), 400);
  EXPECT_EQ(http_status_for(Error::make(ErrorCode::kUnauthorized, "")), 401);
  EXPECT_EQ(http_status_for(Error::make(ErrorCode::kNotFound, "")), 404);
  EXPECT_EQ(http_status_for(Error::make(ErrorCode::kPayloadTooLarge, "")), 413);
  EXPECT_EQ(http_status_for(Error::make(ErrorCode::kRateLimited, "")), 429);
  EXPECT_EQ(http_status_for(Error::make(ErrorCode::kBackendError, "")), 502);
  EXPECT_EQ(http_status_for(Error::make(ErrorCode::kUnavailable, "")), 503);
  EXPECT_EQ(http_status_for(Error::make(ErrorCode::kTimeout, "")), 504);
}

TEST(Errors, BodyHasOpenAiShape) {
  auto e = to_http_error(Error::make(ErrorCode::kInvalidRequest, "bad temp", "temperature"));
  auto j = nlohmann::json::parse(e.body);
  EXPECT_EQ(j["error"]["message"], "bad temp");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_TRUE(j["error"].contains("code"));
  auto auth =
      nlohmann::json::parse(to_http_error(Error::make(ErrorCode::kUnauthorized, "no")).body);
  EXPECT_EQ(auth["error"]["code"], "invalid_api_key");
  EXPECT_TRUE(auth["error"]["param"].is_null());
}

TEST(Errors, ASpentBudgetSaysDoNotRetryAndATransientRefusalSaysWhen) {
  Error budget = Error::make(ErrorCode::kRateLimited, "spent", "team-daily", "budget_exceeded");
  auto headers = retry_headers(budget);
  ASSERT_EQ(headers.size(), 1u);
  EXPECT_EQ(headers[0], std::make_pair(std::string("x-should-retry"), std::string("false")));
  Error full = Error::make(ErrorCode::kUnavailable, "queue full");
  full.retry_after_s = 2;
  headers = retry_headers(full);
  ASSERT_EQ(headers.size(), 1u);
  EXPECT_EQ(headers[0], std::make_pair(std::string("retry-after"), std::string("2")));
  EXPECT_TRUE(retry_headers(Error::make(ErrorCode::kInvalidRequest, "bad")).empty());
}

}  // namespace
}  // namespace ferry::gateway
