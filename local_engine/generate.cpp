#include "local_engine/generate.h"

#include <algorithm>
#include <chrono>
#include <climits>

#include "local_engine/text_stream.h"

namespace ferry::engine {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Error no_allowed_token() {
  return Error::make(ErrorCode::kInternal,
                     "the output constraint allows no token of this vocabulary here");
}

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "?";
}

Result<GenerateResult> generate(Engine& engine, SeqId seq, std::span<const TokenId> prompt,
                                const GenerateOptions& options, const TokenPieceFn& piece,
                                const TokenCallback& on_token) {
  if (!engine.kv().seq_exists(seq)) {
    return Error::make(ErrorCode::kInternal, "generate: no sequence " + std::to_string(seq));
  }
  if (prompt.empty()) return Error::make(ErrorCode::kInvalidRequest, "prompt is empty", "prompt");
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt >= engine.n_ctx()) {
    return Error::make(ErrorCode::kContextOverflow,
                       "prompt of " + std::to_string(n_prompt) + " tokens does not fit the " +
                           std::to_string(engine.n_ctx()) + "-token context");
  }
  int64_t cached = std::min(engine.kv().seq_len(seq), n_prompt - 1);  // recompute >= 1 token
  engine.kv().seq_truncate(seq, cached);

  GenerateResult result;
  result.n_prompt = n_prompt - cached;
  Sampler sampler(options.sampling);
  for (TokenId t : prompt) sampler.accept(t);
  TextStream stream(options.stop);
  std::vector<float> logits;
  std::vector<BatchEntry> batch;

  const auto prefill_start = std::chrono::steady_clock::now();
  const int64_t n_batch = std::max<int64_t>(1, options.n_batch);
  for (int64_t begin = cached; begin < n_prompt; begin += n_batch) {
    const int64_t end = std::min(n_prompt, begin + n_batch);
    batch.clear();
    for (int64_t i = begin; i < end; ++i) {
      batch.push_back({seq, i, prompt[static_cast<size_t>(i)], i == n_prompt - 1});
    }
    if (auto s = engine.forward(batch, logits); !s) return s.error();
  }
  result.prefill_seconds = seconds_since(prefill_start);

  const auto decode_start = std::chrono::steady_clock::now();
  const int64_t n_vocab = engine.config().n_vocab;
  result.finish = FinishReason::kLength;
  for (int64_t step = 0; step < options.max_tokens; ++step) {
    const int32_t sampled =
        sampler.sample(std::span<float>(logits.data(), static_cast<size_t>(n_vocab)));
    if (sampled == kNoAllowedToken) return no_allowed_token();
    const TokenId token = sampled;
    if (std::find(options.eog_tokens.begin(), options.eog_tokens.end(), token) !=
        options.eog_tokens.end()) {
      result.finish = FinishReason::kStop;
      break;
    }
    sampler.accept(token);
    result.tokens.push_back(token);
    std::string text = piece ? stream.push(piece(token)) : std::string();
    if (on_token && !on_token(token, text)) {
      result.finish = FinishReason::kCancelled;
      break;
    }
    if (stream.stopped()) {
      result.finish = FinishReason::kStop;
      break;
    }
    const int64_t pos = engine.kv().seq_len(seq);
    if (step + 1 == options.max_tokens || pos >= engine.n_ctx()) break;
    const BatchEntry next{seq, pos, token, true};
    if (auto s = engine.forward(std::span<const BatchEntry>(&next, 1), logits); !s) {
      return s.error();
    }
  }
  if (piece && result.finish != FinishReason::kCancelled) {
    const std::string rest = stream.finish();
    if (!rest.empty() && on_token && !result.tokens.empty()) on_token(-1, rest);
  }
  result.text = stream.text();
  result.decode_seconds = seconds_since(decode_start);
  return result;
}

std::vector<TokenId> eog_tokens_from_source(const ModelSource& source) {
  std::vector<TokenId> out;
  auto add = [&](std::optional<int64_t> id) {
    if (id && *id >= 0 && *id <= INT32_MAX &&
        std::find(out.begin(), out.end(), static_cast<TokenId>(*id)) == out.end()) {
      out.push_back(static_cast<TokenId>(*id));
    }
  };
  add(source.get_int("tokenizer.ggml.eos_token_id"));
  add(source.get_int("tokenizer.ggml.eot_token_id"));
  add(source.get_int("tokenizer.ggml.eom_token_id"));
  static constexpr std::string_view kEndMarks[] = {"<|im_end|>",      "<|eot_id|>", "<|eom_id|>",
                                                   "<|endoftext|>",   "<|end|>",    "<end_of_turn>",
                                                   "<|end_of_text|>", "</s>"};
  const std::vector<std::string> tokens = source.get_string_array("tokenizer.ggml.tokens");
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (std::string_view mark : kEndMarks) {
      if (tokens[i] == mark) add(static_cast<int64_t>(i));
    }
  }
  return out;
}

}  // namespace ferry::engine
