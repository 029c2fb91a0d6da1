// The policy loader's YAML tree: wherever the fast parser accepts a document, its tree must be
// exactly yaml-cpp's (types, scalar values, entry order, line and column of every node), and
// it must never accept what yaml-cpp refuses. Checked on policies written the usual ways and on
// thousands of seeded mutations of them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "policies/yaml_tree.h"

namespace ferry::policies::ytree {
namespace {

std::string describe(const Node& n) {
  const char* kinds[] = {"undefined", "null", "scalar", "sequence", "map"};
  return std::string(kinds[static_cast<int>(n.type())]) + " at " + std::to_string(n.Mark().line) +
         ":" + std::to_string(n.Mark().column) +
         (n.IsScalar() ? " '" + n.Scalar() + "'" : std::string());
}

// Empty when equal; otherwise where they first differ.
std::string diff(const Node& a, const Node& b, const std::string& path) {
  if (a.type() != b.type() || a.Mark().line != b.Mark().line ||
      a.Mark().column != b.Mark().column || (a.IsScalar() && a.Scalar() != b.Scalar()) ||
      a.size() != b.size()) {
    return path + ": fast " + describe(a) + ", yaml-cpp " + describe(b);
  }
  if (a.IsSequence()) {
    auto ia = a.items().begin();
    auto ib = b.items().begin();
    for (size_t i = 0; i < a.size(); ++i, ++ia, ++ib) {
      std::string d = diff(*ia, *ib, path + "[" + std::to_string(i) + "]");
      if (!d.empty()) return d;
    }
  }
  if (a.IsMap()) {
    auto ia = a.entries().begin();
    auto ib = b.entries().begin();
    for (size_t i = 0; i < a.size(); ++i, ++ia, ++ib) {
      auto [ka, va] = *ia;
      auto [kb, vb] = *ib;
      std::string d = diff(ka, kb, path + "{key " + std::to_string(i) + "}");
      if (d.empty()) d = diff(va, vb, path + "." + (ka.IsScalar() ? ka.Scalar() : "?"));
      if (!d.empty()) return d;
    }
  }
  return "";
}

// Parses both ways; returns whether the fast parser took it. Fails the test on a difference.
bool same_as_yaml_cpp(const std::string& text) {
  auto fast = Document::parse_fast(text);
  if (!fast) return false;
  std::unique_ptr<Document> reference;
  try {
    reference = Document::from_yaml_cpp(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << "the fast parser accepted what yaml-cpp refuses (" << e.what() << "):\n"
                  << text;
    return true;
  }
  std::string d = diff(fast->root(), reference->root(), "root");
  EXPECT_TRUE(d.empty()) << d << "\nin:\n" << text;
  return true;
}

const char* kDocuments[] = {
    R"(timezone: "+01:00"
targets: { small: local-m, large: gpu-m }
models: [auto, { name: chat, description: 'quick, cheap' }]
rules:
  - id: a
    when: { prompt_tokens: { lte: 1500 }, tools: absent, fits: small }
    route: [small, large]
  - id: b
    when: { any: [ { team: research }, { tags: { matches: 'x.*' } } ], not: { stream: true } }
    set: { max_tokens: { at_most: 4096, default: 10 }, temperature: 0.5 }
    route: [{ target: large, weight: 9 }, { target: small, weight: 1 }]
    shadow: small
    tag: [t1]
  - id: c
    when: { state: { large: { queue_depth: { gt: 3 }, healthy: false } }, weekday: [mon] }
    reject: { status: 503, message: "busy \"now\"" }
default: { route: [large, small] }
)",
    R"(# block style throughout
description: the house policy   # trailing comment
targets:
  small: qwen2.5-0.5b-instruct
  large: llama-3.1-70b
models:
  - auto
  - name: chat-large
    description: big one
rules:
- id: short
  when:
    prompt_tokens:
      lte: 1500
    max_tokens: { lte: 512 }
    time: { gte: "09:00", lt: '18:30' }
    hour: { gte: 9 }
  route:
    - small
    - large

default:
  route: [large]
  set:
    temperature: { at_most: 1.5 }
)",
    R"(targets: {a: x, b: y}
rules:
  -
    id: empty-first-line
    when:
    route: [a]
  - - nested
    - list
  - id: "quoted key value"
    'single': 'it''s'
    url: http://example.com/a#b
    neg: -1
    nul: ~
    nul2: null
    q: "null"
    colon: a:b
    spaced: a b  c
default:
)",
    "targets:\n  a: b\nrules: []\ndefault: {}\n",
    "a: 1\nb:\n- x\n- y\nc: [1, [2, [3, {d: e}]], {}]\nd: {a: [ ], b: { c: d }}\n",
    "a:\n  b:\n    c:\n      d: deep\n  e: f\ng: h",
    "a: { b: 1,\n     c: [2,\n       3] }\nz: 1\n",
};

