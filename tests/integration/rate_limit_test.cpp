// Rate limits on one instance (SQLite ledger): exact request counting, the x-ratelimit-*
// headers as OpenAI sends them, 429 with Retry-After and the limit's name, the refusal's row in
// the ledger, tokens counted as prompt + reserved output and corrected at settle.
#include <gtest/gtest.h>

#include "tests/integration/ferry_test_base.h"
#include "tests/integration/fixtures.h"

namespace ferry::itest {
namespace {

class RateLimitTest : public ::testing::Test {
 protected:
  void SetUp() override { upstream_ = start_upstream(); }
  void TearDown() override {
    if (ferry_.process) {
      EXPECT_EQ(ferry_.process->stop(Ms(15000)), 0);
      if (HasFailure()) std::cerr << "---- ferry stderr ----\n" << ferry_.process->stderr_text();
    }
    if (upstream_.process) upstream_.process->stop();
  }
  void start(const std::string& limits) {
    std::string cfg = standard_config(upstream_.address);
    cfg += "ledger:\n  path: " + dir_.path().string() + "/ledger.db\n";
    cfg += "rate_limits:\n" + limits;
    ferry_ = start_ferry(dir_, cfg);
  }
  std::optional<Response> chat(int max_tokens, const char* key = kAppKey) {
    json body = chat_body("gpt-test", "count me");
    body["max_tokens"] = max_tokens;
    return post_json(ferry_.address, "/v1/chat/completions", body, auth_headers(key));
  }
  static int64_t header_int(const Response& r, const char* name) {
    auto v = r.header(name);
    return v ? std::stoll(*v) : -1;
  }

  TempDir dir_;
  Server upstream_;
  Server ferry_;
};

TEST_F(RateLimitTest, RequestsPerMinuteIsExactWithHeadersAndRetryAfter) {
  // 3 a minute: one request refills in 20 s, longer than this test's requests take.
  start("  - { name: team-a-rpm, scope: team, match: team-a, requests_per_minute: 3 }\n");
  for (int i = 0; i < 3; ++i) {
    auto r = chat(16);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->header("x-ratelimit-limit-requests").value_or(""), "3");
    EXPECT_EQ(header_int(*r, "x-ratelimit-remaining-requests"), 2 - i);
    auto reset = r->header("x-ratelimit-reset-requests");
    ASSERT_TRUE(reset);
    EXPECT_EQ(reset->back(), 's') << *reset;  // "19.998s", "39.9s", ...
    EXPECT_FALSE(r->header("x-ratelimit-limit-tokens")) << "no token limit configured";
  }
  auto refused = chat(16);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429) << refused->body;
  json err = refused->body_json()["error"];
  EXPECT_EQ(err["code"], "rate_limit_exceeded") << refused->body;
  EXPECT_EQ(err["param"], "team-a-rpm") << refused->body;
  EXPECT_NE(err["message"].get<std::string>().find("team-a-rpm"), std::string::npos);
  auto retry = refused->header("retry-after");
  ASSERT_TRUE(retry) << "a rate-limited answer says when to retry";
  EXPECT_GE(std::stoll(*retry), 1);
  EXPECT_LE(std::stoll(*retry), 20);
  // As OpenAI's 429s, it says where the limit stands: none left, full again within a minute.
  EXPECT_EQ(refused->header("x-ratelimit-limit-requests").value_or(""), "3");
  EXPECT_EQ(header_int(*refused, "x-ratelimit-remaining-requests"), 0);
  auto refused_reset = refused->header("x-ratelimit-reset-requests");
  ASSERT_TRUE(refused_reset);
  EXPECT_EQ(refused_reset->back(), 's') << *refused_reset;
  // Another team's key is not limited by team-a's limit.
  auto other = chat(16, kHashedKey);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200) << other->body;
  EXPECT_FALSE(other->header("x-ratelimit-limit-requests"));
  // The refusal has its row (queued before the answers that followed it, so durable with them);
  // the server keeps serving.
  json totals = report_totals(ferry_.address);
  EXPECT_EQ(totals["refused_requests"], 1) << totals.dump();
  EXPECT_EQ(totals["requests"], 4) << totals.dump();
  auto metrics = http_request(ferry_.address, "GET", "/metrics", "", auth_headers(kAdminKey));
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ferry_rate_limit_refusals_total 1"), std::string::npos);
}

TEST_F(RateLimitTest, TokensAreCountedAtAdmissionAndCorrectedAtSettle) {
  // 6,000,000 tokens a minute refill 100 a millisecond: the test compares figures far apart.
  start("  - { name: key-tpm, scope: key, match: app-key, tokens_per_minute: 6000000 }\n");
  auto first = chat(2000000);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_EQ(first->header("x-ratelimit-limit-tokens").value_or(""), "6000000");
  EXPECT_FALSE(first->header("x-ratelimit-limit-requests"));
  int64_t after_first = header_int(*first, "x-ratelimit-remaining-tokens");
  // Two million output tokens were reserved with the prompt...
  EXPECT_LE(after_first, 4000000);
  EXPECT_GT(after_first, 3000000);
  // ... and given back at settle (the answer used a handful): the next admission sees them.
  auto second = chat(2000000);
  ASSERT_TRUE(second);
  ASSERT_EQ(second->status, 200) << second->body;
  int64_t after_second = header_int(*second, "x-ratelimit-remaining-tokens");
  EXPECT_GT(after_second, 3000000) << "the first request's unused reservation came back";
  // Reserving more than the whole limit is refused for good (no Retry-After: waiting won't help).
  auto huge = chat(7000000);
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 429) << huge->body;
  EXPECT_FALSE(huge->header("retry-after"));
  EXPECT_NE(huge->body.find("max_tokens"), std::string::npos) << huge->body;
}

TEST_F(RateLimitTest, ConfigNeedsALedgerAndValidEntries) {
  auto refused = [&](const std::string& cfg) {
    std::string path = dir_.write("bad.yaml", cfg);
    Process p({ferry_binary(), "serve", "--config", path});
    auto status = p.wait_exit(Ms(10000));
    EXPECT_TRUE(status) << "ferry serve kept running on a bad config";
    if (status) {
      EXPECT_NE(*status, 0);
    }
    return p.stderr_text();
  };
  std::string cfg = standard_config(upstream_.address);
  cfg += "rate_limits:\n  - { name: a, scope: key, match: app-key, requests_per_minute: 5 }\n";
  std::string err = refused(cfg);
  EXPECT_NE(err.find("need a 'ledger' section"), std::string::npos) << err;
  cfg =
      standard_config(upstream_.address) + "ledger:\n  path: " + dir_.path().string() +
      "/l.db\nrate_limits:\n  - { name: a, scope: key, match: app-key, requests_per_second: 5 }\n";
  err = refused(cfg);
  EXPECT_NE(err.find("requests_per_second"), std::string::npos) << err;
}

}  // namespace
}  // namespace ferry::itest
