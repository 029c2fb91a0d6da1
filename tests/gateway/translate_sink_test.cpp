// gateway/translate_sink: an OpenAI chunk stream translated for a Messages or Responses client,
// and the end of a stream that was rendered whole and then failed (the ledger could not record
// it): the end is replaced by that API's failure event, never sent as a success.
#include "gateway/translate_sink.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "adapters/stream_relay.h"
#include "api/responses_parse.h"
#include "gateway/responses_front.h"
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

// A Responses translator that keeps the final response object (as for the response store).
struct KeptResponse {
  NullSink client;
  FinalResponse final_response;
  RenderContext context;
  std::optional<TranslatingSink> sink;
  explicit KeptResponse(std::string_view request_id) : context{request_id, "coder", 5} {
    context.final_response = &final_response;
    sink.emplace(client, frontend(api::Endpoint::kResponses), context);
  }
};

TEST(TranslatingSink, ResponsesLedgerFailureAfterTheWholeAnswerIsResponseFailed) {
  KeptResponse kept("req-1");
  TranslatingSink& sink = *kept.sink;
  const std::string& final_response = kept.final_response.json;
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

// The final response object kept for the store is the one the client got, byte for byte (the
// renderer hands it over; it used to be read back from the stream and re-written).
TEST(TranslatingSink, ResponsesFinalObjectIsTheOneSent) {
  KeptResponse kept("req-4");
  TranslatingSink& sink = *kept.sink;
  const std::string& final_response = kept.final_response.json;
  std::string sent = translate_all(sink);
  sent += sink.finish(std::nullopt);
  const std::string marker = "\ndata: ";
  const size_t last = sent.rfind(marker);
  ASSERT_NE(last, std::string::npos);
  std::string data = sent.substr(last + marker.size());
  data = data.substr(0, data.find('\n'));
  EXPECT_NE(data.find("\"type\":\"response.completed\""), std::string::npos) << data;
  const std::string head = ",\"response\":";
  const size_t at = data.find(head);
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(final_response, data.substr(at + head.size(), data.size() - at - head.size() - 1));
  EXPECT_EQ(json::parse(final_response), json::parse(data)["response"]);
}

// The renderer says where the final object's id and output are; the store takes them as they
// are, which must be what reading the object back gives, for every kind of output item.
TEST(TranslatingSink, ResponsesStoredPartsAsWrittenAreWhatAReadGives) {
  auto parsed = parse_responses_request(R"({"model":"m","input":"hi"})", {}, false);
  ASSERT_TRUE(parsed);
  const api::ResponsesRequest& request = *parsed->responses;
  const std::vector<std::vector<std::string>> answers = {
      {chunk(R"({"role":"assistant","content":"a\"\u00e9\n\u0001\\"})"), chunk("{}", "\"stop\"")},
      {chunk(R"({"reasoning_content":"think \t"})"), chunk(R"({"content":"x"})"),
       chunk(R"({"tool_calls":[{"index":0,"id":"c\"1\u00ff","type":"function",)"
             R"("function":{"name":"f","arguments":"{\"a\":"}}]})"),
       chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]})"),
       chunk("{}", "\"tool_calls\"")},
      {chunk(R"({"content":"cut"})"), chunk("{}", "\"length\"")}};
  for (const auto& chunks : answers) {
    KeptResponse kept("req-5");
    for (const std::string& c : chunks) (void)kept.sink->translate(c);
    kept.sink->end_upstream();
    (void)kept.sink->finish(std::nullopt);
    const FinalResponse& final = kept.final_response;
    ASSERT_FALSE(final.json.empty());
    EXPECT_GT(final.output_size, 0u) << final.json;
    auto fast = response_to_store(request, final, "k1");
    auto read = response_to_store(request, std::string_view(final.json), "k1");
    ASSERT_TRUE(fast && read) << final.json;
    EXPECT_EQ(fast->id, read->id);
    EXPECT_EQ(fast->output, read->output) << final.json;
    EXPECT_EQ(fast->response, read->response);
    EXPECT_EQ(fast->items, read->items);
  }
}