TEST(YamlTree, UsualPoliciesTakeTheFastPathAndMatchYamlCpp) {
  for (const char* text : kDocuments) {
    EXPECT_TRUE(same_as_yaml_cpp(text)) << "fell back to yaml-cpp on:\n" << text;
  }
  std::ifstream in(FERRY_POLICY_EXAMPLE);
  std::stringstream ss;
  ss << in.rdbuf();
  ASSERT_FALSE(ss.str().empty());
  EXPECT_TRUE(same_as_yaml_cpp(ss.str())) << "the example policy fell back to yaml-cpp";
  // Dashes or dots that are no document marker (one needs a blank after it) are plain text.
  for (const char* text : {"---x: 1\n", "...x: 1\n", "a: ---\nb: ...\n"}) {
    EXPECT_TRUE(same_as_yaml_cpp(text)) << "fell back to yaml-cpp on:\n" << text;
  }
}

// Found by fuzz_policy_loader (fuzz/corpus/policy_loader/eof_null_after_blanks.yaml): a value
// left empty at the end of a text whose last line is blanks. yaml-cpp marks the null where the
// blanks end when that column closes the innermost block collection, else at column 0.
TEST(YamlTree, EmptyValueAtTheEndKeepsYamlCppsMark) {
  for (const char* text :
       {"a:\n  b:\n ", "a:\n  b:\n  ", "a:\n  b:\n   ", "a:\n  b:   ", "a:\n  -\n ", "a:\n  -\n  ",
        "a:\n  -\n   ", "a:\n  b:\n # c", "a:\n  - b:\n   ", "a:\n  - - \n  ",
        "x: 1\nrules:\n  - id: r\n    when:\n      any:\n   "}) {
    EXPECT_TRUE(same_as_yaml_cpp(text)) << "fell back to yaml-cpp on:\n" << text;
  }
  auto doc = Document::parse_fast("a:\n  b:\n ");
  ASSERT_NE(doc, nullptr);
  EXPECT_TRUE(doc->root()["a"]["b"].IsNull());
  EXPECT_EQ(doc->root()["a"]["b"].Mark().line, 2);
  EXPECT_EQ(doc->root()["a"]["b"].Mark().column, 1);
}

