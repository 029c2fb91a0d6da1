// PolicyStore: atomic swaps, rejected reloads keep the old policy, file watching.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "policies/store.h"

namespace ferry::policies {
namespace {

namespace fs = std::filesystem;

// A policy whose every rule routes to `target` and tags the request with `target`, so a
// reader can tell a mixed policy from a whole one.
std::string policy_text(const std::string& target, int rules) {
  std::string text = "targets: { a: model-a, b: model-b }\nrules:\n";
  for (int i = 0; i < rules; ++i) {
    text += "  - id: r" + std::to_string(i) + "\n    when: { prompt_tokens: " + std::to_string(i) +
            " }\n    route: [" + target + "]\n    tag: " + target + "\n";
  }
  text += "default: { route: [" + target + "], tag: " + target + " }\n";
  return text;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ferry-policy-store-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "policies.yaml").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& text) {
    std::string tmp = path_ + ".new";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << text;
    }
    fs::rename(tmp, path_);
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(StoreTest, OpenRefusesAnInvalidPolicyWithItsErrors) {
  write("targets: { a: m }\nrules: []\n");
  auto store = PolicyStore::open(path_);
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().message.find("policies.yaml:1:1: missing required key 'default'"),
            std::string::npos)
      << store.error().message;
}

TEST_F(StoreTest, ReloadSwapsAndKeepsTheOldPolicyForHoldersOfIt) {
  write(policy_text("a", 2));
  auto store = PolicyStore::open(path_);
  ASSERT_TRUE(store) << store.error().message;
  auto before = (*store)->current();
  write(policy_text("b", 2));
  ReloadOutcome out = (*store)->reload("SIGHUP");
  EXPECT_TRUE(out.applied);
  EXPECT_TRUE(out.ok());
  auto after = (*store)->current();
  EXPECT_NE(before->version(), after->version());
  EXPECT_EQ(before->decide(Facts{}).route[0].target, "a");  // a request keeps its version
  EXPECT_EQ(after->decide(Facts{}).route[0].target, "b");
  StoreStatus s = (*store)->status();
  EXPECT_EQ(s.loaded_by, "SIGHUP");
  EXPECT_EQ(s.reloads_applied, 1u);
  EXPECT_FALSE(s.last_rejected);
}

TEST_F(StoreTest, SameContentIsUnchanged) {
  write(policy_text("a", 1));
  auto store = PolicyStore::open(path_);
  ASSERT_TRUE(store);
  ReloadOutcome out = (*store)->reload();
  EXPECT_TRUE(out.unchanged);
  EXPECT_FALSE(out.applied);
}

TEST_F(StoreTest, BrokenFileIsRejectedWhileTheOldPolicyServes) {
  write(policy_text("a", 1));
  auto store = PolicyStore::open(path_);
  ASSERT_TRUE(store);
  auto old = (*store)->current();
  write("targets: { a: m }\nrules:\n  - id: x\n    route: [zzz]\ndefault: { route: [a] }\n");
  ReloadOutcome out = (*store)->reload("file change");
  EXPECT_FALSE(out.applied);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.errors[0].to_string().find(":4:13: unknown target 'zzz'"), std::string::npos)
      << out.errors[0].to_string();
  EXPECT_EQ((*store)->current(), old);
  StoreStatus s = (*store)->status();
  ASSERT_TRUE(s.last_rejected);
  EXPECT_EQ(s.last_rejected->trigger, "file change");
  EXPECT_EQ(s.reloads_rejected, 1u);
  nlohmann::json j = (*store)->status_json();
  EXPECT_EQ(j["version"], old->short_version());
  EXPECT_EQ(j["last_rejected"]["errors"][0]["line"], 4);
  EXPECT_EQ(j["last_rejected"]["trigger"], "file change");

  fs::remove(path_);  // a vanished file is rejected too
  out = (*store)->reload();
  EXPECT_FALSE(out.ok());
  EXPECT_EQ((*store)->current(), old);
}

TEST_F(StoreTest, ApplyTextValidatesAndPersists) {
  write(policy_text("a", 1));
  auto store = PolicyStore::open(path_);
  ASSERT_TRUE(store);
  ReloadOutcome bad = (*store)->apply_text("targets: []\n", "PUT /admin/policy", true);
  EXPECT_FALSE(bad.ok());
  std::ifstream in(path_);
  std::string on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(on_disk, policy_text("a", 1));  // a rejected text is never written

  ReloadOutcome good = (*store)->apply_text(policy_text("b", 1), "PUT /admin/policy", true);
  EXPECT_TRUE(good.applied);
  std::ifstream in2(path_);
  std::string now((std::istreambuf_iterator<char>(in2)), std::istreambuf_iterator<char>());
  EXPECT_EQ(now, policy_text("b", 1));
  EXPECT_TRUE((*store)->reload().unchanged);
}

TEST_F(StoreTest, ConcurrentReadersNeverSeeAMixAndNeverFail) {
  write(policy_text("a", 50));
  auto opened = PolicyStore::open(path_);
  ASSERT_TRUE(opened);
  PolicyStore& store = **opened;
  std::atomic<bool> stop{false};
  std::atomic<int> mixed{0};
  std::atomic<int64_t> decisions{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      Facts f;
      int64_t i = t;
      while (!stop.load(std::memory_order_relaxed)) {
        auto policy = store.current();
        f.prompt_tokens = i++ % 60;
        Decision d = policy->decide(f);
        const std::string& target = d.route.at(0).target;
        // Every part of one decision comes from one policy: route, tags and version agree.
        if (d.tags.size() != 1 || d.tags[0] != target ||
            d.policy_version != policy->short_version()) {
          mixed.fetch_add(1);
        }
        decisions.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  int applied = 0;
  for (int i = 0; i < 40; ++i) {
    ReloadOutcome out = store.apply_text(policy_text(i % 2 ? "a" : "b", 50 + i % 3), "test", false);
    applied += out.applied;
    if (i % 10 == 0) {
      EXPECT_FALSE(store.apply_text("targets: {", "broken", false).ok());
    }
  }
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(mixed.load(), 0);
  EXPECT_EQ(applied, 40);
  EXPECT_GT(decisions.load(), 0);
  EXPECT_EQ(store.status().reloads_rejected, 4u);
}

TEST_F(StoreTest, FileChangeReloadsThroughInotify) {
  write(policy_text("a", 1));
  auto opened = PolicyStore::open(path_);
  ASSERT_TRUE(opened);
  PolicyStore& store = **opened;
  std::atomic<int> outcomes{0};
  store.set_listener([&](const ReloadOutcome&) { outcomes.fetch_add(1); });
  ASSERT_TRUE(store.watch(std::chrono::milliseconds(20)));
  ASSERT_TRUE(store.watch(std::chrono::milliseconds(20)));  // idempotent
  write(policy_text("b", 1));
  // Waits for the watcher (bounded); this is not a timing assertion.
  for (int i = 0; i < 500 && store.current()->decide(Facts{}).route[0].target != "b"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(store.current()->decide(Facts{}).route[0].target, "b");
  EXPECT_EQ(store.status().loaded_by, "file change");

  write("not: [valid");
  for (int i = 0; i < 500 && !store.status().last_rejected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(store.status().last_rejected);
  EXPECT_EQ(store.current()->decide(Facts{}).route[0].target, "b");
  store.stop_watching();
  EXPECT_GE(outcomes.load(), 2);
}

}  // namespace
}  // namespace ferry::policies
