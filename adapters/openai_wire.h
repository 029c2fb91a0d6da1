// Small, allocation-light helpers over OpenAI wire JSON that the adapters need on the hot path:
// finding usage in a body or chunk, and rewriting a stream chunk. Stateless; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "adapters/backend.h"
#include "api/openai_parse.h"
#include "common/json_text.h"

namespace ferry::adapters {

// The JSON scanner primitives live in common/json_text.h; these names stay for the callers.
using ferry::json_string_end;
using ferry::json_value_end;

// key_is (a fast compare with a literal) and parse_token_id_key (a logit_bias key as a token id)
// belong to the OpenAI parser (api/openai_parse.h); the wire helpers use the same ones.
using api::key_is;
using api::parse_token_id_key;

// Finds the top-level-ish `"usage": {...}` object in an OpenAI response body or chunk (the
// last occurrence) and parses it. nullopt when absent or null.
std::optional<Usage> find_usage(std::string_view json);

// The first `"finish_reason": "..."` string value, or "" when absent or null.
std::string find_finish_reason(std::string_view json);

// `model` as a JSON string literal (common/json_text: as nlohmann::json::dump() writes it, bad
// UTF-8 as U+FFFD), for with_quoted_model.
std::string quote_model(std::string_view model);
// `json` (a response body or stream chunk) with the value of its first `"model"` key replaced
// by `quoted` (quote_model's literal, made once per request, not per stream chunk); nullopt when
// it has no string-valued `model` or it already says so.
std::optional<std::string> with_quoted_model(std::string_view json, std::string_view quoted);
// with_quoted_model(json, quote_model(model)).
std::optional<std::string> with_model(std::string_view json, std::string_view model);

// What to do with one upstream stream chunk (the data of one SSE event).
struct ChunkAction {
  bool forward = true;                   // send it to the client
  std::optional<std::string> rewritten;  // send this instead of the original
  std::optional<Usage> usage;            // usage found in the chunk
};

// Inspects a chunk: records usage; when the client did not ask for usage, drops a usage-only
// chunk (empty choices) or strips the usage field from a chunk that also has choices.
ChunkAction inspect_stream_chunk(std::string_view data, bool client_wants_usage);

}  // namespace ferry::adapters
