#include "adapters/openai_wire.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>

namespace ferry::adapters {
namespace {

TEST(OpenAiWire, FindsUsageInBody) {
  auto u = find_usage(R"({"id":"x","choices":[{"message":{"content":"\"usage\": {}"}}],
    "usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,
    "prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}})");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->prompt_tokens, 12);
  EXPECT_EQ(u->completion_tokens, 5);
  EXPECT_EQ(u->cached_tokens, 4);
  EXPECT_EQ(u->reasoning_tokens, 2);
}

TEST(OpenAiWire, UsageShapesBackendsSend) {
  // Spaces, nulls, extra members, nested details with other keys, members in any order.
  auto u = find_usage(R"({"usage" : { "total_tokens" : 30 , "extra": {"a": [1, {"b": "}"}]},
    "completion_tokens_details": {"accepted_prediction_tokens": 0, "reasoning_tokens": 7},
    "prompt_tokens": 20, "completion_tokens": 10, "prompt_tokens_details": null }})");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->prompt_tokens, 20);
  EXPECT_EQ(u->completion_tokens, 10);
  EXPECT_EQ(u->total_tokens, 30);
  EXPECT_EQ(u->cached_tokens, 0);
  EXPECT_EQ(u->reasoning_tokens, 7);
  // A member that is not an integer is not taken as one.
  auto f = find_usage(R"({"usage":{"prompt_tokens":1.5,"completion_tokens":3}})");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->prompt_tokens, -1);
  EXPECT_EQ(f->completion_tokens, 3);
  EXPECT_TRUE(f->malformed);
  auto n = find_usage(R"({"usage":{"prompt_tokens":null,"completion_tokens":"4"}})");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->prompt_tokens, -1);
  EXPECT_EQ(n->completion_tokens, -1);
  EXPECT_TRUE(n->malformed);
  auto ok = find_usage(R"({"usage":{"prompt_tokens":null,"completion_tokens":4}})");
  ASSERT_TRUE(ok);
  EXPECT_FALSE(ok->malformed);  // null is "not given", not malformed
}

TEST(OpenAiWire, UsageIntegersOverTheirExtremes) {
  // Every member through both readers (the scanner gives up past 18 digits and on fractions).
  const char* const texts[] = {"0",
                               "1",
                               "-1",
                               "-11",
                               "999999999999999999",
                               "9007199254740993",
                               "9223372036854775807",
                               "-9223372036854775808",
                               "9223372036854775808",
                               "18446744073709551615",
                               "1e300",
                               "1.0",
                               "\"11\"",
                               "true",
                               "[]",
                               "{}"};
  for (const char* text : texts) {
    for (const char* member :
         {"prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens"}) {
      const bool details = member[0] == 'c' ? std::string_view(member) == "cached_tokens"
                                            : std::string_view(member) == "reasoning_tokens";
      const std::string inner = std::string("\"") + member + "\":" + text;
      const std::string usage =
          !details ? "{" + inner + "}"
          : std::string_view(member) == "cached_tokens"
              ? R"({"prompt_tokens":1,"completion_tokens":1,"prompt_tokens_details":{)" + inner +
                    "}}"
              : R"({"prompt_tokens":1,"completion_tokens":1,"completion_tokens_details":{)" +
                    inner + "}}";
      SCOPED_TRACE(usage);
      auto u = find_usage("{\"usage\":" + usage + "}");
      ASSERT_TRUE(u);
      // The text as an int64, when it is one.
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(text, &end, 10);
      const bool is_int64 = *end == '\0' && errno == 0;
      EXPECT_EQ(u->malformed, !is_int64);
      const int64_t got = std::string_view(member) == "prompt_tokens"       ? u->prompt_tokens
                          : std::string_view(member) == "completion_tokens" ? u->completion_tokens
                          : std::string_view(member) == "cached_tokens"     ? u->cached_tokens
                                                                            : u->reasoning_tokens;
      if (is_int64) {
        EXPECT_EQ(got, v);  // kept as sent (negatives too) for the router to judge
      }
    }
  }
}

