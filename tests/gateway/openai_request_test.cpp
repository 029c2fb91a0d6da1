#include "gateway/openai_request.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <optional>

namespace ferry::gateway {
namespace {

using adapters::Endpoint;

Error expect_error(Endpoint ep, const std::string& body) {
  auto r = parse_request(ep, body);
  EXPECT_FALSE(r) << body;
  return r ? Error{} : r.error();
}

TEST(OpenAiRequest, ParsesAChatRequest) {
  auto r = parse_request(Endpoint::kChatCompletions,
                         R"({"model":"m","messages":[{"role":"user","content":"hi"}],
                             "stream":true,"stream_options":{"include_usage":true},
                             "max_tokens":7,"x_unknown":{"keep":[1,2]}})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->model, "m");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->max_tokens, 7);
}

TEST(OpenAiRequest, NamesTheBadField) {
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions, R"({"messages":[]})").param, "model");
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions, R"({"model":3,"messages":[]})").param,
            "model");
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions, R"({"model":"m"})").param, "messages");
  EXPECT_EQ(
      expect_error(Endpoint::kChatCompletions, R"({"model":"m","messages":[{"content":"x"}]})")
          .param,
      "messages[0].role");
  EXPECT_EQ(expect_error(
                Endpoint::kChatCompletions,
                R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"})")
                .param,
            "temperature");
  EXPECT_EQ(
      expect_error(Endpoint::kChatCompletions,
                   R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0})")
          .param,
      "max_tokens");
  EXPECT_EQ(
      expect_error(Endpoint::kChatCompletions,
                   R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"})")
          .param,
      "stream");
  EXPECT_EQ(expect_error(Endpoint::kCompletions, R"({"model":"m"})").param, "prompt");
  EXPECT_EQ(expect_error(Endpoint::kCompletions, R"({"model":"m","prompt":{"a":1}})").param,
            "prompt");
}

TEST(OpenAiRequest, MalformedJsonAndInvalidUtf8) {
  Error e = expect_error(Endpoint::kChatCompletions, "{\"model\": ");
  EXPECT_EQ(e.code, ErrorCode::kInvalidRequest);
  EXPECT_NE(e.message.find("not valid JSON"), std::string::npos);
  Error u =
      expect_error(Endpoint::kChatCompletions,
                   "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}");
  EXPECT_NE(u.message.find("UTF-8"), std::string::npos) << u.message;
  EXPECT_NE(expect_error(Endpoint::kChatCompletions, "[1,2]").message.find("JSON object"),
            std::string::npos);
}

TEST(OpenAiRequest, UpstreamBodyRewritesModelAndForcesUsage) {
  auto r = parse_request(Endpoint::kChatCompletions,
                         R"({"model":"public","messages":[{"role":"user","content":"hi"}],
                             "stream":true,"tools":[{"type":"function"}],"seed":5,"zzz":true})");
  ASSERT_TRUE(r);
  auto body = nlohmann::json::parse(upstream_body(*r, "org/upstream-7b"));
  EXPECT_EQ(body["model"], "org/upstream-7b");
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["tools"].size(), 1u);
  EXPECT_EQ(body["seed"], 5);
  EXPECT_EQ(body["zzz"], true);
  EXPECT_FALSE(r->include_usage);
}

TEST(OpenAiRequest, NonStreamBodyHasNoStreamOptions) {
  auto r = parse_request(Endpoint::kCompletions, R"({"model":"a","prompt":["x",[1,2]]})");
  ASSERT_TRUE(r) << r.error().message;
  auto body = nlohmann::json::parse(upstream_body(*r, "b"));
  EXPECT_FALSE(body.contains("stream_options"));
}

}  // namespace
}  // namespace ferry::gateway

