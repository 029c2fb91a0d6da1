// The cost levers' own CPU, apart from sockets:
// - pass-through: what ferry does per request on the chat path (the body parsed, spliced for
//   the backend, each of the 34 upstream chunks relayed with the model renamed);
// - cache hit: the same body parsed, the cache key made (the canonical request rendered, its
//   stream members dropped, hashed), the entry looked up and replayed to the client as chat SSE
//   through the front-end's stream renderer; and the same hit as a body;
// - trim: a 50-turn conversation (system prompt, 50 user/assistant exchanges, the question)
//   fitted to a limit that drops 20 exchanges, counted with the demo model's tokenizer and chat
//   template as the planner counts (BM_Trim50Turns, against the routing count it adds to).
// Run: build/bench/ferry_levers_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "adapters/openai_wire.h"
#include "api/openai_render.h"
#include "gateway/frontend.h"
#include "gateway/openai_request.h"
#include "gateway/prompt_count.h"
#include "gateway/response_cache.h"
#include "gateway/trim.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace ferry;
using ordered_json = nlohmann::ordered_json;

constexpr int kChunks = 32;

std::string chat_request() {
  std::string text;
  while (text.size() < 2000) text += "The quick brown fox jumps over the lazy dog. ";
  return R"({"model":"coder","max_tokens":1024,"stream":true,"temperature":0,"messages":[)"
         R"({"role":"system","content":")" +
         text + R"("},{"role":"user","content":"Find the bug in main.cpp"}]})";
}

std::string chunk(const std::string& delta, const std::string& finish = "null") {
  return R"({"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1760000000,"model":"qwen2.5-coder","choices":[{"index":0,"delta":)" +
         delta + R"(,"logprobs":null,"finish_reason":)" + finish + "}]}";
}

std::vector<std::string> upstream_chunks() {
  std::vector<std::string> out = {chunk(R"({"role":"assistant","content":""})")};
  for (int i = 0; i < kChunks; ++i) out.push_back(chunk(R"({"content":" the fix is"})"));
  out.push_back(chunk("{}", "\"stop\""));
  out.push_back(
      R"({"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1760000000,"model":"qwen2.5-coder","choices":[],"usage":{"prompt_tokens":512,"completion_tokens":96,"total_tokens":608}})");
  return out;
}

std::string relay(std::string_view data, const std::string& quoted_model) {
  adapters::ChunkAction action = adapters::inspect_stream_chunk(data, false);
  std::string_view current = action.rewritten ? std::string_view(*action.rewritten) : data;
  if (auto renamed = adapters::with_quoted_model(current, quoted_model)) {
    action.rewritten = std::move(renamed);
  }
  std::string frame = "data: ";
  frame.append(action.rewritten ? std::string_view(*action.rewritten) : data);
  frame.append("\n\n");
  return frame;
}

void BM_PassThroughChat(benchmark::State& state) {
  const std::string body = chat_request();
  const auto chunks = upstream_chunks();
  const std::string quoted = adapters::quote_model("coder");
  for (auto _ : state) {
    auto parsed = gateway::parse_request(api::Endpoint::kChatCompletions, body);
    std::string upstream = gateway::upstream_body(*parsed, "qwen2.5-coder");
    benchmark::DoNotOptimize(upstream.data());
    for (const auto& c : chunks) {
      std::string frame = relay(c, quoted);
      benchmark::DoNotOptimize(frame.data());
    }
  }
}
BENCHMARK(BM_PassThroughChat);

// The key as gateway/planner.cpp (plan_cache) makes it: the canonical typed request hashed.
std::string cache_key(const api::ChatRequest& typed) {
  std::string text = gateway::canonical_request(typed, "qwen2.5-coder");
  text += "\nreasoning:";
  return gateway::response_cache_key("key:app", "gpu", text);
}

