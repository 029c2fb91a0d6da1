// ferry::Error and ferry::Result<T>: errors as values on the request path.
// Plain value types; no shared state, safe to copy between threads.
#pragma once

#include <cassert>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ferry {

// The closed set of error kinds. The gateway maps each to one HTTP status and
// OpenAI error type in one place (gateway/errors.cpp).
enum class ErrorCode {
  kInvalidRequest,   // 400: bad JSON, bad parameter
  kUnauthorized,     // 401: missing or wrong API key
  kForbidden,        // 403: key lacks the role
  kNotFound,         // 404: unknown model or route
  kPayloadTooLarge,  // 413
  kRateLimited,      // 429: rate limit or hard budget
  kContextOverflow,  // 400: prompt + max_tokens does not fit
  kBackendError,     // 502: upstream answered with an error or garbage
  kUnavailable,      // 503: no backend, overload, shutting down
  kTimeout,          // 504: upstream did not answer in time
  kCancelled,        // client went away
  kInternal,         // 500: a bug
};

std::string_view error_code_name(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  std::string param;          // the offending request field, if any
  std::string type_code;      // OpenAI's `code` field (e.g. "model_not_found"), optional
  int upstream_status = 0;    // status the backend returned, when it did
  int64_t retry_after_s = 0;  // > 0: the client may retry after this many seconds (Retry-After)

  static Error make(ErrorCode code, std::string message, std::string param = {},
                    std::string type_code = {}) {
    return Error{code, std::move(message), std::move(param), std::move(type_code), 0, 0};
  }
};

// A value or an Error. Small on purpose: has_value/value/error, no monadic zoo.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & {
    assert(has_value());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(has_value());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(has_value());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const& {
    assert(!has_value());
    return std::get<1>(v_);
  }
  Error&& error() && {
    assert(!has_value());
    return std::get<1>(std::move(v_));
  }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

}  // namespace ferry