namespace ferry::gateway {
namespace {

nlohmann::json rewritten(const std::string& body, const char* upstream = "up/m") {
  auto r = parse_request(adapters::Endpoint::kChatCompletions, body);
  EXPECT_TRUE(r) << body;
  std::string out = upstream_body(*r, upstream);
  auto j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j;
}

TEST(OpenAiRequest, SplicedRewriteKeepsTheClientsBytes) {
  std::string body =
      R"({ "messages" : [{"role":"user","content":"say \"model\": {}"}], "n":1, "temperature": 0.70,
           "model" : "pub", "extra": {"model":"inner"} })";
  auto r = parse_request(adapters::Endpoint::kChatCompletions, body);
  ASSERT_TRUE(r);
  std::string out = upstream_body(*r, "org/\"quoted\"");
  EXPECT_NE(out.find("\"temperature\": 0.70"), std::string::npos) << out;  // number text kept
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["model"], "org/\"quoted\"");
  EXPECT_EQ(j["extra"]["model"], "inner");
  EXPECT_EQ(j["messages"][0]["content"], "say \"model\": {}");
  EXPECT_FALSE(j.contains("stream_options"));
}

TEST(OpenAiRequest, StreamOptionsAddedOrMerged) {
  auto added =
      rewritten(R"({"model":"a","stream":true,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(added["stream_options"]["include_usage"], true);
  auto merged = rewritten(
      R"({"model":"a","stream":true,"stream_options":{"include_usage":false,"x":1},"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(merged["stream_options"]["include_usage"], true);
  EXPECT_EQ(merged["stream_options"]["x"], 1);
  EXPECT_EQ(merged["model"], "up/m");
  // Already asked for: the client's text kept byte for byte, whatever else it holds.
  const std::string asked =
      R"(,"messages":[{"role":"user","content":"x"}],"stream":true,)"
      R"("stream_options":{ "x":[1,{"include_usage":0}], "include_usage" : true }})";
  auto kept = parse_request(adapters::Endpoint::kChatCompletions, R"({"model":"pub")" + asked);
  ASSERT_TRUE(kept);
  EXPECT_EQ(upstream_body(*kept, "up/m"), R"({"model":"up/m")" + asked);
  // Asked twice, or under an escaped name: written once, true (as for any other value).
  for (const char* options :
       {R"({"include_usage":true,"include_usage":false})",
        R"({"include_usage":false,"include_usage":true})", R"({"include_\u0075sage":false})"}) {
    auto twice = rewritten(
        std::string(R"({"model":"a","stream":true,"messages":[{"role":"user","content":"x"}],)") +
        R"("stream_options":)" + options + "}");
    EXPECT_EQ(twice["stream_options"]["include_usage"], true) << options;
    EXPECT_EQ(twice["stream_options"].size(), 1u) << options;
  }
}

}  // namespace
}  // namespace ferry::gateway

namespace ferry::gateway {
namespace {

constexpr const char* kUserX = R"("messages":[{"role":"user","content":"x"}])";

ParsedRequest parsed_chat(const std::string& body) {
  auto r = parse_request(adapters::Endpoint::kChatCompletions, body);
  EXPECT_TRUE(r) << body << ": " << (r ? "" : r.error().message);
  return r ? *r : ParsedRequest{};
}

TEST(OpenAiRequest, AKeyFerryReadsMayNotAppearTwice) {
  // Parsers disagree on which occurrence wins; ferry must not validate or price one value
  // while the backend runs the other.
  Error e = expect_error(Endpoint::kChatCompletions, std::string(R"({"model":"m",)") + kUserX +
                                                         R"(,"max_tokens":5,"max_tokens":100000})");
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_NE(e.message.find("more than once"), std::string::npos) << e.message;
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions,
                         std::string(R"({"model":"m","model":"other",)") + kUserX + "}")
                .param,
            "model");
  // Spelled with an escape, it is still the same key.
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions,
                         std::string(R"({"model":"m",)") + kUserX + R"(,"n":1,"\u006e":100})")
                .param,
            "n");
  EXPECT_EQ(expect_error(Endpoint::kCompletions,
                         R"({"model":"m","prompt":"a","stream":false,"stream":true})")
                .param,
            "stream");
  // Keys ferry does not read pass through as sent, duplicates included.
  auto other =
      parsed_chat(std::string(R"({"model":"m",)") + kUserX + R"(,"x_vendor":1,"x_vendor":2})");
  EXPECT_EQ(upstream_body(other, "up/m"),
            std::string(R"({"model":"up/m",)") + kUserX + R"(,"x_vendor":1,"x_vendor":2})");
  // Inside a message, the first occurrence is the one validated (as before).
  auto role = parsed_chat(R"({"model":"m","messages":[{"role":"user","role":7,"content":"x"}]})");
  EXPECT_EQ(role.model, "m");
}

