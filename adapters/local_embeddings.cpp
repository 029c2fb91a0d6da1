#include "adapters/local_embeddings.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/json_text.h"
#include "local_engine/embeddings.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::adapters {

namespace {

Error invalid(std::string message, std::string param) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message), std::move(param),
                     "invalid_value");
}

}  // namespace

void set_frame_tokens(LocalEmbeddingsModel& model) {
  model.frame_bos.reset();
  model.frame_eos.reset();
  if (model.tok == nullptr) return;
  if (const auto bos = model.tok->bos_id(); bos && model.tok->add_bos()) {
    model.frame_bos = static_cast<int32_t>(*bos);
  }
  if (const auto eos = model.tok->eos_id(); eos && model.tok->add_eos()) {
    model.frame_eos = static_cast<int32_t>(*eos);
  }
}

Result<PromptTokens> embedding_tokens(const LocalEmbeddingsModel& model,
                                      const api::EmbeddingsRequest& request) {
  PromptTokens out;
  std::vector<tokenizer::TokenId> ids;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const api::EmbeddingInput& in = request.inputs[i];
    const std::string where =
        request.inputs.size() == 1 ? "input" : "input[" + std::to_string(i) + "]";
    if (in.tokens) {
      for (const int32_t id : in.ids) {
        if (id >= model.n_vocab) {
          return invalid("'" + where + "' token ids must be between 0 and " +
                             std::to_string(model.n_vocab - 1) + " (the vocabulary), got " +
                             std::to_string(id),
                         "input");
        }
        out.ids.push_back(id);
      }
    } else {
      ids.clear();
      tokenizer::encode_prompt(*model.tok, in.text, ids);
      // EOS where the vocabulary adds it (BERT's [SEP]), as llama.cpp tokenizes with specials.
      const auto eos = model.tok->eos_id();
      if (model.tok->add_eos() && eos && (ids.empty() || ids.back() != *eos)) ids.push_back(*eos);
      if (ids.empty()) return invalid("'" + where + "' has no tokens", "input");
      for (const auto id : ids) out.ids.push_back(static_cast<int32_t>(id));
    }
    out.input_ends.push_back(out.ids.size());
  }
  return out;
}

Result<EmbeddingsJob> plan_embeddings(const LocalEmbeddingsModel& model,
                                      const api::EmbeddingsRequest& request,
                                      const PromptTokens* counted) {
  if (request.extra.is_object() && !request.extra.empty()) {
    const std::string key = request.extra.begin().key();
    return invalid("'" + key + "' is not supported by the local engine's embeddings", key);
  }
  EmbeddingsJob job;
  job.encoding = request.encoding;
  job.dims = model.n_embd;
  if (request.dimensions && *request.dimensions != model.n_embd) {
    const std::string have =
        "this model's embeddings have " + std::to_string(model.n_embd) + " dimensions";
    if (!model.config.matryoshka) {
      return invalid(have + "; 'dimensions' " + std::to_string(*request.dimensions) +
                         " needs a Matryoshka-trained model (config embeddings.matryoshka)",
                     "dimensions");
    }
    if (*request.dimensions > model.n_embd) {
      return invalid(
          have + "; 'dimensions' must be at most that, got " + std::to_string(*request.dimensions),
          "dimensions");
    }
    job.dims = *request.dimensions;
  }
  PromptTokens own;
  if (counted == nullptr || counted->input_ends.size() != request.inputs.size()) {
    auto tokens = embedding_tokens(model, request);
    if (!tokens) return std::move(tokens).error();
    own = std::move(tokens).value();
    counted = &own;
  }
  job.n_client_inputs = request.inputs.size();
  job.prompt_tokens = static_cast<int64_t>(counted->ids.size());
  size_t begin = 0;
  for (size_t i = 0; i < counted->input_ends.size(); ++i) {
    const size_t end = counted->input_ends[i];
    const auto n = static_cast<int64_t>(end - begin);
    if (n > model.n_ctx && !model.config.chunk_long_input) {
      return Error::make(
          ErrorCode::kContextOverflow,
          "this model's context is " + std::to_string(model.n_ctx) + " tokens; " +
              (request.inputs.size() == 1 ? "the input" : "input " + std::to_string(i)) + " is " +
              std::to_string(n) +
              " tokens (config embeddings.long_input: chunk splits such inputs)",
          "input", "context_length_exceeded");
    }
    if (n <= model.n_ctx) {
      job.inputs.emplace_back(counted->ids.begin() + static_cast<ptrdiff_t>(begin),
                              counted->ids.begin() + static_cast<ptrdiff_t>(end));
      job.owner.push_back(i);
      begin = end;
      continue;
    }
    // Chunks: the content between the framing tokens, each piece framed again, so a chunk is
    // what the model sees for a whole input (CLS pooling reads a [CLS], a decoder starts at BOS).
    const auto at_ids = [&](size_t k) { return counted->ids[k]; };
    const bool lead = model.frame_bos && at_ids(begin) == *model.frame_bos;
    const bool trail =
        model.frame_eos && end - begin > (lead ? 1u : 0u) && at_ids(end - 1) == *model.frame_eos;
    const int64_t room = model.n_ctx - (lead ? 1 : 0) - (trail ? 1 : 0);
    if (room <= 0) {
      return Error::make(ErrorCode::kContextOverflow,
                         "this model's context (" + std::to_string(model.n_ctx) +
                             " tokens) has no room for a chunk between its framing tokens",
                         "input", "context_length_exceeded");
    }
    const size_t body_end = end - (trail ? 1 : 0);
    for (size_t at = begin + (lead ? 1 : 0); at < body_end; at += static_cast<size_t>(room)) {
      const size_t stop = std::min(body_end, at + static_cast<size_t>(room));
      std::vector<int32_t> chunk;
      chunk.reserve(stop - at + 2);
      if (lead) chunk.push_back(*model.frame_bos);
      chunk.insert(chunk.end(), counted->ids.begin() + static_cast<ptrdiff_t>(at),
                   counted->ids.begin() + static_cast<ptrdiff_t>(stop));
      if (trail) chunk.push_back(*model.frame_eos);
      job.inputs.push_back(std::move(chunk));
      job.owner.push_back(i);
    }
    begin = end;
  }
  return job;
}