// What the response store is handed: the id and the output as a kept tree writes them (the
// last of a member named twice), the object as sent; nothing for what is not a response.
TEST(ResponsesFront, ResponseToStoreReadsIdAndOutputAsATreeDoes) {
  auto parsed = parse_responses_request(R"({"model":"m","input":"hi"})", {}, false);
  ASSERT_TRUE(parsed);
  const api::ResponsesRequest& request = *parsed->responses;
  auto reference = [](const std::string& text) {  // what nlohmann made of it before
    auto r = nlohmann::ordered_json::parse(text);
    return r["output"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  for (std::string text :
       {std::string(
            R"({"id":"resp_1","object":"response","output":[{"type":"message","id":"m",)"
            R"("content":[{"type":"output_text","text":"a\"\u00e9\n","annotations":[]}]}]})"),
        std::string(R"({"id":"x","id":"resp_2","output":[1],"output":[{"a":-0,"b":1.50,"c":1e300,)"
                    R"("d":18446744073709551615,"a":[true,null]}]})"),
        // Beyond 64 bits: simdjson does not read it; nlohmann does, as before.
        std::string(R"({"id":"resp_3","output":[{"n":123456789012345678901234567890}]})")}) {
    auto kept = response_to_store(request, text, "k1");
    ASSERT_TRUE(kept) << text;
    EXPECT_EQ(kept->id, nlohmann::ordered_json::parse(text)["id"].get<std::string>());
    EXPECT_EQ(kept->output, reference(text)) << text;
    EXPECT_EQ(kept->response, text);
    EXPECT_EQ(kept->key_id, "k1");
    EXPECT_EQ(kept->items, R"([{"type":"message","role":"user","content":"hi"}])");
  }
  for (std::string text : {"", "[]", "{\"id\":5,\"output\":[]}", "{\"id\":\"r\",\"output\":{}}",
                           "{\"id\":\"r\"}", "{not json", "{\"id\":\"r\xff\",\"output\":[]}"}) {
    EXPECT_FALSE(response_to_store(request, text, "k1")) << text;
  }
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

// ---- The HTTP relay's hand-over (take_chunk) against the bytes path ----------------------------
//
// An HTTP backend's relay hands a translator each chunk as it frames it (parsed once: the relay's
// check is the translator's parse); the local engine writes SSE bytes. Both must give the client
// the same events, the same failures and keep the same upstream bytes.

struct Relayed {
  std::vector<api::SseEvent> events;  // what the client got, the end included, ids dropped
  std::optional<std::string> broken;  // the relay's reason, when it broke the stream
  std::optional<std::string> error;   // the translator's error
  std::string upstream;               // the translator's record of the upstream bytes
  adapters::Usage usage;              // what the relay took for the ledger
  std::string finish_reason;
};

// The random ids a renderer makes (message, response, item ids) differ per run.
void drop_ids(json& j) {
  if (j.is_object()) {
    j.erase("id");
    j.erase("item_id");
    for (auto& [k, v] : j.items()) drop_ids(v);
  } else if (j.is_array()) {
    for (auto& v : j) drop_ids(v);
  }
}

// `reads`: the upstream's body bytes as they arrive. `take`: through the relay with the
// translator as its sink (the hand-over); else the relay checks each chunk and the translator
// reads the bytes it writes (the relay before the hand-over, and the local engine's path).
Relayed relay_run(api::Endpoint api, const std::vector<std::string>& reads, bool take) {
  NullSink client;
  RenderContext context{"req-9", "coder", 7};
  TranslatingSink sink(client, frontend(api), context);
  adapters::BackendRequest hop;
  hop.stream = true;
  hop.client_wants_usage = true;  // a translated hop's
  adapters::BackendReply reply;
  const std::string quoted;
  adapters::StreamRelay relay{hop, quoted, reply, take ? &sink : nullptr, adapters::SseParser(),
                              {},  false};
  Relayed run;
  std::string sent;
  for (const std::string& r : reads) {
    run.broken = relay.feed(r);
    if (!relay.to_client.empty()) sent += std::string(sink.translate(relay.to_client));
    relay.to_client.clear();
    if (run.broken) break;
  }
  std::optional<Error> failed;
  if (run.broken) failed = Error::make(ErrorCode::kBackendError, "backend 'up' " + *run.broken);
  if (!failed && !sink.error()) sink.end_upstream();
  if (sink.error()) run.error = sink.error()->message;
  sent += sink.finish(failed);
  run.events = api::parse_named_sse(sent);
  for (auto& e : run.events) drop_ids(e.data);
  run.upstream = sink.take_upstream();
  run.usage = reply.usage;
  run.finish_reason = reply.finish_reason;
  return run;
}

