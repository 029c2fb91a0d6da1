// The in-process engine as a Backend: OpenAI chat completions, completions and embeddings
// answered by a local GGUF model through the continuous-batching scheduler
// (local_engine/scheduler.h), with the model's chat template, SSE streaming, exact usage (cached
// tokens included) and logprobs. Thread-safe: one instance serves every I/O thread. No engine work
// runs on the caller's thread: the scheduler thread hands tokens over through a queue and wakes the
// caller's executor.
#pragma once

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "adapters/backend.h"
#include "api/embeddings_parse.h"
#include "config/config.h"
#include "constrain/cache.h"
#include "local_engine/gguf_source.h"
#include "local_engine/scheduler.h"

namespace ferry::adapters {

class LocalBackend final : public Backend {
 public:
  // Loads the GGUF model (config.local->model_path), its tokenizer and chat template (or
  // config.local->chat_template) and starts the scheduler. Errors: not a local backend, a file
  // that cannot be read or a model ferry cannot run.
  static Result<std::unique_ptr<LocalBackend>> open(const config::BackendConfig& config);
  ~LocalBackend() override;

  const std::string& name() const override;
  // Queue depth, estimated wait and context length, from the scheduler's load snapshot.
  BackendLoad load_facts() const override;
  // The prompt's tokens (chat template applied) for routing, handed back to send() in
  // BackendRequest::prompt; null when the request cannot be run (send() will say why).
  std::shared_ptr<const PromptTokens> exact_prompt(const api::ChatRequest& request) const override;
  // A thinking template (a think block the engine can close: BackendRequest::think_budget).
  bool closes_think_blocks() const override;
  // Chat completions (messages through the chat template) and completions (a prompt string or
  // token ids), streamed as OpenAI SSE chunks without "data: [DONE]" or answered as one JSON
  // body. Runs request.typed (the body only when there is none: parsed by api::parse_openai)
  // with request.prompt when routing counted it. Errors: kInvalidRequest (bad or unsupported
  // parameters: echo, best_of, token ids beyond the vocabulary, ...), kContextOverflow
  // (prompt + max_tokens beyond the context, with the numbers), kUnavailable + retry_after_s
  // (queue full), kTimeout (timeouts.total_ms), kCancelled (client gone).
  boost::asio::awaitable<Result<BackendReply>> send(const BackendRequest& request, StreamSink* sink,
                                                    CancelSignal& cancel) override;

  // Tokens per sequence (prompt + completion).
  int64_t context_length() const;
  // The exact number of prompt tokens `body` would run with (chat template applied), parsed by
  // api::parse_openai.
  Result<int64_t> count_prompt(Endpoint endpoint, std::string_view body) const;
  // The scheduler's load (gateway/metrics.h renders it as the ferry_local_* families).
  engine::LoadSnapshot load() const;
  // The compiled constraints (tests observe which thread compiles: GrammarCache::observe_compiles).
  constrain::GrammarCache& grammar_cache();

 private:
  struct Impl;
  class Call;  // one send()
  // /v1/embeddings (adapters/local_embeddings.h plans the job and writes the body).
  boost::asio::awaitable<Result<BackendReply>> embed(const BackendRequest& request,
                                                     const api::EmbeddingsRequest& typed,
                                                     CancelSignal& cancel);
  static Result<std::unique_ptr<LocalBackend>> open_encoder(
      const config::BackendConfig& config, std::shared_ptr<const engine::GgufSource> source);
  explicit LocalBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::adapters
