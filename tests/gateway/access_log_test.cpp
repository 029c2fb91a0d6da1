#include "gateway/access_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace ferry::gateway {
namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(AccessLog, FlushWritesEveryQueuedLineInOrder) {
  auto path = (std::filesystem::temp_directory_path() /
               ("ferry_access_log_test_" + std::to_string(::getpid()) + ".log"))
                  .string();
  std::filesystem::remove(path);
  {
    AccessLog log(path);
    for (int i = 0; i < 1000; ++i) log.write("{\"n\":" + std::to_string(i) + "}");
    log.flush();
    auto lines = read_lines(path);
    ASSERT_EQ(lines.size(), 1000u);
    EXPECT_EQ(lines.front(), "{\"n\":0}");
    EXPECT_EQ(lines.back(), "{\"n\":999}");
    log.write("last");
  }  // the destructor drains what is left
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 1001u);
  EXPECT_EQ(lines.back(), "last");
  std::filesystem::remove(path);
}

TEST(AccessLog, ManyWritersLoseNothing) {
  auto path = (std::filesystem::temp_directory_path() /
               ("ferry_access_log_mt_" + std::to_string(::getpid()) + ".log"))
                  .string();
  std::filesystem::remove(path);
  {
    AccessLog log(path);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&log] {
        for (int i = 0; i < 5000; ++i) log.write("x");
      });
    }
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(read_lines(path).size(), 20000u);
  std::filesystem::remove(path);
}

TEST(AccessLog, OffWritesNothingAndBadPathThrows) {
  AccessLog off("off");
  EXPECT_FALSE(off.enabled());
  off.write("ignored");
  off.flush();
  EXPECT_THROW(AccessLog("/nonexistent-dir/x/access.log"), std::runtime_error);
}

}  // namespace
}  // namespace ferry::gateway

#include <nlohmann/json.hpp>

namespace ferry::gateway {
namespace {

TEST(JsonLine, ProducesValidJsonWithEscapesAndMillis) {
  std::string line = JsonLine()
                         .str("path", "/v1/\"q\"\\\n\x01")
                         .integer("status", 200)
                         .millis("latency_ms", 1234567)
                         .millis("tiny", 5)
                         .boolean("stream", false)
                         .str("utf8", "h\xc3\xa9llo \xf0\x9f\x98\x80")
                         .finish();
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["path"], "/v1/\"q\"\\\n\x01");
  EXPECT_EQ(j["status"], 200);
  EXPECT_DOUBLE_EQ(j["latency_ms"].get<double>(), 1234.567);
  EXPECT_DOUBLE_EQ(j["tiny"].get<double>(), 0.005);
  EXPECT_EQ(j["stream"], false);
  EXPECT_EQ(j["utf8"], "h\xc3\xa9llo \xf0\x9f\x98\x80");
}

TEST(JsonLine, InvalidUtf8BecomesReplacementCharacters) {
  std::string line = JsonLine().str("p", "a\xff\xc3(\xed\xa0\x80z").finish();
  auto j = nlohmann::json::parse(line);  // would throw on invalid UTF-8
  EXPECT_EQ(j["p"], "a\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz");
}

}  // namespace
}  // namespace ferry::gateway