// Both paths over `reads`, for both front-ends: equal; the hand-over's run is returned.
Relayed same_both_ways(api::Endpoint api, const std::vector<std::string>& reads) {
  Relayed bytes = relay_run(api, reads, false);
  Relayed taken = relay_run(api, reads, true);
  EXPECT_EQ(taken.broken, bytes.broken);
  EXPECT_EQ(taken.error, bytes.error);
  EXPECT_EQ(taken.upstream, bytes.upstream);
  // The ledger's usage and finish reason: the relay scans a taken chunk's text only where the
  // translator's parse found the members its scans look for.
  EXPECT_EQ(taken.finish_reason, bytes.finish_reason);
  EXPECT_EQ(taken.usage.prompt_tokens, bytes.usage.prompt_tokens);
  EXPECT_EQ(taken.usage.completion_tokens, bytes.usage.completion_tokens);
  EXPECT_EQ(taken.usage.total_tokens, bytes.usage.total_tokens);
  EXPECT_EQ(taken.usage.cached_tokens, bytes.usage.cached_tokens);
  EXPECT_EQ(taken.usage.reasoning_tokens, bytes.usage.reasoning_tokens);
  EXPECT_EQ(taken.usage.malformed, bytes.usage.malformed);
  EXPECT_EQ(taken.events.size(), bytes.events.size()) << [&] {
    std::string names;
    for (const auto& e : taken.events) names += e.name + " ";
    names += "| ";
    for (const auto& e : bytes.events) names += e.name + " ";
    return names;
  }();
  for (size_t i = 0; i < std::min(taken.events.size(), bytes.events.size()); ++i) {
    EXPECT_EQ(taken.events[i].name, bytes.events[i].name) << i;
    EXPECT_EQ(taken.events[i].data, bytes.events[i].data) << i;
  }
  return taken;
}

std::string usage_chunk(const std::string& usage) {
  return frame(R"({"id":"c1","object":"chat.completion.chunk","created":1,"model":"up",)"
               R"("choices":[],"usage":)" +
               usage + "}");
}

const std::vector<api::Endpoint> kApis = {api::Endpoint::kMessages, api::Endpoint::kResponses};

// Text with escapes and multi-byte UTF-8, thinking, a refusal, the usage with its details.
std::vector<std::string> text_stream() {
  return {chunk(R"({"role":"assistant","content":""})"),
          chunk(R"({"reasoning_content":"think \"hard\"\n"})"),
          chunk(R"({"content":"caf\u00e9 \ud83d\ude00 \\ \/ \t tab"})"),
          chunk(R"({"content":"日本語 and ünïcödé"})"),
          chunk(R"({"refusal":"no"})"),
          chunk("{}", "\"stop\""),
          usage_chunk(R"({"prompt_tokens":7,"completion_tokens":5,"total_tokens":12,)"
                      R"("prompt_tokens_details":{"cached_tokens":3},)"
                      R"("completion_tokens_details":{"reasoning_tokens":2}})"),
          "data: [DONE]\n\n"};
}

