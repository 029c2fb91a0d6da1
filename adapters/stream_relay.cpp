#include "adapters/stream_relay.h"

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "adapters/openai_wire.h"
#include "common/saturating.h"

namespace ferry::adapters {

namespace {

// An event's data as SSE `data:` lines: data that came in several lines (SSE joins them with
// LF) goes out in as many, so the client reads the same data.
void append_data(std::string& out, std::string_view data) {
  for (;;) {
    const size_t lf = data.find('\n');
    out.append("data: ");
    out.append(data.substr(0, lf));
    out.push_back('\n');
    if (lf == std::string_view::npos) break;
    data.remove_prefix(lf + 1);
  }
  out.push_back('\n');
}

}  // namespace

namespace {

// A count member of Anthropic's usage: absent 0, not a non-negative int64 `malformed`.
int64_t anthropic_count(const nlohmann::json& usage, const char* key, bool& malformed) {
  auto it = usage.find(key);
  if (it == usage.end() || it->is_null()) return 0;
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    malformed = true;
    return 0;
  }
  return it->get<int64_t>();
}

}  // namespace

// ---- Anthropic Messages, for a backend that speaks it natively ----------------------------

void read_anthropic_usage(const nlohmann::json& usage, Usage& into) {
  if (!usage.is_object()) return;
  bool malformed = false;
  if (usage.contains("input_tokens")) {
    int64_t in = anthropic_count(usage, "input_tokens", malformed);
    int64_t read = anthropic_count(usage, "cache_read_input_tokens", malformed);
    int64_t made = anthropic_count(usage, "cache_creation_input_tokens", malformed);
    // Saturating: the recorder then finds the count implausible, never a wrapped one.
    into.prompt_tokens = saturating_add(saturating_add(in, read), made);
    if (into.prompt_tokens < 0) malformed = true;
    into.cached_tokens = read;
  }
  if (usage.contains("output_tokens")) {
    into.completion_tokens = anthropic_count(usage, "output_tokens", malformed);
  }
  if (into.prompt_tokens >= 0 && into.completion_tokens >= 0) {
    into.total_tokens = saturating_add(into.prompt_tokens, into.completion_tokens);
  }
  into.malformed = into.malformed || malformed;
}

// ---- OpenAI Responses, for a backend that speaks it natively -----------------------------

void read_responses_usage(const nlohmann::json& usage, Usage& into) {
  if (!usage.is_object()) return;
  bool malformed = false;
  into.prompt_tokens = anthropic_count(usage, "input_tokens", malformed);
  into.completion_tokens = anthropic_count(usage, "output_tokens", malformed);
  into.total_tokens = saturating_add(into.prompt_tokens, into.completion_tokens);
  auto detail = [&](const char* holder, const char* key) -> int64_t {
    auto it = usage.find(holder);
    return it != usage.end() && it->is_object() ? anthropic_count(*it, key, malformed) : 0;
  };
  into.cached_tokens = detail("input_tokens_details", "cached_tokens");
  into.reasoning_tokens = detail("output_tokens_details", "reasoning_tokens");
  into.malformed = into.malformed || malformed;
}

std::string responses_finish(const nlohmann::json& response) {
  const std::string status = response.value("status", std::string());
  if (status == "completed") return "stop";
  if (status == "incomplete") {
    const auto& details = response.value("incomplete_details", nlohmann::json());
    const std::string reason =
        details.is_object() ? details.value("reason", std::string()) : std::string();
    return reason == "max_output_tokens" ? "length" : reason.empty() ? "incomplete" : reason;
  }
  return status.empty() ? "failed" : status;
}

// ---- The relay ----------------------------------------------------------------------------

