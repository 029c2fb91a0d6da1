// The relay of an upstream event stream (an HTTP backend's streamed answer) to the client's sink,
// apart from sockets: every event checked, usage and finish reason taken, the model renamed, the
// events gathered for the next write; and the readers of the usage of a backend that speaks
// Anthropic Messages or OpenAI Responses natively. Not thread-safe: one relay per stream.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "adapters/backend.h"
#include "adapters/sse_parser.h"

namespace ferry::adapters {

// Relays an upstream event stream to the client: every event must be an OpenAI chunk (anything
// else breaks the stream and is never forwarded); usage and the finish reason are taken and the
// model renamed on the way. Events gather in `to_client` until the caller writes them to the
// sink. A sink that reads the chunks itself (StreamSink::take_chunk: a translator) is handed
// each chunk's JSON as it is framed, and its parse is the check.
struct StreamRelay {
  const BackendRequest& request;
  const std::string& reply_model;  // quoted; empty: keep the upstream's name
  BackendReply& reply;
  StreamSink* sink = nullptr;  // the client's, for take_chunk (null: none)
  SseParser sse;
  std::string to_client;
  bool saw_done = false;

  // Feeds body bytes; why the stream is broken, when it is.
  std::optional<std::string> feed(std::string_view bytes);

 private:
  void relay(std::string_view data, bool taken, const ChunkKeys& keys);
  void relay_message_event(std::string_view event, std::string_view data);
  void relay_response_event(std::string_view event, std::string_view data);
};

// Anthropic's usage as ferry counts it: the cache reads and writes are input tokens too.
// `into` keeps what an earlier event said where this one is silent (message_delta carries the
// final output count, message_start the input).
void read_anthropic_usage(const nlohmann::json& usage, Usage& into);
// The usage of a Responses `response` object (input_tokens, output_tokens and their details).
void read_responses_usage(const nlohmann::json& usage, Usage& into);
// The ledger's finish reason for a finished `response` object: stop, length (cut by
// max_output_tokens), the other incomplete reason, or failed.
std::string responses_finish(const nlohmann::json& response);

}  // namespace ferry::adapters
