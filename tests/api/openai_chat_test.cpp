// OpenAI chat completions: the parser per field, the renderer per field, and the round trip
// chat -> events -> chat on representative bodies and chunk streams.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/openai_chat_parse.h"
#include "api/openai_chat_render.h"
#include "tests/api/event_log.h"

namespace ferry::api {
namespace {

using nlohmann::json;

// The data of each `data: ...` event of an SSE text (the renderers write one line each).
std::vector<std::string> sse_data(const std::string& sse) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    size_t end = sse.find("\n\n", pos);
    out.push_back(sse.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

json without_ids(json j) {
  j.erase("id");
  j.erase("created");
  return j;
}

// ---------------------------------------------------------------------------------------------
// Bodies

const char* kToolBody = R"({"id":"chatcmpl-abc","object":"chat.completion","created":1700000001,
  "model":"qwen","choices":[{"index":0,"message":{"role":"assistant","content":"Let me look.",
  "reasoning_content":"The user wants weather.","tool_calls":[
   {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
   {"id":"call_2","type":"function","function":{"name":"get_time","arguments":"{}"}}]},
  "logprobs":null,"finish_reason":"tool_calls"}],
  "usage":{"prompt_tokens":30,"completion_tokens":12,"total_tokens":42,
   "prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":5}}})";

TEST(ChatParse, BodyFieldByField) {
  auto a = parse_chat_completion(kToolBody);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->id, "chatcmpl-abc");
  EXPECT_EQ(a->model, "qwen");
  EXPECT_EQ(a->created, 1700000001);
  ASSERT_EQ(a->blocks.size(), 4u);
  EXPECT_EQ(a->blocks[0].kind, BlockKind::kThinking);
  EXPECT_EQ(a->blocks[0].text, "The user wants weather.");
  EXPECT_EQ(a->blocks[1].kind, BlockKind::kText);
  EXPECT_EQ(a->blocks[1].text, "Let me look.");
  EXPECT_EQ(a->blocks[2].kind, BlockKind::kToolCall);
  EXPECT_EQ(a->blocks[2].call_id, "call_1");
  EXPECT_EQ(a->blocks[2].name, "get_weather");
  EXPECT_EQ(a->blocks[2].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(a->blocks[3].name, "get_time");
  EXPECT_EQ(a->finish, FinishReason::kToolCalls);
  EXPECT_EQ(a->usage, (Usage{30, 12, 8, 5, true}));
}

TEST(ChatParse, FinishReasonsAndStopSequences) {
  auto body = [](const std::string& choice_tail) {
    return R"({"id":"x","model":"m","choices":[{"index":0,"message":{"content":"hi"},)" +
           choice_tail + "}]}";
  };
  struct Case {
    std::string tail;
    FinishReason want;
    std::string seq;
  };
  for (const Case& c : std::vector<Case>{
           {R"("finish_reason":"stop")", FinishReason::kStop, ""},
           {R"("finish_reason":"length")", FinishReason::kLength, ""},
           {R"("finish_reason":"content_filter")", FinishReason::kContentFilter, ""},
           {R"("finish_reason":"stop","stop_reason":"###")", FinishReason::kStopSequence, "###"},
           {R"("finish_reason":"stop","stop_reason":128001)", FinishReason::kStop, ""},
       }) {
    auto a = parse_chat_completion(body(c.tail));
    ASSERT_TRUE(a) << c.tail << ": " << a.error().message;
    EXPECT_EQ(a->finish, c.want) << c.tail;
    EXPECT_EQ(a->stop_sequence, c.seq) << c.tail;
    EXPECT_FALSE(a->usage.reported);
  }
  auto unknown = parse_chat_completion(body(R"("finish_reason":"eos")"));
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kBackendError);
  EXPECT_NE(unknown.error().message.find("eos"), std::string::npos);
  EXPECT_FALSE(parse_chat_completion(body(R"("finish_reason":null)")));
}

TEST(ChatParse, ReasoningUnderEitherNameAndRefusalAsText) {
  auto a = parse_chat_completion(
      R"({"choices":[{"message":{"reasoning":"hmm","content":null,"refusal":"I can't."},
      "finish_reason":"stop"}]})");
  ASSERT_TRUE(a) << a.error().message;
  ASSERT_EQ(a->blocks.size(), 2u);
  EXPECT_EQ(a->blocks[0].kind, BlockKind::kThinking);
  EXPECT_EQ(a->blocks[0].text, "hmm");
  EXPECT_EQ(a->blocks[1].kind, BlockKind::kText);
  EXPECT_EQ(a->blocks[1].text, "I can't.");
}

