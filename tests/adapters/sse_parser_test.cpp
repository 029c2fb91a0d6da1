#include "adapters/sse_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace ferry::adapters {
namespace {

std::vector<std::string> parse_in_pieces(const std::string& text, const std::vector<size_t>& cuts) {
  SseParser parser;
  std::vector<std::string> events;
  size_t prev = 0;
  auto on_event = [&](std::string_view, std::string_view data) { events.emplace_back(data); };
  for (size_t cut : cuts) {
    EXPECT_TRUE(parser.feed(std::string_view(text).substr(prev, cut - prev), on_event));
    prev = cut;
  }
  EXPECT_TRUE(parser.feed(std::string_view(text).substr(prev), on_event));
  return events;
}

TEST(SseParser, ParsesEventsAndIgnoresComments) {
  auto events =
      parse_in_pieces(": keep-alive\n\ndata: {\"a\":1}\n\nevent: x\ndata: b\ndata: c\n\n", {});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], "{\"a\":1}");
  EXPECT_EQ(events[1], "b\nc");
}

TEST(SseParser, HandlesCrLfAndCr) {
  auto events = parse_in_pieces("data: one\r\n\r\ndata:two\r\rdata: three\n\n", {});
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0], "one");
  EXPECT_EQ(events[1], "two");
  EXPECT_EQ(events[2], "three");
}

TEST(SseParser, SameEventsForEverySplit) {
  std::string text =
      "data: {\"choices\":[{\"delta\":{\"content\":\"h\\u00e9\"}}]}\r\n\r\n"
      ": comment\n\ndata: [DONE]\n\n";
  auto whole = parse_in_pieces(text, {});
  ASSERT_EQ(whole.size(), 2u);
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); b += 7) {
      EXPECT_EQ(parse_in_pieces(text, {a, b}), whole) << "cuts at " << a << "," << b;
    }
  }
}

TEST(SseParser, ByteAtATime) {
  std::string text = "data: x\r\n\r\ndata: y\n\n";
  std::vector<size_t> cuts;
  for (size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
  auto events = parse_in_pieces(text, cuts);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1], "y");
}

TEST(SseParser, RefusesOversizedEvents) {
  SseParser parser(16);
  bool ok = parser.feed("data: 0123456789abcdefghij\n\n", [](auto, auto) {});
  EXPECT_FALSE(ok);
  EXPECT_FALSE(parser.error().empty());
}

TEST(SseParser, ReportsPartialEvent) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("data: partial", [](auto, auto) {}));
  EXPECT_TRUE(parser.has_partial_event());
}

TEST(UpstreamJson, EventsMustBeOneValidObject) {
  EXPECT_TRUE(is_json_object(R"({"choices":[{"delta":{"content":"hi"}}]})"));
  EXPECT_TRUE(is_json_object(" {} "));
  for (const char* bad : {"{this is not json}", "{\"id\": \"broken\", this is not json", "[]",
                          "\"text\"", "{} {}", "{\"a\":\"\xff\"}", ""}) {
    EXPECT_FALSE(is_json_object(bad)) << bad;
  }
}

TEST(UpstreamJson, AnAnswerHasAChoicesArray) {
  EXPECT_TRUE(is_openai_answer(R"({"id":"x","choices":[]})"));
  EXPECT_FALSE(is_openai_answer(R"({"id":"x"})"));
  EXPECT_FALSE(is_openai_answer(R"({"choices":{}})"));
  EXPECT_FALSE(is_openai_answer("this is not json {"));
}

}  // namespace
}  // namespace ferry::adapters
