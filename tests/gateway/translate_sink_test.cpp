// gateway/translate_sink: an OpenAI chunk stream translated for a Messages or Responses client,
// and the end of a stream that was rendered whole and then failed (the ledger could not record
// it): the end is replaced by that API's failure event, never sent as a success.
#include "gateway/translate_sink.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tests/api/sse_events.h"

namespace ferry::gateway {
namespace {

using nlohmann::json;

class NullSink final : public adapters::StreamSink {
 public:
  boost::asio::awaitable<bool> write(std::string_view) override { co_return true; }
};

std::string frame(const std::string& data) {
  return "data: " + data + "\n\n";
}
std::string chunk(const std::string& delta, const std::string& finish = "null") {
  return frame(R"({"id":"c1","object":"chat.completion.chunk","created":1,"model":"up",)"
               R"("choices":[{"index":0,"delta":)" +
               delta + R"(,"finish_reason":)" + finish + "}]}");
}

// The upstream's whole stream through the sink (the backend consumes [DONE]): what the client
// got while it streamed.
std::string translate_all(TranslatingSink& sink) {
  std::string sent;
  for (
      const std::string& c :
      {chunk(R"({"role":"assistant","content":""})"), chunk(R"({"content":"Hello"})"),
       chunk("{}", "\"stop\""),
       frame(
           R"({"id":"c1","object":"chat.completion.chunk","created":1,"model":"up",)"
           R"("choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}})")}) {
    sent += std::string(sink.translate(c));
  }
  sink.end_upstream();
  EXPECT_FALSE(sink.error());
  return sent;
}

TEST(TranslatingSink, ResponsesLedgerFailureAfterTheWholeAnswerIsResponseFailed) {
  NullSink client;
  std::string final_response;
  RenderContext context{"req-1", "coder", 5};
  context.final_response = &final_response;
  TranslatingSink sink(client, frontend(api::Endpoint::kResponses), context);
  std::string sent = translate_all(sink);
  Error e = Error::make(ErrorCode::kUnavailable, "the answer could not be recorded");
  std::string end = sink.finish(e);
  EXPECT_EQ(end.find("response.completed"), std::string::npos) << end;
  auto before = api::parse_named_sse(sent);
  auto ev = api::parse_named_sse(end);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().name, "response.failed");
  const json& response = ev.back().data["response"];
  EXPECT_EQ(response["status"], "failed");
  EXPECT_EQ(response["error"]["message"], "the answer could not be recorded");
  EXPECT_EQ(response["id"], before.front().data["response"]["id"]);
  // Sequence numbers run on without a gap from what was sent.
  int64_t next = static_cast<int64_t>(before.size());
  for (const auto& event : ev) EXPECT_EQ(event.data["sequence_number"], next++);
  EXPECT_TRUE(final_response.empty()) << "a failed response is not stored";
}

TEST(TranslatingSink, MessagesLedgerFailureAfterTheWholeAnswerIsAnErrorEvent) {
  NullSink client;
  RenderContext context{"req-2", "coder", 5};
  TranslatingSink sink(client, frontend(api::Endpoint::kMessages), context);
  std::string sent = translate_all(sink);
  EXPECT_NE(sent.find("event: message_start"), std::string::npos) << sent;
  Error e = Error::make(ErrorCode::kUnavailable, "the answer could not be recorded");
  std::string end = sink.finish(e);
  EXPECT_EQ(end.find("message_stop"), std::string::npos) << end;
  auto ev = api::parse_named_sse(end);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().name, "error");
  EXPECT_EQ(ev.back().data["type"], "error");
  EXPECT_EQ(ev.back().data["error"]["message"], "the answer could not be recorded");
}

TEST(TranslatingSink, WithoutAFailureTheEndIsTheSuccess) {
  NullSink client;
  RenderContext context{"req-3", "coder", 5};
  TranslatingSink responses(client, frontend(api::Endpoint::kResponses), context);
  translate_all(responses);
  auto ev = api::parse_named_sse(responses.finish(std::nullopt));
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().name, "response.completed");
  TranslatingSink messages(client, frontend(api::Endpoint::kMessages), context);
  translate_all(messages);
  ev = api::parse_named_sse(messages.finish(std::nullopt));
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().name, "message_stop");
}

}  // namespace
}  // namespace ferry::gateway
