// The local engine's embeddings job and reply: vocabulary and context checks with the numbers,
// long inputs chunked and averaged when configured, `dimensions` only for a Matryoshka model
// (truncated and renormalized), unknown members refused, and the OpenAI body (float, base64).
#include "adapters/local_embeddings.h"

#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

namespace ferry::adapters {
namespace {

LocalEmbeddingsModel model(bool chunk = false, bool matryoshka = false) {
  LocalEmbeddingsModel m;
  m.n_vocab = 50;
  m.n_ctx = 4;
  m.n_embd = 3;
  m.config.chunk_long_input = chunk;
  m.config.matryoshka = matryoshka;
  return m;
}

api::EmbeddingsRequest request(const std::string& body) {
  auto r = api::parse_embeddings(body);
  EXPECT_TRUE(r.has_value()) << body;
  return r ? std::move(r).value() : api::EmbeddingsRequest{};
}

TEST(LocalEmbeddings, TokenIdsCheckedAgainstTheVocabulary) {
  auto t = embedding_tokens(model(), request(R"({"model":"m","input":[[1,2],[3]]})"));
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(t->input_ends, (std::vector<size_t>{2, 3}));
  auto bad = embedding_tokens(model(), request(R"({"model":"m","input":[[1],[50]]})"));
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().param, "input");
  EXPECT_NE(bad.error().message.find("input[1]"), std::string::npos);
  EXPECT_NE(bad.error().message.find("49"), std::string::npos);
}

TEST(LocalEmbeddings, LongInputRefusedWithTheNumbers) {
  auto r = request(R"({"model":"m","input":[1,2,3,4,5,6]})");
  auto job = plan_embeddings(model(), r, nullptr);
  ASSERT_FALSE(job.has_value());
  EXPECT_EQ(job.error().code, ErrorCode::kContextOverflow);
  EXPECT_NE(job.error().message.find("context is 4 tokens"), std::string::npos);
  EXPECT_NE(job.error().message.find("is 6 tokens"), std::string::npos);
}

TEST(LocalEmbeddings, LongInputChunkedAndAveragedWhenConfigured) {
  auto r = request(R"({"model":"m","input":[[1,2,3,4,5,6],[7]]})");
  auto job = plan_embeddings(model(/*chunk=*/true), r, nullptr);
  ASSERT_TRUE(job.has_value());
  ASSERT_EQ(job->inputs.size(), 3u);
  EXPECT_EQ(job->inputs[0].size(), 4u);
  EXPECT_EQ(job->inputs[1].size(), 2u);
  EXPECT_EQ(job->owner, (std::vector<size_t>{0, 0, 1}));
  EXPECT_EQ(job->prompt_tokens, 7);
  // Chunks weighted by their tokens: 4 * (1,0,0) + 2 * (0,1,0), normalized.
  auto v = client_vectors(*job, {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}});
  ASSERT_EQ(v.size(), 2u);
  EXPECT_NEAR(v[0][0], 4 / std::sqrt(20.0), 1e-6);
  EXPECT_NEAR(v[0][1], 2 / std::sqrt(20.0), 1e-6);
  EXPECT_EQ(v[1], (std::vector<float>{0, 0, 1}));
}

