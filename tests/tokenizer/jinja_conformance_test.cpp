// Chat templates: rendered text identical to @huggingface/jinja (npm 0.5.11) for the template
// families ferry serves, over conversations with system prompts, multiple turns, tool calls
// and results, reasoning, with and without add_generation_prompt.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/tokenizer/test_support.h"
#include "tokenizer/jinja.h"

namespace ferry::tokenizer {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Family {
  const char* file;
  const char* bos;
  const char* eos;
};

constexpr Family kFamilies[] = {
    {"llama3", "<|begin_of_text|>", "<|eot_id|>"},
    {"qwen2.5", "", "<|im_end|>"},
    {"qwen3", "", "<|im_end|>"},
    {"smollm2", "", "<|im_end|>"},
    {"mistral", "<s>", "</s>"},
    {"phi3", "<s>", "<|endoftext|>"},
    {"gemma2", "<bos>", "<eos>"},
    {"gemma3", "<bos>", "<eos>"},
};

TEST(JinjaConformance, SameTextAsHuggingFaceJinja) {
  ASSERT_TRUE(testing::refs_installed())
      << "reference packages missing: run tests/tokenizer/setup_refs.sh";
  const std::string dir = std::string(std::getenv("FERRY_TOKENIZER_SOURCE_DIR")) + "/templates";
  const auto conversations = nlohmann::ordered_json::parse(read_file(dir + "/conversations.json"));
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  std::vector<std::string> labels;
  for (const Family& f : kFamilies) {
    const std::string source = read_file(dir + "/" + f.file + ".jinja");
    ASSERT_FALSE(source.empty()) << f.file;
    for (const auto& conv : conversations) {
      for (const bool gen : {true, false}) {
        nlohmann::ordered_json ctx;
        ctx["messages"] = conv["messages"];
        ctx["tools"] = conv.contains("tools") ? conv["tools"] : nlohmann::ordered_json();
        ctx["add_generation_prompt"] = gen;
        ctx["bos_token"] = f.bos;
        ctx["eos_token"] = f.eos;
        if (conv.contains("kwargs")) {
          for (auto it = conv["kwargs"].begin(); it != conv["kwargs"].end(); ++it)
            ctx[it.key()] = it.value();
        }
        cases.push_back({{"template", source}, {"context", ctx}});
        labels.push_back(std::string(f.file) + "/" + conv["name"].get<std::string>() +
                         (gen ? "/gen" : ""));
      }
    }
  }
  const auto ref = testing::run_reference("jinja_ref.js", {}, cases);
  ASSERT_TRUE(ref.json) << ref.error;
  int rendered = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& want = (*ref.json)[i];
    auto tmpl = jinja::Template::parse(cases[i]["template"].get<std::string>());
    ASSERT_TRUE(tmpl) << labels[i] << ": " << tmpl.error().message;
    auto got = tmpl->render(cases[i]["context"]);
    if (want.contains("error")) {
      EXPECT_FALSE(got) << labels[i] << ": the reference raised \""
                        << want["error"].get<std::string>() << "\" but ferry rendered:\n"
                        << (got ? *got : "");
      continue;
    }
    ASSERT_TRUE(got) << labels[i] << ": " << got.error().message;
    EXPECT_EQ(*got, want["text"].get<std::string>()) << labels[i];
    ++rendered;
  }
  EXPECT_GT(rendered, 60);
}

}  // namespace
}  // namespace ferry::tokenizer