// The key as it was made before (the typed request rendered as OpenAI JSON, parsed back for
// its stream members to be dropped, dumped, hashed): the reference of BM_CacheKey.
std::string json_cache_key(const api::ChatRequest& typed) {
  auto canonical = ordered_json::parse(api::render_openai(typed, "qwen2.5-coder"), nullptr, false);
  canonical.erase("stream");
  canonical.erase("stream_options");
  std::string text = canonical.dump();
  text += "\nreasoning:";
  return gateway::response_cache_key("key:app", "gpu", text);
}

void BM_CacheKey(benchmark::State& state, bool typed) {
  auto parsed = gateway::parse_request(api::Endpoint::kChatCompletions, chat_request());
  for (auto _ : state) {
    std::string key = typed ? cache_key(*parsed->typed) : json_cache_key(*parsed->typed);
    benchmark::DoNotOptimize(key.data());
  }
}
BENCHMARK_CAPTURE(BM_CacheKey, typed, true);
BENCHMARK_CAPTURE(BM_CacheKey, json_round_trip, false);

class Collect final : public api::EventSink {
 public:
  Collect(gateway::StreamRenderer& r, std::string& out) : r_(r), out_(out) {}
  void on_event(const api::Event& e) override { r_.render(e, out_); }

 private:
  gateway::StreamRenderer& r_;
  std::string& out_;
};

// A cache holding the answer of the upstream's stream under the request's key.
gateway::ResponseCache& filled_cache(const std::string& key) {
  static gateway::ResponseCache cache;
  std::string sse;
  for (const auto& c : upstream_chunks()) sse += "data: " + c + "\n\n";
  sse += "data: [DONE]\n\n";
  auto kept = std::make_shared<gateway::CachedAnswer>();
  kept->answer = *gateway::answer_from_openai(sse, true);
  kept->target = "gpu";
  kept->prompt_tokens = 512;
  cache.put(key, std::move(kept), 600000, 0);
  return cache;
}

// One hit as the proxy serves it, up to the rendering: the body parsed, the key made, the
// entry looked up, the answer given the client's model name.
struct Hit {
  Result<gateway::ParsedRequest> parsed;
  std::shared_ptr<const gateway::CachedAnswer> entry;
  api::Answer answer;
};
Hit look_up(gateway::ResponseCache& cache, const std::string& body) {
  Hit h{gateway::parse_request(api::Endpoint::kChatCompletions, body), nullptr, {}};
  h.entry = cache.get(cache_key(*h.parsed->typed), 1);
  h.answer = h.entry->answer;
  h.answer.model = h.parsed->model;
  return h;
}

// A hit replayed as chat SSE (`stream`) or rendered as a body.
void cache_hit(benchmark::State& state, bool stream) {
  const std::string body = chat_request();
  auto first = gateway::parse_request(api::Endpoint::kChatCompletions, body);
  gateway::ResponseCache& cache = filled_cache(cache_key(*first->typed));
  const gateway::FrontEnd& fe = gateway::frontend(api::Endpoint::kChatCompletions);
  for (auto _ : state) {
    Hit hit = look_up(cache, body);
    gateway::RenderContext context{"req-1", hit.parsed->model, hit.entry->prompt_tokens};
    if (!stream) {
      auto out = fe.render_answer(hit.answer, context);
      if (!out) {
        state.SkipWithError(out.error().message.c_str());
        break;
      }
      benchmark::DoNotOptimize(out->body.data());
      continue;
    }
    auto renderer = fe.stream_renderer(context);
    std::string out;
    Collect into(*renderer, out);
    api::replay(hit.answer, into, 0, api::Usage{512, 0, 0, 0, true});
    out += fe.stream_done;
    benchmark::DoNotOptimize(out.data());
  }
}
void BM_CacheHitStream(benchmark::State& state) {
  cache_hit(state, true);
}
BENCHMARK(BM_CacheHitStream);
void BM_CacheHitBody(benchmark::State& state) {
  cache_hit(state, false);
}
BENCHMARK(BM_CacheHitBody);

