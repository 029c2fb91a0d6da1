// common/json_text: the one JSON string escaper (both control-character forms), the UTF-8
// check and the scanner primitives.
#include "common/json_text.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

namespace ferry {
namespace {

// Random strings of pieces that each need different handling, at every alignment.
std::string random_text(std::mt19937_64& rng, bool valid_utf8) {
  static const std::vector<std::string> kValid = {"a",
                                                  "plain text",
                                                  "\"",
                                                  "\\",
                                                  "\n",
                                                  "\r",
                                                  "\t",
                                                  "\b",
                                                  "\f",
                                                  std::string(1, '\0'),
                                                  "\x01",
                                                  "\x1f",
                                                  "\x7f",
                                                  "/",
                                                  "\xc3\xa9",
                                                  "\xe2\x82\xac",
                                                  "\xf0\x9f\x98\x80",
                                                  "\xf4\x8f\xbf\xbf",
                                                  "\xed\x9f\xbf",
                                                  "0123456789abcdef"};
  static const std::vector<std::string> kInvalid = {
      "\xc3", "\x80",    "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
      "\xff", "\xe2\x82"};
  std::string s;
  int pieces = static_cast<int>(rng() % 12);
  for (int i = 0; i < pieces; ++i) {
    if (!valid_utf8 && rng() % 4 == 0) {
      s += kInvalid[rng() % kInvalid.size()];
    } else {
      s += kValid[rng() % kValid.size()];
    }
  }
  return s;
}

TEST(JsonText, ShortFormIsWhatNlohmannDumps) {
  std::mt19937_64 rng(14);
  for (int i = 0; i < 20000; ++i) {
    std::string s = random_text(rng, /*valid_utf8=*/true);
    ASSERT_TRUE(is_valid_utf8(s));
    ASSERT_EQ(json_string(s), nlohmann::json(s).dump()) << testing::PrintToString(s);
  }
  EXPECT_EQ(json_string("a\nb\t\x01\"\\"), "\"a\\nb\\t\\u0001\\\"\\\\\"");
}

TEST(JsonText, UnicodeFormWritesEveryControlAsAnEscape) {
  EXPECT_EQ(json_string("\n\t\b\f\r\x1f", JsonControls::kUnicode),
            "\"\\u000a\\u0009\\u0008\\u000c\\u000d\\u001f\"");
  EXPECT_EQ(json_string("q\"\\", JsonControls::kUnicode), "\"q\\\"\\\\\"");
}

TEST(JsonText, BadUtf8BecomesOneReplacementPerByte) {
  EXPECT_EQ(json_string("\xc3"), "\"\xef\xbf\xbd\"");
  EXPECT_EQ(json_string("abcdefgh\xe2\x82"), "\"abcdefgh\xef\xbf\xbd\xef\xbf\xbd\"");
  EXPECT_EQ(json_string("\xed\xa0\x80"), "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));
  std::mt19937_64 rng(1414);
  for (int i = 0; i < 20000; ++i) {
    std::string s = random_text(rng, /*valid_utf8=*/false);
    for (JsonControls c : {JsonControls::kShort, JsonControls::kUnicode}) {
      std::string out = json_string(s, c);
      // Always one valid JSON string, whatever the input bytes.
      ASSERT_TRUE(is_valid_utf8(out)) << testing::PrintToString(s);
      auto parsed = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(parsed.is_string()) << testing::PrintToString(s);
      if (is_valid_utf8(s)) {
        ASSERT_EQ(parsed.get<std::string>(), s);
      }
    }
  }
}

// Strings longer than a key or a stream delta are escaped through a buffer of the thread (and
// the longest in place again): the same text at every length, after what `out` holds.
TEST(JsonText, LongStringsAreEscapedTheSameAtEveryLength) {
  std::mt19937_64 rng(1616);
  for (bool valid : {true, false}) {
    std::string s;
    while (s.size() < 70000) {
      s += random_text(rng, valid);
      if (s.size() > 200 && s.size() < 60000 && rng() % 8 != 0) continue;
      for (JsonControls c : {JsonControls::kShort, JsonControls::kUnicode}) {
        std::string expected(s.size() * kJsonEscapedMaxPerByte + kJsonEscapeSlack, '\0');
        expected.resize(static_cast<size_t>(escape_json(expected.data(), s, c) - expected.data()));
        std::string out = "[1,";
        append_json_string(out, s, c);
        ASSERT_EQ(out, "[1,\"" + expected + "\"") << s.size();
        if (valid && c == JsonControls::kShort) {
          ASSERT_EQ(json_string(s), nlohmann::json(s).dump());
        }
      }
    }
  }
}

TEST(JsonText, AppendsAfterWhatIsThere) {
  std::string out = "[1,";
  append_json_string(out, std::string(3000, '"'));  // past any small buffer
  EXPECT_EQ(out.size(), 3u + 2 + 6000);
  EXPECT_EQ(out.substr(0, 5), "[1,\"\\");
  EXPECT_EQ(out.back(), '"');
}

TEST(JsonText, ScannerFindsEnds) {
  std::string_view s = R"({"a":"x\"}","b":[1,{"c":"]"}],"d":-1.5e3,"e":null} tail)";
  EXPECT_EQ(json_value_end(s, 0), s.find(" tail"));
  EXPECT_EQ(json_string_end(s, 5), s.find(",\"b\""));
  EXPECT_EQ(json_string_end(R"("a\\")", 0), 5u);  // an escaped backslash, then the quote
  EXPECT_EQ(json_string_end(R"("a\")", 0), std::string_view::npos);
  EXPECT_EQ(json_value_end(R"({"a":[1)", 0), std::string_view::npos);
  EXPECT_EQ(json_element_end(s, s.find("-1.5")), s.find(",\"e\""));
  EXPECT_EQ(json_element_end(s, s.size()), std::string_view::npos);
  EXPECT_EQ(skip_json_ws(" \t\r\n x", 0), 5u);

  std::vector<std::string> keys;
  size_t end = for_each_json_member(s, 0, [&](std::string_view key, size_t value) {
    keys.emplace_back(key);
    return json_element_end(s, value);
  });
  EXPECT_EQ(end, s.find(" tail"));
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "d", "e"}));
  // A key written with an escape stops the scan: the caller parses in full instead.
  EXPECT_EQ(for_each_json_member(R"({"mod\u0065l":1})", 0,
                                 [](std::string_view, size_t v) { return v + 1; }),
            std::string_view::npos);
  EXPECT_EQ(for_each_json_member(R"({"a":1)", 0, [](std::string_view, size_t v) { return v + 1; }),
            std::string_view::npos);
}

}  // namespace
}  // namespace ferry