TEST(TranslatingSinkHandOver, TextThinkingEscapesAndUsageAsTheBytesPathGivesThem) {
  for (api::Endpoint api : kApis) {
    Relayed r = same_both_ways(api, text_stream());
    EXPECT_FALSE(r.broken);
    EXPECT_FALSE(r.error);
    ASSERT_FALSE(r.events.empty());
    EXPECT_NE(r.upstream.find("caf\\u00e9"), std::string::npos) << "the upstream bytes are kept";
  }
  // All the reads in one (a backend that sent the whole stream at once).
  std::string all;
  for (const std::string& f : text_stream()) all += f;
  for (api::Endpoint api : kApis) same_both_ways(api, {all});
}

TEST(TranslatingSinkHandOver, ChunksSplitAnywhereEvenInsideAUtf8Character) {
  std::string all;
  for (const std::string& f : text_stream()) all += f;
  const size_t in_char = all.find("日") + 1;  // inside the three bytes of 日
  for (size_t at : {size_t{1}, size_t{7}, all.find("\n\n") + 1, in_char, all.size() - 1}) {
    for (api::Endpoint api : kApis) {
      Relayed r = same_both_ways(api, {all.substr(0, at), all.substr(at)});
      EXPECT_FALSE(r.broken) << at;
      EXPECT_FALSE(r.error) << at;
    }
  }
  // One byte at a time.
  std::vector<std::string> bytes;
  for (char c : all) bytes.emplace_back(1, c);
  for (api::Endpoint api : kApis) same_both_ways(api, bytes);
}

TEST(TranslatingSinkHandOver, ToolCallDeltas) {
  std::vector<std::string> reads = {
      chunk(R"({"role":"assistant","content":"Let me look."})"),
      chunk(
          R"({"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"lookup","arguments":""}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":"}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"\"x\\\"y\"}"}}]})"),
      chunk(
          R"({"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"read","arguments":"{}"}}]})"),
      chunk("{}", "\"tool_calls\""),
      usage_chunk(R"({"prompt_tokens":7,"completion_tokens":9,"total_tokens":16})"),
      "data: [DONE]\n\n"};
  for (api::Endpoint api : kApis) {
    Relayed r = same_both_ways(api, reads);
    EXPECT_FALSE(r.error);
  }
}