std::vector<std::vector<float>> client_vectors(const EmbeddingsJob& job,
                                               const std::vector<std::vector<float>>& engine) {
  std::vector<std::vector<double>> sums(job.n_client_inputs);
  std::vector<int> parts(job.n_client_inputs, 0);
  for (size_t k = 0; k < engine.size() && k < job.owner.size(); ++k) {
    auto& sum = sums[job.owner[k]];
    sum.resize(engine[k].size(), 0.0);
    const auto weight = static_cast<double>(job.inputs[k].size());
    for (size_t d = 0; d < engine[k].size(); ++d) sum[d] += weight * engine[k][d];
    ++parts[job.owner[k]];
  }
  std::vector<std::vector<float>> out(job.n_client_inputs);
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t dims = std::min(sums[i].size(), static_cast<size_t>(job.dims));
    out[i].resize(dims);
    for (size_t d = 0; d < dims; ++d) out[i][d] = static_cast<float>(sums[i][d]);
    // One whole part at full length is already normalized: keep its floats exactly.
    if (parts[i] == 1 && dims == sums[i].size()) {
      const auto k =
          static_cast<size_t>(std::find(job.owner.begin(), job.owner.end(), i) - job.owner.begin());
      out[i] = engine[k];
      continue;
    }
    engine::l2_normalize(out[i]);
  }
  return out;
}

Result<std::string> embeddings_body(const EmbeddingsJob& job,
                                    const std::vector<std::vector<float>>& vectors,
                                    const std::string& model) {
  for (const auto& v : vectors) {
    if (!std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); })) {
      return Error::make(ErrorCode::kBackendError,
                         "the local model computed an embedding that is not finite");
    }
  }
  std::string out = R"({"object":"list","data":[)";
  for (size_t i = 0; i < vectors.size(); ++i) {
    if (i > 0) out += ',';
    out += R"({"object":"embedding","index":)" + std::to_string(i) + R"(,"embedding":)";
    if (job.encoding == api::EmbeddingEncoding::kBase64) {
      out += '"' + api::encode_embedding_base64(vectors[i]) + '"';
    } else {
      out += '[';
      char buf[32];
      for (size_t d = 0; d < vectors[i].size(); ++d) {
        if (d > 0) out += ',';
        // The float's exact value as the shortest double text (as OpenAI writes them): a client
        // reads the same number it decodes from base64.
        const auto r = std::to_chars(buf, buf + sizeof(buf), static_cast<double>(vectors[i][d]));
        out.append(buf, r.ptr);
      }
      out += ']';
    }
    out += '}';
  }
  out += R"(],"model":)";
  append_json_string(out, model);
  out += R"(,"usage":{"prompt_tokens":)" + std::to_string(job.prompt_tokens) +
         R"(,"total_tokens":)" + std::to_string(job.prompt_tokens) + "}}";
  return out;
}

}  // namespace ferry::adapters