// A model that frames its inputs (BERT's [CLS] ... [SEP], here 0 ... 49): every chunk of a long
// input is framed the same way, so CLS pooling reads a [CLS] in each; an input without the
// framing tokens (token ids as sent) is split as it is.
TEST(LocalEmbeddings, ChunksOfAFramedInputAreFramedToo) {
  LocalEmbeddingsModel m = model(/*chunk=*/true);
  m.frame_bos = 0;
  m.frame_eos = 49;
  auto job = plan_embeddings(m, request(R"({"model":"m","input":[[0,1,2,3,4,5,49],[1,2,3,4,5]]})"),
                             nullptr);
  ASSERT_TRUE(job.has_value());
  ASSERT_EQ(job->inputs.size(), 5u);
  EXPECT_EQ(job->inputs[0], (std::vector<int32_t>{0, 1, 2, 49}));
  EXPECT_EQ(job->inputs[1], (std::vector<int32_t>{0, 3, 4, 49}));
  EXPECT_EQ(job->inputs[2], (std::vector<int32_t>{0, 5, 49}));
  EXPECT_EQ(job->inputs[3], (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(job->inputs[4], (std::vector<int32_t>{5}));
  EXPECT_EQ(job->owner, (std::vector<size_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(job->prompt_tokens, 12);  // the client's tokens, as counted for routing
  // An input that fits is sent as it is, framing and all.
  auto fits = plan_embeddings(m, request(R"({"model":"m","input":[[0,1,2,49]]})"), nullptr);
  ASSERT_TRUE(fits.has_value());
  EXPECT_EQ(fits->inputs, (std::vector<std::vector<int32_t>>{{0, 1, 2, 49}}));
  // No room for a chunk between the framing tokens: refused with the numbers.
  m.n_ctx = 2;
  auto none = plan_embeddings(m, request(R"({"model":"m","input":[[0,1,2,49]]})"), nullptr);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code, ErrorCode::kContextOverflow);
  EXPECT_NE(none.error().message.find("(2 tokens)"), std::string::npos);
}

TEST(LocalEmbeddings, DimensionsNeedAMatryoshkaModel) {
  auto r = request(R"({"model":"m","input":[1],"dimensions":2})");
  auto refused = plan_embeddings(model(), r, nullptr);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().param, "dimensions");
  EXPECT_NE(refused.error().message.find("3 dimensions"), std::string::npos);
  EXPECT_TRUE(
      plan_embeddings(model(), request(R"({"model":"m","input":[1],"dimensions":3})"), nullptr)
          .has_value());
  auto job = plan_embeddings(model(false, /*matryoshka=*/true), r, nullptr);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->dims, 2);
  auto v = client_vectors(*job, {{0.6f, 0.0f, 0.8f}});
  // Truncated to (0.6, 0) and renormalized.
  EXPECT_EQ(v[0], (std::vector<float>{1.0f, 0.0f}));
  auto larger = plan_embeddings(model(false, true),
                                request(R"({"model":"m","input":[1],"dimensions":4})"), nullptr);
  ASSERT_FALSE(larger.has_value());
  EXPECT_EQ(larger.error().param, "dimensions");
}

TEST(LocalEmbeddings, UnknownMembersRefusedNotIgnored) {
  auto job =
      plan_embeddings(model(), request(R"({"model":"m","input":[1],"truncate":true})"), nullptr);
  ASSERT_FALSE(job.has_value());
  EXPECT_EQ(job.error().param, "truncate");
}

TEST(LocalEmbeddings, OpenAiBodyFloatAndBase64) {
  auto job = plan_embeddings(model(), request(R"({"model":"m","input":[[1],[2,3]]})"), nullptr);
  ASSERT_TRUE(job.has_value());
  const std::vector<std::vector<float>> v = {{0.6f, 0.8f, 0.0f}, {1.0f / 3, 2.0f / 3, 2.0f / 3}};
  auto body = embeddings_body(*job, v, "alias");
  ASSERT_TRUE(body.has_value());
  auto j = nlohmann::json::parse(*body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "alias");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 3);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][1]["object"], "embedding");
  EXPECT_EQ(j["data"][1]["index"], 1);
  for (size_t d = 0; d < 3; ++d) EXPECT_EQ(j["data"][1]["embedding"][d].get<float>(), v[1][d]);

  auto b64 = plan_embeddings(
      model(), request(R"({"model":"m","input":[1],"encoding_format":"base64"})"), nullptr);
  ASSERT_TRUE(b64.has_value());
  auto j64 = nlohmann::json::parse(*embeddings_body(*b64, {v[1]}, "alias"));
  auto back = api::decode_embedding_base64(j64["data"][0]["embedding"].get<std::string>());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, v[1]);

  auto nan = embeddings_body(*b64, {{NAN, 0, 0}}, "alias");
  ASSERT_FALSE(nan.has_value());
  EXPECT_EQ(nan.error().code, ErrorCode::kBackendError);
}

}  // namespace
}  // namespace ferry::adapters
