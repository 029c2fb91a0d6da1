#include "gateway/errors.h"

#include "api/openai_chat_render.h"

namespace ferry::gateway {

// The statuses, types and codes are api/openai_chat_render's (the one mapping; api/ may not
// include gateway/).
int http_status_for(const Error& error) {
  return api::openai_error_status(error);
}

std::string error_json(const Error& error) {
  return api::openai_error_json(error);
}

std::vector<std::pair<std::string, std::string>> retry_headers(const Error& error) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (error.type_code == "budget_exceeded") {
    headers.emplace_back("x-should-retry", "false");
  } else if (error.retry_after_s > 0) {
    headers.emplace_back("retry-after", std::to_string(error.retry_after_s));
  }
  return headers;
}

HttpError to_http_error(const Error& error) {
  return HttpError{http_status_for(error), error_json(error)};
}

}  // namespace ferry::gateway