std::optional<std::string> StreamRelay::feed(std::string_view bytes) {
  // What goes out is about what came in (the `data: ` framing kept, a model perhaps renamed):
  // room made ahead, at least 2 KiB, doubling, rather than grown event by event (the caller
  // clears it after each write, keeping the room).
  if (const size_t want = to_client.size() + bytes.size() + 256; to_client.capacity() < want) {
    to_client.reserve(std::max<size_t>({want, 2 * to_client.capacity(), 2048}));
  }
  bool malformed = false;
  const bool messages = request.endpoint == Endpoint::kMessages;
  const bool responses = request.endpoint == Endpoint::kResponses;
  const bool chunks = !messages && !responses;
  const bool ok = sse.feed(bytes, [&](std::string_view event, std::string_view data) {
    if (saw_done || malformed) return;
    if (!messages && data == "[DONE]") {
      saw_done = true;
      return;
    }
    // An OpenAI chunk a sink reads itself is parsed there, once: that parse is the check.
    ChunkKeys keys;
    const ChunkTake take =
        chunks && sink != nullptr ? sink->take_chunk(data, keys) : ChunkTake::kPass;
    if (take == ChunkTake::kMalformed || (take == ChunkTake::kPass && !is_json_object(data))) {
      malformed = true;
    } else if (messages) {
      relay_message_event(event, data);
    } else if (responses) {
      relay_response_event(event, data);
    } else {
      relay(data, take == ChunkTake::kTaken, take == ChunkTake::kTaken ? keys : ChunkKeys{});
    }
  });
  if (!ok) return sse.error();
  if (malformed) return std::string("sent a malformed stream event");
  return std::nullopt;
}

// A chunk the sink took is always written on (its bytes are the sink's record of the stream; a
// translated hop asks for the usage chunk, so nothing it gets is dropped). `keys` says which
// scans can find anything (the rest would find nothing: they are skipped).
void StreamRelay::relay(std::string_view data, bool taken, const ChunkKeys& keys) {
  ChunkAction action =
      keys.usage ? inspect_stream_chunk(data, request.client_wants_usage) : ChunkAction{};
  if (action.usage) reply.usage = *action.usage;
  if (!reply_model.empty()) {
    std::string_view current = action.rewritten ? std::string_view(*action.rewritten) : data;
    if (auto renamed = with_quoted_model(current, reply_model)) {
      action.rewritten = std::move(renamed);
    }
  }
  std::string_view payload = action.rewritten ? std::string_view(*action.rewritten) : data;
  // A renamed payload has the same members (the model's value is a string literal).
  if (reply.finish_reason.empty() && keys.finish_reason) {
    reply.finish_reason = find_finish_reason(payload);
  }
  if (!action.forward && !taken) return;
  append_data(to_client, payload);
}

// A Messages stream, relayed verbatim (the model renamed in message_start): the usage of
// message_start and message_delta, the stop_reason; message_stop ends it.
void StreamRelay::relay_message_event(std::string_view event, std::string_view data) {
  std::optional<std::string> renamed;
  if (event == "message_start" || event == "message_delta") {
    auto j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
    const nlohmann::json* holder = &j;
    if (event == "message_start" && j.contains("message")) holder = &j["message"];
    if (holder->is_object() && holder->contains("usage")) {
      read_anthropic_usage((*holder)["usage"], reply.usage);
    }
    if (event == "message_delta" && j.contains("delta") && j["delta"].is_object()) {
      const auto& stop = j["delta"].value("stop_reason", nlohmann::json());
      if (stop.is_string()) reply.finish_reason = stop.get<std::string>();
    }
    if (event == "message_start" && !reply_model.empty()) {
      renamed = with_quoted_model(data, reply_model);
    }
  } else if (event == "message_stop") {
    saw_done = true;
  }
  to_client.append("event: ");
  to_client.append(event);
  to_client.push_back('\n');
  append_data(to_client, renamed ? std::string_view(*renamed) : data);
}

// A Responses stream, relayed verbatim (the model renamed in the events that carry the
// `response` object): the terminal event (response.completed, .incomplete, .failed) gives
// the usage and the status, and ends it. Deltas (most events) are not parsed.
void StreamRelay::relay_response_event(std::string_view event, std::string_view data) {
  std::optional<std::string> renamed;
  if (data.find("\"response\"") != std::string_view::npos) {
    auto j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
    const std::string type = j.value("type", std::string(event));
    const auto& response = j.value("response", nlohmann::json());
    if (response.is_object() && (type == "response.completed" || type == "response.incomplete" ||
                                 type == "response.failed")) {
      read_responses_usage(response.value("usage", nlohmann::json()), reply.usage);
      reply.finish_reason = responses_finish(response);
      saw_done = true;
    }
    if (response.is_object() && !reply_model.empty()) {
      renamed = with_quoted_model(data, reply_model);
    }
  }
  if (!event.empty()) {
    to_client.append("event: ");
    to_client.append(event);
    to_client.append("\n");
  }
  append_data(to_client, renamed ? std::string_view(*renamed) : data);
}

}  // namespace ferry::adapters
