// The serving core of the local engine: one thread owns the Engine (model and KV cache) and runs
// many requests together by continuous batching. Each step is one Engine::forward holding one
// decode token for every running sequence plus, budget permitting, a chunk of a prompt being
// prefilled; a prefix cache keeps the KV of prompt prefixes for later requests. Bounded by a
// number of sequences, a KV memory budget and a waiting queue; requests can be cancelled and
// carry deadlines; a request whose consumer falls behind is paused (back-pressure, max_unread).
// submit(), cancel(), consumed() and load() are thread-safe; the callbacks of a request run on the
// scheduler thread and must return quickly without blocking.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "local_engine/embeddings.h"
#include "local_engine/engine.h"
#include "local_engine/generate.h"
#include "local_engine/sampler.h"
#include "local_engine/speculative.h"

namespace ferry::engine {

// What one step did, for SchedulerOptions::on_step.
struct StepStats {
  int64_t decode_tokens = 0;   // running sequences that got a token's forward this step
  int64_t prefill_tokens = 0;  // prompt tokens computed this step
  int64_t prefill_sequences = 0;
  int64_t draft_tokens = 0;     // drafted tokens verified beside the decode tokens
  int64_t accepted_tokens = 0;  // of those, the ones the model agreed with
  double seconds = 0;           // the forward pass
};

struct SchedulerOptions {
  int64_t max_sequences = 16;  // sequences decoded together
  int64_t max_queue = 64;      // requests waiting beyond the free sequence slots
  // KV of running sequences, embeddings inputs being computed and cached prefixes; 0: auto.
  int64_t kv_budget_bytes = 0;
  int64_t prefill_chunk = 256;  // prompt tokens prefilled per step (whole prefix blocks)
  bool prefix_cache = true;     // keep and reuse the KV of prompt prefixes
  // Prompt tokens per prefix-cache block. Prompts are prefilled in whole blocks and the last
  // partial block on its own, so a token's KV is computed the same way with or without a cache
  // hit and however requests are batched (greedy output does not depend on either). At least 8.
  int64_t prefix_block = 16;
  // Input tokens per embeddings forward pass (EmbeddingRunner); one such pass runs between
  // two decode steps while embeddings are waiting.
  int64_t embedding_batch_tokens = 512;
  // Speculative decoding by prompt lookup (local_engine/speculative.h): a decoding sequence's
  // next token goes into the step with up to max_draft tokens drafted from its own prompt and
  // output, all verified in the same forward pass; the longest prefix the sampler agrees with
  // is kept and the KV of the rest is truncated. Only in a batch-invariant engine, where a
  // position's logits do not depend on the batch, so outputs are exactly those without it
  // (greedy and, for a seed, sampled: each kept token is the sampler's own draw from the
  // logits of the tokens before it). Off in an engine with llama.cpp's numerics.
  SpeculativeOptions speculative;
  // Called on the scheduler thread after every step (tests and benchmarks).
  std::function<void(const StepStats&)> on_step;
};

struct TopLogprob {
  TokenId token = 0;
  float logprob = 0;
};

// One generated token as the request's on_token callback sees it.
struct TokenEvent {
  TokenId token = -1;     // -1: text that was held back until the end (no token of its own)
  std::string_view text;  // text that became safe to show (whole UTF-8 characters; may be "")
  float logprob = 0;      // the token's log-probability under the model (when asked)
  std::span<const TopLogprob> top_logprobs;  // the most likely tokens at this step (when asked)
};

// How a request ended, delivered once by on_done.
struct Completion {
  FinishReason finish = FinishReason::kLength;
  std::optional<Error> error;  // cancelled (kCancelled), past its deadline (kTimeout), ...
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // prompt tokens whose KV came from the prefix cache
  int64_t completion_tokens = 0;  // generated tokens, without the end-of-generation token
  int64_t queued_us = 0;          // submit -> given a sequence slot
  int64_t first_token_us = -1;    // submit -> first token (-1: none)
  int64_t total_us = 0;
};

struct GenerationRequest {
  std::vector<TokenId> prompt;
  int64_t max_tokens = 128;       // >= 1; prompt + max_tokens must fit the context
  SamplingParams sampling;        // the penalties look at generated tokens only
  std::vector<std::string> stop;  // stop strings (not part of the output)
  bool stop_at_eog = true;        // end at the model's end-of-generation tokens
  int32_t top_logprobs = -1;      // < 0: no logprobs; else each token's + this many best
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Back-pressure. > 0: at most this many on_token events may be delivered and not yet
  // acknowledged with Scheduler::consumed(); at the bound the sequence is paused (it keeps its
  // slot, KV and sampler state and is left out of the steps; the others run on) until the
  // consumer acknowledges. 0: unbounded, for a consumer that never acknowledges.
  int64_t max_unread = 0;
  std::function<void(const TokenEvent&)> on_token;
  std::function<void(const Completion&)> on_done;  // exactly once, after the last on_token
};

using RequestId = uint64_t;

// A consistent view of the scheduler's load, refreshed every step.
struct LoadSnapshot {
  int64_t queue_depth = 0;  // submitted, not yet given a sequence slot
  int64_t active_sequences = 0;
  int64_t paused_sequences = 0;  // running, paused at their max_unread bound (a slow consumer)
  int64_t max_sequences = 0;
  int64_t kv_bytes_used = 0;        // allocated KV: running sequences, embeddings, cached prefixes
  int64_t kv_bytes_embeddings = 0;  // of that, held by embeddings inputs being computed
  int64_t kv_bytes_peak = 0;        // the most KV allocated at any forward pass, since start
  int64_t kv_budget_bytes = 0;
  int64_t prefix_cache_bytes = 0;
  int64_t prefix_cache_entries = 0;
  int64_t est_wait_ms = 0;            // estimated wait for a slot, for a request arriving now
  double tokens_per_second = 0;       // generated tokens/s over the last ~10 s
  double prefix_cache_hit_ratio = 0;  // prompt tokens reused / prompt tokens, since start
  int64_t prompt_tokens_total = 0;
  int64_t cached_tokens_total = 0;
  int64_t completion_tokens_total = 0;
  int64_t requests_completed = 0;
  int64_t sequences_cancelled = 0;  // cancelled or past their deadline, since start
  int64_t spec_drafted_total = 0;   // tokens drafted by prompt lookup and verified, since start
  int64_t spec_accepted_total = 0;  // of those, the ones kept (each saved a step)
};

class Scheduler {
 public:
  // Starts the scheduler thread. `piece` gives a token's bytes (may be empty: no text, no stop
  // strings); `eog_tokens` end a generation when a request has stop_at_eog.
  Scheduler(std::unique_ptr<Engine> engine, SchedulerOptions options, TokenPieceFn piece,
            std::vector<TokenId> eog_tokens);
  // Stops the thread; requests still queued or running end with kUnavailable.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Fails at once (callbacks never called) with kInvalidRequest (empty prompt,
  // bad token, max_tokens < 1), kContextOverflow (prompt + max_tokens beyond the context, or more
  // KV than the whole budget) or kUnavailable with retry_after_s (queue full, shutting down).
  Result<RequestId> submit(GenerationRequest request);
  // Queues an embeddings request (local_engine/embeddings.h): its inputs run in batched
  // forward passes between decode steps, sharing passes with other embeddings requests. Fails
  // at once (on_done never called) with kInvalidRequest (no input, an empty input, a bad token),
  // kContextOverflow (an input longer than the context, or whose KV is more than the whole
  // budget, with the numbers) or kUnavailable (queue full, shutting down). Each input's KV is
  // charged to the budget while it is computed: an input waits for the room, and chat requests
  // queued after it wait behind it. cancel() applies to it as to a generation.
  Result<RequestId> submit_embeddings(EmbeddingRequest request);
  // Stops a queued or running request within one step and frees its KV; its on_done gets
  // kCancelled. Unknown or finished ids are ignored.
  void cancel(RequestId id);
  // The consumer of `id` has taken `events` more of its on_token events (see max_unread): a
  // sequence paused at its bound resumes at the next step. Unknown or finished ids are ignored.
  void consumed(RequestId id, int64_t events);
  LoadSnapshot load() const;

  int64_t n_ctx() const;
  const ModelConfig& model_config() const;
  int64_t kv_budget_bytes() const;
  int64_t kv_bytes_per_token() const;

  // "this model's context is N tokens; the prompt is P tokens and max_tokens is M".
  static std::string context_overflow_message(int64_t n_ctx, int64_t n_prompt,
                                              std::optional<int64_t> max_tokens);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::engine
