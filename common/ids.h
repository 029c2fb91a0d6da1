// Time-ordered identifiers (UUIDv7) and request ids. Thread-safe: the random source is
// thread-local.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ferry {

// A UUIDv7 (RFC 9562) in canonical text form; sorts by creation time.
std::string make_uuid_v7();

// A short request id: "req_" followed by 26 hex digits derived from a UUIDv7.
std::string make_request_id();

// `prefix` followed by `chars` random letters and digits (62 symbols, 8 random bits scaled to
// each, so nearly 5.95 bits a symbol), for the
// ids of the wire formats: "msg_" + 24 (Anthropic), "call_" + 24 (tool calls).
std::string make_random_id(std::string_view prefix, size_t chars);

}  // namespace ferry