TEST(OpenAiRequest, EscapedKeysAreReadAsTheKeysTheySpell) {
  Error e = expect_error(
      Endpoint::kChatCompletions,
      R"({"mod\u0065l":"m","m\u0065ssages":[{"r\u006fle":"user","content":"x"}],"max_tok\u0065ns":0})");
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.message, "'max_tokens' must be an integer between 1 and 2147483647, got 0");
  // The splice compares keys as written, so an escaped `model` key is re-serialised instead.
  auto r = parsed_chat(std::string(R"({"mod\u0065l":"m",)") + kUserX + "}");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(upstream_body(r, "up/m"),
            R"({"messages":[{"content":"x","role":"user"}],"model":"up/m"})");
}

TEST(OpenAiRequest, MessageErrorsNameTheirIndex) {
  Error content = expect_error(
      Endpoint::kChatCompletions,
      R"({"model":"m","messages":[{"role":"user","content":"x"},{"role":"user","content":5}]})");
  EXPECT_EQ(content.param, "messages[1].content");
  EXPECT_EQ(content.message,
            "'messages[1].content' must be a string or an array of parts, got an integer");
  Error not_object = expect_error(
      Endpoint::kChatCompletions,
      R"({"model":"m","messages":[{"role":"user","content":"x"},{"role":"user"},"hi"]})");
  EXPECT_EQ(not_object.param, "messages[2]");
  EXPECT_EQ(not_object.message, "'messages[2]' must be an object, got a string");
  Error role = expect_error(Endpoint::kChatCompletions,
                            R"({"model":"m","messages":[{"role":"robot","content":"x"}]})");
  EXPECT_EQ(role.param, "messages[0].role");
  EXPECT_EQ(role.message,
            "'messages[0].role' must be one of system, developer, user, assistant, tool, "
            "function; got 'robot'");
}

TEST(OpenAiRequest, SplicedRewriteWithStreamAndOverridesIsExact) {
  auto r = parsed_chat(std::string(R"({"model":"pub",)") + kUserX +
                       R"(,"max_completion_tokens":9,"stream":true})");
  BodyOverrides o;
  o.max_tokens = 5;
  o.temperature = 0.5;
  // Replaced in place where present; added before the closing brace in a fixed order.
  EXPECT_EQ(
      upstream_body(r, "up/m", o),
      std::string(R"({"model":"up/m",)") + kUserX +
          R"(,"max_completion_tokens":5,"stream":true,"stream_options":{"include_usage":true},"temperature":0.5})");
  // Whitespace everywhere, a key spelled inside a string, an existing stream_options.
  std::string spaced =
      " \n{ \"messages\" :\t[ { \"role\" : \"user\" , \"content\" : \"a \\\"model\\\": 1\" } ] ,\n"
      " \"model\"\t:\n\"pub\" , \"stream\" : true , \"stream_options\" : { \"include_usage\" : "
      "false } }\n";
  auto s = parsed_chat(spaced);
  EXPECT_EQ(
      upstream_body(s, "up/m", o),
      " \n{ \"messages\" :\t[ { \"role\" : \"user\" , \"content\" : \"a \\\"model\\\": 1\" } ] ,\n"
      " \"model\"\t:\n\"up/m\" , \"stream\" : true , \"stream_options\" : "
      "{\"include_usage\":true} ,\"max_tokens\":5,\"temperature\":0.5}\n");
}

TEST(OpenAiRequest, UpstreamModelNamesAreEscapedAsJson) {
  auto r = parsed_chat(std::string(R"({"model":"pub",)") + kUserX + "}");
  for (std::string name :
       {"plain/model-7b", "caf\xc3\xa9", "tab\there", "back\\slash", "q\"uote", ""}) {
    auto j = nlohmann::json::parse(upstream_body(r, name));
    EXPECT_EQ(j["model"], name);
  }
}

