#include "gateway/openai_request.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
  auto added = rewritten(R"({"model":"a","stream":true,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(added["stream_options"]["include_usage"], true);
  auto merged = rewritten(
      R"({"model":"a","stream":true,"stream_options":{"include_usage":false,"x":1},"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(merged["stream_options"]["include_usage"], true);
  EXPECT_EQ(merged["stream_options"]["x"], 1);
  EXPECT_EQ(merged["model"], "up/m");
}

TEST(OpenAiRequest, DuplicateModelKeyUsesTheLastLikeTheParser) {
  auto j = rewritten(R"({"model":"first","messages":[{"role":"user","content":"x"}],"model":"second"})");
  EXPECT_EQ(j["model"], "up/m");
}

}  // namespace
}  // namespace ferry::gateway
