// POST /v1/embeddings through the real ferry binary on a bert encoder (ferry model synth --arch
// bert): OpenAI-shaped vectors, usage counted with the model's WordPiece tokenizer ([CLS] and
// [SEP] included), a batch equal to single requests, base64 equal to floats, inputs past the
// model's 32 positions refused with the numbers, and chat/completions against the encoder a
// 400 naming why, while ferry keeps serving. BertLlamaAgreement compares the vectors with
// llama.cpp's for the same file (node-llama-cpp, tests/tokenizer/refs; skipped without it);
// FERRY_BERT_COMPARE_MODEL=path.gguf runs that comparison on another bert file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/integration/embedding_vectors.h"
#include "tests/integration/ferry_test_base.h"

namespace ferry::itest {
namespace {

// The standard config with model "bge" on a local backend serving `model`.
std::string bert_config(const ListenAddress& upstream, const std::string& model) {
  std::string cfg = standard_config(upstream);
  cfg.insert(cfg.find("backends:\n") + 10,
             "  - { name: enc, kind: local, model: " + model + ", threads: 1 }\n");
  cfg.insert(cfg.find("models:\n") + 8, "  - { name: bge, backend: enc }\n");
  return cfg;
}

class BertEmbeddingsTest : public OwnConfigTest {
 protected:
  void SetUp() override {
    OwnConfigTest::SetUp();
    const std::string model = (dir_.path() / "bert.gguf").string();
    ASSERT_EQ(run_command(ferry_binary() +
                          " model synth --arch bert --embd 64 --layers 2 --heads 4 --ffn 128 "
                          "--ctx 32 --pooling mean --type F16 --seed 5 '" +
                          model + "' > /dev/null 2>&1"),
              0);
    ferry_ = start_ferry(dir_, bert_config(upstream_.address, model));
  }