// ---- integer fields over their extremes ------------------------------------------------------

// JSON texts at the edges of every integer type a client can send.
const char* const kIntegerExtremes[] = {"9223372036854775807",
                                        "-9223372036854775808",
                                        "9223372036854775808",
                                        "18446744073709551615",
                                        "4611686018427387904",
                                        "9007199254740993",
                                        "4294967301",
                                        "2147483648",
                                        "2147483647",
                                        "129",
                                        "128",
                                        "21",
                                        "20",
                                        "6",
                                        "5",
                                        "1",
                                        "0",
                                        "-1",
                                        "1e300",
                                        "1.0",
                                        "-0.5",
                                        "\"1\"",
                                        "true",
                                        "null",
                                        "[1]",
                                        "{}"};

// The integer the text spells when it is a plain JSON integer (no fraction, no exponent).
std::optional<__int128> integer_value(std::string_view text) {
  size_t i = text.starts_with('-') ? 1 : 0;
  if (i == text.size()) return std::nullopt;
  __int128 v = 0;
  for (size_t k = i; k < text.size(); ++k) {
    if (text[k] < '0' || text[k] > '9' || k - i > 30) return std::nullopt;
    v = v * 10 + (text[k] - '0');
  }
  return i == 1 ? -v : v;
}

struct IntegerField {
  Endpoint endpoint;
  const char* name;
  int64_t min;
  int64_t max;
};

std::string body_with(Endpoint ep, const std::string& member) {
  return ep == Endpoint::kChatCompletions
             ? R"({"model":"m","messages":[{"role":"user","content":"x"}],)" + member + "}"
             : R"({"model":"m","prompt":"x",)" + member + "}";
}

TEST(OpenAiRequest, IntegerFieldsAcceptExactlyTheirRangeAndNeverWrap) {
  const IntegerField fields[] = {
      {Endpoint::kChatCompletions, "max_tokens", 1, kMaxTokensLimit},
      {Endpoint::kChatCompletions, "max_completion_tokens", 1, kMaxTokensLimit},
      {Endpoint::kCompletions, "max_tokens", 1, kMaxTokensLimit},
      {Endpoint::kChatCompletions, "n", 1, kMaxChoices},
      {Endpoint::kCompletions, "n", 1, kMaxChoices},
      {Endpoint::kChatCompletions, "seed", INT64_MIN, INT64_MAX},
      {Endpoint::kChatCompletions, "top_logprobs", 0, 20},
      {Endpoint::kCompletions, "logprobs", 0, 5},
  };
  for (const IntegerField& f : fields) {
    for (const char* text : kIntegerExtremes) {
      SCOPED_TRACE(std::string(f.name) + "=" + text);
      auto r = parse_request(f.endpoint,
                             body_with(f.endpoint, "\"" + std::string(f.name) + "\":" + text));
      const auto v = integer_value(text);
      const bool absent = std::string_view(text) == "null";
      const bool in_range = v && *v >= f.min && *v <= f.max;
      if (absent || in_range) {
        ASSERT_TRUE(r) << r.error().message;
        if (in_range && (std::string_view(f.name).starts_with("max_"))) {
          EXPECT_EQ(r->max_tokens, static_cast<int64_t>(*v));
        }
        if (in_range && std::string_view(f.name) == "n") {
          EXPECT_EQ(r->n, static_cast<int64_t>(*v));
        }
        continue;
      }
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().code, ErrorCode::kInvalidRequest);
      // Integers beyond 64 bits fail JSON parsing itself; everything else names the field.
      if (!v || (*v >= INT64_MIN && *v <= static_cast<__int128>(UINT64_MAX))) {
        EXPECT_EQ(r.error().param, f.name) << r.error().message;
      }
    }
  }
}

