#include "common/ids.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace ferry {
namespace {

bool is_lower_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The Unix milliseconds in the first 12 hex digits of `hex`.
int64_t ms_of(const std::string& hex) {
  return static_cast<int64_t>(std::stoull(hex.substr(0, 12), nullptr, 16));
}

TEST(Ids, UuidV7HasVersionAndVariant) {
  std::string id = make_uuid_v7();
  ASSERT_EQ(id.size(), 36u);
  EXPECT_EQ(id[14], '7');
  EXPECT_TRUE(id[19] == '8' || id[19] == '9' || id[19] == 'a' || id[19] == 'b');
}

TEST(Ids, UuidV7IsCanonicalLowerHexWithTheTime) {
  for (int i = 0; i < 200; ++i) {
    int64_t before = now_ms();
    std::string id = make_uuid_v7();
    int64_t after = now_ms();
    ASSERT_EQ(id.size(), 36u);
    for (size_t k = 0; k < id.size(); ++k) {
      if (k == 8 || k == 13 || k == 18 || k == 23) {
        EXPECT_EQ(id[k], '-') << id;
      } else {
        EXPECT_TRUE(is_lower_hex(id[k])) << id;
      }
    }
    std::string hex = id.substr(0, 8) + id.substr(9, 4);
    EXPECT_GE(ms_of(hex), before) << id;
    EXPECT_LE(ms_of(hex), after) << id;
  }
}

TEST(Ids, RequestIdIsTheUuidPrefixWithTheTime) {
  for (int i = 0; i < 200; ++i) {
    int64_t before = now_ms();
    std::string id = make_request_id();
    int64_t after = now_ms();
    ASSERT_EQ(id.size(), 30u) << id;
    EXPECT_EQ(id.substr(0, 4), "req_");
    EXPECT_TRUE(std::all_of(id.begin() + 4, id.end(), is_lower_hex)) << id;
    EXPECT_EQ(id[4 + 12], '7') << id;                           // version
    EXPECT_TRUE(id[4 + 16] >= '8' && id[4 + 16] <= 'b') << id;  // variant 0b10
    EXPECT_GE(ms_of(id.substr(4)), before) << id;
    EXPECT_LE(ms_of(id.substr(4)), after) << id;
  }
}

TEST(Ids, RequestIdsAreUnique) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(seen.insert(make_request_id()).second);
}

// Each thread has its own generator: their random parts must differ (the same seed in two
// threads would repeat the same sequence), and ids from different threads never collide.
TEST(Ids, RequestIdsAreUniqueAcrossThreads) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&ids, t] {
      for (int i = 0; i < kPerThread; ++i) ids[t].push_back(make_request_id());
    });
  }
  for (auto& th : threads) th.join();
  std::set<std::string> whole;
  std::set<std::string> random_parts;  // the 14 hex digits after the time
  for (const auto& v : ids) {
    for (const auto& id : v) {
      EXPECT_TRUE(whole.insert(id).second) << id;
      EXPECT_TRUE(random_parts.insert(id.substr(4 + 12)).second) << id;
    }
  }
  EXPECT_EQ(whole.size(), static_cast<size_t>(kThreads * kPerThread));
}

// Ids sort by creation time, also between threads, once the millisecond has moved on.
TEST(Ids, RequestIdsAreOrderedAcrossThreads) {
  std::string earlier;
  std::thread([&earlier] { earlier = make_request_id(); }).join();
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  std::string later;
  std::thread([&later] { later = make_request_id(); }).join();
  EXPECT_LT(earlier, later);
  EXPECT_LT(ms_of(earlier.substr(4)), ms_of(later.substr(4)));
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  EXPECT_LT(later, make_request_id());
  std::string uuid = make_uuid_v7();
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  std::string uuid_later;
  std::thread([&uuid_later] { uuid_later = make_uuid_v7(); }).join();
  EXPECT_LT(uuid, uuid_later);
}

TEST(Ids, RandomIdsHaveTheirPrefixLengthAndAlphabetAndDoNotRepeat) {
  std::set<std::string> seen;
  std::set<char> symbols;
  for (int i = 0; i < 2000; ++i) {
    std::string id = make_random_id("msg_", 24);
    ASSERT_EQ(id.size(), 28u);
    ASSERT_EQ(id.rfind("msg_", 0), 0u);
    for (char c : id.substr(4)) {
      ASSERT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << id;
      symbols.insert(c);
    }
    EXPECT_TRUE(seen.insert(id).second) << "repeated " << id;
  }
  EXPECT_EQ(symbols.size(), 62u);  // every letter and digit turns up
  EXPECT_EQ(make_random_id("resp_", 48).size(), 53u);
  EXPECT_EQ(make_random_id("", 0), "");
}

}  // namespace
}  // namespace ferry
