// The one place that maps a ferry::Error to an HTTP status and an OpenAI-style error body
// {"error":{"message","type","param","code"}}. Stateless; thread-safe.
#pragma once

#include <string>

#include "common/error.h"

namespace ferry::gateway {

struct HttpError {
  int status = 500;
  std::string body;  // JSON
};

int http_status_for(const Error& error);
HttpError to_http_error(const Error& error);

// The JSON error object alone, for an SSE error event: {"error":{...}}.
std::string error_json(const Error& error);

}  // namespace ferry::gateway