TEST(ChatParse, RefusesWhatItCannotRenderFaithfully) {
  const char* bad[] = {
      "not json",
      "[1,2]",
      R"({"choices":[]})",
      R"({"choices":[{"message":{"content":"a"},"finish_reason":"stop"},
                     {"message":{"content":"b"},"finish_reason":"stop"}]})",
      R"({"choices":[{"index":1,"message":{"content":"a"},"finish_reason":"stop"}]})",
      R"({"choices":[{"message":{"content":5},"finish_reason":"stop"}]})",
      R"({"choices":[{"message":{"tool_calls":[{"id":"c","type":"function","function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]})",
      R"({"choices":[{"message":{"tool_calls":[{"id":"c","type":"custom","function":{"name":"f"}}]},"finish_reason":"tool_calls"}]})",
      R"({"choices":[{"finish_reason":"stop"}]})",
  };
  for (const char* body : bad) {
    auto a = parse_chat_completion(body);
    ASSERT_FALSE(a) << body;
    EXPECT_EQ(a.error().code, ErrorCode::kBackendError) << body;
  }
}

TEST(ChatParse, UpstreamErrorBodyKeepsItsMessage) {
  auto a =
      parse_chat_completion(R"({"error":{"message":"model overloaded","type":"server_error"}})");
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, ErrorCode::kBackendError);
  EXPECT_EQ(a.error().message, "model overloaded");
}

TEST(ChatParse, MalformedUsageIsNotReported) {
  for (const char* usage : {R"({"prompt_tokens":1.5,"completion_tokens":2})",
                            R"({"prompt_tokens":-1,"completion_tokens":2})",
                            R"({"prompt_tokens":"3","completion_tokens":2})",
                            R"({"prompt_tokens":18446744073709551615,"completion_tokens":2})"}) {
    auto a = parse_chat_completion(
        std::string(R"({"choices":[{"message":{"content":"a"},"finish_reason":"stop"}],"usage":)") +
        usage + "}");
    ASSERT_TRUE(a) << usage;
    EXPECT_FALSE(a->usage.reported) << usage;
    EXPECT_EQ(a->usage.prompt_tokens, 0) << usage;
  }
}

TEST(ChatRender, BodyFieldByField) {
  Answer a;
  a.model = "m";
  a.created = 5;
  a.blocks.push_back(Block{BlockKind::kThinking, "think", "sig", "", "", ""});
  a.blocks.push_back(Block{BlockKind::kText, "one ", "", "", "", ""});
  a.blocks.push_back(Block{BlockKind::kText, "two", "", "", "", ""});
  a.blocks.push_back(Block{BlockKind::kToolCall, "", "", "", "f", "{\"x\":1}"});
  a.finish = FinishReason::kStopSequence;
  a.stop_sequence = "END";
  a.usage = Usage{7, 3, 2, 1, true};
  WireBody r = render_chat_completion(a);
  EXPECT_EQ(r.status, 200);
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["id"].get<std::string>().size(), 9u + 29u);
  EXPECT_EQ(j["created"], 5);
  const json& m = j["choices"][0]["message"];
  EXPECT_EQ(m["content"], "one two");
  EXPECT_EQ(m["reasoning_content"], "think");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"x\":1}");
  EXPECT_EQ(m["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");  // chat has no word for a stop sequence
  EXPECT_EQ(j["usage"]["total_tokens"], 10);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["reasoning_tokens"], 1);
  // Two renders make two ids.
  EXPECT_NE(json::parse(render_chat_completion(a).body)["id"], j["id"]);
}

