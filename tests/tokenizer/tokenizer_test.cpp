// Unit tests of the tokenizer library that need no reference implementation.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ferry::tokenizer {
namespace {

std::vector<std::string> pieces(SplitPattern p, std::string_view text) {
  std::vector<std::string> out;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = next_piece(p, text, pos);
    EXPECT_GT(end, pos);
    if (end <= pos) break;
    out.emplace_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

using V = std::vector<std::string>;

TEST(Pretokenizer, Cl100kWhitespaceRules) {
  EXPECT_EQ(pieces(SplitPattern::kCl100k, "a  \n\tb"), (V{"a", "  \n", "\tb"}));
  EXPECT_EQ(pieces(SplitPattern::kCl100k, "x   y"), (V{"x", "  ", " y"}));
  EXPECT_EQ(pieces(SplitPattern::kCl100k, "x   "), (V{"x", "   "}));
  EXPECT_EQ(pieces(SplitPattern::kCl100k, "12345"), (V{"123", "45"}));
  EXPECT_EQ(pieces(SplitPattern::kCl100k, "it's IT'S"), (V{"it", "'s", " IT", "'S"}));
  EXPECT_EQ(pieces(SplitPattern::kCl100k, " !!\n\nx"), (V{" !!\n\n", "x"}));
}

TEST(Pretokenizer, UnicodeWhiteSpaceIsExact) {
  // U+0085 is White_Space (JavaScript's \s misses it); U+FEFF is not (JavaScript's \s has it).
  EXPECT_TRUE(code_point_props(0x85) & uprop::kWhiteSpace);
  EXPECT_FALSE(code_point_props(0xFEFF) & uprop::kWhiteSpace);
  EXPECT_TRUE(code_point_props(0x3000) & uprop::kWhiteSpace);
  EXPECT_FALSE(code_point_props(0x200B) & uprop::kWhiteSpace);
  EXPECT_EQ(pieces(SplitPattern::kCl100k, "a\xC2\x85\xC2\x85" "b"), (V{"a", "\xC2\x85", "\xC2\x85" "b"}));
}

TEST(Pretokenizer, Qwen2DigitsOneByOne) {
  EXPECT_EQ(pieces(SplitPattern::kQwen2, "x123"), (V{"x", "1", "2", "3"}));
}

TEST(Pretokenizer, O200kCaseRuns) {
  EXPECT_EQ(pieces(SplitPattern::kO200k, "HTTPServer"), (V{"HTTPServer"}));
  EXPECT_EQ(pieces(SplitPattern::kO200k, "getElementById"), (V{"get", "Element", "By", "Id"}));
  EXPECT_EQ(pieces(SplitPattern::kO200k, "don't/a//"), (V{"don't", "/a", "//"}));
}

TEST(Pretokenizer, Gpt2) {
  EXPECT_EQ(pieces(SplitPattern::kGpt2, "Hello  world's 123"), (V{"Hello", " ", " world", "'s", " 123"}));
}

TEST(Pretokenizer, InvalidBytesArePieces) {
  const std::string s = "a\xFF\xC3 b\xE2\x82";
  std::size_t total = 0;
  for (const auto& p : pieces(SplitPattern::kO200k, s)) total += p.size();
  EXPECT_EQ(total, s.size());
}

TEST(Tiktoken, KnownIds) {
  auto cl = load_tokenizer("cl100k_base");
  ASSERT_TRUE(cl) << cl.error().message;
  EXPECT_EQ((*cl)->encode("hello world"), (std::vector<TokenId>{15339, 1917}));
  auto o2 = load_tokenizer("o200k_base");
  ASSERT_TRUE(o2) << o2.error().message;
  EXPECT_EQ((*o2)->encode("hello world"), (std::vector<TokenId>{24912, 2375}));
  EXPECT_EQ((*cl)->vocab_size(), 100277u);
}

TEST(Tiktoken, SpecialTokensOnlyWhenAsked) {
  auto cl = load_tokenizer("cl100k_base");
  ASSERT_TRUE(cl);
  const auto parsed = (*cl)->encode("a<|endoftext|>b", Specials::kParse);
  EXPECT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[1], 100257u);
  const auto text = (*cl)->encode("a<|endoftext|>b");
  EXPECT_GT(text.size(), 3u);
  EXPECT_EQ((*cl)->decode(parsed), "a<|endoftext|>b");
}

TEST(Tiktoken, AnyBytesRoundTrip) {
  auto cl = load_tokenizer("cl100k_base");
  ASSERT_TRUE(cl);
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string s(rng() % 300, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    EXPECT_EQ((*cl)->decode((*cl)->encode(s)), s);
  }
}

TEST(Tiktoken, HostileInputsStayLinear) {
  // The 10 MB cases run in the conformance tier (tiktoken_conformance_test.cpp).
  auto cl = load_tokenizer("cl100k_base");
  ASSERT_TRUE(cl);
  const std::string spaces(1'000'000, ' ');
  EXPECT_GT((*cl)->count(spaces), 0u);
  std::string letters(200'000, 'x');
  std::mt19937 rng(3);
  for (char& c : letters) c = static_cast<char>('a' + rng() % 26);
  const auto ids = (*cl)->encode(letters);
  EXPECT_EQ((*cl)->decode(ids), letters);
}

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  auto cl = load_tokenizer("cl100k_base");
  ASSERT_TRUE(cl);
  const std::string text = "日本語 😀👍🏽 ok";
  const auto ids = (*cl)->encode(text);
  StreamDecoder dec(**cl);
  std::string out;
  for (const TokenId id : ids) {
    const std::string part = dec.push(id);
    // Every chunk is complete UTF-8 on its own.
    EXPECT_EQ(complete_utf8_prefix(part), part.size());
    out += part;
  }
  out += dec.finish();
  EXPECT_EQ(out, text);
}

TEST(LoadTokenizer, UnknownNameIsAnError) {
  auto t = load_tokenizer("no_such_encoding");
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find("unknown tokenizer"), std::string::npos);
  EXPECT_FALSE(load_tokenizer("/nonexistent/tokenizer.json"));
}

