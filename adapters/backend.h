// The Backend interface every target implements (HTTP backends and the in-process engine,
// local_backend.h): one request in, a reply or an Error out, streaming through a sink.
// Implementations are shared by all I/O threads and must be thread-safe; one call runs on the
// caller's executor (the client connection's I/O loop).
#pragma once

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/chat_request.h"
#include "common/error.h"

namespace ferry::adapters {

// Token usage as the backend reported it (-1 where it did not).
struct Usage {
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
  int64_t total_tokens = -1;
  int64_t cached_tokens = 0;     // prompt_tokens_details.cached_tokens
  int64_t reasoning_tokens = 0;  // completion_tokens_details.reasoning_tokens
  // A member above was present but not an integer that fits in int64 (a float, a string,
  // 1e300, 2^64): its field keeps its default and the usage must not be billed as reported.
  // Negative integers are kept as sent, for the router's plausibility check to refuse.
  bool malformed = false;
  bool reported() const { return prompt_tokens >= 0 || completion_tokens >= 0; }
};

using Endpoint = api::Endpoint;

// A prompt as one backend will run it (the in-process engine's token ids), made when routing
// counts it, so the backend neither parses nor tokenizes the request again.
struct PromptTokens {
  std::vector<int32_t> ids;
  // Embeddings: every input's tokens one after the other in `ids`, input i ending at
  // input_ends[i]. Empty for chat and completions.
  std::vector<size_t> input_ends;
};

struct BackendRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string body;  // the JSON body to send, already rewritten for this backend
  // The request as the gateway parsed it (shared by every hop); null: a caller that has only
  // `body` (a backend that needs the typed value then parses `body` with api::parse_openai).
  std::shared_ptr<const api::ChatRequest> typed;
  api::Overrides overrides;  // a rule's `set`, already written into `body`, applied to `typed`
  // This backend's tokens for the prompt, from exact_prompt() at routing; null: not counted.
  std::shared_ptr<const PromptTokens> prompt;
  bool stream = false;
  bool client_wants_usage = false;  // stream_options.include_usage as the client sent it
  std::string request_id;
  std::string task_id;  // x-ferry-task or metadata.task_id: a replica pool's `affinity: task`
  // Headers sent upstream as the client sent them: a backend that speaks the client's API
  // natively (Messages: anthropic-version, anthropic-beta). Empty otherwise.
  std::vector<std::pair<std::string, std::string>> headers;
  // The model name the client asked for (an alias): every reply's `model` says this, never
  // the target's or upstream's name, so a client can send it back. Empty: left as it is.
  std::string reply_model;
  // A policy's reasoning budget that this backend applies itself (Backend::closes_think_blocks):
  // the think block is closed after this many tokens and the answer follows. < 0: none.
  int64_t think_budget = -1;
};

// Receives a streamed answer, already formatted as SSE bytes ("data: ...\n\n").
// What a sink did with an OpenAI chunk an HTTP backend's relay handed it (take_chunk).
enum class ChunkTake {
  kPass,       // not read: the relay checks the chunk and forwards its bytes as usual
  kTaken,      // read (it is one JSON object): what it becomes goes out at the next write()
  kMalformed,  // not one JSON object: the relay breaks the stream, as for any sink
};

// What a sink that took a chunk found in it (its parse, not a scan of the text): whether a
// member named `usage` with an object value, and one named `finish_reason` with a string value,
// occur anywhere in it, by their decoded names. The relay's text scans (inspect_stream_chunk,
// find_finish_reason) find such members only where these are true, so it runs each only then.
// Both true when not known.
struct ChunkKeys {
  bool usage = true;
  bool finish_reason = true;
};

class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // An HTTP backend's relay hands each OpenAI chunk's JSON (`data`, never "[DONE]") here as it
  // frames it, before it checks it: a sink that reads the chunks itself (a translator) parses
  // each one once, and that parse is the relay's check. The bytes of the chunks a sink took
  // still reach write() (its record of the stream), but what it sends for them is its own.
  // Every chunk a sink took is written before the backend call returns. A sink that took it may
  // say what `keys` it holds. The default reads none.
  virtual ChunkTake take_chunk(std::string_view /*data*/, ChunkKeys& /*keys*/) {
    return ChunkTake::kPass;
  }
  // Sends bytes to the client; the first call also sends the response headers. Returns false
  // when the client is gone: the backend must then abandon the upstream request.
  virtual boost::asio::awaitable<bool> write(std::string_view sse_bytes) = 0;
  // A response header the answer carries (x-ferry-constraint); only before the first write.
  virtual void add_header(std::string_view /*name*/, std::string_view /*value*/) {}
};

struct BackendReply {
  int status = 200;
  std::string body;            // non-streaming: the backend's JSON body, verbatim
  Usage usage;                 // what the backend reported
  std::string finish_reason;   // of the first choice, when seen
  int64_t first_byte_us = -1;  // request sent -> first response byte (TTFT for streams)
  // Response headers of a non-streamed answer (a stream's went through StreamSink::add_header).
  std::vector<std::pair<std::string, std::string>> headers;
  // The local engine's output constraint ("none", "json_object", "json_schema", "tools") and
  // the compiled grammar's hash; empty from HTTP backends (the ledger records both).
  std::string constraint;
  std::string constraint_hash;
};

// Cancels an in-flight backend call from outside it (the client hung up). Used on the same
// executor as the call.
class CancelSignal {
 public:
  virtual ~CancelSignal() = default;
  bool cancelled() const { return cancelled_; }
  void cancel() {
    cancelled_ = true;
    if (hook_) hook_();
  }
  // The backend installs what cancelling does (e.g. close its upstream socket).
  template <typename F>
  void set_hook(F&& f) {
    hook_ = std::forward<F>(f);
  }
  void clear_hook() { hook_ = nullptr; }

 private:
  bool cancelled_ = false;
  std::function<void()> hook_;
};

// What a backend knows about its own load, for routing facts (-1 / 0 = unknown).
struct BackendLoad {
  int64_t queue_depth = -1;    // requests waiting
  int64_t est_wait_ms = -1;    // estimated queueing delay
  int64_t context_length = 0;  // the model's context window, when the backend knows it
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const std::string& name() const = 0;
  // Thread-safe, cheap: read at routing time for every request.
  virtual BackendLoad load_facts() const { return {}; }
  // The exact prompt tokens this backend would run `request` with, when it knows its own
  // tokenizer and template (the in-process engine); null otherwise. Routing counts with it and
  // hands the tokens back in BackendRequest::prompt.
  virtual std::shared_ptr<const PromptTokens> exact_prompt(
      const api::ChatRequest& /*request*/) const {
    return nullptr;
  }
  // Whether a reasoning token budget can be handed to this backend in
  // BackendRequest::think_budget: the in-process engine on a chat template with a think block.
  virtual bool closes_think_blocks() const { return false; }
  // Runs one request. For streams, chunks go to `sink` as they arrive; an Error returned after
  // the sink was written to means the stream broke midway. `cancel` may be triggered while the
  // call is suspended.
  virtual boost::asio::awaitable<Result<BackendReply>> send(const BackendRequest& request,
                                                            StreamSink* sink,
                                                            CancelSignal& cancel) = 0;
};

}  // namespace ferry::adapters
