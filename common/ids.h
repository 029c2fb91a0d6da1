// Time-ordered identifiers (UUIDv7) and request ids. Thread-safe: the random source is
// thread-local.
#pragma once

#include <string>

namespace ferry {

// A UUIDv7 (RFC 9562) in canonical text form; sorts by creation time.
std::string make_uuid_v7();

// A short request id: "req_" followed by 26 hex digits derived from a UUIDv7.
std::string make_request_id();

}  // namespace ferry
