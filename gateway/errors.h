// Maps a ferry::Error to an HTTP status and an OpenAI-style error body (api/openai_chat_render
// holds the one mapping) {"error":{"message","type","param","code"}}. Stateless; thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace ferry::gateway {

struct HttpError {
  int status = 500;
  std::string body;  // JSON
};

int http_status_for(const Error& error);
HttpError to_http_error(const Error& error);

// The headers that tell a client whether and when to retry. A transient refusal (a rate
// limit, a full queue) carries `retry-after`; a spent budget (code `budget_exceeded`) carries
// `x-should-retry: false` (the OpenAI SDKs' own switch), never `retry-after`: retrying before
// the reset only burns requests (the planner adds the reset time, `x-ferry-budget-reset`).
std::vector<std::pair<std::string, std::string>> retry_headers(const Error& error);

// The JSON error object alone, for an SSE error event: {"error":{...}}.
std::string error_json(const Error& error);

}  // namespace ferry::gateway
