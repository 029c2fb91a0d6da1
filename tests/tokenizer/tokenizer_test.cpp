// Unit tests of the tokenizer library that need no reference implementation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "gguf/gguf_writer.h"
#include "model_tools/model_tools.h"
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
  EXPECT_EQ(pieces(SplitPattern::kCl100k,
                   "a\xC2\x85\xC2\x85"
                   "b"),
            (V{"a", "\xC2\x85",
               "\xC2\x85"
               "b"}));
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
  EXPECT_EQ(pieces(SplitPattern::kGpt2, "Hello  world's 123"),
            (V{"Hello", " ", " world", "'s", " 123"}));
}

TEST(Pretokenizer, InvalidBytesArePieces) {
  const std::string s = "a\xFF\xC3 b\xE2\x82";
  std::size_t total = 0;
  for (const auto& p : pieces(SplitPattern::kO200k, s)) total += p.size();
  EXPECT_EQ(total, s.size());
}

TEST(Pretokenizer, AsciiClassesAgreeWithTheUnicodeTables) {
  for (int b = 0; b < 128; ++b) {
    const std::uint8_t k = ascii::class_of(static_cast<char>(b));
    const std::uint16_t props = code_point_props(static_cast<std::uint32_t>(b));
    EXPECT_EQ(static_cast<bool>(k & ascii::kLetter), static_cast<bool>(props & uprop::kL)) << b;
    EXPECT_EQ(static_cast<bool>(k & ascii::kUpper), static_cast<bool>(props & uprop::kLu)) << b;
    EXPECT_EQ(static_cast<bool>(k & ascii::kLower), static_cast<bool>(props & uprop::kLl)) << b;
    EXPECT_EQ(static_cast<bool>(k & ascii::kDigit), static_cast<bool>(props & uprop::kN)) << b;
    EXPECT_EQ(static_cast<bool>(k & ascii::kSpace), static_cast<bool>(props & uprop::kWhiteSpace))
        << b;
    EXPECT_EQ(static_cast<bool>(k & ascii::kOther),
              !(props & (uprop::kL | uprop::kN | uprop::kWhiteSpace)))
        << b;
    EXPECT_FALSE(props & uprop::kM) << b;
  }
}

// next_piece's ASCII fast paths against the plain code-point matchers, piece by piece, on text
// that is mostly ASCII with the characters that make the fast paths give up mixed in.
TEST(Pretokenizer, FastPathsMatchTheCodePointMatchers) {
  static const char* const kAtoms[] = {"a",
                                       "b",
                                       "Z",
                                       "Q",
                                       "s",
                                       "t",
                                       "S",
                                       "T",
                                       "e",
                                       "l",
                                       "1",
                                       "2",
                                       "9",
                                       " ",
                                       " ",
                                       " ",
                                       "  ",
                                       "\t",
                                       "\n",
                                       "\r\n",
                                       "\v",
                                       "\f",
                                       "'",
                                       "'s",
                                       "'LL",
                                       "'re",
                                       ".",
                                       ",",
                                       "!",
                                       "/",
                                       "//",
                                       "$",
                                       "+",
                                       "<",
                                       "`",
                                       "_",
                                       "-",
                                       "\"",
                                       "\x1F",
                                       "\x7F",
                                       "\xC2\xA0",
                                       "\xC2\x85",
                                       "\xC5\xBF",
                                       "\xC3\xA9",
                                       "\xC3\x89",
                                       "\xC7\x85",
                                       "\xCC\x81",
                                       "\xD9\xA3",
                                       "\xC2\xBD",
                                       "\xE2\x80\x99",
                                       "\xE3\x80\x80",
                                       "\xE4\xB8\xAD",
                                       "\xF0\x9F\x98\x80",
                                       "\xEF\xBB\xBF",
                                       "\xFF",
                                       "\xC3"};
  std::mt19937 rng(11);
  for (int round = 0; round < 4000; ++round) {
    std::string text;
    const int atoms = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < atoms; ++i) text += kAtoms[rng() % std::size(kAtoms)];
    for (const SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kCl100k, SplitPattern::kQwen2,
                                 SplitPattern::kO200k, SplitPattern::kLlamaDefault}) {
      for (std::size_t pos = 0; pos < text.size();) {
        const std::size_t want = next_piece_by_code_points(p, text, pos);
        ASSERT_EQ(next_piece(p, text, pos), want)
            << split_pattern_name(p) << " at " << pos << " of \"" << text << "\"";
        ASSERT_GT(want, pos);
        pos = want;
      }
    }
  }
}

