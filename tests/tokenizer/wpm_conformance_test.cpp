// GGUF WordPiece ("bert") vocabularies: identical ids to llama.cpp's WPM tokenizer
// (node-llama-cpp 3.21.1). The vocabulary is made here from the conformance corpus (its most
// frequent words and word tails, its characters, BERT's special tokens at BERT's ids), written
// as a vocabulary-only GGUF with the bert hyper-parameters llama.cpp reads. Texts are valid
// UTF-8 (node carries no other); tokenizer_test.cpp covers invalid bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <unistd.h>

#include "gguf/gguf_writer.h"
#include "tests/tokenizer/llama_conformance.h"
#include "tests/tokenizer/test_support.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {
namespace {

const std::string kWordStart = "\xE2\x96\x81";

std::size_t utf8_len(unsigned char c) {
  return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
}

// Words of the corpus: runs between ASCII white space and punctuation, ASCII lowercased.
std::map<std::string, int> corpus_words(const std::vector<std::string>& texts) {
  std::map<std::string, int> words;
  for (const std::string& t : texts) {
    std::string w;
    for (const char c : t) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x80 && !std::isalnum(u)) {
        if (!w.empty()) ++words[w];
        w.clear();
        continue;
      }
      w.push_back(static_cast<char>(std::tolower(u)));
    }
    if (!w.empty()) ++words[w];
  }
  return words;
}

// The most frequent `n` keys of a count table (ties by key).
std::vector<std::string> top(const std::map<std::string, int>& counts, std::size_t n) {
  std::vector<std::pair<int, std::string>> v;
  for (const auto& [k, c] : counts) v.emplace_back(-c, k);
  std::sort(v.begin(), v.end());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size() && i < n; ++i) out.push_back(v[i].second);
  return out;
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
};

Vocab corpus_vocab(const std::vector<std::string>& texts) {
  Vocab v;
  std::set<std::string> seen;
  const auto add = [&](const std::string& t, int32_t type) {
    if (!seen.insert(t).second) return;
    v.tokens.push_back(t);
    v.types.push_back(type);
  };
  add("[PAD]", 3);
  for (int i = 0; i < 99; ++i) add(kWordStart + "[unused" + std::to_string(i) + "]", 1);
  for (const char* s : {"[UNK]", "[CLS]", "[SEP]", "[MASK]"}) add(s, 3);
  for (int c = 0x21; c < 0x7F; ++c) {
    if (!std::isalnum(c)) add(kWordStart + std::string(1, static_cast<char>(c)), 1);
  }
  const auto words = corpus_words(texts);
  std::map<std::string, int> chars, tails;
  for (const auto& [w, count] : words) {
    for (std::size_t i = 0; i < w.size();) {
      const std::size_t len = std::min(utf8_len(static_cast<unsigned char>(w[i])), w.size() - i);
      chars[w.substr(i, len)] += count;
      if (i > 0) {
        for (std::size_t n = 2; n <= 5 && i + n <= w.size(); ++n) tails[w.substr(i, n)] += count;
      }
      i += len;
    }
  }
  // Characters seen once stay out of the vocabulary, so some words are [UNK].
  for (const auto& [c, count] : chars) {
    if (count < 2) continue;
    add(kWordStart + c, 1);
    add(c, 1);
  }
  for (const std::string& w : top(words, 4000)) add(kWordStart + w, 1);
  for (const std::string& t : top(tails, 3000)) add(t, 1);
  return v;
}

std::string write_bert_vocab(const std::string& path, const Vocab& v) {
  gguf::GgufWriter w;
  w.set("general.architecture", gguf::Value::string("bert"));
  w.set("bert.context_length", gguf::Value::u32(512));
  w.set("bert.embedding_length", gguf::Value::u32(32));
  w.set("bert.feed_forward_length", gguf::Value::u32(64));
  w.set("bert.block_count", gguf::Value::u32(1));
  w.set("bert.attention.head_count", gguf::Value::u32(2));
  w.set("bert.attention.layer_norm_epsilon", gguf::Value::f32(1e-12f));
  w.set("bert.attention.causal", gguf::Value::boolean(false));
  w.set("bert.pooling_type", gguf::Value::u32(2));
  w.set("tokenizer.ggml.model", gguf::Value::string("bert"));
  w.set("tokenizer.ggml.pre", gguf::Value::string("default"));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(v.tokens));
  w.set("tokenizer.ggml.token_type",
        gguf::Value::i32_array(std::vector<int64_t>(v.types.begin(), v.types.end())));
  w.set("tokenizer.ggml.token_type_count", gguf::Value::u32(2));
  w.set("tokenizer.ggml.unknown_token_id", gguf::Value::u32(100));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(101));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(102));
  w.set("tokenizer.ggml.seperator_token_id", gguf::Value::u32(102));
  w.set("tokenizer.ggml.padding_token_id", gguf::Value::u32(0));
  w.set("tokenizer.ggml.cls_token_id", gguf::Value::u32(101));
  w.set("tokenizer.ggml.mask_token_id", gguf::Value::u32(103));
  const auto st = w.write_file(path);
  EXPECT_TRUE(st) << (st ? "" : st.error().message);
  return path;
}

std::vector<std::string> wpm_texts() {
  std::vector<std::string> texts = testing::conformance_corpus();
  std::erase_if(texts, [](const std::string& s) { return s.size() > 60000; });
  for (std::string& s : testing::random_strings(23, 2000)) texts.push_back(std::move(s));
  for (const char* s : {"", " ", "  two leading spaces", "Hello, World! It's 3.14 o'clock.",
                        "ÉCOLE Über façade", "İstanbul ΣΑΣ ǅ", "中文字符和日本語のテキスト",
                        "a\x01"
                        "b\x7f"
                        "c\tx\u00A0y\u3000z",
                        "[CLS] [SEP] [UNK] [MASK] [PAD]", "e\xCC\x81 combining",
                        "x\xEF\xBB\xBFy \xE2\x80\x8B zero"}) {
    texts.emplace_back(s);
  }
  return texts;
}

TEST(WpmConformance, SameIdsAsLlamaCpp) {
  ASSERT_TRUE(testing::refs_installed())
      << "reference packages missing: run tests/tokenizer/setup_refs.sh";
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("ferry_wpm_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  const auto texts = wpm_texts();
  const std::string model = write_bert_vocab(dir + "/bert-vocab.gguf", corpus_vocab(texts));
  auto tok = load_tokenizer(model);
  ASSERT_TRUE(tok) << tok.error().message;
  EXPECT_EQ((*tok)->bos_id(), 101u);
  EXPECT_EQ((*tok)->eos_id(), 102u);
  EXPECT_TRUE((*tok)->add_bos());
  EXPECT_TRUE((*tok)->add_eos());
  expect_same_as_llama_cpp(model, texts);
  std::size_t unknowns = 0, ids = 0;
  for (const std::string& t : texts) {
    const auto got = (*tok)->encode(t);
    ids += got.size();
    unknowns += static_cast<std::size_t>(std::count(got.begin(), got.end(), 100u));
  }
  EXPECT_GT(unknowns, 0u) << "the vocabulary should leave some words [UNK]";
  std::printf("wpm conformance: %zu texts, %zu ids (%zu [UNK]), vocabulary %zu\n", texts.size(),
              ids, unknowns, (*tok)->vocab_size());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::tokenizer