TEST(Jinja, LoopsNamespacesFiltersAndTests) {
  auto t = jinja::Template::parse(
      "{%- set ns = namespace(n=0) -%}"
      "{%- for m in messages if m.role != 'skip' -%}"
      "{{ loop.index }}:{{ m.role | upper }}={{ m.content | trim }}{% if not loop.last %},{% endif %}"
      "{%- set ns.n = ns.n + m.content | length -%}"
      "{%- endfor %} n={{ ns.n }} {{ messages[::-1][0].role }} {{ x is defined }} {{ {'a': [1, 'b']} | tojson }}");
  ASSERT_TRUE(t) << t.error().message;
  const auto ctx = nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "user", "content": " hi "}, {"role": "skip", "content": "zz"},
                       {"role": "assistant", "content": "yo"}]})");
  auto out = t->render(ctx);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(*out, "1:USER=hi,2:ASSISTANT=yo n=6 assistant False {\"a\": [1, \"b\"]}");
}

TEST(Jinja, ErrorsAreValues) {
  EXPECT_FALSE(jinja::Template::parse("{% if x %}unclosed"));
  EXPECT_FALSE(jinja::Template::parse("{% include 'other.jinja' %}"));
  EXPECT_FALSE(jinja::Template::parse("{{ 1 + }}"));
  auto t = jinja::Template::parse("{{ raise_exception('roles must alternate') }}");
  ASSERT_TRUE(t);
  auto out = t->render(nlohmann::ordered_json::object());
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("roles must alternate"), std::string::npos);
}

TEST(ChatFormatter, OpenAiAccounting) {
  auto cl = load_tokenizer("cl100k_base");
  ASSERT_TRUE(cl);
  auto f = ChatFormatter::create(*cl);
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_TRUE((*f)->uses_openai_accounting());
  // 3 per message + "user" (1) + "hello world" (2) + 1 for the name + "bob" (1) + 3 priming.
  auto n = (*f)->count_json(R"([{"role": "user", "name": "bob", "content": "hello world"}])");
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(*n, 3u + 1 + 2 + 1 + 1 + 3);
}

TEST(ChatFormatter, TemplateCountIsTheRenderedPromptsCount) {
  auto cl = load_tokenizer("cl100k_base");
  ASSERT_TRUE(cl);
  auto f = ChatFormatter::create(
      *cl, "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|endoftext|>{% endfor %}"
           "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  ASSERT_TRUE(f) << f.error().message;
  const auto req = nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})");
  auto text = (*f)->render(req);
  ASSERT_TRUE(text);
  EXPECT_EQ(*text, "<|im_start|>user\na\nb<|endoftext|><|im_start|>assistant\n");
  auto n = (*f)->count(req);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, (*cl)->count(*text, Specials::kParse));
  EXPECT_FALSE(ChatFormatter::create(*cl, "{% for %}"));
}

TEST(HfTokenizerJson, UnsupportedPiecesAreLoadErrors) {
  const auto dir = std::filesystem::temp_directory_path() / "ferry_tok_unit_hf";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tokenizer.json").string();
  {
    std::ofstream out(path);
    out << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
              "normalizer": {"type": "NFKC"}, "pre_tokenizer": null})";
  }
  auto t = load_tokenizer(path);
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find("NFKC"), std::string::npos);
  {
    std::ofstream out(path);
    out << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
              "normalizer": null, "pre_tokenizer": null, "added_tokens": [{"id": 3, "content": "<x>", "special": true}]})";
  }
  auto ok = load_tokenizer(path);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ((*ok)->encode("abab<x>a", Specials::kParse), (std::vector<TokenId>{2, 2, 3, 0}));
  std::filesystem::remove_all(dir);
}

TEST(GgufVocab, SharedLlama2SentencePiece) {
  const char* shared = std::getenv("FERRY_SHARED_DIR");
  const std::string path = std::string(shared ? shared : "../shared") + "/models/llama-2-tiny-random.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto t = load_tokenizer(path);
  ASSERT_TRUE(t) << t.error().message;
  // llama.cpp (node-llama-cpp 3.21.1) gives these ids.
  EXPECT_EQ((*t)->encode("Hello world"), (std::vector<TokenId>{15043, 3186}));
  EXPECT_EQ((*t)->decode((*t)->encode("Hello world")), "Hello world");
  EXPECT_EQ((*t)->encode("\n"), (std::vector<TokenId>{29871, 13}));
  EXPECT_TRUE((*t)->add_bos());
}

}  // namespace
}  // namespace ferry::tokenizer
