// Hostile policies through the real server: a `matches` rule that made a backtracking matcher
// spin for ever on a claimed tag, and a YAML alias bomb sent to PUT /admin/policy (refused
// with 422 and its position, no memory blow-up, the old policy keeps serving).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/common/alias_bomb.h"
#include "tests/integration/fixtures.h"

namespace ferry::itest {
namespace {

constexpr const char* kPolicy = R"(
targets:
  good: gpt-test
  other: chunky
models: [auto]
rules:
  - id: evil-regex
    when: { claimed_tags: { matches: '(a|aa)+b' } }
    route: [other]
default: { route: [good] }
)";

// The peak resident memory of a process, in KiB (VmHWM); -1 when unreadable.
int64_t peak_rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

class HostilePolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    upstream_ = start_upstream();
    std::string policy = dir_.write("policies.yaml", kPolicy);
    ferry_ = start_ferry(dir_, standard_config(upstream_.address) + "policy:\n  file: " + policy +
                                   "\n  watch: false\n");
  }
  void TearDown() override {
    if (ferry_.process) {
      EXPECT_EQ(ferry_.process->stop(Ms(15000)), 0) << "ferry did not exit cleanly";
      if (HasFailure()) std::cerr << "---- ferry stderr ----\n" << ferry_.process->stderr_text();
    }
    if (upstream_.process) upstream_.process->stop();
  }

  void expect_serving(const char* target) {
    auto health = http_request(ferry_.address, "GET", "/healthz");
    ASSERT_TRUE(health) << "/healthz no longer answers";
    EXPECT_EQ(health->status, 200);
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("auto", "still ok"));
    ASSERT_TRUE(r) << "ferry no longer answers";
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->header("x-ferry-target").value_or(""), target);
  }

  std::string active_version() {
    auto r = http_request(ferry_.address, "GET", "/admin/policy", "", auth_headers(kAdminKey));
    if (!r || r->status != 200) return "";
    return r->body_json().value("version", "");
  }

  TempDir dir_;
  Server upstream_;
  Server ferry_;
};

// With std::regex, 60 a's against (a|aa)+b never answered and /healthz timed out.
TEST_F(HostilePolicyTest, BacktrackingPatternOnAClaimedTagAnswers) {
  auto headers = auth_headers();
  headers.push_back("x-ferry-tags: " + std::string(60, 'a'));
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("auto", "hi"), headers);
  ASSERT_TRUE(r) << "no answer: the match did not end";
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->header("x-ferry-target").value_or(""), "good");  // no match: the default
  headers.back() = "x-ferry-tags: " + std::string(60, 'a') + "b";
  auto hit = post_json(ferry_.address, "/v1/chat/completions", chat_body("auto", "hi"), headers);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->status, 200) << hit->body;
  EXPECT_EQ(hit->header("x-ferry-target").value_or(""), "other");
  expect_serving("good");
}

TEST_F(HostilePolicyTest, PatternsRe2RefusesAre422AtPut) {
  std::string policy = kPolicy;
  policy.replace(policy.find("(a|aa)+b"), 8, "(a)\\1");
  std::string v1 = active_version();
  auto r = http_request(ferry_.address, "PUT", "/admin/policy?persist=false", policy,
                        auth_headers(kAdminKey));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 422) << r->body;
  EXPECT_NE(r->body.find(":8:38: invalid regular expression '(a)\\\\1'"), std::string::npos)
      << r->body;
  EXPECT_EQ(active_version(), v1);
}

TEST_F(HostilePolicyTest, AliasBombAtPutIs422AndMemoryStaysSmall) {
  std::string v1 = active_version();
  ASSERT_FALSE(v1.empty());
  auto r = http_request(ferry_.address, "PUT", "/admin/policy?persist=false",
                        ferry::testing::alias_bomb(), auth_headers(kAdminKey));
  ASSERT_TRUE(r) << "no answer to the bomb";
  EXPECT_EQ(r->status, 422) << r->body;
  json error = r->body_json()["error"];
  std::string message = error.value("message", "");
  EXPECT_EQ(error.value("code", ""), "invalid_policy") << r->body;
  EXPECT_NE(message.find("more than 200000 nodes"), std::string::npos) << message;
  // Located: the source, then the line of the alias that crossed the budget (f, line 6).
  EXPECT_NE(message.find(":6:"), std::string::npos) << message;
  EXPECT_EQ(active_version(), v1);
  expect_serving("good");
  // 2.8 GiB before; a bounded walk stays far below this.
  int64_t peak = peak_rss_kib(ferry_.process->pid());
  ASSERT_GT(peak, 0);
  EXPECT_LT(peak, 200 * 1024) << "peak RSS " << peak << " KiB";
}

}  // namespace
}  // namespace ferry::itest