TEST(YamlTree, EverythingElseGoesToYamlCpp) {
  for (const char* text : {"",
                           "# only a comment\n",
                           "--- \na: 1\n",
                           "--- a: 1\n",
                           "a: 1\n...\n",
                           "targets:\n...  a: default\n",  // fuzz/corpus: document_end_marker
                           "a: &x 1\nb: *x\n",
                           "a: !!str 1\n",
                           "a: |\n  text\n",
                           "a: >\n  folded\n",
                           "a: multi\n  line\n",
                           "a: \"two\n  lines\"\n",
                           "- top\n- list\n",
                           "a:\tb\n",
                           "a: \xc3\xbc\n",
                           "? complex\n: key\n",
                           "a: {b}\n",
                           "a: [b, ]\n",
                           "a: {b: }\n",
                           "a: [b: c]\n",
                           "\"a\":1\n",
                           "a: \"\\u00e9\"\n",
                           "a: 1\r\n",
                           "a: b: c\n",
                           "a: 1\n  b: 2\n"}) {
    EXPECT_EQ(Document::parse_fast(text), nullptr) << text;
    // ...and the full parse still gives yaml-cpp's answer.
    std::unique_ptr<Document> full;
    std::unique_ptr<Document> reference;
    std::string full_error;
    std::string reference_error;
    try {
      full = Document::parse(text);
    } catch (const YAML::Exception& e) {
      full_error = e.what();
    }
    try {
      reference = Document::from_yaml_cpp(YAML::Load(text));
    } catch (const YAML::Exception& e) {
      reference_error = e.what();
    }
    EXPECT_EQ(full_error, reference_error) << text;
    if (full && reference) {
      EXPECT_EQ(diff(full->root(), reference->root(), "root"), "") << text;
    }
  }
}

TEST(YamlTree, LookupsAndRanges) {
  auto doc = Document::parse("a: 1\nb: [x, y]\na: 2\nc: {d: e}\n");
  ASSERT_TRUE(doc && doc->parsed_fast());
  Node root = doc->root();
  EXPECT_EQ(root["a"].Scalar(), "1");  // the first of duplicate keys, as yaml-cpp
  EXPECT_FALSE(root["missing"]);
  EXPECT_FALSE(root["a"]["x"]);  // not a map: undefined, no throw
  EXPECT_EQ(root["b"].size(), 2u);
  std::vector<std::string> items;
  for (const auto& item : root["b"].items()) items.push_back(item.Scalar());
  EXPECT_EQ(items, (std::vector<std::string>{"x", "y"}));
  std::vector<std::string> keys;
  for (const auto& [k, v] : root.entries()) keys.push_back(k.Scalar());
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "a", "c"}));
  EXPECT_EQ(root["c"]["d"].Mark().line, 3);
  EXPECT_EQ(root["c"]["d"].Mark().column, 7);
}

const char* kTokens[] = {
    "{",  "}",    "[",     "]",   ":",  ": ",   ",",    ", ",     "-",    "- ",   " ",
    "\n", "  ",   "    ",  "'",   "\"", "#",    " # c", "a",      "b1",   "-1",   "09:00",
    "~",  "null", "\"q\"", "'s'", "''", "\\\"", "x: y", "\n  - ", "\n- ", "\n  ", "&a",
    "*a", "!t",   "|",     ">",   "?",  "%",    "@",    "`",      "\t",   "\r",
};

// FERRY_FUZZ_ITERATIONS and FERRY_FUZZ_SEED run a longer or another search by hand.
TEST(YamlTree, MutatedDocumentsNeverDiffer) {
  const char* iterations_env = std::getenv("FERRY_FUZZ_ITERATIONS");
  const char* seed_env = std::getenv("FERRY_FUZZ_SEED");
  int iterations = iterations_env != nullptr ? std::atoi(iterations_env) : 20000;
  std::mt19937_64 rng(seed_env != nullptr ? std::strtoull(seed_env, nullptr, 10) : 20261130);
  int fast = 0;
  int total = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    std::string text = kDocuments[rng() % std::size(kDocuments)];
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      size_t pos = rng() % text.size();
      switch (rng() % 4) {
        case 0:
          text.erase(pos, 1 + rng() % 6);
          break;
        case 1:
          text.insert(pos, kTokens[rng() % std::size(kTokens)]);
          break;
        case 2:
          text.insert(pos, text.substr(rng() % text.size(), 1 + rng() % 30));
          break;
        default:
          std::swap(text[pos], text[rng() % text.size()]);
          break;
      }
    }
    ++total;
    fast += same_as_yaml_cpp(text) ? 1 : 0;
    if (HasFailure()) break;
  }
  // Many small edits keep the document in the fast parser's subset: the comparison has bite.
  EXPECT_GT(fast, total / 10) << fast << " of " << total;
}

}  // namespace
}  // namespace ferry::policies::ytree
