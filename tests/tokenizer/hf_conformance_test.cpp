// HF tokenizer.json: identical ids to HuggingFace tokenizers (npm @anush008/tokenizers) for
// files in the shapes Llama 3, Qwen2, GPT-2 (byte-level) and Llama 2 / Mistral (SentencePiece
// style: byte fallback, Prepend/Replace normalizer or Metaspace) ship. The files are generated
// at test time by refs/make_hf_fixtures.js.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "tests/tokenizer/test_support.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {
namespace {

class HfConformance : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    if (!testing::refs_installed()) return;
    dir_ = (std::filesystem::temp_directory_path() /
            ("ferry_hf_fixtures_" + std::to_string(::getpid())))
               .string();
    const std::string cmd = "node '" + testing::refs_dir() + "/make_hf_fixtures.js' '" + dir_ + "'";
    made_ = std::system(cmd.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  static std::string dir_;
  static bool made_;
};
std::string HfConformance::dir_;
bool HfConformance::made_ = false;

TEST_P(HfConformance, SameIdsAsHuggingFace) {
  ASSERT_TRUE(testing::refs_installed())
      << "reference packages missing: run tests/tokenizer/setup_refs.sh";
  ASSERT_TRUE(made_) << "make_hf_fixtures.js failed";
  const std::string file = dir_ + "/" + GetParam() + ".json";
  std::vector<std::string> texts = testing::conformance_corpus();
  for (std::string& s : testing::random_strings(11, 4000)) texts.push_back(std::move(s));
  texts.push_back("<|im_start|>user\nhi<|im_end|><|eot_id|><s>x</s> <s>  y");
  auto tok = load_tokenizer(file);
  ASSERT_TRUE(tok) << tok.error().message;
  const auto ref = testing::run_reference("hf_ref.js", {file}, nlohmann::json(texts));
  ASSERT_TRUE(ref.json) << ref.error;
  int mismatches = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto want = (*ref.json)[i].get<std::vector<TokenId>>();
    const auto got = (*tok)->encode(texts[i], Specials::kParse);
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << GetParam() << " differs on #" << i << ": \""
                    << testing::hex_escape(texts[i].substr(0, 200)) << "\" (" << got.size()
                    << " ids, HF " << want.size() << ")";
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << texts.size() << " texts";
}

INSTANTIATE_TEST_SUITE_P(Files, HfConformance,
                         ::testing::Values("llama3", "qwen2", "gpt2", "llama2", "metaspace"));

}  // namespace
}  // namespace ferry::tokenizer
