// The embeddings front-end's parser, per field: every form of `input` and each refusal naming
// its field, encoding_format, dimensions, user, unknown members kept, duplicates refused; and
// the base64 encoding OpenAI uses (little-endian float32) round-tripped.
#include "api/embeddings_parse.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ferry::api {
namespace {

EmbeddingsRequest ok(const std::string& body) {
  auto r = parse_embeddings(body);
  EXPECT_TRUE(r.has_value()) << body << ": " << (r ? "" : r.error().message);
  return r ? std::move(r).value() : EmbeddingsRequest{};
}

Error bad(const std::string& body) {
  auto r = parse_embeddings(body);
  EXPECT_FALSE(r.has_value()) << body;
  if (r) return {};
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidRequest);
  return r.error();
}

TEST(EmbeddingsParse, InputAsAString) {
  auto r = ok(R"({"model":"m","input":"hello"})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_FALSE(r.inputs[0].tokens);
  EXPECT_EQ(r.inputs[0].text, "hello");
  EXPECT_EQ(r.encoding, EmbeddingEncoding::kFloat);
}

TEST(EmbeddingsParse, InputAsStrings) {
  auto r = ok(R"({"model":"m","input":["a","b c"]})");
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[1].text, "b c");
}

TEST(EmbeddingsParse, InputAsTokenIdsIsOneInput) {
  auto r = ok(R"({"model":"m","input":[1,2,3]})");
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_TRUE(r.inputs[0].tokens);
  EXPECT_EQ(r.inputs[0].ids, (std::vector<int32_t>{1, 2, 3}));
}

TEST(EmbeddingsParse, InputAsTokenArrays) {
  auto r = ok(R"({"model":"m","input":[[1],[2,3]]})");
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[1].ids, (std::vector<int32_t>{2, 3}));
}

TEST(EmbeddingsParse, InputRefusalsNameTheField) {
  for (const char* body : {
           R"({"model":"m"})",                       // missing
           R"({"model":"m","input":""})",            // empty string
           R"({"model":"m","input":[]})",            // empty array
           R"({"model":"m","input":["a",""]})",      // an empty string inside
           R"({"model":"m","input":[[1],[]]})",      // an empty token array
           R"({"model":"m","input":[1,-2]})",        // negative id
           R"({"model":"m","input":[1,2.5]})",       // not an integer
           R"({"model":"m","input":[1,"a"]})",       // mixed
           R"({"model":"m","input":["a",[1]]})",     // mixed forms
           R"({"model":"m","input":[4294967301]})",  // beyond int32
           R"({"model":"m","input":{"a":1}})",       // an object
           R"({"model":"m","input":null})",          // null
       }) {
    EXPECT_EQ(bad(body).param, "input") << body;
  }
}

TEST(EmbeddingsParse, AtMost2048Inputs) {
  std::string many = R"({"model":"m","input":[)";
  for (int i = 0; i < 2048; ++i) many += std::string(i ? "," : "") + "\"x\"";
  EXPECT_EQ(ok(many + "]}").inputs.size(), 2048u);
  Error e = bad(many + ",\"y\"]}");
  EXPECT_EQ(e.param, "input");
  EXPECT_NE(e.message.find("2049"), std::string::npos);
  EXPECT_NE(e.message.find("2048"), std::string::npos);
}

TEST(EmbeddingsParse, EncodingFormat) {
  EXPECT_EQ(ok(R"({"model":"m","input":"a","encoding_format":"base64"})").encoding,
            EmbeddingEncoding::kBase64);
  EXPECT_EQ(ok(R"({"model":"m","input":"a","encoding_format":"float"})").encoding,
            EmbeddingEncoding::kFloat);
  EXPECT_EQ(bad(R"({"model":"m","input":"a","encoding_format":"int8"})").param, "encoding_format");
  EXPECT_EQ(bad(R"({"model":"m","input":"a","encoding_format":1})").param, "encoding_format");
}

TEST(EmbeddingsParse, Dimensions) {
  EXPECT_EQ(ok(R"({"model":"m","input":"a","dimensions":8})").dimensions, 8);
  EXPECT_FALSE(ok(R"({"model":"m","input":"a"})").dimensions.has_value());
  for (const char* v : {"0", "-1", "2.5", "\"8\"", "1e300"}) {
    EXPECT_EQ(bad(std::string(R"({"model":"m","input":"a","dimensions":)") + v + "}").param,
              "dimensions")
        << v;
  }
}

TEST(EmbeddingsParse, UserModelAndExtra) {
  auto r = ok(R"({"model":"m","input":"a","user":"u1","x_custom":{"k":[1]}})");
  EXPECT_EQ(r.user, "u1");
  ASSERT_TRUE(r.extra.is_object());
  EXPECT_EQ(r.extra["x_custom"]["k"][0], 1);
  EXPECT_EQ(bad(R"({"model":"m","input":"a","user":5})").param, "user");
  EXPECT_EQ(bad(R"({"input":"a"})").param, "model");
  EXPECT_EQ(bad(R"({"model":7,"input":"a"})").param, "model");
  EXPECT_EQ(bad(R"({"model":"m","model":"n","input":"a"})").param, "model");
  EXPECT_EQ(bad(R"([1])").param, "");
  EXPECT_EQ(bad("{\"model\":\"m\",\"input\":\"\xff\"}").param, "");  // not UTF-8
}

TEST(EmbeddingsParse, IntoTheTypedRequest) {
  ChatRequest out;
  int model_keys = 0;
  ASSERT_TRUE(parse_embeddings_into(R"({"model":"m","input":["a"],"user":"u"})", out, &model_keys)
                  .has_value());
  EXPECT_EQ(out.endpoint, Endpoint::kEmbeddings);
  EXPECT_EQ(out.model, "m");
  EXPECT_EQ(out.metadata.user, "u");
  ASSERT_NE(out.embeddings, nullptr);
  EXPECT_EQ(out.embeddings->inputs.size(), 1u);
  EXPECT_EQ(model_keys, 1);
}

TEST(EmbeddingsBase64, LittleEndianFloat32RoundTrip) {
  const std::vector<float> v = {1.0f, -0.5f, 3.25e-7f, 0.0f, -123.456f};
  const std::string text = encode_embedding_base64(v);
  // 1.0f is 00 00 80 3f little-endian: "AACAPw" starts the text.
  EXPECT_EQ(text.substr(0, 6), "AACAPw");
  EXPECT_EQ(text.size(), (v.size() * 4 + 2) / 3 * 4);
  auto back = decode_embedding_base64(text);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, v);
  for (size_t n = 0; n < 4; ++n) {  // every padding length
    std::vector<float> w(n, 0.75f);
    EXPECT_EQ(decode_embedding_base64(encode_embedding_base64(w)), w) << n;
  }
  EXPECT_FALSE(decode_embedding_base64("AAC").has_value());
  EXPECT_FALSE(decode_embedding_base64("AA!A").has_value());
  EXPECT_FALSE(decode_embedding_base64("AAAA").has_value());  // 3 bytes: not whole floats
}

}  // namespace
}  // namespace ferry::api
