// The OpenAI embeddings front-end (POST /v1/embeddings): a body validated into the typed
// EmbeddingsRequest in one pass, every error a 400 naming the field as OpenAI does. The request
// rides in the one typed request (ChatRequest::embeddings, endpoint kEmbeddings), so routing,
// counting, budgets and the ledger see it as they see any other. Stateless functions (a parser
// buffer per thread); thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/chat_request.h"
#include "common/error.h"

namespace ferry::api {

// OpenAI's limit on the inputs of one request.
constexpr size_t kMaxEmbeddingInputs = 2048;

// One input: text, or token ids as the client sent them (0..kMaxTokenId; a local target checks
// them against its vocabulary).
struct EmbeddingInput {
  bool tokens = false;
  std::string text;
  std::vector<int32_t> ids;
};

enum class EmbeddingEncoding { kFloat, kBase64 };

struct EmbeddingsRequest {
  std::string model;
  std::vector<EmbeddingInput> inputs;  // 1..kMaxEmbeddingInputs, none empty
  EmbeddingEncoding encoding = EmbeddingEncoding::kFloat;
  std::optional<int64_t> dimensions;  // >= 1
  std::optional<std::string> user;
  Json extra;  // other top-level members, as sent (passed through to HTTP backends)
};

// Parses and validates an embeddings body into a ChatRequest of endpoint kEmbeddings: `model`,
// metadata.user and `embeddings` set. `input` is a string, an array of strings, an array of
// token ids or an array of token-id arrays; `encoding_format` "float" or "base64"; `dimensions`
// a positive integer; `user` a string. Known members may appear once. `model_keys` as for
// parse_openai (gateway/openai_request.h splices the model).
Status parse_embeddings_into(std::string_view body, ChatRequest& out, int* model_keys = nullptr);
Result<EmbeddingsRequest> parse_embeddings(std::string_view body);

// Little-endian IEEE float32 bytes of `v`, base64-encoded (what OpenAI sends for
// encoding_format "base64"), and back (nullopt: not base64 of a whole number of floats).
std::string encode_embedding_base64(const std::vector<float>& v);
std::optional<std::vector<float>> decode_embedding_base64(std::string_view text);

}  // namespace ferry::api
