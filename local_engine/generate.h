// One request's generation loop on an Engine: batched prefill of the prompt, then decode steps
// with a Sampler until an end-of-generation token, a stop string, max tokens or a full context;
// a per-token callback receives each token and its UTF-8-safe text. Runs on the engine's
// owning thread.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "local_engine/engine.h"
#include "local_engine/sampler.h"

namespace ferry::engine {

// The bytes a token stands for (the tokenizer's decoder); empty for control tokens.
using TokenPieceFn = std::function<std::string(TokenId)>;
// Called once per generated token with the text that became safe to show (may be empty).
// Returning false cancels the generation. After the last token, one more call with token -1
// carries text that was held back (an unfinished character or a partial stop-string match).
using TokenCallback = std::function<bool(TokenId token, std::string_view text)>;

struct GenerateOptions {
  int64_t max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;    // stop strings (not part of the output)
  std::vector<TokenId> eog_tokens;  // end-of-generation tokens (not part of the output)
  int64_t n_batch = 256;            // prompt tokens per forward during prefill
};

enum class FinishReason { kStop, kLength, kCancelled };
// The error of a constrained generation whose matcher allows nothing (Sampler::sample returned
// kNoAllowedToken): a gap between grammar and vocabulary, never a silent unconstrained token.
Error no_allowed_token();
std::string_view finish_reason_name(FinishReason reason);

struct GenerateResult {
  std::vector<TokenId> tokens;  // generated, without the end-of-generation token
  std::string text;
  FinishReason finish = FinishReason::kLength;
  int64_t n_prompt = 0;  // prompt tokens computed (not already in the cache)
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Generates for sequence `seq`, which must exist in the engine's KV cache; positions it already
// holds must be the prompt's first tokens (reused, not recomputed). `piece` may be empty when
// no text is wanted (then text and the callback's text stay empty).
Result<GenerateResult> generate(Engine& engine, SeqId seq, std::span<const TokenId> prompt,
                                const GenerateOptions& options, const TokenPieceFn& piece,
                                const TokenCallback& on_token = {});

// The end-of-generation tokens a model's vocabulary declares (eos, eot, eom ids) plus tokens
// whose text marks a turn's end (<|im_end|>, <|eot_id|>, <|endoftext|>, <|end|>, </s>...).
std::vector<TokenId> eog_tokens_from_source(const ModelSource& source);

}  // namespace ferry::engine
