#include "gateway/openai_request.h"

#include <gtest/gtest.h>

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
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions, R"({"model":3,"messages":[]})").param, "model");
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions, R"({"model":"m"})").param, "messages");
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions, R"({"model":"m","messages":[{"content":"x"}]})").param,
            "messages[0].role");
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions,
                         R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"})")
                .param,
            "temperature");
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions,
                         R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0})")
                .param,
            "max_tokens");
  EXPECT_EQ(expect_error(Endpoint::kChatCompletions,
                         R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"})")
                .param,
            "stream");
  EXPECT_EQ(expect_error(Endpoint::kCompletions, R"({"model":"m"})").param, "prompt");
  EXPECT_EQ(expect_error(Endpoint::kCompletions, R"({"model":"m","prompt":{"a":1}})").param, "prompt");
}

TEST(OpenAiRequest, MalformedJsonAndInvalidUtf8) {
  Error e = expect_error(Endpoint::kChatCompletions, "{\"model\": ");
  EXPECT_EQ(e.code, ErrorCode::kInvalidRequest);
  EXPECT_NE(e.message.find("not valid JSON"), std::string::npos);
  Error u = expect_error(Endpoint::kChatCompletions,
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