TEST(ChatRender, FailedAnswerIsAnOpenAIErrorBody) {
  Answer a;
  a.finish = FinishReason::kError;
  a.error = Error::make(ErrorCode::kRateLimited, "slow down \"now\"");
  WireBody r = render_chat_completion(a);
  EXPECT_EQ(r.status, 429);
  json j = json::parse(r.body);
  EXPECT_EQ(j["error"]["type"], "rate_limit_error");
  EXPECT_EQ(j["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(j["error"]["message"], "slow down \"now\"");
  EXPECT_TRUE(j["error"]["param"].is_null());
}

TEST(ChatRoundTrip, BodiesComeBackTheSame) {
  const std::string bodies[] = {
      kToolBody,
      R"({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,
        "message":{"role":"assistant","content":"Hello \"world\"\n\u00e9"},"logprobs":null,
        "finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,
        "prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}})",
  };
  for (const std::string& body : bodies) {
    auto a = parse_chat_completion(body);
    ASSERT_TRUE(a) << a.error().message;
    WireBody r = render_chat_completion(*a);
    EXPECT_EQ(without_ids(json::parse(r.body)), without_ids(json::parse(body)));
    // And through the event sequence.
    AnswerBuilder b;
    replay(*a, b, 3);
    EXPECT_EQ(without_ids(json::parse(render_chat_completion(b.answer()).body)),
              without_ids(json::parse(body)));
  }
}

// ---------------------------------------------------------------------------------------------
// Streams

std::string chunk(const std::string& delta, const std::string& finish = "null") {
  return R"({"id":"chatcmpl-s","object":"chat.completion.chunk","created":9,"model":"m","choices":[{"index":0,"delta":)" +
         delta + R"(,"logprobs":null,"finish_reason":)" + finish + "}]}";
}
const std::string kUsageChunk =
    R"({"id":"chatcmpl-s","object":"chat.completion.chunk","created":9,"model":"m","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":6,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}})";

std::vector<std::string> text_stream() {
  return {chunk(R"({"role":"assistant","content":""})"),
          chunk(R"({"content":"Hel"})"),
          chunk(R"({"content":"lo é"})"),
          chunk("{}", "\"stop\""),
          kUsageChunk,
          "[DONE]"};
}
std::vector<std::string> tool_stream() {
  return {
      chunk(R"({"role":"assistant","content":""})"),
      chunk(R"({"reasoning_content":"need two calls"})"),
      chunk(R"({"content":"Checking."})"),
      chunk(
          R"({"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]})"),
      chunk(
          R"({"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":""}}]})"),
      chunk(R"({"tool_calls":[{"index":1,"function":{"arguments":"{\"tz\":\"CET\"}"}}]})"),
      chunk("{}", "\"tool_calls\""),
      kUsageChunk,
      "[DONE]"};
}
std::vector<std::string> length_stream() {
  return {chunk(R"({"role":"assistant","content":""})"), chunk(R"({"content":"trunc"})"),
          chunk("{}", "\"length\""), kUsageChunk, "[DONE]"};
}

EventLog parse_stream(const std::vector<std::string>& datas) {
  ChatStreamParser parser;
  EventLog log;
  for (const std::string& d : datas) {
    Status s = parser.feed(d, log);
    EXPECT_TRUE(s) << d << ": " << (s ? "" : s.error().message);
  }
  EXPECT_TRUE(parser.finished());
  return log;
}

TEST(ChatStreamParse, TextStreamEvents) {
  EventLog log = parse_stream(text_stream());
  std::vector<std::string> types;
  for (const auto& e : log.events) types.push_back(e.type);
  EXPECT_EQ(types, (std::vector<std::string>{"start", "block_start", "delta", "delta", "block_stop",
                                             "finish"}));
  EXPECT_EQ(log.events[0].id, "chatcmpl-s");
  EXPECT_EQ(log.events[0].text, "m");
  EXPECT_EQ(log.events[3].text, "lo é");
  EXPECT_EQ(log.events.back().reason, FinishReason::kStop);
  EXPECT_EQ(log.events.back().usage, (Usage{11, 6, 4, 2, true}));  // the chunk after finish
}

