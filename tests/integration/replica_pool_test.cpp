// GPU replica pools (issue 18): a backend listing several replica URLs, each a real
// ferry_test_upstream. Load spreads by outstanding requests, a dead replica is routed around
// (its breaker opens, nothing fails for the client), task and prompt-prefix affinity keep a
// task or a shared prompt prefix on one replica, and /metrics shows each replica.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <iostream>
#include <thread>
#include <vector>

#include "tests/integration/ferry_test_base.h"
#include "tests/integration/fixtures.h"

namespace ferry::itest {
namespace {

class ReplicaPoolTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (ferry_.process) {
      EXPECT_EQ(ferry_.process->stop(Ms(15000)), 0);
      if (HasFailure()) std::cerr << "---- ferry stderr ----\n" << ferry_.process->stderr_text();
    }
    for (auto& u : upstreams_) {
      if (u.process) u.process->stop();
    }
  }
  static std::string url(const ListenAddress& a) {
    return "http://" + a.host + ":" + std::to_string(a.port) + "/v1";
  }
  // `replicas` base URLs in one pool `gpu`; models `pool-echo` and `pool-slow` on it.
  void start(const std::vector<std::string>& replicas, const std::string& affinity = "") {
    std::string cfg = standard_config(upstreams_.front().address);
    std::string pool = "  - name: gpu\n    replicas:\n";
    for (const auto& r : replicas) pool += "      - " + r + "\n";
    if (!affinity.empty()) pool += "    affinity: " + affinity + "\n";
    pool += "    api_key: " + std::string(kUpstreamKey) +
            "\n    timeouts: { connect_ms: 2000, first_byte_ms: 5000 }\n";
    cfg.insert(cfg.find("  - name: dead\n"), pool);
    cfg.insert(cfg.find("models:\n") + 8,
               "  - {name: pool-echo, backend: gpu, upstream_model: echo}\n"
               "  - {name: pool-slow, backend: gpu, upstream_model: slow-500}\n");
    ferry_ = start_ferry(dir_, cfg);
  }
  int64_t served_by(size_t i) { return upstream_stats(upstreams_[i].address)["completed"]; }
  std::optional<Response> chat(const std::string& model, const std::string& task = "") {
    auto headers = auth_headers();
    if (!task.empty()) headers.push_back("x-ferry-task: " + task);
    return post_json(ferry_.address, "/v1/chat/completions", chat_body(model, "pooled"), headers);
  }

  // 9 requests sharing an affinity key (`same`) land on one of the three replicas; 24 with
  // other keys (`other`) on at least two.
  void expect_affinity(const std::function<std::optional<Response>(int)>& same,
                       const std::function<std::optional<Response>(int)>& other) {
    for (int i = 0; i < 9; ++i) {
      auto r = same(i);
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
    }
    std::vector<int64_t> before;
    int holders = 0;
    for (size_t i = 0; i < 3; ++i) {
      before.push_back(served_by(i));
      if (before.back() > 0) ++holders;
    }
    EXPECT_EQ(holders, 1) << before[0] << " " << before[1] << " " << before[2];
    EXPECT_EQ(before[0] + before[1] + before[2], 9);
    for (int t = 0; t < 24; ++t) {
      auto r = other(t);
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
    }
    int used = 0;
    for (size_t i = 0; i < 3; ++i) used += served_by(i) > before[i] ? 1 : 0;
    EXPECT_GE(used, 2);
  }

  TempDir dir_;
  std::vector<Server> upstreams_;
  Server ferry_;
};

