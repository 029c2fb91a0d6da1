#include "adapters/sse_parser.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "adapters/backend.h"
#include "adapters/openai_wire.h"

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

bool is_answer(std::string_view text) {
  Usage usage;
  std::string finish;
  return read_openai_answer(text, usage, finish);
}

TEST(UpstreamJson, AnAnswerHasAChoicesArray) {
  EXPECT_TRUE(is_answer(R"({"id":"x","choices":[]})"));
  EXPECT_FALSE(is_answer(R"({"id":"x"})"));
  EXPECT_FALSE(is_answer(R"({"choices":{}})"));
  EXPECT_FALSE(is_answer("this is not json {"));
  EXPECT_FALSE(is_answer(R"({"choices":[]} {})"));
  EXPECT_FALSE(is_answer("{\"choices\":[\"\xff\"]}"));
}

// The answer's facts from its one parse, against the text scanners the relay uses on stream
// chunks (find_usage, find_finish_reason), on the usage shapes their own tests hold.
TEST(UpstreamJson, AnAnswerReadsItsUsageAndFinishReasonAsTheScannersDo) {
  std::vector<std::string> usages = {
      R"({"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,)"
      R"("prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}})",
      R"({ "total_tokens" : 30 , "extra": {"a": [1, {"b": "}"}]},)"
      R"("completion_tokens_details": {"accepted_prediction_tokens": 0, "reasoning_tokens": 7},)"
      R"("prompt_tokens": 20, "completion_tokens": 10, "prompt_tokens_details": null })",
      R"({"prompt_tokens":null,"completion_tokens":4})",
      R"({"prompt_\u0074okens":7,"completion_tokens":8})",
      R"({"prompt_tokens":5,"note":"}\"{","completion_tokens":6,"x":[{"y":"]"}]})",
      "{}",
      "null",
  };
  for (const char* n : {"0", "-1", "999999999999999999", "9223372036854775807",
                        "-9223372036854775808", "9223372036854775808", "18446744073709551615",
                        "1e300", "1.0", "1.5", "\"11\"", "true", "[]", "{}", "null"}) {
    usages.push_back(std::string(R"({"prompt_tokens":)") + n + R"(,"completion_tokens":)" + n +
                     R"(,"total_tokens":)" + n + R"(,"prompt_tokens_details":{"cached_tokens":)" +
                     n + R"(},"completion_tokens_details":{"reasoning_tokens":)" + n + "}}");
  }
  const std::vector<std::string> choices = {
      "[]",
      R"([{"index":0,"message":{"content":"\"usage\": {}"},"finish_reason":"stop"}])",
      R"([{"finish_reason":null},{"finish_reason":"length"}])",
      R"([{"finish_reason":null}])",
      R"([{"message":{"role":"assistant"}},{"finish_reason":"tool_calls"}])",
  };
  const Usage untouched{-7, -7, -7, -7, -7, true};
  for (const std::string& usage : usages) {
    for (const std::string& choice : choices) {
      // The usage before the choices, after them, and a stale one overridden by a later key.
      for (const std::string& body :
           {R"({"id":"x","usage":)" + usage + R"(,"choices":)" + choice + "}",
            R"({"id":"x","choices":)" + choice + R"(,"usage":)" + usage + "}",
            R"({"usage":{"prompt_tokens":99},"choices":)" + choice + R"(,"usage":)" + usage +
                "}"}) {
        SCOPED_TRACE(body);
        Usage got = untouched;
        std::string finish = "stale";
        ASSERT_TRUE(read_openai_answer(body, got, finish));
        EXPECT_EQ(finish, find_finish_reason(body));
        const std::optional<Usage> want = find_usage(body);
        const Usage& expect = want ? *want : untouched;
        EXPECT_EQ(got.prompt_tokens, expect.prompt_tokens);
        EXPECT_EQ(got.completion_tokens, expect.completion_tokens);
        EXPECT_EQ(got.total_tokens, expect.total_tokens);
        EXPECT_EQ(got.cached_tokens, expect.cached_tokens);
        EXPECT_EQ(got.reasoning_tokens, expect.reasoning_tokens);
        EXPECT_EQ(got.malformed, expect.malformed);
      }
    }
  }
  // An escaped finish reason is read decoded (the scanner gives the text as written).
  Usage u;
  std::string finish;
  ASSERT_TRUE(read_openai_answer(R"({"choices":[{"finish_reason":"st\u006fp"}]})", u, finish));
  EXPECT_EQ(finish, "stop");
}

}  // namespace
}  // namespace ferry::adapters