// A streamed hit's first byte: wall time from the request's bytes (parsed, keyed, looked up)
// to the first SSE frame rendered for the client (the socket write aside); issue 19: <= 0.1 ms.
class FirstFrame final : public api::EventSink {
 public:
  FirstFrame(gateway::StreamRenderer& r, std::string& out, std::chrono::steady_clock::time_point& t)
      : r_(r), out_(out), first_(t) {}
  void on_event(const api::Event& e) override {
    r_.render(e, out_);
    if (!seen_ && !out_.empty()) {
      first_ = std::chrono::steady_clock::now();
      seen_ = true;
    }
  }

 private:
  gateway::StreamRenderer& r_;
  std::string& out_;
  std::chrono::steady_clock::time_point& first_;
  bool seen_ = false;
};
void BM_CacheHitStreamFirstByte(benchmark::State& state) {
  const std::string body = chat_request();
  auto first = gateway::parse_request(api::Endpoint::kChatCompletions, body);
  gateway::ResponseCache& cache = filled_cache(cache_key(*first->typed));
  const gateway::FrontEnd& fe = gateway::frontend(api::Endpoint::kChatCompletions);
  for (auto _ : state) {
    const auto arrived = std::chrono::steady_clock::now();
    Hit hit = look_up(cache, body);
    gateway::RenderContext context{"req-1", hit.parsed->model, hit.entry->prompt_tokens};
    auto renderer = fe.stream_renderer(context);
    std::string out;
    std::chrono::steady_clock::time_point first_byte;
    FirstFrame into(*renderer, out, first_byte);
    api::replay(hit.answer, into, 0, api::Usage{512, 0, 0, 0, true});
    state.SetIterationTime(std::chrono::duration<double>(first_byte - arrived).count());
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_CacheHitStreamFirstByte)->UseManualTime()->Unit(benchmark::kMicrosecond);

// A 50-turn conversation.
std::string long_conversation() {
  ordered_json messages = ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a terse assistant."}});
  for (int i = 0; i < 50; ++i) {
    messages.push_back({{"role", "user"},
                        {"content", "Question " + std::to_string(i) +
                                        " about the lighthouse keepers of the northern coast?"}});
    messages.push_back(
        {{"role", "assistant"}, {"content", "Answer " + std::to_string(i) + ": the lamps."}});
  }
  messages.push_back({{"role", "user"}, {"content", "And what happened last?"}});
  return ordered_json{{"model", "m"}, {"messages", messages}}.dump();
}

// Trimming as the planner trims for an HTTP target, per request:
// - BM_Trim50Turns (now): the routing count kept the messages' shares (its cost over a plain count
//   is BM_Count50TurnsShares against BM_Count50Turns/cached), the demo template is compositional,
//   so the least turns to drop come from the shares with no render and no check; then the trimmed
//   request is written as the hop's OpenAI body (what passing the client's bytes on avoids);
// - BM_Trim50TurnsRenderAndCheck (before): the shares rendered again for the trim, the candidate
// checked by
//   one exact count (a template not proven compositional still takes this path), the body;
// - BM_Trim50TurnsBisection: each candidate rendered and counted.
// `counts`: exact counts (renders) per trim.
void trim_50_turns(benchmark::State& state, int mode) {
  auto tok = tokenizer::load_tokenizer(FERRY_DEMO_MODEL);
  if (!tok) {
    state.SkipWithError(tok.error().message.c_str());
    return;
  }
  auto chat = tokenizer::ChatFormatter::create(*tok, "");
  if (!chat) {
    state.SkipWithError(chat.error().message.c_str());
    return;
  }
  gateway::PromptCounter counter{*tok, *chat};
  auto parsed = gateway::parse_request(api::Endpoint::kChatCompletions, long_conversation());
  int64_t counts = 0;
  auto count = [&](const api::ChatRequest& r) {
    ++counts;
    return counter.count(true, api::template_input(r)).value_or(0);
  };
  const auto kept = counter.shares(api::template_input(*parsed->typed));
  gateway::MessageShareCounter share_counter;
  if (mode == 0) {
    share_counter = [&](const api::ChatRequest&) { return kept; };
  } else if (mode == 1) {
    share_counter = [&](const api::ChatRequest& r) {
      auto s = counter.shares(api::template_input(r));
      if (s) s->compositional = false;  // as before: the prediction checked
      return s;
    };
  }
  const int64_t full = count(*parsed->typed);
  gateway::TrimOptions options;
  options.limit = full * 6 / 10;  // about 20 of the 50 exchanges go
  int64_t dropped = 0;
  int64_t after = 0;
  counts = 0;
  for (auto _ : state) {
    auto result = gateway::trim_to_fit(*parsed->typed, options, count, share_counter);
    dropped = result->messages_dropped;
    after = result->tokens_after;
    std::string body = api::render_openai(*result->request, "qwen2.5-coder");
    benchmark::DoNotOptimize(body.data());
  }
  state.counters["prompt_tokens"] = static_cast<double>(full);
  state.counters["messages_dropped"] = static_cast<double>(dropped);
  state.counters["tokens_after"] = static_cast<double>(after);
  state.counters["counts"] =
      static_cast<double>(counts) / static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["compositional"] = (*chat)->compositional() ? 1 : 0;
}
void BM_Trim50Turns(benchmark::State& state) {
  trim_50_turns(state, 0);
}
BENCHMARK(BM_Trim50Turns)->Unit(benchmark::kMicrosecond);
void BM_Trim50TurnsRenderAndCheck(benchmark::State& state) {
  trim_50_turns(state, 1);
}
BENCHMARK(BM_Trim50TurnsRenderAndCheck)->Unit(benchmark::kMicrosecond);
void BM_Trim50TurnsBisection(benchmark::State& state) {
  trim_50_turns(state, 2);
}
BENCHMARK(BM_Trim50TurnsBisection)->Unit(benchmark::kMicrosecond);

// What one exact count of the 50-turn conversation costs: the template's input made, the
// template rendered (the floor of any exact count: Jinja), the rendered prompt counted.
void BM_Count50TurnsRenderOnly(benchmark::State& state) {
  auto tok = tokenizer::load_tokenizer(FERRY_DEMO_MODEL);
  auto chat = tokenizer::ChatFormatter::create(*tok, "");
  auto parsed = gateway::parse_request(api::Endpoint::kChatCompletions, long_conversation());
  for (auto _ : state) {
    auto text = (*chat)->render(api::template_input(*parsed->typed), true);
    benchmark::DoNotOptimize(text->data());
  }
}
BENCHMARK(BM_Count50TurnsRenderOnly)->Unit(benchmark::kMicrosecond);
void BM_Count50Turns(benchmark::State& state, bool cached) {
  auto tok = tokenizer::load_tokenizer(FERRY_DEMO_MODEL);
  auto chat = tokenizer::ChatFormatter::create(*tok, "");
  auto parsed = gateway::parse_request(api::Endpoint::kChatCompletions, long_conversation());
  for (auto _ : state) {
    auto input = api::template_input(*parsed->typed);
    auto n = cached ? (*chat)->count(input) : (*chat)->count_uncached(input);
    benchmark::DoNotOptimize(*n);
  }
}
BENCHMARK_CAPTURE(BM_Count50Turns, cached, true)->Unit(benchmark::kMicrosecond);
// The routing count keeping the messages' shares (when the policy trims): the same render.
void BM_Count50TurnsShares(benchmark::State& state) {
  auto tok = tokenizer::load_tokenizer(FERRY_DEMO_MODEL);
  auto chat = tokenizer::ChatFormatter::create(*tok, "");
  gateway::PromptCounter counter{*tok, *chat};
  auto parsed = gateway::parse_request(api::Endpoint::kChatCompletions, long_conversation());
  for (auto _ : state) {
    auto input = api::template_input(*parsed->typed);
    auto s = counter.shares(input);
    benchmark::DoNotOptimize(s->total);
  }
}
BENCHMARK(BM_Count50TurnsShares)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Count50Turns, uncached, false)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
