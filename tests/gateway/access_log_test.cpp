#include "gateway/access_log.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
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

// Lines from several threads: each thread's lines keep their order, none is lost or torn, and a
// view into a larger buffer writes only its own bytes.
TEST(AccessLog, EachWritersLinesStayInOrder) {
  auto path = (std::filesystem::temp_directory_path() /
               ("ferry_access_log_order_" + std::to_string(::getpid()) + ".log"))
                  .string();
  std::filesystem::remove(path);
  constexpr int kThreads = 3;
  constexpr int kLines = 3000;
  {
    AccessLog log(path);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&log, t] {
        for (int i = 0; i < kLines; ++i) {
          std::string buf = "t" + std::to_string(t) + ":" + std::to_string(i) + "|junk";
          log.write(std::string_view(buf).substr(0, buf.find('|')));
          if (i % 1000 == 999) log.flush();
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  std::vector<int> next(kThreads, 0);
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  for (const auto& line : lines) {
    ASSERT_EQ(line[0], 't') << line;
    auto colon = line.find(':');
    ASSERT_NE(colon, std::string::npos) << line;
    int t = std::stoi(line.substr(1, colon - 1));
    ASSERT_TRUE(t >= 0 && t < kThreads) << line;
    EXPECT_EQ(line.substr(colon + 1), std::to_string(next[t])) << line;
    ++next[t];
  }
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

// An escaper written from the JSON and UTF-8 rules, byte by byte, to check the word-at-a-time
// one against: ASCII control characters become \u00XX, '"' and '\\' get a backslash, a
// well-formed UTF-8 sequence is copied, and each byte that does not start one becomes U+FFFD.
std::string reference_escape(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20) {
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 0xf];
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    uint32_t cp = len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    bool ok = len != 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMinForLength[len] && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xef\xbf\xbd";
      ++i;
    }
  }
  return out;
}

std::string escaped_by_json_line(std::string_view s) {
  std::string line = JsonLine().str("k", s).finish();
  EXPECT_EQ(line.substr(0, 6), "{\"k\":\"");
  EXPECT_EQ(line.substr(line.size() - 2), "\"}");
  return line.substr(6, line.size() - 8);
}

// Every special byte or sequence at every offset of plain strings of 0 to 24 bytes, so each one
// falls before, inside, across and after 8-byte words and in the padded tail.
TEST(JsonLine, EscapesLikeTheReferenceAtEveryOffset) {
  const std::vector<std::string> specials = {"\"",
                                             "\\",
                                             "\n",
                                             std::string(1, '\0'),
                                             "\x01",
                                             "\x1f",
                                             "\x7f",
                                             " ",
                                             "\xc3\xa9",
                                             "\xe2\x82\xac",
                                             "\xf0\x9f\x98\x80",
                                             "\xf4\x8f\xbf\xbf",
                                             "\xff",
                                             "\x80",
                                             "\xc0\xaf",
                                             "\xc1\xbf",
                                             "\xe0\x80\xaf",
                                             "\xed\xa0\x80",
                                             "\xf0\x80\x80\xaf",
                                             "\xf4\x90\x80\x80",
                                             "\xf5\x80\x80\x80",
                                             "\xe2\x82",
                                             "\xf0\x9f\x98",
                                             "\xc3"};
  for (const auto& special : specials) {
    for (size_t len = 0; len <= 24; ++len) {
      for (size_t at = 0; at <= len; ++at) {
        std::string s(len, 'x');
        for (size_t k = 0; k < len; ++k) s[k] = static_cast<char>('a' + k % 26);
        s.insert(at, special);
        ASSERT_EQ(escaped_by_json_line(s), reference_escape(s))
            << "special " << testing::PrintToString(special) << " at " << at << " of " << len;
      }
    }
  }
}

TEST(JsonLine, EscapesRandomBytesLikeTheReference) {
  std::mt19937 rng(12345);
  const std::string alphabet =
      std::string("ab\"\\\n\x01\x7f\x80\xbf\xc2\xc3\xe0\xe2\xed\xf0\xf4\xff") +
      std::string(1, '\0');
  for (int round = 0; round < 20000; ++round) {
    std::string s(rng() % 40, ' ');
    for (auto& c : s) c = alphabet[rng() % alphabet.size()];
    ASSERT_EQ(escaped_by_json_line(s), reference_escape(s)) << testing::PrintToString(s);
  }
}

