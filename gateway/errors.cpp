#include "gateway/errors.h"

#include <nlohmann/json.hpp>

namespace ferry::gateway {

namespace {

// OpenAI's `type` for each status family.
const char* openai_type(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidRequest:
    case ErrorCode::kContextOverflow:
    case ErrorCode::kNotFound:
    case ErrorCode::kPayloadTooLarge:
      return "invalid_request_error";
    case ErrorCode::kUnauthorized:
      return "authentication_error";
    case ErrorCode::kForbidden:
      return "permission_error";
    case ErrorCode::kRateLimited:
      return "rate_limit_error";
    case ErrorCode::kTimeout:
      return "timeout_error";
    case ErrorCode::kBackendError:
    case ErrorCode::kUnavailable:
    case ErrorCode::kCancelled:
    case ErrorCode::kInternal:
      return "server_error";
  }
  return "server_error";
}

const char* default_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kUnauthorized:
      return "invalid_api_key";
    case ErrorCode::kNotFound:
      return "model_not_found";
    case ErrorCode::kPayloadTooLarge:
      return "request_too_large";
    case ErrorCode::kContextOverflow:
      return "context_length_exceeded";
    case ErrorCode::kRateLimited:
      return "rate_limit_exceeded";
    case ErrorCode::kBackendError:
      return "backend_error";
    case ErrorCode::kUnavailable:
      return "backend_unavailable";
    case ErrorCode::kTimeout:
      return "backend_timeout";
    default:
      return nullptr;
  }
}

}  // namespace

int http_status_for(const Error& error) {
  switch (error.code) {
    case ErrorCode::kInvalidRequest:
      return 400;
    case ErrorCode::kContextOverflow:
      return 400;
    case ErrorCode::kUnauthorized:
      return 401;
    case ErrorCode::kForbidden:
      return 403;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kPayloadTooLarge:
      return 413;
    case ErrorCode::kRateLimited:
      return 429;
    case ErrorCode::kBackendError:
      return 502;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kTimeout:
      return 504;
    case ErrorCode::kCancelled:
      return 499;  // never sent: the client is gone
    case ErrorCode::kInternal:
      return 500;
  }
  return 500;
}

std::string error_json(const Error& error) {
  nlohmann::json e = {{"message", error.message},
                      {"type", openai_type(error.code)},
                      {"param", nullptr},
                      {"code", nullptr}};
  if (!error.param.empty()) e["param"] = error.param;
  if (!error.type_code.empty()) {
    e["code"] = error.type_code;
  } else if (const char* c = default_code(error.code)) {
    e["code"] = c;
  }
  // A message can quote client or upstream bytes that are not UTF-8: U+FFFD, never a throw.
  return nlohmann::json{{"error", std::move(e)}}.dump(-1, ' ', false,
                                                      nlohmann::json::error_handler_t::replace);
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
