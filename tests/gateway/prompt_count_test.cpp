// PromptCounter::typed_shares, the count of a chat from the typed request, against the count of
// the chat template's input built from it (api::template_input), over many random requests:
// equal whenever it answers, and it answers for the usual shapes.
#include "gateway/prompt_count.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "api/chat_request.h"
#include "api/openai_parse.h"
#include "api/openai_render.h"
#include "config/config.h"

namespace ferry::gateway {
namespace {

using Json = nlohmann::ordered_json;

PromptCounter counter_for(const char* tokenizer_name) {
  auto cfg = config::load_config_text(std::string(R"(
backends:
  - { name: gpu, base_url: "http://127.0.0.1:9/v1" }
models:
  - { name: m, backend: gpu, upstream_model: m, tokenizer: )") +
                                          tokenizer_name + " }\n",
                                      "ferry.yaml");
  EXPECT_TRUE(cfg) << cfg.error().message;
  auto counters = load_prompt_counters(*cfg);
  EXPECT_TRUE(counters) << counters.error().message;
  return counters->at("m");
}

// The typed count equals the tree's, total and shares, whenever it answers.
void expect_same_as_tree(const PromptCounter& counter, const api::ChatRequest& r) {
  const Json input = api::template_input(r);
  const auto by_tree = counter.shares(input);
  const auto count_by_tree = counter.count(true, input);
  ASSERT_TRUE(by_tree);
  ASSERT_TRUE(count_by_tree);
  ASSERT_EQ(by_tree->total, *count_by_tree);
  const auto typed = counter.typed_shares(r, /*per_message=*/true);
  if (!typed) return;
  EXPECT_EQ(typed->total, by_tree->total) << input.dump();
  EXPECT_EQ(typed->per_message, by_tree->per_message) << input.dump();
  EXPECT_EQ(typed->exact, by_tree->exact);
  EXPECT_EQ(typed->compositional, by_tree->compositional);
  const auto total_only = counter.typed_shares(r, /*per_message=*/false);
  ASSERT_TRUE(total_only);
  EXPECT_EQ(total_only->total, by_tree->total);
  EXPECT_TRUE(total_only->per_message.empty());
}

class RandomChat {
 public:
  explicit RandomChat(uint32_t seed) : rng_(seed) {}

  std::string body() {
    Json b = Json::object();
    b["model"] = "m";
    Json messages = Json::array();
    const int n = pick(0, 6);
    for (int i = 0; i < n; ++i) messages.push_back(message());
    b["messages"] = std::move(messages);
    if (chance(10)) {
      b["tools"] =
          Json::array({{{"type", "function"},
                        {"function", {{"name", word()}, {"parameters", {{"type", "object"}}}}}}});
    } else if (chance(5)) {
      b["tools"] = Json::array();
    } else if (chance(3)) {
      b["tools"] = "not a list";
    }
    if (chance(20)) b["max_tokens"] = pick(1, 100);
    return b.dump();
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(int percent) { return pick(1, 100) <= percent; }

  std::string word() {
    static const char* kWords[] = {"hello",
                                   "the",
                                   " world",
                                   "ledger",
                                   "<|endoftext|>",
                                   "<|im_start|>",
                                   "\xc3\xa9t\xc3\xa9",
                                   "\xe2\x82\xac",
                                   "\xf0\x9f\x98\x80",
                                   "  ",
                                   "\n",
                                   "123",
                                   "tok\tens",
                                   "\"q\"",
                                   "\\",
                                   "",
                                   "a b c d",
                                   "{\"a\":1}"};
    std::string s;
    const int n = pick(0, 8);
    for (int i = 0; i < n; ++i) s += kWords[pick(0, static_cast<int>(std::size(kWords)) - 1)];
    return s;
  }

  Json content() {
    switch (pick(0, 9)) {
      case 0:
        return nullptr;
      case 1:
      case 2: {
        Json parts = Json::array();
        const int n = pick(0, 3);
        for (int i = 0; i < n; ++i) {
          switch (pick(0, 4)) {
            case 0:
              parts.push_back({{"type", "image_url"}, {"image_url", {{"url", "http://x/y.png"}}}});
              break;
            case 1:
              parts.push_back({{"type", "text"}, {"text", word()}, {"cache_control", "x"}});
              break;
            default:
              parts.push_back({{"type", "text"}, {"text", word()}});
          }
        }
        return parts;
      }
      default:
        return word();
    }
  }

  Json message() {
    static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
    Json m = Json::object();
    m["role"] = kRoles[pick(0, 4)];
    if (!chance(10)) m["content"] = content();
    if (chance(15)) m["name"] = word();
    if (chance(15)) {
      Json calls = Json::array();
      const int n = pick(1, 2);
      for (int i = 0; i < n; ++i) {
        Json call = {{"id", "call_" + std::to_string(i)},
                     {"type", "function"},
                     {"function", {{"name", word()}, {"arguments", "{\"q\":\"" + word() + "\"}"}}}};
        if (chance(20)) call["x_call"] = word();
        calls.push_back(std::move(call));
      }
      m["tool_calls"] = std::move(calls);
    }
    if (chance(10)) m["tool_call_id"] = "call_" + word();
    if (chance(8)) m["x_member"] = word();
    if (chance(4)) m["x_number"] = pick(0, 9);
    return m;
  }

  std::mt19937 rng_;
};

TEST(PromptCountTyped, EqualsTheTemplateInputsCountOverRandomChats) {
  for (const char* name : {"cl100k_base", "o200k_base"}) {
    SCOPED_TRACE(name);
    const PromptCounter counter = counter_for(name);
    ASSERT_TRUE(counter.chat);
    RandomChat random(20261205);
    int parsed = 0;
    int typed = 0;
    for (int i = 0; i < 1500; ++i) {
      const std::string body = random.body();
      auto r = api::parse_openai(api::Endpoint::kChatCompletions, body);
      if (!r) continue;
      ++parsed;
      SCOPED_TRACE(body);
      expect_same_as_tree(counter, *r);
      if (counter.typed_shares(*r, false)) ++typed;
      if (HasFatalFailure() || HasNonfatalFailure()) return;
    }
    // Most requests take the typed path; the others (tools, unknown members) the tree's.
    EXPECT_GT(parsed, 1000);
    EXPECT_GT(typed, parsed / 3);
    EXPECT_LT(typed, parsed);
  }
}

TEST(PromptCountTyped, TextThatIsNotUtf8AndUnknownMembersGoToTheTree) {
  const PromptCounter counter = counter_for("cl100k_base");
  api::ChatRequest r;
  r.endpoint = api::Endpoint::kChatCompletions;
  api::Message m;
  m.role = api::Role::kUser;
  m.content.form = api::Content::Form::kText;
  m.content.text = "plain text";
  r.messages.push_back(m);
  expect_same_as_tree(counter, r);
  EXPECT_TRUE(counter.typed_shares(r, true));

  // Not UTF-8, in each field the count reads: the tree holds U+FFFD instead.
  for (int field = 0; field < 5; ++field) {
    api::ChatRequest bad = r;
    api::Message& b = bad.messages[0];
    switch (field) {
      case 0:
        b.content.text = "bad \xff byte";
        break;
      case 1:
        b.content.form = api::Content::Form::kParts;
        b.content.parts = {{"text", "ok", {}}, {"text", "cut \xe2\x82", {}}};
        break;
      case 2:
        b.name = "n\xc0";
        break;
      case 3:
        b.tool_calls = std::vector<api::ToolCall>{{"id", "function", "f", "{\"a\":\"\xfe\"}", {}}};
        break;
      case 4:
        b.tool_call_id = "t\xed\xa0\x80";
        break;
    }
    SCOPED_TRACE(field);
    EXPECT_FALSE(counter.typed_shares(bad, true));
    expect_same_as_tree(counter, bad);
  }

  // Unknown members that the tree's count would read.
  api::ChatRequest extra = r;
  extra.messages[0].extra = Json::object({{"x", "counted"}});
  EXPECT_FALSE(counter.typed_shares(extra, true));
  expect_same_as_tree(counter, extra);
  extra.messages[0].extra = Json::object();  // none, as an empty object
  EXPECT_TRUE(counter.typed_shares(extra, true));
  expect_same_as_tree(counter, extra);

  // A completions request, and a model that counts with a chat template: not this path.
  api::ChatRequest completions;
  completions.endpoint = api::Endpoint::kCompletions;
  EXPECT_FALSE(counter.typed_shares(completions, true));
  EXPECT_FALSE(PromptCounter{}.typed_shares(r, true));
}

}  // namespace
}  // namespace ferry::gateway