TEST_F(ReplicaPoolTest, ConcurrentLoadSpreadsOverTheReplicas) {
  for (int i = 0; i < 3; ++i) upstreams_.push_back(start_upstream());
  start({url(upstreams_[0].address), url(upstreams_[1].address), url(upstreams_[2].address)});
  // 30 requests that each hold a replica 500 ms, all at once: the fewest-outstanding choice
  // gives each replica a share; one replica alone would hold all 30.
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 30; ++t) {
    threads.emplace_back([&] {
      auto r = chat("pool-slow");
      if (r && r->status == 200) ++ok;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 30);
  int64_t total = 0;
  for (size_t i = 0; i < 3; ++i) {
    int64_t n = served_by(i);
    total += n;
    EXPECT_GE(n, 5) << "replica " << i << " got too small a share";
  }
  EXPECT_EQ(total, 30);
  auto metrics = http_request(ferry_.address, "GET", "/metrics", "", auth_headers(kAdminKey));
  ASSERT_TRUE(metrics);
  for (size_t i = 0; i < 3; ++i) {
    std::string series = "ferry_replica_requests_total{backend=\"gpu\",replica=\"" +
                         url(upstreams_[i].address) + "\"} " + std::to_string(served_by(i));
    EXPECT_NE(metrics->body.find(series), std::string::npos) << series << "\n" << metrics->body;
  }
  EXPECT_NE(metrics->body.find("ferry_replica_outstanding{backend=\"gpu\""), std::string::npos);
}

TEST_F(ReplicaPoolTest, ADeadReplicaIsRoutedAroundAndItsBreakerOpens) {
  upstreams_.push_back(start_upstream());
  const std::string dead = "http://127.0.0.1:" + std::to_string(closed_port()) + "/v1";
  start({dead, url(upstreams_[0].address)});
  for (int i = 0; i < 12; ++i) {
    auto r = chat("pool-echo");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << "request " << i << ": " << r->body;
  }
  EXPECT_EQ(served_by(0), 12);
  auto metrics = http_request(ferry_.address, "GET", "/metrics", "", auth_headers(kAdminKey));
  ASSERT_TRUE(metrics);
  const std::string labels = "{backend=\"gpu\",replica=\"" + dead + "\"} ";
  // Tried until it looked slow or its breaker opened; never after that within the cool-down.
  auto at = metrics->body.find("ferry_replica_failures_total" + labels);
  ASSERT_NE(at, std::string::npos) << metrics->body;
  int64_t failures = std::stoll(metrics->body.substr(at + 28 + labels.size()));
  EXPECT_GE(failures, 1);
  EXPECT_LT(failures, 12) << "the dead replica kept being tried first";
  // The pool as a whole stayed healthy: the target's own breaker saw no failure.
  EXPECT_NE(metrics->body.find("ferry_backend_healthy{target=\"pool-echo\"} 1"), std::string::npos)
      << metrics->body;
}

// A replica that failed and came back serves again: its failure penalises it for a while, not
// until it happens to be picked (under sequential traffic it never would be).
TEST_F(ReplicaPoolTest, ARecoveredReplicaServesAgain) {
  upstreams_.push_back(start_upstream());
  const uint16_t port = closed_port();
  const std::string back = "http://127.0.0.1:" + std::to_string(port) + "/v1";
  start({back, url(upstreams_[0].address)});
  for (int i = 0; i < 3; ++i) {
    auto r = chat("pool-echo");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  // The replica comes up on its port; after the failure penalty (2 s) it competes again.
  upstreams_.push_back(
      start_server({upstream_binary(), "--listen", "127.0.0.1:" + std::to_string(port)}));
  ASSERT_TRUE(upstreams_.back().process);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  for (int i = 0; i < 10; ++i) {
    auto r = chat("pool-echo");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  EXPECT_GE(served_by(1), 1) << "the recovered replica was never picked again";
  EXPECT_EQ(served_by(0) + served_by(1), 13);
}

TEST_F(ReplicaPoolTest, TaskAffinityKeepsATaskOnOneReplica) {
  for (int i = 0; i < 3; ++i) upstreams_.push_back(start_upstream());
  start({url(upstreams_[0].address), url(upstreams_[1].address), url(upstreams_[2].address)},
        "task");
  // Other tasks hash elsewhere too: 24 distinct tasks do not all land on one replica.
  expect_affinity([&](int) { return chat("pool-echo", "agent-run-42"); },
                  [&](int t) { return chat("pool-echo", "task-" + std::to_string(t)); });
}

// Prefix affinity: requests whose conversations open with the same 4 KiB (a long system prompt
// and the turns after it) go to one replica, whose KV cache holds that prefix, whatever their
// last turn; conversations with other prefixes spread over the pool.
TEST_F(ReplicaPoolTest, PrefixAffinityKeepsASharedPromptPrefixOnOneReplica) {
  for (int i = 0; i < 3; ++i) upstreams_.push_back(start_upstream());
  start({url(upstreams_[0].address), url(upstreams_[1].address), url(upstreams_[2].address)},
        "prefix");
  auto ask = [&](const std::string& system, const std::string& question) {
    json body = chat_body("pool-echo", question);
    body["messages"].insert(body["messages"].begin(),
                            json{{"role", "system"}, {"content", system}});
    return post_json(ferry_.address, "/v1/chat/completions", body, auth_headers());
  };
  const std::string shared = "You are the support agent of shop 7. " + std::string(5000, 'r');
  expect_affinity([&](int i) { return ask(shared, "question " + std::to_string(i)); },
                  [&](int p) {
                    return ask("You are the support agent of shop " + std::to_string(100 + p) + ".",
                               "hi");
                  });
}

TEST_F(ReplicaPoolTest, ConfigRefusesAPoolOfOneAndBothForms) {
  upstreams_.push_back(start_upstream());
  auto refused = [&](const std::string& backend) {
    std::string cfg = standard_config(upstreams_.front().address);
    cfg.insert(cfg.find("  - name: dead\n"), backend);
    std::string path = dir_.write("bad.yaml", cfg);
    Process p({ferry_binary(), "serve", "--config", path});
    auto status = p.wait_exit(Ms(10000));
    EXPECT_TRUE(status) << "ferry serve kept running on a bad config";
    return p.stderr_text();
  };
  std::string u = url(upstreams_[0].address);
  EXPECT_NE(refused("  - name: gpu\n    replicas: [" + u + "]\n").find("at least two"),
            std::string::npos);
  EXPECT_NE(
      refused("  - name: gpu\n    base_url: " + u + "\n    replicas: [" + u + ", " + u + "x]\n")
          .find("exactly one"),
      std::string::npos);
  EXPECT_NE(refused("  - name: gpu\n    replicas: [" + u + ", " + u + "]\n").find("twice"),
            std::string::npos);
  EXPECT_NE(refused("  - name: gpu\n    replicas: [" + u + ", " + u + "x]\n    affinity: sticky\n")
                .find("none, task or prefix"),
            std::string::npos);
}

}  // namespace
}  // namespace ferry::itest