TEST(OpenAiWire, NullOrMissingUsage) {
  EXPECT_FALSE(find_usage(R"({"usage":null})"));
  EXPECT_FALSE(find_usage(R"({"choices":[]})"));
  EXPECT_FALSE(find_usage(R"({"usage":{"prompt_tokens":1)"));  // truncated
}

TEST(OpenAiWire, FinishReason) {
  EXPECT_EQ(find_finish_reason(R"({"choices":[{"finish_reason":"stop"}]})"), "stop");
  EXPECT_EQ(find_finish_reason(R"({"choices":[{"finish_reason":null}]})"), "");
  EXPECT_EQ(
      find_finish_reason(R"({"choices":[{"finish_reason": null},{"finish_reason" : "length"}]})"),
      "length");
}

TEST(OpenAiWire, JsonValueEndHonoursStrings) {
  std::string s = R"({"a":"}{\"","b":[1,{"c":2}]} tail)";
  EXPECT_EQ(json_value_end(s, 0), s.find(" tail"));
  EXPECT_EQ(json_value_end("{\"a\":1", 0), std::string_view::npos);
}

TEST(OpenAiWire, UsageOnlyChunkDroppedWhenNotAsked) {
  std::string chunk =
      R"({"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}})";
  auto hidden = inspect_stream_chunk(chunk, /*client_wants_usage=*/false);
  EXPECT_FALSE(hidden.forward);
  ASSERT_TRUE(hidden.usage);
  EXPECT_EQ(hidden.usage->completion_tokens, 4);
  auto shown = inspect_stream_chunk(chunk, /*client_wants_usage=*/true);
  EXPECT_TRUE(shown.forward);
  EXPECT_FALSE(shown.rewritten);
}

TEST(OpenAiWire, UsageOnlyChunkWithSpacesDroppedAndQuotedKeysInTextIgnored) {
  // Pretty-printed empty choices; and a content text that spells a choices key (escaped).
  auto spaced = inspect_stream_chunk(
      R"({"choices" : [ ] , "usage": {"prompt_tokens": 3, "completion_tokens": 4}})", false);
  EXPECT_FALSE(spaced.forward);
  std::string tricky =
      R"({"x":"\"choices\": []","choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}})";
  auto kept = inspect_stream_chunk(tricky, false);
  EXPECT_TRUE(kept.forward);
  ASSERT_TRUE(kept.rewritten);
  EXPECT_EQ(kept.rewritten->find("\"usage\""), std::string::npos);
}

TEST(OpenAiWire, UsageStrippedFromContentChunkWhenNotAsked) {
  std::string chunk =
      R"({"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}})";
  auto a = inspect_stream_chunk(chunk, false);
  EXPECT_TRUE(a.forward);
  ASSERT_TRUE(a.rewritten);
  EXPECT_EQ(a.rewritten->find("usage"), std::string::npos);
  EXPECT_NE(a.rewritten->find("\"hi\""), std::string::npos);
}

TEST(OpenAiWire, OrdinaryChunkUntouched) {
  auto a = inspect_stream_chunk(R"({"choices":[{"delta":{"content":"x"}}],"usage":null})", false);
  EXPECT_TRUE(a.forward);
  EXPECT_FALSE(a.rewritten);
  EXPECT_FALSE(a.usage);
}

TEST(OpenAiWire, WithModelRenamesOnlyTheReplysModel) {
  const std::string body =
      R"({"id":"x","model":"big-model","choices":[{"message":{"content":"say \"model\": 1"}}]})";
  auto renamed = with_model(body, "auto");
  ASSERT_TRUE(renamed);
  EXPECT_EQ(*renamed,
            R"({"id":"x","model":"auto","choices":[{"message":{"content":"say \"model\": 1"}}]})");
  EXPECT_FALSE(with_model(*renamed, "auto")) << "already says so";
  EXPECT_FALSE(with_model(R"({"id":"x","choices":[]})", "auto")) << "no model to rename";
  auto quoted = with_model(R"({"model" : "m"})", "we\"ird");
  ASSERT_TRUE(quoted);
  EXPECT_EQ(*quoted, R"({"model" : "we\"ird"})");
}

