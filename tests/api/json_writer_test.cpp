#include "api/json_writer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <vector>

#include "api/json_read.h"

namespace ferry::api {
namespace {

std::string json_quoted(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

TEST(JsonWriter, EscapesQuotesBackslashesAndControls) {
  EXPECT_EQ(json_quoted("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(json_quoted("\n\r\t"), R"("\n\r\t")");
  // The short forms nlohmann::json::dump() writes (common/json_text's escaper).
  EXPECT_EQ(json_quoted("\b\f"), R"("\b\f")");
  EXPECT_EQ(json_quoted(std::string("\x01\x1f\0", 3)), R"("\u0001\u001f\u0000")");
  EXPECT_EQ(json_quoted("</script>"), "\"</script>\"");
}

TEST(JsonWriter, KeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(json_quoted("é€𝄞"), "\"é€𝄞\"");
  // A lone continuation byte, a truncated sequence, an overlong '/', a surrogate, > U+10FFFF.
  for (std::string bad : {"\x80", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    std::string out = json_quoted("a" + bad + "b");
    EXPECT_TRUE(is_json_object("{\"k\":" + out + "}")) << out;
    EXPECT_NE(out.find("\xef\xbf\xbd"), std::string::npos) << out;
    EXPECT_EQ(out.front(), '"');
    EXPECT_EQ(out[1], 'a');
  }
}

TEST(JsonWriter, RoundTripsEveryByteThroughAJsonParser) {
  std::string all;
  for (int c = 0; c < 128; ++c) all.push_back(static_cast<char>(c));
  auto parsed = nlohmann::json::parse("[" + json_quoted(all) + "]");
  EXPECT_EQ(parsed[0].get<std::string>(), all);
}

TEST(JsonWriter, FindsEverySpecialByteAtEveryPositionOfALongString) {
  for (const std::string& special :
       std::vector<std::string>{"\"", "\\", "\n", std::string(1, '\0'), "\x1f", "é", "\xff"}) {
    for (size_t at = 0; at < 24; ++at) {
      std::string s(24, 'a');
      s.insert(at, special);
      std::string out = json_quoted(s);
      auto parsed = nlohmann::json::parse("[" + out + "]");
      std::string want = special == "\xff" ? std::string(s).replace(at, 1, "\xef\xbf\xbd") : s;
      EXPECT_EQ(parsed[0].get<std::string>(), want) << "at " << at;
    }
  }
}

TEST(JsonWriter, WritesIntegersExactly) {
  std::string out;
  append_json_int(out, INT64_MAX);
  out.push_back(' ');
  append_json_int(out, INT64_MIN);
  out.push_back(' ');
  append_json_int(out, 0);
  EXPECT_EQ(out, "9223372036854775807 -9223372036854775808 0");
}

// ---- probe_members: the members a text scan for `"key":` could find, from a parse ------------

struct Probed {
  bool usage = false;
  bool finish = false;
};

Probed probe(const std::string& json) {
  JsonReader reader;
  simdjson::dom::element doc;
  EXPECT_EQ(reader.parse(json).get(doc), simdjson::SUCCESS) << json;
  MemberProbe probes[] = {{"usage", simdjson::dom::element_type::OBJECT},
                          {"finish_reason", simdjson::dom::element_type::STRING}};
  probe_members(doc, probes, 2);
  return {probes[0].found, probes[1].found};
}

TEST(ProbeMembers, FindsMembersAtAnyDepthOfTheirType) {
  EXPECT_FALSE(probe(R"({"choices":[{"delta":{"content":"usage"},"finish_reason":null}]})").usage);
  EXPECT_FALSE(probe(R"({"choices":[{"finish_reason":null}]})").finish);
  EXPECT_TRUE(probe(R"({"choices":[{"finish_reason":"stop"}]})").finish);
  EXPECT_TRUE(probe(R"({"choices":[],"usage":{"prompt_tokens":1}})").usage);
  EXPECT_TRUE(probe(R"({"a":[[{"b":{"usage":{}}}]]})").usage);
  EXPECT_TRUE(probe(R"([1,{"finish_reason":"x"}])").finish);
  // Another type is not the member looked for: a null usage, a numeric finish_reason.
  Probed p = probe(R"({"usage":null,"finish_reason":5,"x":{"usage":[1],"finish_reason":{}}})");
  EXPECT_FALSE(p.usage);
  EXPECT_FALSE(p.finish);
  // Names are compared decoded; one that ends in a quote and the name is what `"usage":` also
  // matches in the text (after an escaped quote).
  EXPECT_TRUE(probe(R"({"us\u0061ge":{}})").usage);
  EXPECT_TRUE(probe(R"({"x\"usage":{}})").usage);
  EXPECT_TRUE(probe(R"({"a\"finish_reason":"stop"})").finish);
  EXPECT_FALSE(probe(R"({"xusage":{},"usages":{},"usag":{},"finish_reason_":"x"})").usage);
  EXPECT_FALSE(probe(R"({"xfinish_reason":"stop","finish_reason_":"x"})").finish);
  // Strings, numbers and empty containers at the root.
  EXPECT_FALSE(probe(R"("usage")").usage);
  EXPECT_FALSE(probe("[]").usage);
  EXPECT_FALSE(probe("{}").finish);
}

TEST(ProbeMembers, DeepNestingIsWalkedToTheParsersDepth) {
  std::string deep;
  for (int i = 0; i < 500; ++i) deep += R"({"a":[)";  // 1,000 levels (simdjson's limit: 1,024)
  deep += R"({"usage":{}})";
  for (int i = 0; i < 500; ++i) deep += "]}";
  EXPECT_TRUE(probe(deep).usage);
  EXPECT_FALSE(probe(deep).finish);
}

}  // namespace
}  // namespace ferry::api
