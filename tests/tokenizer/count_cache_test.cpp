// The per-run count cache against the uncached count: a differential test over many generated
// conversations (repeated system prompts and turns, tool calls, content parts, Unicode,
// special-token text inside content), every chat template ferry ships in tests/tokenizer/templates
// and the synthetic model's own, OpenAI's accounting, and each kind of tokenizer (tiktoken,
// GGUF byte-level BPE, SentencePiece when the shared model is present); a tiny bound evicts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "model_tools/model_tools.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/count_cache.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

const std::vector<std::string> kTexts = {
    "You are a terse assistant.",
    "What is the capital of France?",
    "Paris.",
    "  leading and trailing spaces  ",
    "line one\nline two\n\n\tindented",
    "naïve café — 東京 🚀 emoji",
    "code: for (int i = 0; i < n; ++i) { x += i; }",
    "text with <|im_end|> and <|endoftext|> inside",
    "",
    "1234567890 3.14159 don't won't I'm",
    "A much longer paragraph about lighthouse keepers of the northern coast, who kept the lamps "
    "burning through the winter storms and wrote down every ship that passed.",
};

std::string text_at(std::mt19937& rng) {
  return kTexts[std::uniform_int_distribution<std::size_t>(0, kTexts.size() - 1)(rng)];
}