  json post(const std::string& path, const json& body, int want_status) {
    auto r = post_json(ferry_.address, path, body);
    EXPECT_TRUE(r.has_value());
    if (!r) return {};
    EXPECT_EQ(r->status, want_status) << r->body;
    return r->body_json();
  }
};

TEST_F(BertEmbeddingsTest, AnswersInOpenAiShapeWithTheModelsOwnTokens) {
  json j = post("/v1/embeddings",
                {{"model", "bge"}, {"input", json::array({"Hello world", "a cat sat"})}}, 200);
  ASSERT_EQ(j["data"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    auto v = floats(j["data"][i]["embedding"]);
    ASSERT_EQ(v.size(), 64u);
    double norm = 0;
    for (const float x : v) norm += static_cast<double>(x) * x;
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
  // [CLS] hello world [SEP] + [CLS] a cat sat [SEP].
  EXPECT_EQ(j["usage"]["prompt_tokens"], 9);
  EXPECT_EQ(j["usage"]["total_tokens"], 9);
  json one = post("/v1/embeddings", {{"model", "bge"}, {"input", "a cat sat"}}, 200);
  EXPECT_EQ(floats(one["data"][0]["embedding"]), floats(j["data"][1]["embedding"]));
  EXPECT_EQ(one["usage"]["prompt_tokens"], 5);
  json b64 = post("/v1/embeddings",
                  {{"model", "bge"}, {"input", "a cat sat"}, {"encoding_format", "base64"}}, 200);
  EXPECT_EQ(from_base64(b64["data"][0]["embedding"].get<std::string>()),
            floats(one["data"][0]["embedding"]));
  // Token ids as sent (no [CLS]/[SEP] added).
  json ids =
      post("/v1/embeddings", {{"model", "bge"}, {"input", json::array({101, 150, 102})}}, 200);
  EXPECT_EQ(ids["usage"]["prompt_tokens"], 3);
}

TEST_F(BertEmbeddingsTest, RefusesLongInputsAndChatWhileServing) {
  json tokens = json::array();
  for (int i = 0; i < 33; ++i) tokens.push_back(150);
  json longer = post("/v1/embeddings", {{"model", "bge"}, {"input", tokens}}, 400);
  EXPECT_EQ(longer["error"]["code"], "context_length_exceeded");
  const std::string msg = longer["error"]["message"].get<std::string>();
  EXPECT_NE(msg.find("32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("33"), std::string::npos) << msg;
  tokens.erase(tokens.begin());
  post("/v1/embeddings", {{"model", "bge"}, {"input", tokens}}, 200);

  json chat = post(
      "/v1/chat/completions",
      {{"model", "bge"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}}, 400);
  EXPECT_NE(chat["error"]["message"].get<std::string>().find("embedding model"), std::string::npos)
      << chat.dump();
  json completion = post("/v1/completions", {{"model", "bge"}, {"prompt", "hi"}}, 400);
  EXPECT_NE(completion["error"]["message"].get<std::string>().find("/v1/embeddings"),
            std::string::npos)
      << completion.dump();
  EXPECT_EQ(post("/v1/embeddings", {{"model", "bge"}, {"input", "still here"}}, 200)["data"].size(),
            1u);
}

// embeddings.long_input: chunk on an encoder: each chunk of a long [CLS] ... [SEP] input is
// framed as a whole input, so the reply is the token-weighted mean of the framed chunks' vectors
// (each of which the server also answers on its own), renormalized.
TEST_F(BertEmbeddingsTest, ChunksOfALongInputAreFramedLikeWholeInputs) {
  TempDir dir;
  std::string cfg = bert_config(upstream_.address, (dir_.path() / "bert.gguf").string());
  const std::string enc = "threads: 1 }";
  cfg.replace(cfg.find(enc), enc.size(), "threads: 1, embeddings: { long_input: chunk } }");
  Server chunked = start_ferry(dir, cfg);
  auto embed = [&](const json& input) {
    auto r = post_json(chunked.address, "/v1/embeddings", {{"model", "bge"}, {"input", input}});
    EXPECT_TRUE(r.has_value());
    if (!r) return std::vector<float>{};
    EXPECT_EQ(r->status, 200) << r->body;
    return floats(r->body_json()["data"][0]["embedding"]);
  };
  auto framed = [](int n, int first) {
    json ids = json::array({101});
    for (int i = 0; i < n; ++i) ids.push_back(150 + (first + i) % 40);
    ids.push_back(102);
    return ids;
  };
  // 42 tokens in a context of 32: [CLS] + 30 + [SEP], then [CLS] + 10 + [SEP].
  const std::vector<float> whole = embed(framed(40, 0));
  const std::vector<float> a = embed(framed(30, 0));
  const std::vector<float> b = embed(framed(10, 30));
  ASSERT_EQ(whole.size(), 64u);
  ASSERT_EQ(a.size(), 64u);
  ASSERT_EQ(b.size(), 64u);
  std::vector<double> mean(64);
  double norm = 0;
  for (size_t d = 0; d < 64; ++d) {
    mean[d] = 32.0 * a[d] + 12.0 * b[d];
    norm += mean[d] * mean[d];
  }
  for (size_t d = 0; d < 64; ++d) EXPECT_NEAR(whole[d], mean[d] / std::sqrt(norm), 1e-5) << d;
}

// Keys only a decoder uses (continuous batching, KV budget, prefill chunks, prefix cache,
// speculation, chat template) are refused by name for an encoder model, not ignored.
TEST_F(BertEmbeddingsTest, DecoderOnlyKeysAreRefusedForAnEncoder) {
  TempDir dir;
  std::string cfg = bert_config(upstream_.address, (dir_.path() / "bert.gguf").string());
  const std::string enc = "threads: 1 }";
  cfg.replace(cfg.find(enc), enc.size(), "threads: 1, max_sequences: 8, kv_budget_mb: 64 }");
  const std::string path = dir.write("ferry.yaml", cfg);
  Process p({ferry_binary(), "serve", "--config", path, "--listen", "127.0.0.1:0"});
  auto status = p.wait_exit(Ms(20000));
  ASSERT_TRUE(status) << "ferry serve kept running";
  EXPECT_NE(*status, 0);
  const std::string text = p.stderr_text();
  EXPECT_NE(text.find("max_sequences, kv_budget_mb"), std::string::npos) << text;
  EXPECT_NE(text.find("encoder"), std::string::npos) << text;
}

std::string refs_dir() {
  return std::string(FERRY_SOURCE_DIR) + "/tests/tokenizer/refs";
}

// Parameter: the synth --arch (a 64-wide, 2-layer F16 model of it).
class BertLlamaAgreement : public OwnConfigTest, public ::testing::WithParamInterface<const char*> {
 protected:
  std::string model_;
  void SetUp() override {
    OwnConfigTest::SetUp();
    if (!std::filesystem::exists(refs_dir() + "/node_modules/node-llama-cpp"))
      GTEST_SKIP() << "node-llama-cpp is not installed (tests/tokenizer/setup_refs.sh)";
    const char* other = std::getenv("FERRY_BERT_COMPARE_MODEL");
    model_ = other != nullptr ? other : (dir_.path() / "bert.gguf").string();
    if (other == nullptr) {
      ASSERT_EQ(run_command(ferry_binary() + " model synth --arch " + GetParam() +
                            " --embd 64 --layers 2 --heads 4 --ffn 128 --ctx 64 --pooling cls "
                            "--type F16 --seed 9 '" +
                            model_ + "' > /dev/null 2>&1"),
                0);
    }
    ferry_ = start_ferry(dir_, bert_config(upstream_.address, model_));
  }
};

TEST_P(BertLlamaAgreement, VectorsAndTokenCountsMatchLlamaCpp) {
  const std::vector<std::string> texts = {"Hello world",
                                          "A cat sat on the mat.",
                                          "What is the capital of France?",
                                          "Embeddings: similar sentences, similar vectors!",
                                          "ÉCOLE façade naïve",
                                          "中文 text 2024"};
  const std::string in = (dir_.path() / "texts.json").string();
  const std::string out = (dir_.path() / "llama.json").string();
  std::ofstream(in) << json(texts).dump();
  ASSERT_EQ(run_command("node '" + refs_dir() + "/llama_embed.js' '" + model_ + "' '" + in + "' '" +
                        out + "'"),
            0);
  std::ifstream f(out);
  const json ref = json::parse(f);
  auto r = post_json(ferry_.address, "/v1/embeddings", {{"model", "bge"}, {"input", texts}});
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no reply");
  const json got = r->body_json();
  double worst_abs = 0, worst_cos = 1;
  int64_t llama_tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<double> want;
    double norm = 0;
    for (const auto& x : ref["vectors"][i]) norm += x.get<double>() * x.get<double>();
    for (const auto& x : ref["vectors"][i]) want.push_back(x.get<double>() / std::sqrt(norm));
    const auto mine = floats(got["data"][i]["embedding"]);
    ASSERT_EQ(mine.size(), want.size());
    double max_abs = 0, dot = 0, nm = 0;
    for (size_t d = 0; d < want.size(); ++d) {
      max_abs = std::max(max_abs, std::abs(mine[d] - want[d]));
      dot += mine[d] * want[d];
      nm += static_cast<double>(mine[d]) * mine[d];
    }
    const double cos = dot / std::sqrt(nm);
    std::printf("input %zu: max |ferry - llama.cpp| %.3g, cosine %.9f\n", i, max_abs, cos);
    worst_abs = std::max(worst_abs, max_abs);
    worst_cos = std::min(worst_cos, cos);
    llama_tokens += static_cast<int64_t>(ref["tokens"][i].size()) + 2;  // [CLS] ... [SEP]
  }
  std::printf("%s: %zu inputs, worst max abs %.3g, worst cosine %.9f\n", model_.c_str(),
              texts.size(), worst_abs, worst_cos);
  EXPECT_EQ(got["usage"]["prompt_tokens"].get<int64_t>(), llama_tokens);
  EXPECT_LT(worst_abs, 2e-3);
  EXPECT_GT(worst_cos, 0.9999);
}

INSTANTIATE_TEST_SUITE_P(Arch, BertLlamaAgreement, ::testing::Values("bert", "nomic-bert"));

}  // namespace
}  // namespace ferry::itest
