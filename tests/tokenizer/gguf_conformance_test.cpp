// GGUF vocabularies: identical ids to llama.cpp's tokenizer (node-llama-cpp 3.21.1) for a
// SentencePiece vocabulary (the shared llama-2-tiny-random.gguf) and for byte-level BPE
// vocabularies with the llama3, qwen2, gpt2 and llama.cpp "default" pre-tokenizers (GGUF files
// written here).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "tests/tokenizer/llama_conformance.h"
#include "tests/tokenizer/test_support.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {

void expect_same_as_llama_cpp(const std::string& model, const std::vector<std::string>& texts,
                              bool special) {
  ASSERT_TRUE(testing::refs_installed())
      << "reference packages missing: run tests/tokenizer/setup_refs.sh";
  auto tok = load_tokenizer(model);
  ASSERT_TRUE(tok) << tok.error().message;
  const auto ref = testing::run_reference(
      "llama_ref.js",
      special ? std::vector<std::string>{model, "special"} : std::vector<std::string>{model},
      nlohmann::json(texts));
  ASSERT_TRUE(ref.json) << ref.error;
  int mismatches = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto want = (*ref.json)[i].get<std::vector<TokenId>>();
    const auto got = (*tok)->encode(texts[i], special ? Specials::kParse : Specials::kAsText);
    if (got != want && ++mismatches <= 5) {
      std::string g, w;
      for (std::size_t k = 0; k < std::min<std::size_t>(got.size(), 30); ++k)
        g += std::to_string(got[k]) + " ";
      for (std::size_t k = 0; k < std::min<std::size_t>(want.size(), 30); ++k)
        w += std::to_string(want[k]) + " ";
      ADD_FAILURE() << model << " differs on #" << i << ": \""
                    << testing::hex_escape(texts[i].substr(0, 120)) << "\"\n ferry: " << g
                    << "\n llama: " << w;
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << texts.size() << " texts";
}

namespace {

std::string shared_model() {
  const char* dir = std::getenv("FERRY_SHARED_DIR");
  return std::string(dir ? dir : "../shared") + "/models/llama-2-tiny-random.gguf";
}

std::vector<std::string> texts_for_gguf() {
  std::vector<std::string> texts = testing::conformance_corpus();
  // Drop the largest files: node-llama-cpp is slow on them and they add nothing here.
  std::erase_if(texts, [](const std::string& s) { return s.size() > 60000; });
  for (std::string& s : testing::random_strings(21, 2000)) texts.push_back(std::move(s));
  texts.push_back("");
  texts.push_back(" ");
  texts.push_back("  two leading spaces");
  return texts;
}

TEST(GgufConformance, SentencePieceLlama2) {
  if (!std::filesystem::exists(shared_model())) GTEST_SKIP() << shared_model() << " is absent";
  expect_same_as_llama_cpp(shared_model(), texts_for_gguf());
}

TEST(GgufConformance, SentencePieceLlama2SpecialTokens) {
  if (!std::filesystem::exists(shared_model())) GTEST_SKIP() << shared_model() << " is absent";
  expect_same_as_llama_cpp(shared_model(),
                           {"<s> [INST] Be brief.\n\nhello world [/INST]",
                            "<s>[INST]x[/INST] ok</s><s>[INST] y", "a</s>b", "</s>", " <s> "},
                           true);
}

// A byte-level BPE GGUF: the hyper-parameters of the shared model (or minimal ones), with the
// vocabulary and merges of a tokenizer.json fixture and the given pre-tokenizer name.
std::string write_bpe_gguf(const std::string& dir, const std::string& fixture,
                           const std::string& pre) {
  std::ifstream in(fixture);
  std::ostringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::json::parse(ss.str());
  const auto& vocab = j["model"]["vocab"];
  std::vector<std::string> tokens(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    tokens[it.value().get<std::size_t>()] = it.key();
  std::vector<int64_t> types(tokens.size(), 1);
  for (const auto& a : j["added_tokens"]) {
    const auto id = a["id"].get<std::size_t>();
    if (id >= tokens.size()) {
      tokens.resize(id + 1);
      types.resize(id + 1, 1);
    }
    tokens[id] = a["content"].get<std::string>();
    types[id] = 3;
  }
  std::vector<std::string> merges;
  for (const auto& m : j["model"]["merges"]) merges.push_back(m.get<std::string>());

  gguf::GgufWriter w;
  auto base = gguf::GgufFile::open(shared_model());
  if (base) {
    for (const auto& [key, value] : (*base)->metadata()) {
      if (key.rfind("tokenizer.", 0) != 0) w.set(key, value);
    }
  } else {
    w.set("general.architecture", gguf::Value::string("llama"));
  }
  w.set("llama.vocab_size", gguf::Value::u32(static_cast<uint32_t>(tokens.size())));
  w.set("tokenizer.ggml.model", gguf::Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::Value::string(pre));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.merges", gguf::Value::string_array(merges));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(static_cast<uint32_t>(tokens.size() - 1)));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(static_cast<uint32_t>(tokens.size() - 1)));
  const std::string path = dir + "/" + pre + ".gguf";
  const auto st = w.write_file(path);
  EXPECT_TRUE(st) << (st ? "" : st.error().message);
  return path;
}

class GgufBpeConformance : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(GgufBpeConformance, SameIdsAsLlamaCpp) {
  ASSERT_TRUE(testing::refs_installed())
      << "reference packages missing: run tests/tokenizer/setup_refs.sh";
  if (!std::filesystem::exists(shared_model()))
    GTEST_SKIP() << shared_model() << " is absent (model hyper-parameters)";
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("ferry_gguf_bpe_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  const std::string cmd = "node '" + testing::refs_dir() + "/make_hf_fixtures.js' '" + dir + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string model =
      write_bpe_gguf(dir, dir + "/" + GetParam().first + ".json", GetParam().second);
  expect_same_as_llama_cpp(model, texts_for_gguf());
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Pre, GgufBpeConformance,
                         ::testing::Values(std::make_pair("llama3", "llama-bpe"),
                                           std::make_pair("qwen2", "qwen2"),
                                           std::make_pair("gpt2", "gpt-2"),
                                           std::make_pair("gpt2", "default")));

}  // namespace
}  // namespace ferry::tokenizer
