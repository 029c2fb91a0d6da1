// The cost levers' pure parts: trimming by the messages' shares against trimming by bisection
// alone (the same turns dropped, the same exact count, over generated conversations and
// limits, with the demo model's tokenizer and template and with OpenAI's accounting), the
// shares of compositional templates taken without any check against the whole count (every
// shipped template), the persistent cache tier (its codec, bound, expiry, a reopen), and the
// response cache's canonical request (every member that shapes the answer changes it, the
// stream members do not).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

#include "api/openai_parse.h"
#include "api/openai_render.h"
#include "gateway/prompt_count.h"
#include "gateway/response_cache.h"
#include "gateway/response_cache_store.h"
#include "gateway/trim.h"
#include "ledger/sqlite_db.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::gateway {
namespace {

using Json = nlohmann::ordered_json;

api::ChatRequest parse(const Json& body) {
  auto r = api::parse_openai(api::Endpoint::kChatCompletions, body.dump());
  EXPECT_TRUE(r) << body.dump();
  return r ? *r : api::ChatRequest{};
}

// A conversation of `turns` exchanges after a system prompt, some with a tool call and its
// result, ending on a user question.
Json conversation(std::mt19937& rng, int turns) {
  Json messages = Json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a terse assistant."}});
  for (int i = 0; i < turns; ++i) {
    const std::string n = std::to_string(rng() % 1000);
    messages.push_back({{"role", "user"}, {"content", "Question " + n + " about the lamps?"}});
    if (rng() % 4 == 0) {
      messages.push_back(
          {{"role", "assistant"},
           {"content", "Let me look that up."},
           {"tool_calls",
            Json::array(
                {{{"id", "c" + n},
                  {"type", "function"},
                  {"function", {{"name", "lookup"}, {"arguments", "{\"q\":" + n + "}"}}}}})}});
      messages.push_back({{"role", "tool"}, {"tool_call_id", "c" + n}, {"content", "result " + n}});
    }
    messages.push_back({{"role", "assistant"},
                        {"content", std::string(1 + rng() % 60, 'a' + (rng() % 26)) + " done."}});
  }
  messages.push_back({{"role", "user"}, {"content", "And what happened last?"}});
  return {{"model", "m"}, {"messages", messages}};
}

void trim_by_shares_equals_bisection(const tokenizer::ChatFormatter* chat,
                                     std::shared_ptr<const tokenizer::Tokenizer> tok) {
  std::shared_ptr<const tokenizer::ChatFormatter> shared(std::shared_ptr<void>(), chat);
  PromptCounter counter{std::move(tok), shared};
  int64_t counts = 0;
  auto count = [&](const api::ChatRequest& r) {
    ++counts;
    return counter.count(true, api::template_input(r)).value_or(-1);
  };
  auto shares = [&](const api::ChatRequest& r) { return counter.shares(api::template_input(r)); };
  std::mt19937 rng(99);
  int64_t trimmed = 0;
  for (int i = 0; i < 40; ++i) {
    const api::ChatRequest request = parse(conversation(rng, 3 + static_cast<int>(rng() % 20)));
    const int64_t full = count(request);
    for (int pct : {20, 45, 70, 95, 100}) {
      TrimOptions options;
      options.limit = full * pct / 100;
      options.keep_last_turns = 1 + static_cast<int64_t>(rng() % 2);
      auto want = trim_to_fit(request, options, count);
      counts = 0;
      auto got = trim_to_fit(request, options, count, shares);
      ASSERT_EQ(static_cast<bool>(got), static_cast<bool>(want)) << i << " " << pct;
      if (!want) continue;
      EXPECT_EQ(got->messages_dropped, want->messages_dropped) << i << " " << pct;
      EXPECT_EQ(got->tokens_before, want->tokens_before);
      EXPECT_EQ(got->tokens_after, want->tokens_after) << i << " " << pct;
      EXPECT_LE(got->tokens_after, options.limit);
      if (got->request) {
        // What the shares chose is the exact count of what is sent.
        EXPECT_EQ(count(*got->request), got->tokens_after);
        ++trimmed;
      }
      EXPECT_LE(counts, 2 + 1) << "the shares held: one exact check, plus the recount above";
    }
  }
  EXPECT_GT(trimmed, 40);
}

TEST(TrimShares, ChooseWhatBisectionChoosesWithTheDemoTemplate) {
  auto tok = tokenizer::load_tokenizer(FERRY_DEMO_MODEL);
  ASSERT_TRUE(tok);
  auto chat = tokenizer::ChatFormatter::create(*tok);
  ASSERT_TRUE(chat);
  trim_by_shares_equals_bisection(chat->get(), *tok);
}

TEST(TrimShares, ChooseWhatBisectionChoosesWithOpenAiAccounting) {
  auto tok = tokenizer::load_tokenizer("cl100k_base");
  ASSERT_TRUE(tok);
  auto chat = tokenizer::ChatFormatter::create(*tok);
  ASSERT_TRUE(chat);
  trim_by_shares_equals_bisection(chat->get(), *tok);
}

// Every shipped template with the demo model's tokenizer (ChatML's special tokens): where the
// template is proven compositional, trimming takes the shares as exact (no count at all while
// the first message stays), and what it sends recounts whole to exactly what it said and drops
// what bisection drops; elsewhere the shares are checked. Generated conversations with and
// without a system prompt, tool calls and results, several limits.
TEST(TrimShares, CompositionalSharesAreExactForEveryShippedTemplate) {
  auto tok = tokenizer::load_tokenizer(FERRY_DEMO_MODEL);
  ASSERT_TRUE(tok);
  std::set<std::string> compositional;
  int64_t unchecked = 0;
  for (const char* family :
       {"llama3", "qwen2.5", "qwen3", "smollm2", "mistral", "phi3", "gemma2", "gemma3"}) {
    std::ifstream in(std::string(FERRY_TEMPLATES_DIR) + "/" + family + ".jinja");
    const std::string source((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
    ASSERT_FALSE(source.empty()) << family;
    auto chat = tokenizer::ChatFormatter::create(*tok, source);
    ASSERT_TRUE(chat) << family;
    if ((*chat)->compositional()) compositional.insert(family);
    PromptCounter counter{*tok, *chat};
    int64_t counts = 0;
    auto count = [&](const api::ChatRequest& r) {
      ++counts;
      return counter.count(true, api::template_input(r)).value_or(-1);
    };
    auto shares = [&](const api::ChatRequest& r) { return counter.shares(api::template_input(r)); };
    std::mt19937 rng(7);
    for (int i = 0; i < 30; ++i) {
      Json body = conversation(rng, 2 + static_cast<int>(rng() % 16));
      const bool system = rng() % 3 != 0;
      if (!system) body["messages"].erase(body["messages"].begin());
      const api::ChatRequest request = parse(body);
      const int64_t full = count(request);
      if (full < 0) continue;  // a conversation this template refuses (roles, tools)
      for (int pct : {30, 60, 90}) {
        TrimOptions options;
        options.limit = full * pct / 100;
        auto want = trim_to_fit(request, options, count);
        counts = 0;
        auto got = trim_to_fit(request, options, count, shares);
        const int64_t used = counts;
        ASSERT_EQ(static_cast<bool>(got), static_cast<bool>(want)) << family << " " << i;
        if (!want) continue;
        EXPECT_EQ(got->messages_dropped, want->messages_dropped)
            << family << " " << i << " " << pct;
        EXPECT_EQ(got->tokens_after, want->tokens_after) << family << " " << i << " " << pct;
        if (!got->request) continue;
        EXPECT_EQ(count(*got->request), got->tokens_after) << family << " " << i << " " << pct;
        if ((*chat)->compositional() && system) {
          EXPECT_EQ(used, 0) << family << ": compositional shares need no count";
          ++unchecked;
        }
      }
    }
  }
  // ChatML's templates are cut by this tokenizer's special tokens; the others' turn markers are
  // plain text to it (their shares are unknown, bisection decides), and Gemma's first user turn
  // takes the system prompt.
  EXPECT_EQ(compositional, (std::set<std::string>{"qwen2.5", "qwen3", "smollm2"}));
  EXPECT_GT(unchecked, 60);
}

// A template whose rendering of a message depends on its position is not compositional: its
// shares are checked (and the count stays exact).
TEST(TrimShares, APositionalTemplateIsNotCompositional) {
  auto tok = tokenizer::load_tokenizer(FERRY_DEMO_MODEL);
  ASSERT_TRUE(tok);
  auto numbered = tokenizer::ChatFormatter::create(
      *tok,
      "{% for m in messages %}<|im_start|>{{ m.role }} {{ loop.index }}\n{{ m.content }}"
      "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  ASSERT_TRUE(numbered);
  EXPECT_FALSE((*numbered)->compositional());
  auto plain = tokenizer::ChatFormatter::create(
      *tok,
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  ASSERT_TRUE(plain);
  EXPECT_TRUE((*plain)->compositional());
}

// Shares that lie: the exact check catches them and bisection decides.
TEST(TrimShares, AWrongPredictionFallsBackToBisection) {
  std::mt19937 rng(5);
  const api::ChatRequest request = parse(conversation(rng, 10));
  auto count = [](const api::ChatRequest& r) {
    int64_t n = 0;
    for (const auto& m : r.messages) n += 5 + static_cast<int64_t>(m.content.text.size());
    return n;
  };
  auto lying = [&](const api::ChatRequest& r) {
    MessageShares s{count(r), std::vector<int64_t>(r.messages.size(), 1), false, false};
    return std::optional<MessageShares>(s);
  };
  TrimOptions options;
  options.limit = count(request) / 2;
  auto want = trim_to_fit(request, options, count);
  auto got = trim_to_fit(request, options, count, lying);
  ASSERT_TRUE(want);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->messages_dropped, want->messages_dropped);
  EXPECT_EQ(got->tokens_after, want->tokens_after);
}

TEST(CanonicalRequest, EveryMemberThatShapesTheAnswerChangesItAndStreamingDoesNot) {
  const Json base = {{"model", "m"},
                     {"temperature", 0},
                     {"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}};
  const std::string key = canonical_request(parse(base), "up");
  // The stream members and the client's model name are not part of what the target receives.
  Json streamed = base;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  EXPECT_EQ(canonical_request(parse(streamed), "up"), key);
  EXPECT_NE(canonical_request(parse(base), "other-upstream"), key);
  const std::vector<std::pair<const char*, Json>> changes = {
      {"temperature", 0.5},
      {"top_p", 0.9},
      {"seed", 7},
      {"max_tokens", 10},
      {"max_completion_tokens", 10},
      {"stop", "x"},
      {"presence_penalty", 0.1},
      {"frequency_penalty", 0.1},
      {"logit_bias", {{"42", 5}}},
      {"top_k", 3},
      {"min_p", 0.1},
      {"user", "u1"},
      {"response_format", {{"type", "json_object"}}},
      {"tools",
       Json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {}}}}}})},
      {"chat_template_kwargs", {{"enable_thinking", false}}},
      {"n", 2},
  };
  for (const auto& [member, value] : changes) {
    Json changed = base;
    changed[member] = value;
    EXPECT_NE(canonical_request(parse(changed), "up"), key) << member;
  }
  Json other_text = base;
  other_text["messages"][0]["content"] = "hi!";
  EXPECT_NE(canonical_request(parse(other_text), "up"), key);
  Json other_role = base;
  other_role["messages"][0]["role"] = "system";
  EXPECT_NE(canonical_request(parse(other_role), "up"), key);
  // Length-prefixed: moving a byte from one message into the next is another request.
  Json two = base;
  two["messages"] =
      Json::array({{{"role", "user"}, {"content", "ab"}}, {{"role", "user"}, {"content", "c"}}});
  Json moved = two;
  moved["messages"][0]["content"] = "a";
  moved["messages"][1]["content"] = "bc";
  EXPECT_NE(canonical_request(parse(two), "up"), canonical_request(parse(moved), "up"));
  // A rule's overrides are what the target receives.
  api::Overrides o;
  o.temperature = 0.7;
  EXPECT_NE(canonical_request(parse(base), "up", o), key);
  Json at_07 = base;
  at_07["temperature"] = 0.7;
  EXPECT_EQ(canonical_request(parse(base), "up", o), canonical_request(parse(at_07), "up"));
}