TEST(JsonLine, InvalidUtf8AtTheEndOfAString) {
  // Truncated sequences end the string: each byte of them becomes U+FFFD.
  EXPECT_EQ(escaped_by_json_line("abcdefgh\xe2\x82"), "abcdefgh\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(escaped_by_json_line("abcdefg\xf0"), "abcdefg\xef\xbf\xbd");
  EXPECT_EQ(escaped_by_json_line("abcd\xf0\x9f\x98"), "abcd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(escaped_by_json_line("\xc3"), "\xef\xbf\xbd");
  EXPECT_EQ(escaped_by_json_line("0123456789abcde\xc3"), "0123456789abcde\xef\xbf\xbd");
  // A complete sequence that ends the string is kept.
  EXPECT_EQ(escaped_by_json_line("0123456789abcd\xc3\xa9"), "0123456789abcd\xc3\xa9");
  EXPECT_EQ(escaped_by_json_line("abcde\xe2\x82\xac"), "abcde\xe2\x82\xac");
}

TEST(JsonLine, NumbersTimestampsAndAGrowingLine) {
  std::string big(5000, '"');  // 10000 bytes escaped: past the first buffer
  std::string line = JsonLine()
                         .integer("min", INT64_MIN)
                         .integer("max", INT64_MAX)
                         .integer("zero", 0)
                         .millis("neg", -1500)
                         .millis("big", 123456789012)
                         .boolean("t", true)
                         .boolean("f", false)
                         .utc_micros("ts", 1'780'000'000'123'456)
                         .str("big", big)
                         .str("empty", "")
                         .finish();
  const std::string prefix =
      "{\"min\":-9223372036854775808,\"max\":9223372036854775807,\"zero\":0,"
      "\"neg\":-1.500,\"big\":123456789.012,\"t\":true,\"f\":false,"
      "\"ts\":\"2026-05-28T20:26:40.123456Z\",\"big\":\"";
  EXPECT_EQ(line.substr(0, prefix.size()), prefix);
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["big"], big);
  EXPECT_EQ(j["empty"], "");
  EXPECT_TRUE(line.ends_with("\",\"empty\":\"\"}")) << line.substr(line.size() - 20);
  EXPECT_EQ(JsonLine().finish(), "{}");
}

JsonLine line_with(std::string_view key, std::string_view value) {
  JsonLine j;
  j.str(key, value);
  return j;
}

// close() hands out the line in place; the buffer then serves the next JsonLine on the thread,
// which must show nothing of the previous line, nor of one still open beside it.
TEST(JsonLine, CloseReusesTheBufferWithoutLeftovers) {
  std::string long_value(3000, 'v');
  {
    JsonLine first = line_with("long", long_value);
    std::string_view text = first.close();
    EXPECT_EQ(text, "{\"long\":\"" + long_value + "\"}");
  }
  {
    JsonLine second;
    std::string_view text = second.integer("n", 1).close();
    EXPECT_EQ(text, "{\"n\":1}");
    JsonLine beside;  // made while `second` holds the spare buffer
    EXPECT_EQ(beside.boolean("b", false).close(), "{\"b\":false}");
    EXPECT_EQ(text, "{\"n\":1}");
  }
  EXPECT_EQ(line_with("a", "x").finish(), "{\"a\":\"x\"}");
  EXPECT_EQ(JsonLine().close(), "{}");
  EXPECT_EQ(line_with("z", "\n").close(), "{\"z\":\"\\u000a\"}");
}

TEST(JsonLine, InvalidUtf8BecomesReplacementCharacters) {
  std::string line = JsonLine().str("p", "a\xff\xc3(\xed\xa0\x80z").finish();
  auto j = nlohmann::json::parse(line);  // would throw on invalid UTF-8
  EXPECT_EQ(j["p"], "a\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz");
}

}  // namespace
}  // namespace ferry::gateway