TEST(OpenAiRequest, ChatLogprobsIsABoolean) {
  for (const char* text : kIntegerExtremes) {
    SCOPED_TRACE(text);
    auto r =
        parse_request(Endpoint::kChatCompletions,
                      body_with(Endpoint::kChatCompletions, std::string("\"logprobs\":") + text));
    if (std::string_view(text) == "true" || std::string_view(text) == "null") {
      EXPECT_TRUE(r) << r.error().message;
    } else {
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().param, "logprobs");
    }
  }
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions,
                         body_with(Endpoint::kChatCompletions, R"("logprobs":"yes")"))
                .param,
            "logprobs");
  EXPECT_TRUE(parse_request(Endpoint::kChatCompletions,
                            body_with(Endpoint::kChatCompletions, R"("logprobs":false)")));
}

TEST(OpenAiRequest, LogitBiasKeysAreTokenIdsAndValuesWithinAHundred) {
  for (const char* text : kIntegerExtremes) {
    const auto v = integer_value(text);
    // As a key (a JSON string holding the text).
    if (std::string_view(text).find('"') == std::string_view::npos) {
      SCOPED_TRACE(std::string("key ") + text);
      auto r = parse_request(Endpoint::kChatCompletions,
                             body_with(Endpoint::kChatCompletions,
                                       std::string(R"("logit_bias":{")") + text + R"(":1})"));
      const bool ok = v && *v >= 0 && *v <= kMaxTokenId && text[0] != '-';
      EXPECT_EQ(static_cast<bool>(r), ok);
      if (!r) {
        EXPECT_EQ(r.error().param, "logit_bias");
      }
    }
    // As a value.
    SCOPED_TRACE(std::string("value ") + text);
    auto r = parse_request(
        Endpoint::kChatCompletions,
        body_with(Endpoint::kChatCompletions, std::string(R"("logit_bias":{"5":)") + text + "}"));
    const double d = std::strtod(text, nullptr);
    const bool number = std::string_view(text).find_first_of("\"tn[{") == std::string_view::npos;
    const bool ok = number && d >= -100 && d <= 100;
    EXPECT_EQ(static_cast<bool>(r), ok) << (r ? "" : r.error().message);
    if (!r && number && v && *v <= static_cast<__int128>(UINT64_MAX)) {
      EXPECT_EQ(r.error().param, "logit_bias");
    }
  }
  // The issue's key: 99999999999 does not fit a token id (it wrapped to an int32 before).
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions,
                         body_with(Endpoint::kChatCompletions, R"("logit_bias":{"99999999999":1})"))
                .param,
            "logit_bias");
  for (const char* key : {"", "-1", "+5", " 5", "5 ", "0x10", "1.5"}) {
    SCOPED_TRACE(key);
    EXPECT_EQ(expect_error(Endpoint::kChatCompletions,
                           body_with(Endpoint::kChatCompletions,
                                     std::string(R"("logit_bias":{")") + key + R"(":1})"))
                  .param,
              "logit_bias");
  }
}

TEST(OpenAiRequest, CompletionPromptTokenIdsAreTokenIds) {
  for (const char* text : kIntegerExtremes) {
    const auto v = integer_value(text);
    const bool is_string = text[0] == '"';
    for (const std::string& prompt :
         {"[" + std::string(text) + "]", "[[7," + std::string(text) + "]]"}) {
      SCOPED_TRACE(prompt);
      auto r = parse_request(Endpoint::kCompletions, R"({"model":"m","prompt":)" + prompt + "}");
      // ["1"] is a prompt of one string and [[1]] one token array; inside a token array
      // neither is an id.
      const bool ok =
          (v && *v >= 0 && *v <= kMaxTokenId) ||
          ((is_string || std::string_view(text) == "[1]") && !prompt.starts_with("[[7,"));
      EXPECT_EQ(static_cast<bool>(r), ok) << (r ? "" : r.error().message);
      if (!r && !(v && (*v > static_cast<__int128>(UINT64_MAX) || *v < INT64_MIN))) {
        EXPECT_EQ(r.error().param, "prompt");
      }
    }
  }
  // 4294967301 = 2^32 + 5: refused, never read as token 5.
  Error e = expect_error(Endpoint::kCompletions, R"({"model":"m","prompt":[4294967301]})");
  EXPECT_NE(e.message.find("4294967301"), std::string::npos) << e.message;
}

}  // namespace
}  // namespace ferry::gateway