TEST(Pretokenizer, LlamaCppDefault) {
  // [\p{P}$+<=>^~|]+ first, then GPT-2's regex inside each part, then \p{N}+, then [0-9]{3}.
  EXPECT_EQ(pieces(SplitPattern::kLlamaDefault, "Hello, world! 12345 x"),
            (V{"Hello", ",", " world", "!", " ", "123", "45", " x"}));
  EXPECT_EQ(pieces(SplitPattern::kLlamaDefault, "a   !b"), (V{"a", "   ", "!", "b"}));
  EXPECT_EQ(pieces(SplitPattern::kLlamaDefault, "a   `b"), (V{"a", "  ", " `", "b"}));
  EXPECT_EQ(pieces(SplitPattern::kLlamaDefault, "don't"), (V{"don", "'", "t"}));
  EXPECT_EQ(pieces(SplitPattern::kLlamaDefault, "x+=1;"), (V{"x", "+=", "1", ";"}));
  EXPECT_EQ(pieces(SplitPattern::kLlamaDefault, "ab12cd 1234567"),
            (V{"ab", "12", "cd", " ", "123", "456", "7"}));
  // U+00BD is \p{N} but not [0-9]; U+2019 is \p{P}.
  EXPECT_EQ(pieces(SplitPattern::kLlamaDefault,
                   "\xC2\xBD"
                   "1234 it\xE2\x80\x99s"),
            (V{"\xC2\xBD", "123", "4", " it", "\xE2\x80\x99", "s"}));
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

// tiktoken's byte pair merge as its reference implementation writes it: adjacent parts merge
// when their concatenation is a token, lowest rank (= id) first, leftmost on ties. Quadratic;
// for checking the library's merge loops on long pieces.
constexpr TokenId kNoRank = 0xFFFFFFFFu;

std::vector<TokenId> reference_encode(const Tokenizer& tok, SplitPattern pattern,
                                      std::string_view text) {
  std::vector<TokenId> out;
  const auto rank = [&](std::string_view bytes) { return tok.token_id(bytes).value_or(kNoRank); };
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = next_piece_by_code_points(pattern, text, pos);
    const std::string_view piece = text.substr(pos, end - pos);
    pos = end;
    if (const auto whole = tok.token_id(piece)) {
      out.push_back(*whole);
      continue;
    }
    std::vector<std::size_t> starts(piece.size() + 1);
    for (std::size_t i = 0; i <= piece.size(); ++i) starts[i] = i;
    std::vector<TokenId> ranks(piece.size() - 1);
    for (std::size_t i = 0; i + 1 < piece.size(); ++i) ranks[i] = rank(piece.substr(i, 2));
    while (!ranks.empty()) {
      const auto best =
          static_cast<std::size_t>(std::min_element(ranks.begin(), ranks.end()) - ranks.begin());
      if (ranks[best] == kNoRank) break;
      starts.erase(starts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      ranks.erase(ranks.begin() + static_cast<std::ptrdiff_t>(best));
      const auto part_rank = [&](std::size_t i) {
        return rank(piece.substr(starts[i], starts[i + 2] - starts[i]));
      };
      if (best + 2 < starts.size()) ranks[best] = part_rank(best);
      if (best > 0) ranks[best - 1] = part_rank(best - 1);
    }
    for (std::size_t i = 0; i + 1 < starts.size(); ++i) {
      out.push_back(*tok.token_id(piece.substr(starts[i], starts[i + 1] - starts[i])));
    }
  }
  return out;
}

TEST(Tiktoken, LongPiecesMergeAsTiktokenDoes) {
  std::mt19937 rng(5);
  const auto random_text = [&](std::string_view alphabet, std::size_t chars,
                               std::size_t char_bytes) {
    std::string s;
    for (std::size_t i = 0; i < chars; ++i)
      s += alphabet.substr(rng() % (alphabet.size() / char_bytes) * char_bytes, char_bytes);
    return s;
  };
  std::vector<std::string> texts;
  for (const std::size_t n : {49, 50, 64, 100, 333, 1000, 2500}) {
    texts.push_back(random_text("abcdefghijklmnopqrstuvwxyz", n, 1));
    texts.push_back(random_text("ab", n, 1));
    texts.push_back(random_text("eeeeeeeeet", n, 1));
    texts.push_back(std::string(n, 'a'));
    texts.push_back(std::string(n, '='));
    texts.push_back(" " +
                    random_text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", n, 1));
    texts.push_back(random_text(
        "\xE4\xB8\xAD\xE6\x96\x87\xE7\x9A\x84\xE6\x98\xAF\xE4\xB8\x80\xE4\xBA\x86", n / 3, 3));
    texts.push_back(
        random_text("\xD0\xB0\xD0\xB1\xD0\xB2\xD0\xB3\xD0\xB4\xD0\xB5\xD0\xBE\xD1\x82", n / 2, 2));
    texts.push_back(random_text("!@#$%^&*()[]{}<>?/|~-_+=.,;:", n, 1));
    std::string bytes(n, '\0');
    for (char& c : bytes)
      c = static_cast<char>(0x80 + rng() % 0x80);  // invalid UTF-8: "other" bytes
    texts.push_back(bytes);
  }
  for (const char* name : {"cl100k_base", "o200k_base"}) {
    auto tok = load_tokenizer(name);
    ASSERT_TRUE(tok) << tok.error().message;
    const SplitPattern pattern =
        std::string_view(name) == "o200k_base" ? SplitPattern::kO200k : SplitPattern::kCl100k;
    for (const std::string& text : texts) {
      const auto want = reference_encode(**tok, pattern, text);
      ASSERT_EQ((*tok)->encode(text), want)
          << name << " on \"" << text.substr(0, 60) << "\" (" << text.size() << " bytes)";
      ASSERT_EQ((*tok)->count(text), want.size());
    }
  }
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
      "{{ loop.index }}:{{ m.role | upper }}={{ m.content | trim }}{% if not loop.last %},{% endif "
      "%}"
      "{%- set ns.n = ns.n + m.content | length -%}"
      "{%- endfor %} n={{ ns.n }} {{ messages[::-1][0].role }} {{ x is defined }} {{ {'a': [1, "
      "'b']} | tojson }}");
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

// A corrupt or hostile template (from a model file or a config) ends in an error naming what
// it exceeded, never in a stack overflow, an exhausted memory, a cycle or a render that never
// ends; each of these crashed or hung the renderer before its bound existed.
TEST(Jinja, HostileTemplatesEndInErrors) {
  auto render_error = [](const std::string& source) -> std::string {
    auto t = jinja::Template::parse(source);
    if (!t) return t.error().message;
    auto out = t->render(nlohmann::ordered_json::object());
    return out ? std::string() : out.error().message;
  };
  const std::string deep_parens =
      "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  const struct {
    std::string source;
    std::string expect;
  } cases[] = {
      {deep_parens, "nested more than"},
      {"{{ " + std::string(5000, '-') + "1 }}", "nested more than"},
      {"{{ " +
           [] {
             std::string s;
             for (int k = 0; k < 5000; ++k) s += "not ";
             return s;
           }() +
           "1 }}",
       "nested more than"},
      {[] {
         std::string s;
         for (int k = 0; k < 5000; ++k) s += "{% if 1 %}";
         return s;
       }(),
       "nested more than"},
      {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "nested more than"},
      {"{% set x = [] %}{{ x.append(x) }}{{ x|tojson }}", "cannot append a list into itself"},
      {"{% set a = [] %}{% set b = [a] %}{{ a.append(b) }}", "cannot append a list into itself"},
      {"{% set ns = namespace(a=1) %}{% set ns.x = [ns] %}{{ ns|tojson }}",
       "cannot store a namespace inside itself"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
       "steps"},
      {"{{ range(9223372036854775807) }}", "range of more than"},
      {"{{ range(-9223372036854775807, 9223372036854775807, 3) }}", "range of more than"},
      {"{{ range(1" + std::string(300, '0') + ".0) }}", "out of integer range"},
      {"{{ 'ab' * 9000000000000000000 }}", "MiB"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
       "{% endfor %}",
       "MiB"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
       "{% endfor %}",
       "MiB"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}"
       "{% set ns.s = ns.s|replace('a', 'aa')|replace('b', 'bb') %}{% endfor %}",
       "MiB"},
      {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
      {"{{ -9223372036854775807 - 2 }}", "integer overflow"},
      {"{{ 4611686018427387904 * 2 }}", "integer overflow"},
      {"{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow"},
      {"{{ (-9223372036854775807 - 1)|abs }}", "integer overflow"},
      {"{{ 1" + std::string(300, '0') + ".0|int }}", "out of integer range"},
      {"{{ [1]|tojson(indent=1000000000) }}", "indent"},
  };
  for (const auto& c : cases) {
    const std::string error = render_error(c.source);
    EXPECT_NE(error.find(c.expect), std::string::npos)
        << c.source.substr(0, 80) << " gave: " << (error.empty() ? "(rendered)" : error);
  }
  // What real templates do stays well inside the bounds: 100 nested parentheses, INT64_MIN % -1
  // (0, as in Python), and ranges counted exactly.
  auto ok = jinja::Template::parse(
      "{{ " + std::string(100, '(') + "7" + std::string(100, ')') +
      " }} {{ (-9223372036854775807 - 1) % -1 }} {{ range(10, 0, -3)|list|tojson }} "
      "{{ range(0, 10, 4)|length }}");
  ASSERT_TRUE(ok) << ok.error().message;
  auto out = ok->render(nlohmann::ordered_json::object());
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(*out, "7 0 [10, 7, 4, 1] 3");
}

// The step budget is far above what a chat template spends on the largest request the server
// takes (8 MiB): every shipped template renders 100,000 messages with tool calls.
TEST(Jinja, TheStepBudgetFitsTheLargestRequests) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "Be brief."}});
  for (int k = 0; k < 50000; ++k) {
    messages.push_back({{"role", "user"}, {"content", "q" + std::to_string(k)}});
    messages.push_back({{"role", "assistant"}, {"content", "a" + std::to_string(k)}});
  }
  const nlohmann::ordered_json context = {{"messages", messages},
                                          {"add_generation_prompt", true},
                                          {"bos_token", "<s>"},
                                          {"eos_token", "</s>"}};
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(FERRY_TOKENIZER_TEST_DIR) + "/templates")) {
    if (entry.path().extension() != ".jinja") continue;
    std::ifstream in(entry.path());
    const std::string source((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
    auto t = jinja::Template::parse(source);
    ASSERT_TRUE(t) << entry.path() << ": " << t.error().message;
    auto out = t->render(context);
    // A template may refuse the conversation on its own terms (raise_exception), never on the
    // renderer's bounds.
    if (!out) {
      EXPECT_EQ(out.error().message.find("steps"), std::string::npos)
          << entry.path() << ": " << out.error().message;
      EXPECT_EQ(out.error().message.find("nested"), std::string::npos) << entry.path();
    } else {
      EXPECT_NE(out->find("q49999"), std::string::npos) << entry.path();
    }
  }
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
      *cl,
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|endoftext|>{% endfor %}"
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

// ChatFormatter renders from the request in place (no copy of the messages unless they need
// normalising); it must give what rendering its documented context gives (the context the
// conformance tests hold to @huggingface/jinja).
TEST(ChatFormatter, RendersWhatItsContextRenders) {
  const std::string dir = std::string(FERRY_TOKENIZER_TEST_DIR) + "/templates";
  std::ifstream in(dir + "/conversations.json");
  ASSERT_TRUE(in) << dir;
  const auto conversations = nlohmann::ordered_json::parse(in);
  auto cl = load_tokenizer("cl100k_base");
  ASSERT_TRUE(cl);
  std::vector<nlohmann::ordered_json> requests;
  for (const auto& conv : conversations) {
    nlohmann::ordered_json req;
    req["messages"] = conv["messages"];
    if (conv.contains("tools")) req["tools"] = conv["tools"];
    if (conv.contains("kwargs")) req["chat_template_kwargs"] = conv["kwargs"];
    requests.push_back(req);
  }
  // Content parts, and tool-call arguments as JSON text, go through the normalising path.
  requests.push_back(nlohmann::ordered_json::parse(R"({"messages": [
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}},
                                 {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get", "arguments": "{\"city\": \"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "cold"}],
    "chat_template_kwargs": {"enable_thinking": false, "add_generation_prompt": false}})"));
  for (const char* family :
       {"llama3", "qwen2.5", "qwen3", "smollm2", "mistral", "phi3", "gemma2", "gemma3"}) {
    std::ifstream t(dir + "/" + family + ".jinja");
    const std::string source((std::istreambuf_iterator<char>(t)), std::istreambuf_iterator<char>());
    auto f = ChatFormatter::create(*cl, source);
    ASSERT_TRUE(f) << family << ": " << f.error().message;
    auto tpl = jinja::Template::parse(source);
    ASSERT_TRUE(tpl);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      for (const bool gen : {true, false}) {
        const auto want = tpl->render((*f)->template_context(requests[i], gen));
        const auto got = (*f)->render(requests[i], gen);
        ASSERT_EQ(static_cast<bool>(got), static_cast<bool>(want)) << family << " #" << i;
        if (want) {
          EXPECT_EQ(*got, *want) << family << " #" << i;
        }
      }
    }
  }
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

// `ferry model synth` writes tokenizer.ggml.pre "default", llama.cpp's fallback: it loads, and
// splits as llama.cpp's default pre-tokenizer does.
TEST(GgufVocab, SynthModelsLoadWithTheDefaultPreTokenizer) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("ferry_tok_synth_" + std::to_string(std::random_device{}())))
                              .string();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/synth.gguf";
  model_tools::SynthOptions options;
  options.n_embd = 32;
  options.n_layer = 1;
  options.n_head = 2;
  options.n_head_kv = 1;
  options.n_ff = 64;
  const auto written = model_tools::write_synth_model(options, path);
  ASSERT_TRUE(written) << written.error().message;
  auto tok = load_tokenizer(path);
  ASSERT_TRUE(tok) << tok.error().message;
  const std::string text = "Hello, world! 12345 don't\n\nx+=1;";
  const auto ids = (*tok)->encode(text);
  EXPECT_FALSE(ids.empty());
  EXPECT_EQ((*tok)->decode(ids), text);
  // No token spans two pieces of the default pre-tokenizer.
  std::vector<std::size_t> cuts;
  for (std::size_t pos = 0; pos < text.size();
       pos = next_piece(SplitPattern::kLlamaDefault, text, pos))
    cuts.push_back(pos);
  std::size_t at = 0;
  for (const TokenId id : ids) {
    const std::size_t len = (*tok)->token_bytes(id).size();
    const auto next_cut = std::upper_bound(cuts.begin(), cuts.end(), at);
    if (next_cut != cuts.end()) {
      EXPECT_LE(at + len, *next_cut) << "token " << id << " at byte " << at;
    }
    at += len;
  }
  std::filesystem::remove_all(dir);
}

