// The GoogleTest fixture most integration tests share: a fresh ferry_test_upstream and a fresh
// `ferry serve` on the standard config, both on port 0, stopped after the test.
// One fixture per test; not shared between threads.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "tests/integration/fixtures.h"

namespace ferry::itest {

class FerryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(ferry_binary().empty()) << "FERRY_BINARY is not set";
    ASSERT_FALSE(upstream_binary().empty()) << "FERRY_TEST_UPSTREAM is not set";
    upstream_ = start_upstream();
    ferry_ = start_ferry(dir_, standard_config(upstream_.address));
  }

  void TearDown() override {
    if (ferry_.process) {
      int status = ferry_.process->stop(Ms(15000));
      EXPECT_EQ(status, 0) << "ferry did not exit cleanly on SIGTERM";
      if (HasFailure()) {
        std::cerr << "---- ferry stderr ----\n" << ferry_.process->stderr_text() << "\n";
      }
    }
    if (upstream_.process) upstream_.process->stop();
  }

  // A normal request on a fresh connection still succeeds: ferry keeps serving.
  void expect_serving() {
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "still ok"));
    ASSERT_TRUE(r) << "ferry no longer answers";
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: still ok");
  }

  // Waits (up to 10 s) until the upstream's counter `name` reaches at least `value`.
  json wait_upstream_stat(const std::string& name, int64_t value) {
    json stats;
    for (int i = 0; i < 1000; ++i) {
      stats = upstream_stats(upstream_.address);
      if (stats.contains(name) && stats[name].get<int64_t>() >= value) break;
      std::this_thread::sleep_for(Ms(10));
    }
    return stats;
  }

  TempDir dir_;
  Server upstream_;
  Server ferry_;
};

// A fresh ferry_test_upstream and a ledger path; the test starts ferry on its own config into
// ferry_. Both are stopped after the test, and ferry must exit cleanly.
class OwnConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    upstream_ = start_upstream();
    db_ = (dir_.path() / "ledger.db").string();
  }
  void TearDown() override {
    if (ferry_.process) {
      int status = ferry_.process->stop(Ms(15000));
      EXPECT_EQ(status, 0) << "ferry did not exit cleanly";
      if (HasFailure()) std::cerr << "---- ferry stderr ----\n" << ferry_.process->stderr_text();
    }
    if (upstream_.process) upstream_.process->stop();
  }

  TempDir dir_;
  Server upstream_;
  Server ferry_;
  std::string db_;
};

// Checks the OpenAI error shape {"error":{"message","type","param","code"}}.
inline ::testing::AssertionResult is_openai_error(const Response& r) {
  json j = r.body_json();
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) {
    return ::testing::AssertionFailure() << "not an OpenAI error body: " << r.body;
  }
  const json& e = j["error"];
  for (const char* key : {"message", "type", "param", "code"}) {
    if (!e.contains(key)) {
      return ::testing::AssertionFailure() << "error has no '" << key << "': " << r.body;
    }
  }
  if (!e["message"].is_string() || e["message"].get<std::string>().empty()) {
    return ::testing::AssertionFailure() << "error message is empty: " << r.body;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ferry::itest
