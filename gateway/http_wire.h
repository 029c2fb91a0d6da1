// HTTP/1.1 response heads and chunk framing, written by hand: the hot path sends each response
// head, and each streamed chunk with its framing, in one gathered write, without a serializer;
// and the checks of request bytes ferry reads (target, header values). Beast-free so it is
// unit-tested (and compiled) in seconds. Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json_text.h"

namespace ferry::gateway {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// The reason phrase HTTP/1.1 conventionally uses for `status` ("Unknown" for codes it lacks).
std::string_view reason_phrase(int status);

struct ResponseHead {
  int status = 200;
  std::string_view content_type;         // empty: no Content-Type
  std::string_view request_id;           // empty: no x-request-id
  const HeaderList* headers = nullptr;   // extra headers, written in order
  std::optional<size_t> content_length;  // nullopt: Transfer-Encoding: chunked
  bool keep_alive = true;
  bool no_cache = false;  // Cache-Control: no-cache (event streams)
};

// Appends the status line and the header block, ending with the blank line. Header names or
// values holding CR, LF or NUL are left out (they would split the response).
void append_response_head(std::string& out, const ResponseHead& head);

// The framing of one chunk of `size` (> 0) bytes: "<hex size>\r\n"; the chunk is followed by
// "\r\n". The last chunk of a body is kLastChunk.
void append_chunk_prefix(std::string& out, size_t size);
inline constexpr std::string_view kChunkEnd = "\r\n";
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// The UTF-8 check of request bytes is common/json_text.h's.
using ferry::is_valid_utf8;

// True when every byte of a request target is printable ASCII (0x21 to 0x7e): anything else
// must be percent-encoded (RFC 3986), and would otherwise reach logs and error messages raw.
bool is_clean_target(std::string_view target);

}  // namespace ferry::gateway