TEST(ChatStreamParse, ParallelToolCallsWithSplitArguments) {
  ChatStreamParser parser;
  AnswerBuilder b;
  for (const std::string& d : tool_stream()) ASSERT_TRUE(parser.feed(d, b)) << d;
  ASSERT_FALSE(b.violation());
  const Answer& a = b.answer();
  ASSERT_EQ(a.blocks.size(), 4u);
  EXPECT_EQ(a.blocks[0].kind, BlockKind::kThinking);
  EXPECT_EQ(a.blocks[1].text, "Checking.");
  EXPECT_EQ(a.blocks[2].call_id, "call_a");
  EXPECT_EQ(a.blocks[2].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(a.blocks[3].name, "get_time");
  EXPECT_EQ(a.blocks[3].arguments, "{\"tz\":\"CET\"}");
  EXPECT_EQ(a.finish, FinishReason::kToolCalls);
}

TEST(ChatStreamParse, EndWithoutDoneFinishesOnlyAfterAFinishReason) {
  ChatStreamParser cut;
  EventLog log;
  ASSERT_TRUE(cut.feed(chunk(R"({"content":"a"})"), log));
  Status s = cut.end(log);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kBackendError);
  EXPECT_EQ(log.count("finish"), 0u);

  ChatStreamParser ok;
  EventLog log2;
  ASSERT_TRUE(ok.feed(chunk(R"({"content":"a"})", "\"stop\""), log2));
  EXPECT_TRUE(ok.end(log2));
  EXPECT_EQ(log2.count("finish"), 1u);
}

TEST(ChatStreamParse, UpstreamErrorChunkIsAnErrorEvent) {
  ChatStreamParser p;
  EventLog log;
  ASSERT_TRUE(p.feed(chunk(R"({"content":"a"})"), log));
  ASSERT_TRUE(p.feed(R"({"error":{"message":"GPU fell off the bus"}})", log));
  EXPECT_EQ(log.events.back().type, "error");
  EXPECT_EQ(log.events.back().text, "GPU fell off the bus");
  EXPECT_TRUE(p.finished());
}

TEST(ChatStreamParse, RefusesBrokenStreams) {
  std::vector<std::vector<std::string>> bad = {
      {"{not json"},
      {chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]})")},  // no name
      {chunk(R"({"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{"}}]})"),
       chunk(R"({"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{"}}]})"),
       chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"}"}}]})")},  // interleaved
      {chunk(R"({"tool_calls":[{"index":500,"id":"a","function":{"name":"f"}}]})")},
      {chunk(R"({"content":"a"})", "\"eos\"")},
      {chunk(R"({"content":["a"]})")},
  };
  for (const auto& datas : bad) {
    ChatStreamParser p;
    EventLog log;
    bool failed = false;
    for (const std::string& d : datas) {
      if (!p.feed(d, log)) {
        failed = true;
        break;
      }
    }
    EXPECT_TRUE(failed) << datas.back();
    // A failed parser sends nothing more.
    size_t n = log.events.size();
    EXPECT_FALSE(p.feed(chunk(R"({"content":"more"})"), log));
    EXPECT_EQ(log.events.size(), n);
  }
}