// Usage and finish reasons where the relay's text scans look (any depth, the last usage object,
// the first string finish_reason, names written with escapes): the ledger gets the same.
TEST(TranslatingSinkHandOver, TheLedgersUsageAndFinishReasonAsTheScansFindThem) {
  // A chunk's frame: the usual head, then `rest`.
  auto odd_chunk = [](const std::string& rest) {
    return frame(R"({"id":"c1","object":"chat.completion.chunk","created":1,"model":"up",)" + rest);
  };
  const std::vector<std::string> odd = {
      // usage null on every chunk (some servers), then the real one.
      odd_chunk(
          R"("choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}],"usage":null})"),
      // usage inside a choice's logprobs, and after the top-level one (the last one counts).
      odd_chunk(
          R"("choices":[{"index":0,"delta":{"content":"b"},"logprobs":{"usage":{"prompt_tokens":1}}}]})"),
      odd_chunk(
          R"("usage":{"prompt_tokens":2,"completion_tokens":3},"choices":[{"index":0,"delta":{},"x":{"usage":{"completion_tokens":4}}}]})"),
      // A finish_reason string nested somewhere else before the choice's own.
      odd_chunk(
          R"("meta":{"finish_reason":"elsewhere"},"choices":[{"index":0,"delta":{"content":"c"},"finish_reason":null}]})"),
      // Names written with escapes: decoded, the text scans do not see them.
      odd_chunk(
          R"("choices":[{"index":0,"delta":{"content":"d"},"finish_reas\u006fn":"length"}],"us\u0061ge":{"prompt_tokens":9}})"),
      // A name ending in an escaped quote and the key: the scans see `"usage":` in it.
      odd_chunk(
          R"("choices":[{"index":0,"delta":{"content":"e"}}],"x\"usage":{"prompt_tokens":11,"completion_tokens":12}})"),
      odd_chunk(R"("choices":[{"index":0,"delta":{"content":"f"}}],"y\"finish_reason":"stop"})"),
      // Where the translator's own passes do not look: inside a delta, a tool call, a member
      // named twice (the reader reads the first), choices that are an object, a delta that is
      // an array, two choices (an error), an upstream error chunk.
      odd_chunk(R"("choices":[{"index":0,"delta":{"content":"g","usage":{"prompt_tokens":21}}}]})"),
      odd_chunk(
          R"("choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":"{}","usage":{"total_tokens":3}}}]}}]})"),
      odd_chunk(
          R"("choices":[{"index":0,"delta":{"content":"h"}}],"choices":[{"finish_reason":"length","usage":{"prompt_tokens":4}}]})"),
      odd_chunk(
          R"("choices":[{"index":0,"delta":{"content":"i"},"delta":{"x":{"usage":{"completion_tokens":5}}}}]})"),
      odd_chunk(R"("choices":{"finish_reason":"content_filter","usage":{"prompt_tokens":6}}})"),
      odd_chunk(
          R"("choices":[{"index":0,"delta":[{"usage":{"prompt_tokens":8},"finish_reason":"stop"}]}]})"),
      odd_chunk(
          R"("choices":[{"index":0,"finish_reason":"stop"},{"index":1,"finish_reason":"length","usage":{}}]})"),
      frame(
          R"({"error":{"message":"x","usage":{"prompt_tokens":9}},"choices":[{"finish_reason":"stop"}]})"),
      // Counts the scanner gives up on (a float, a string, beyond int64): nlohmann decides.
      odd_chunk(
          R"("choices":[],"usage":{"prompt_tokens":1.5,"completion_tokens":"2","total_tokens":9223372036854775808}})")};
  for (size_t i = 0; i < odd.size(); ++i) {
    for (api::Endpoint api : kApis) {
      SCOPED_TRACE(odd[i]);
      std::vector<std::string> reads = {chunk(R"({"role":"assistant","content":""})")};
      for (size_t j = 0; j <= i; ++j) reads.push_back(odd[j]);
      reads.push_back(chunk("{}", "\"stop\""));
      reads.push_back(
          usage_chunk(R"({"prompt_tokens":7,"completion_tokens":5,"total_tokens":12})"));
      reads.push_back("data: [DONE]\n\n");
      same_both_ways(api, reads);
      // The odd chunk after the finish (and one more after it: this harness, unlike the sink's
      // write(), keeps the last translation of the bytes path until the next read).
      reads = {chunk(R"({"role":"assistant","content":""})"), chunk("{}", "\"stop\""), odd[i],
               usage_chunk(R"({"prompt_tokens":1})"), "data: [DONE]\n\n"};
      same_both_ways(api, reads);
      // The odd chunk alone: its usage and finish reason are the last the relay sees (the
      // chunks the translator fails on are left out: see above).
      if (odd[i].find("\"index\":1") != std::string::npos) continue;
      if (odd[i].find("\"error\"") != std::string::npos) continue;
      Relayed r = same_both_ways(
          api, {chunk(R"({"role":"assistant","content":""})"), odd[i], "data: [DONE]\n\n"});
      EXPECT_FALSE(r.broken);
      // The text scans see `"usage":` after the escaped quote of a longer name.
      if (odd[i].find(R"("x\"usage")") != std::string::npos) {
        EXPECT_EQ(r.usage.prompt_tokens, 11);
      }
    }
  }
}

