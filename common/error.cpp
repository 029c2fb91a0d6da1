#include "common/error.h"

namespace ferry {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidRequest:
      return "invalid_request";
    case ErrorCode::kUnauthorized:
      return "unauthorized";
    case ErrorCode::kForbidden:
      return "forbidden";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kPayloadTooLarge:
      return "payload_too_large";
    case ErrorCode::kRateLimited:
      return "rate_limited";
    case ErrorCode::kContextOverflow:
      return "context_overflow";
    case ErrorCode::kBackendError:
      return "backend_error";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "internal";
}

}  // namespace ferry