TEST(ChatStreamRender, ChunksFieldByField) {
  Answer a;
  a.model = "m";
  a.blocks.push_back(Block{BlockKind::kToolCall, "", "", "", "f", "{\"k\":\"v\"}"});
  a.finish = FinishReason::kToolCalls;
  a.usage = Usage{1, 2, 0, 0, true};
  ChatStreamRenderer r(ChatRenderOptions{{}, /*include_usage=*/false});
  RenderSink sink(r);
  replay(a, sink, 4);
  std::vector<std::string> datas = sse_data(sink.out);
  ASSERT_GE(datas.size(), 4u);
  EXPECT_EQ(datas.back(), "[DONE]");
  std::string id;
  for (size_t i = 0; i + 1 < datas.size(); ++i) {
    json c = json::parse(datas[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (i == 0) id = c["id"];
    EXPECT_EQ(c["id"], id) << "one id for the whole stream";
    EXPECT_FALSE(c.contains("usage")) << "usage only when asked for";
  }
  json first_call = json::parse(datas[1])["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(first_call["index"], 0);
  EXPECT_EQ(first_call["function"]["name"], "f");
  EXPECT_EQ(first_call["type"], "function");
  EXPECT_EQ(json::parse(datas[datas.size() - 2])["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ChatStreamRender, ErrorEndsTheStreamWithoutDone) {
  ChatStreamRenderer r;
  std::string out;
  Error e = Error::make(ErrorCode::kBackendError, "upstream broke");
  r.render(StartEvent{"x", "m", 1, {}}, out);
  r.render(ErrorEvent{&e}, out);
  r.render(FinishEvent{}, out);  // nothing after the end
  std::vector<std::string> datas = sse_data(out);
  ASSERT_EQ(datas.size(), 2u);
  json err = json::parse(datas[1]);
  EXPECT_EQ(err["error"]["message"], "upstream broke");
  EXPECT_EQ(err["error"]["type"], "server_error");
  EXPECT_EQ(out.find("[DONE]"), std::string::npos);
}

TEST(ChatRoundTrip, ChunkStreamsComeBackTheSame) {
  for (const auto& datas : {text_stream(), tool_stream(), length_stream()}) {
    ChatStreamParser parser;
    ChatStreamRenderer renderer(ChatRenderOptions{{}, /*include_usage=*/true});
    RenderSink sink(renderer);
    for (const std::string& d : datas) ASSERT_TRUE(parser.feed(d, sink)) << d;
    std::vector<std::string> out = sse_data(sink.out);
    ASSERT_EQ(out.size(), datas.size()) << sink.out;
    for (size_t i = 0; i < datas.size(); ++i) {
      if (datas[i] == "[DONE]") {
        EXPECT_EQ(out[i], "[DONE]");
        continue;
      }
      EXPECT_EQ(without_ids(json::parse(out[i])), without_ids(json::parse(datas[i])))
          << "chunk " << i;
    }
  }
}

// feed_object: data that is not one JSON object is told apart from a chunk that fails (an HTTP
// relay breaks the stream for the former with its own error) and changes nothing.
TEST(ChatStreamParse, FeedObjectTellsDataThatIsNotAnObjectFromAChunkThatFails) {
  EventLog log;
  ChatStreamParser parser;
  Status s;
  EXPECT_FALSE(parser.feed_object("not json", log, s));
  EXPECT_FALSE(parser.feed_object("[]", log, s));
  EXPECT_FALSE(parser.feed_object("{\"content\":\"\xff\"}", log, s)) << "bad UTF-8";
  EXPECT_TRUE(log.events.empty()) << "nothing changes";
  ASSERT_TRUE(parser.feed_object(R"({"choices":[{"index":0,"delta":{"content":"hi"}}]})", log, s));
  EXPECT_TRUE(s);
  ASSERT_EQ(log.events.size(), 3u);  // start, block start, delta
  EXPECT_EQ(log.events[2].text, "hi");
  ASSERT_TRUE(parser.feed_object(R"({"choices":[{"index":0,"delta":{"content":1}}]})", log, s));
  EXPECT_FALSE(s);
  // After the failure: still checked, and the failure repeated.
  EXPECT_FALSE(parser.feed_object("{", log, s));
  ASSERT_TRUE(parser.feed_object(R"({"choices":[]})", log, s));
  EXPECT_FALSE(s);
  EXPECT_EQ(log.events.size(), 3u);
}

}  // namespace
}  // namespace ferry::api
