// The cost levers' pure parts: trimming by the messages' shares against trimming by bisection
// alone (the same turns dropped, the same exact count, over generated conversations and
// limits, with the demo model's tokenizer and template and with OpenAI's accounting), and the
// response cache's canonical request (every member that shapes the answer changes it, the
// stream members do not).
#include <gtest/gtest.h>

#include <random>

#include "api/openai_parse.h"
#include "api/openai_render.h"
#include "gateway/prompt_count.h"
#include "gateway/response_cache.h"
#include "gateway/trim.h"
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
    MessageShares s{count(r), std::vector<int64_t>(r.messages.size(), 1), false};
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

}  // namespace
}  // namespace ferry::gateway