TEST(GgufVocab, SharedLlama2SentencePiece) {
  const char* shared = std::getenv("FERRY_SHARED_DIR");
  const std::string path =
      std::string(shared ? shared : "../shared") + "/models/llama-2-tiny-random.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto t = load_tokenizer(path);
  ASSERT_TRUE(t) << t.error().message;
  // llama.cpp (node-llama-cpp 3.21.1) gives these ids.
  EXPECT_EQ((*t)->encode("Hello world"), (std::vector<TokenId>{15043, 3186}));
  EXPECT_EQ((*t)->decode((*t)->encode("Hello world")), "Hello world");
  EXPECT_EQ((*t)->encode("\n"), (std::vector<TokenId>{29871, 13}));
  EXPECT_TRUE((*t)->add_bos());
}

// A GGUF WordPiece vocabulary by hand: words and pieces, [UNK] for a word with an unknown
// piece, lowercasing and accent stripping, invalid bytes dropped as llama.cpp drops them
// (wpm_conformance_test.cpp compares whole corpora with llama.cpp itself).
TEST(WordPiece, LlamaCppWpmRules) {
  const std::string ws = "\xE2\x96\x81";
  std::vector<std::string> tokens = {
      "[PAD]", "[UNK]",  "[CLS]",     "[SEP]",  ws + "hello",        ws + "un", "believ",
      "able",  ws + ",", ws + "cafe", ws + "!", ws + "\xE4\xB8\xAD", ws + "x"};
  gguf::GgufWriter w;
  w.set("general.architecture", gguf::Value::string("bert"));
  w.set("tokenizer.ggml.model", gguf::Value::string("bert"));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(tokens));
  w.set("tokenizer.ggml.token_type",
        gguf::Value::i32_array({3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  w.set("tokenizer.ggml.unknown_token_id", gguf::Value::u32(1));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(2));
  w.set("tokenizer.ggml.seperator_token_id", gguf::Value::u32(3));
  const std::string path =
      (std::filesystem::temp_directory_path() / "ferry_wpm_unit.gguf").string();
  ASSERT_TRUE(w.write_file(path));
  auto t = load_tokenizer(path);
  ASSERT_TRUE(t) << t.error().message;
  using V = std::vector<TokenId>;
  EXPECT_EQ((*t)->encode("Hello, UNBELIEVABLE!"), (V{4, 8, 5, 6, 7, 10}));
  EXPECT_EQ((*t)->encode("  Caf\xC3\xA9 \xE4\xB8\xAD\xE4\xB8\xAD"), (V{9, 11, 11}));
  EXPECT_EQ((*t)->encode("hellox unbelievablex"), (V{1, 1}));  // no piece "x" after a word start
  EXPECT_EQ((*t)->encode("he\xFFllo \x01x\xC3"), (V{4, 12}));
  EXPECT_EQ((*t)->bos_id(), 2u);
  EXPECT_EQ((*t)->eos_id(), 3u);
  EXPECT_TRUE((*t)->add_bos() && (*t)->add_eos());
  EXPECT_EQ((*t)->decode(V{4, 5, 6, 7, 8}), "hello unbelievable ,");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ferry::tokenizer