// The key search jumps between occurrences of the key's first letter: keys and strings full of
// that letter, near misses ("models", an escaped quote), the key first and last in the text.
TEST(OpenAiWire, KeysAreFoundAmongDecoysAtEveryOffset) {
  for (size_t n = 0; n < 48; ++n) {
    const std::string pad(n, 'm');
    const std::string text = R"({")" + pad + R"(":"m\"model\" mm","models":1,"model":"old"})";
    auto renamed = with_model(text, "new");
    ASSERT_TRUE(renamed) << text;
    EXPECT_EQ(*renamed, R"({")" + pad + R"(":"m\"model\" mm","models":1,"model":"new"})");
    EXPECT_FALSE(with_model(R"({")" + pad + R"(":"model","models":"x"})", "new")) << n;
    // finish_reason as the text's last key, and past a null one.
    const std::string chunk = R"({"f":")" + std::string(n, 'f') +
                              R"(","choices":[{"finish_reason":null},{"finish_reason":"stop"}]})";
    EXPECT_EQ(find_finish_reason(chunk), "stop") << chunk;
    EXPECT_EQ(find_finish_reason(R"({"finish_reason":"x)" + pad + "\"}"), "x" + pad);
  }
}

}  // namespace
}  // namespace ferry::adapters

namespace ferry::adapters {
namespace {

TEST(OpenAiWire, JsonStringEndFindsTheUnescapedQuote) {
  auto end_of = [](std::string_view s) { return json_string_end(s, s.find('"')); };
  EXPECT_EQ(end_of(R"("abc" tail)"), 5u);
  EXPECT_EQ(end_of(R"("" tail)"), 2u);
  EXPECT_EQ(end_of(R"("a\"b" tail)"), 6u);    // escaped quote
  EXPECT_EQ(end_of(R"("a\\" tail)"), 5u);     // escaped backslash, then the closing quote
  EXPECT_EQ(end_of(R"("a\\\"b" tail)"), 8u);  // backslash, escaped quote
  std::string long_text = "\"" + std::string(300, 'x') + "\\\"" + std::string(40, 'y') + "\" tail";
  EXPECT_EQ(end_of(long_text), long_text.find(" tail"));
  EXPECT_EQ(end_of(R"("never closed)"), std::string_view::npos);
  EXPECT_EQ(end_of(R"("ends in an escape\")"), std::string_view::npos);
}

TEST(OpenAiWire, LastUsageKeyWinsAndStringsSpellingItAreSkipped) {
  // A later string value "usage" is no key; the usage object before it is found.
  auto u = find_usage(
      R"({"usage":{"prompt_tokens":2,"completion_tokens":1},"note":"usage","x":["usage"]})");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->prompt_tokens, 2);
  // The last usage key decides, even when it is null.
  EXPECT_FALSE(find_usage(R"({"usage":{"prompt_tokens":2},"choices":[],"usage":null})"));
  auto last = find_usage(R"({"usage":{"prompt_tokens":2},"usage" :{"prompt_tokens":3}})");
  ASSERT_TRUE(last);
  EXPECT_EQ(last->prompt_tokens, 3);
  // Members after the counts, with braces and quotes inside strings.
  auto tail = find_usage(
      R"({"usage":{"prompt_tokens":5,"note":"}\"{","completion_tokens":6,"x":[{"y":"]"}]},"z":1})");
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->prompt_tokens, 5);
  EXPECT_EQ(tail->completion_tokens, 6);
  // An escaped key is left to the full parser, which reads it.
  auto escaped = find_usage(R"({"usage":{"prompt_\u0074okens":7,"completion_tokens":8}})");
  ASSERT_TRUE(escaped);
  EXPECT_EQ(escaped->prompt_tokens, 7);
  EXPECT_EQ(escaped->completion_tokens, 8);
}

TEST(OpenAiWire, UsageChunkInspectedOnceFindsTheCounts) {
  auto a = inspect_stream_chunk(
      R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,)"
      R"("prompt_tokens_details":{"cached_tokens":4}}})",
      true);
  ASSERT_TRUE(a.usage);
  EXPECT_EQ(a.usage->total_tokens, 11);
  EXPECT_EQ(a.usage->cached_tokens, 4);
}

}  // namespace
}  // namespace ferry::adapters