// ---- the persistent cache tier ----------------------------------------------------------------

CachedAnswer sample_answer(const std::string& text) {
  CachedAnswer v;
  v.answer.id = "chatcmpl-1";
  v.answer.model = "gpu";
  v.answer.created = 1760000000;
  api::Block thinking;
  thinking.kind = api::BlockKind::kThinking;
  thinking.text = "hmm";
  thinking.signature = "sig";
  api::Block answer;
  answer.text = text;
  api::Block call;
  call.kind = api::BlockKind::kToolCall;
  call.call_id = "call_1";
  call.name = "lookup";
  call.arguments = std::string("{\"q\":\"a\0b\"}", 12);  // any bytes
  v.answer.blocks = {thinking, answer, call};
  v.answer.finish = api::FinishReason::kStopSequence;
  v.answer.stop_sequence = "END";
  v.answer.usage = api::Usage{12, 7, 3, 2, true};
  v.tokens = ledger::split_openai_usage(12, 3, 7, 2, ledger::TokenSource::kBackend);
  v.target = "gpu";
  v.prompt_tokens = 12;
  return v;
}

TEST(PersistentCache, TheCodecKeepsEveryFieldAndRefusesEveryTruncation) {
  const CachedAnswer v = sample_answer("the lamps");
  const std::string bytes = encode_cached_answer(v);
  auto back = decode_cached_answer(bytes);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->answer.id, v.answer.id);
  EXPECT_EQ(back->answer.model, v.answer.model);
  EXPECT_EQ(back->answer.created, v.answer.created);
  EXPECT_EQ(back->answer.blocks, v.answer.blocks);
  EXPECT_EQ(back->answer.finish, v.answer.finish);
  EXPECT_EQ(back->answer.stop_sequence, v.answer.stop_sequence);
  EXPECT_EQ(back->answer.usage, v.answer.usage);
  EXPECT_EQ(back->tokens.input.count, v.tokens.input.count);
  EXPECT_EQ(back->tokens.cached_input.count, v.tokens.cached_input.count);
  EXPECT_EQ(back->tokens.output.count, v.tokens.output.count);
  EXPECT_EQ(back->tokens.reasoning.count, v.tokens.reasoning.count);
  EXPECT_EQ(back->tokens.output.source, ledger::TokenSource::kBackend);
  EXPECT_EQ(back->target, v.target);
  EXPECT_EQ(back->prompt_tokens, v.prompt_tokens);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_cached_answer(bytes.substr(0, n))) << n;
  }
  EXPECT_FALSE(decode_cached_answer(bytes + "x"));
  std::string foreign = bytes;
  foreign[0] = 9;  // another format
  EXPECT_FALSE(decode_cached_answer(foreign));
}

