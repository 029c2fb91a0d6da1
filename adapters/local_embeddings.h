// The in-process engine's side of /v1/embeddings that needs no I/O: the request's inputs as the
// engine runs them (tokens checked against the vocabulary and the context, long inputs refused
// with the numbers or split into context-sized chunks), and the OpenAI reply body from the
// engine's pooled vectors (chunks averaged, `dimensions` truncated, float or base64).
// LocalBackend (local_backend.h) waits for the scheduler between the two. Pure functions;
// thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "adapters/backend.h"
#include "api/embeddings_parse.h"
#include "common/error.h"
#include "config/config.h"

namespace ferry::tokenizer {
class Tokenizer;
}

namespace ferry::adapters {

// What one local model offers embeddings with.
struct LocalEmbeddingsModel {
  const tokenizer::Tokenizer* tok = nullptr;
  int64_t n_vocab = 0;
  int64_t n_ctx = 0;
  int64_t n_embd = 0;
  config::LocalEmbeddingsConfig config;
  // The tokens the vocabulary frames an input with (BOS in front when it adds BOS, EOS at the
  // end when it adds EOS: BERT's [CLS] ... [SEP]); every chunk of a long input gets them too.
  std::optional<int32_t> frame_bos;
  std::optional<int32_t> frame_eos;
};

// The model's framing tokens from its tokenizer (LocalEmbeddingsModel::frame_bos/frame_eos).
void set_frame_tokens(LocalEmbeddingsModel& model);

// Every input's tokens (text through the model's tokenizer as completions prompts are, BOS
// included when the vocabulary adds it, and EOS when it adds that: BERT's [CLS] ... [SEP];
// token ids as sent), for routing's count and the engine:
// ids one input after the other, input_ends[i] where input i ends. Errors (kInvalidRequest,
// param "input"): a token id outside the vocabulary, a text that has no tokens.
Result<PromptTokens> embedding_tokens(const LocalEmbeddingsModel& model,
                                      const api::EmbeddingsRequest& request);

// The engine's work for one request: its inputs (chunks of at most n_ctx tokens when the config
// says chunk, each framed as a whole input is: an input that begins with frame_bos and ends with
// frame_eos has its content split and every chunk wrapped in both), which client input each one
// belongs to, and the reply's shape.
struct EmbeddingsJob {
  std::vector<std::vector<int32_t>> inputs;
  std::vector<size_t> owner;  // per engine input: the client's input index
  size_t n_client_inputs = 0;
  int64_t prompt_tokens = 0;  // the client's tokens (each counted once)
  int64_t dims = 0;           // the reply's vector length
  api::EmbeddingEncoding encoding = api::EmbeddingEncoding::kFloat;
};

// Checks what the local engine can honour and splits the inputs: members it does not know
// (400 naming them), `dimensions` (equal to the model's, or at most it for a Matryoshka model;
// else 400 stating the model's dimension), inputs longer than the context (kContextOverflow with
// the numbers, unless long_input is chunk). `counted` is routing's count (null: tokenized here).
Result<EmbeddingsJob> plan_embeddings(const LocalEmbeddingsModel& model,
                                      const api::EmbeddingsRequest& request,
                                      const PromptTokens* counted);

// The client's vectors from the engine's (one per engine input, each L2-normalized): chunks of
// one input averaged weighted by their tokens, then renormalized; truncated to job.dims and
// renormalized when that is fewer than the model's.
std::vector<std::vector<float>> client_vectors(const EmbeddingsJob& job,
                                               const std::vector<std::vector<float>>& engine);

// The OpenAI embeddings body: {"object":"list","data":[{"object":"embedding","index":i,
// "embedding":[...] or "base64"}],"model":model,"usage":{"prompt_tokens","total_tokens"}}.
// kBackendError when a vector is not finite (a broken model), never NaN in JSON.
Result<std::string> embeddings_body(const EmbeddingsJob& job,
                                    const std::vector<std::vector<float>>& vectors,
                                    const std::string& model);

}  // namespace ferry::adapters
