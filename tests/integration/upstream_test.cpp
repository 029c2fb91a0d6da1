// Checks ferry_test_upstream itself (and the harness client) without ferry in between, so that
// a failing gateway test can be told apart from a broken test server.
#include <gtest/gtest.h>

#include "tests/integration/fixtures.h"

namespace ferry::itest {
namespace {

class UpstreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (upstream_binary().empty()) {
      GTEST_FAIL() << "FERRY_TEST_UPSTREAM is not set";
    }
    upstream_ = start_upstream();
  }
  void TearDown() override {
    if (upstream_.process) {
      EXPECT_EQ(upstream_.process->stop(), 0);
    }
  }
  Server upstream_;
};

TEST_F(UpstreamTest, EchoNonStreamingAndLastRequest) {
  json body = chat_body("echo", "hello there");
  body["unknown_field"] = {{"nested", json::array({1, 2, 3})}};
  auto r = post_json(upstream_.address, "/v1/chat/completions", body, {"Authorization: Bearer x"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  json j = r->body_json();
  EXPECT_EQ(j["choices"][0]["message"]["content"], "echo: hello there");
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  json last = upstream_last_request(upstream_.address);
  EXPECT_EQ(last["body"], body);
  EXPECT_EQ(last["headers"]["authorization"], "Bearer x");
  EXPECT_EQ(last["target"], "/v1/chat/completions");
}

TEST_F(UpstreamTest, ChunkyStreamWithUsageReassembles) {
  json body = chat_body("chunky", "one two three four", true);
  body["stream_options"] = {{"include_usage", true}};
  StreamResult s = stream_request(upstream_.address, "/v1/chat/completions", body, {});
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 200);
  EXPECT_EQ(s.end, ReadStatus::kEnd);
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(s.content(), "echo: one two three four");
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_TRUE(s.chunks.back()["choices"].empty());
  EXPECT_EQ(s.chunks.back()["usage"]["completion_tokens"], 5);
}

TEST_F(UpstreamTest, CompletionStreamWithoutUsage) {
  StreamResult s = stream_request(upstream_.address, "/v1/completions",
                                  completion_body("echo", "a b", true), {});
  ASSERT_TRUE(s.head);
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(s.content(), "echo: a b");
  for (const auto& c : s.chunks) EXPECT_FALSE(c.contains("usage"));
}

TEST_F(UpstreamTest, FailuresAndResets) {
  auto r = post_json(upstream_.address, "/v1/chat/completions", chat_body("fail-500", "x"), {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_TRUE(r->body_json()["error"].is_object());

  StreamResult s = stream_request(upstream_.address, "/v1/chat/completions",
                                  chat_body("reset-mid-stream", "a b c d e f", true), {});
  ASSERT_TRUE(s.head);
  EXPECT_FALSE(s.saw_done);
  EXPECT_TRUE(s.end == ReadStatus::kError || s.end == ReadStatus::kClosed)
      << read_status_name(s.end);
}

TEST_F(UpstreamTest, HangCountsCancellationAndKeepAliveReusesConnection) {
  {
    auto c = Connection::open(upstream_.address.host, upstream_.address.port);
    ASSERT_TRUE(c);
    ASSERT_TRUE(
        c->send(make_request("POST", "/v1/chat/completions", chat_body("hang", "x").dump(), {})));
    EXPECT_FALSE(c->readable(Ms(200)));
  }  // closing the client cancels the request
  json stats;
  for (int i = 0; i < 500; ++i) {
    stats = upstream_stats(upstream_.address);
    if (stats["cancelled"] == 1) break;
    std::this_thread::sleep_for(Ms(10));
  }
  EXPECT_EQ(stats["cancelled"], 1);

  auto c = Connection::open(upstream_.address.host, upstream_.address.port);
  ASSERT_TRUE(c);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        c->send(make_request("POST", "/v1/chat/completions", chat_body("echo", "k").dump(), {})));
    auto r = c->read_response(Ms(5000));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  stats = upstream_stats(upstream_.address);
  EXPECT_EQ(stats["requests"], 4);
  EXPECT_EQ(stats["api_connections"], 2);
}

}  // namespace
}  // namespace ferry::itest