TEST(PersistentCache, EntriesSurviveAReopenExpireAndStayWithinTheBound) {
  char dir_template[] = "/tmp/ferry_pcache_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string path = std::string(dir_template) + "/cache.db";
  const int64_t now = response_cache_now_ms();
  const int64_t bound = 1 << 20;
  {
    auto tier = PersistentCache::open(path, bound);
    ASSERT_TRUE(tier) << tier.error().message;
    (*tier)->save("live", std::make_shared<CachedAnswer>(sample_answer("kept")), now + 600000);
    (*tier)->save("gone", std::make_shared<CachedAnswer>(sample_answer("old")), now + 1);
    // 24 entries of 100 KB: the file keeps the most recently stored MiB.
    for (int i = 0; i < 24; ++i) {
      (*tier)->save(
          "big" + std::to_string(i),
          std::make_shared<CachedAnswer>(sample_answer(std::string(100000, 'a' + i % 26))),
          now + 600000);
      (*tier)->flush();  // one batch each: stored in order
    }
    EXPECT_EQ((*tier)->stats().written, 26);
    EXPECT_GT((*tier)->stats().evicted, 0);
  }
  {
    auto db = ledger::Db::open(path, true);
    ASSERT_TRUE(db);
    auto total = db->prepare("SELECT SUM(bytes), COUNT(*) FROM entries");
    ASSERT_TRUE(total);
    ASSERT_TRUE(*total->step());
    EXPECT_LE(total->int_at(0), bound);
    EXPECT_GE(total->int_at(1), 9);  // about ten 100 KB entries fit
  }
  auto tier = PersistentCache::open(path, bound);
  ASSERT_TRUE(tier);
  ResponseCache memory(4 << 20);
  auto loaded = (*tier)->load_into(memory, now + 10);  // "gone" expired by then
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_FALSE(memory.get("gone", now + 10));
  EXPECT_FALSE(memory.get("live", now + 10)) << "stored first: out of the bound";
  EXPECT_FALSE(memory.get("big0", now + 10));
  auto newest = memory.get("big23", now + 10);
  ASSERT_TRUE(newest);
  EXPECT_EQ(newest->answer.blocks[1].text, std::string(100000, 'a' + 23 % 26));
  EXPECT_EQ(*loaded, memory.stats().entries);
  EXPECT_FALSE(memory.get("big23", now + 600001)) << "the TTL left is kept";
  std::filesystem::remove_all(dir_template);
}

}  // namespace
}  // namespace ferry::gateway