// A conversation: maybe a system prompt, then turns; some assistants call a tool whose result
// follows; some contents are parts arrays.
Json conversation(std::mt19937& rng) {
  Json messages = Json::array();
  if (rng() % 3 != 0) messages.push_back({{"role", "system"}, {"content", text_at(rng)}});
  const int turns = 1 + static_cast<int>(rng() % 6);
  for (int t = 0; t < turns; ++t) {
    if (rng() % 5 == 0) {
      messages.push_back({{"role", "user"},
                          {"content", Json::array({{{"type", "text"}, {"text", text_at(rng)}},
                                                   {{"type", "text"}, {"text", text_at(rng)}}})}});
    } else {
      messages.push_back({{"role", "user"}, {"content", text_at(rng)}});
    }
    if (t + 1 == turns && rng() % 2 == 0) break;  // ends on the user's turn
    if (rng() % 4 == 0) {
      messages.push_back(
          {{"role", "assistant"},
           {"content", ""},
           {"tool_calls",
            Json::array({{{"id", "c1"},
                          {"type", "function"},
                          {"function",
                           {{"name", "lookup"},
                            {"arguments", "{\"q\": \"" + std::to_string(rng() % 9) + "\"}"}}}}})}});
      messages.push_back({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", text_at(rng)}});
    }
    messages.push_back({{"role", "assistant"}, {"content", text_at(rng)}});
  }
  Json request = {{"messages", messages}};
  if (rng() % 4 == 0) {
    request["tools"] =
        Json::array({{{"type", "function"},
                      {"function", {{"name", "lookup"}, {"parameters", {{"type", "object"}}}}}}});
  }
  return request;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Tokenizers {
  std::vector<std::shared_ptr<const Tokenizer>> all;
  std::filesystem::path dir;
  Tokenizers() {
    dir = std::filesystem::temp_directory_path() /
          ("ferry_count_cache_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir);
    for (const char* name : {"cl100k_base", "o200k_base"}) all.push_back(*load_tokenizer(name));
    model_tools::SynthOptions options;
    options.n_embd = 32;
    options.n_layer = 1;
    options.n_head = 2;
    options.n_head_kv = 1;
    options.n_ff = 64;
    const std::string synth = (dir / "synth.gguf").string();
    EXPECT_TRUE(model_tools::write_synth_model(options, synth));
    all.push_back(*load_tokenizer(synth));
    all.push_back(*load_tokenizer(FERRY_DEMO_MODEL));
    const char* shared = std::getenv("FERRY_SHARED_DIR");
    const std::string spm =
        std::string(shared ? shared : "../shared") + "/models/llama-2-tiny-random.gguf";
    if (std::filesystem::exists(spm)) all.push_back(*load_tokenizer(spm));
  }
  ~Tokenizers() { std::filesystem::remove_all(dir); }
};

std::vector<std::string> template_sources(const Tokenizer& tok) {
  const std::string dir = std::string(FERRY_TOKENIZER_TEST_DIR) + "/templates";
  std::vector<std::string> out;
  for (const char* family :
       {"llama3", "qwen2.5", "qwen3", "smollm2", "mistral", "phi3", "gemma2", "gemma3"}) {
    out.push_back(read(dir + "/" + family + ".jinja"));
  }
  if (!tok.chat_template().empty()) out.push_back(tok.chat_template());
  const std::string& name = tok.name();
  if (name == "cl100k_base" || name == "o200k_base") out.push_back("");  // OpenAI's accounting
  return out;
}

TEST(CountCache, CachedCountsEqualUncachedOverConversationsTemplatesAndTokenizers) {
  Tokenizers toks;
  std::mt19937 rng(20261201);
  std::vector<Json> conversations;
  for (int i = 0; i < 60; ++i) conversations.push_back(conversation(rng));
  int64_t compared = 0;
  for (const auto& tok : toks.all) {
    for (const std::string& source : template_sources(*tok)) {
      auto f = ChatFormatter::create(tok, source);
      ASSERT_TRUE(f) << tok->name() << ": " << f.error().message;
      // Twice over: the second pass is served from the cache.
      for (int pass = 0; pass < 2; ++pass) {
        for (std::size_t i = 0; i < conversations.size(); ++i) {
          for (const bool gen : {true, false}) {
            const auto want = (*f)->count_uncached(conversations[i], gen);
            const auto got = (*f)->count(conversations[i], gen);
            const auto by_message = (*f)->count_messages(conversations[i], gen);
            ASSERT_EQ(static_cast<bool>(got), static_cast<bool>(want)) << tok->name() << " #" << i;
            ASSERT_EQ(static_cast<bool>(by_message), static_cast<bool>(want));
            if (!want) continue;
            ASSERT_EQ(*got, *want) << tok->name() << " template " << source.substr(0, 60)
                                   << " conversation #" << i << " gen " << gen;
            ASSERT_EQ(by_message->total, *want) << tok->name() << " #" << i;
            std::size_t shares = 0;
            for (std::size_t s : by_message->per_message) shares += s;
            EXPECT_LE(shares, *want);
            if (!by_message->per_message.empty()) {
              EXPECT_EQ(by_message->per_message.size(), conversations[i]["messages"].size());
            }
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 1000);
}

// OpenAI's accounting: the shares are exact, so they and the fixed tokens make the total.
TEST(CountCache, OpenAiSharesAddUpToTheTotal) {
  auto cl = load_tokenizer("cl100k_base");
  ASSERT_TRUE(cl);
  auto f = ChatFormatter::create(*cl);
  ASSERT_TRUE(f);
  std::mt19937 rng(7);
  for (int i = 0; i < 50; ++i) {
    Json request = conversation(rng);
    request.erase("tools");
    auto counts = (*f)->count_messages(request);
    ASSERT_TRUE(counts);
    EXPECT_TRUE(counts->exact_shares);
    std::size_t sum = 3;  // priming the reply
    for (std::size_t s : counts->per_message) sum += s;
    EXPECT_EQ(sum, counts->total);
    EXPECT_EQ(counts->total, *(*f)->count_uncached(request));
  }
}

// A bound far below the texts' size: entries are evicted, counts stay exact, and a repeat of
// what is still held is a hit.
TEST(CountCache, ATinyBoundEvictsAndStaysExact) {
  auto demo = load_tokenizer(FERRY_DEMO_MODEL);
  ASSERT_TRUE(demo);
  auto f = ChatFormatter::create(*demo);
  ASSERT_TRUE(f);
  CountCache cache(**demo, 2048);
  std::mt19937 rng(11);
  for (int i = 0; i < 200; ++i) {
    const auto text = (*f)->render(conversation(rng));
    ASSERT_TRUE(text);
    EXPECT_EQ(cache.count_prompt(*text), count_prompt(**demo, *text)) << *text;
    std::vector<PieceCount> pieces;
    const std::size_t n = cache.count_prompt(*text, &pieces);
    std::size_t sum = 0;
    for (const auto& p : pieces) sum += p.tokens;
    EXPECT_EQ(sum + ((*demo)->add_bos() ? 1 : 0), n);
    EXPECT_EQ(cache.count_text(*text), (*demo)->count(*text));
  }
  const auto stats = cache.stats();
  EXPECT_GT(stats.evictions, 0);
  EXPECT_GT(stats.hits, 0);
  EXPECT_LE(stats.bytes, 2048);
}

}  // namespace
}  // namespace ferry::tokenizer