// Chunks that are JSON objects but cannot be rendered: the translator's error, its error event.
TEST(TranslatingSinkHandOver, WrongShapedChunksAreTheTranslatorsErrorBothWays) {
  const std::vector<std::string> bad = {
      frame(R"({"id":"c1","choices":[5]})"),
      frame(R"({"id":"c1","choices":[{"index":0,"delta":{}},{"index":1,"delta":{}}]})"),
      frame(R"({"id":"c1","choices":[{"index":3,"delta":{"content":"x"}}]})"),
      chunk(R"({"content":5})"),
      chunk(R"({"content":"x"})", "\"exploded\""),
      chunk(R"({"tool_calls":[{"function":{"name":"f"}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"type":"retrieval","function":{"name":"f"}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]})"),
      chunk(R"({"tool_calls":"no"})")};
  for (const std::string& b : bad) {
    for (api::Endpoint api : kApis) {
      Relayed r = same_both_ways(api, {chunk(R"({"role":"assistant","content":"a"})"), b,
                                       chunk(R"({"content":"never"})"), "data: [DONE]\n\n"});
      EXPECT_FALSE(r.broken) << b;
      ASSERT_TRUE(r.error) << b;
      ASSERT_FALSE(r.events.empty());
      // The client's stream ends with the API's error event; nothing after the bad chunk.
      const std::string last = r.events.back().name;
      EXPECT_TRUE(last == "error" || last == "response.failed") << b << " " << last;
      EXPECT_EQ(r.events.back().data.dump().find("never"), std::string::npos) << b;
    }
  }
}

// The upstream's own error chunk mid-stream: the API's error event, the same both ways.
TEST(TranslatingSinkHandOver, AnUpstreamErrorMidStream) {
  for (api::Endpoint api : kApis) {
    Relayed r = same_both_ways(
        api, {chunk(R"({"role":"assistant","content":"par"})"), chunk(R"({"content":"tial"})"),
              frame(R"({"error":{"message":"the GPU fell over"}})"),
              chunk(R"({"content":"after"})"), "data: [DONE]\n\n"});
    EXPECT_FALSE(r.broken);
    EXPECT_NE(r.events.back().data.dump().find("the GPU fell over"), std::string::npos);
  }
}

// Data that is not one JSON object (cut, two values, bad UTF-8, a string): the relay breaks the
// stream with its own error, never the translator's; the chunks before it are sent.
TEST(TranslatingSinkHandOver, DataThatIsNotOneJsonObjectIsTheRelaysError) {
  const std::vector<std::string> bad = {
      frame("{this is not json}"), frame(R"({"id":"c1")"), frame(R"({"a":1}{"b":2})"),
      frame("\"text\""),           frame("[1,2]"),         frame("{\"content\":\"\xff\xfe\"}")};
  for (size_t i = 0; i < bad.size(); ++i) {
    for (api::Endpoint api : kApis) {
      Relayed r = same_both_ways(api, {chunk(R"({"role":"assistant","content":"a"})") + bad[i] +
                                       chunk(R"({"content":"never"})")});
      ASSERT_TRUE(r.broken) << bad[i];
      EXPECT_EQ(*r.broken, "sent a malformed stream event");
      EXPECT_FALSE(r.error) << "the relay's error, not the translator's";
      ASSERT_FALSE(r.events.empty());
      EXPECT_NE(r.events.back().data.dump().find("malformed stream event"), std::string::npos);
      for (const auto& e : r.events) EXPECT_EQ(e.data.dump().find("never"), std::string::npos);
    }
  }
}

// An event whose data comes in several `data:` lines is one object (joined with LF): the
// hand-over gives the translator the data as the relay framed it, and the relay's bytes carry
// it in as many `data:` lines (a client of the chat path, or the translator reading the bytes,
// reads the same object).
TEST(TranslatingSinkHandOver, DataOfSeveralLinesIsOneChunk) {
  for (bool take : {true, false}) {
    for (api::Endpoint api : kApis) {
      Relayed r = relay_run(api,
                            {chunk(R"({"role":"assistant","content":""})"),
                             "data: {\"choices\":[{\"index\":0,\n"
                             "data: \"delta\":{\"content\":\"two lines\"}}]}\n\n",
                             chunk("{}", "\"stop\""), "data: [DONE]\n\n"},
                            take);
      EXPECT_FALSE(r.broken);
      EXPECT_FALSE(r.error);
      std::string all;
      for (const auto& e : r.events) all += e.data.dump();
      EXPECT_NE(all.find("two lines"), std::string::npos) << all;
    }
  }
}

}  // namespace
}  // namespace ferry::gateway
