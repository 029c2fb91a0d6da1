// Incremental Server-Sent Events parser: feed it bytes split anywhere, get whole events; and the
// JSON checks of what an upstream sends. Not thread-safe: one parser per stream (the checks are
// thread-safe).
#pragma once

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

namespace ferry::adapters {

// Parses the text/event-stream format (WHATWG HTML, "Server-sent events"): lines ending in
// LF, CR or CRLF; `data:` lines joined with LF; a blank line dispatches the event; comment lines
// (starting with ':') and other fields are ignored except `event:`. Bounded: an event larger
// than max_event_bytes is an error rather than unbounded growth.
class SseParser {
 public:
  explicit SseParser(size_t max_event_bytes = 8 << 20) : max_event_bytes_(max_event_bytes) {}

  // Feeds bytes; calls on_event(event_type, data) for each complete event. Returns false (and
  // stops) when an event exceeds the limit; error() then says why.
  template <typename OnEvent>
  bool feed(std::string_view bytes, OnEvent&& on_event) {
    for (size_t i = 0; i < bytes.size();) {
      char c = bytes[i];
      if (skip_lf_ && c == '\n') {
        skip_lf_ = false;
        ++i;
        continue;
      }
      skip_lf_ = false;
      if (c == '\n' || c == '\r') {
        skip_lf_ = c == '\r';
        ++i;
        if (line_.empty()) {
          if (has_data_) on_event(std::string_view(event_), std::string_view(data_));
          data_.clear();
          event_.clear();
          has_data_ = false;
        } else {
          if (!take_line()) return false;
          line_.clear();
        }
        continue;
      }
      // Copy the run of ordinary bytes up to the next line end at once.
      size_t end = line_end(bytes, i);
      line_.append(bytes.data() + i, end - i);
      if (line_.size() > max_event_bytes_) return fail("an SSE line exceeds the size limit");
      i = end;
    }
    return true;
  }

  // The index of the first CR or LF at or after `from` (bytes.size() when none): two memchr
  // scans (string_view::find_first_of calls memchr once per byte of the haystack).
  static size_t line_end(std::string_view bytes, size_t from) {
    const char* begin = bytes.data() + from;
    size_t n = bytes.size() - from;
    const void* lf = std::memchr(begin, '\n', n);
    size_t end = lf != nullptr ? static_cast<size_t>(static_cast<const char*>(lf) - begin) : n;
    const void* cr = std::memchr(begin, '\r', end);
    if (cr != nullptr) end = static_cast<size_t>(static_cast<const char*>(cr) - begin);
    return from + end;
  }

  // True when bytes of an unfinished event are buffered (a stream that ends here was cut).
  bool has_partial_event() const { return !line_.empty() || has_data_; }
  const std::string& error() const { return error_; }

 private:
  bool take_line();
  bool fail(std::string message) {
    error_ = std::move(message);
    return false;
  }

  size_t max_event_bytes_;
  std::string line_;
  std::string data_;
  std::string event_;
  std::string error_;
  bool has_data_ = false;
  bool skip_lf_ = false;
};

// Checks of what an upstream sends, by simdjson's validating parse (UTF-8, syntax, exactly one
// value) on one parser per thread whose buffers are reused: cheap enough for every stream event.
// True when `text` is one valid JSON object (an SSE event's data must be).
bool is_json_object(std::string_view text);
struct Usage;  // adapters/backend.h
// True when `text` is one valid JSON object with a "choices" array (a non-stream answer). From
// the same parse, the answer's facts: `usage` from its last top-level `usage` member when that
// is an object (left as it is when absent or null), read as find_usage reads one
// (adapters/openai_wire.h); `finish_reason` from the first choice whose `finish_reason` is a
// string ("" when none is).
bool read_openai_answer(std::string_view text, Usage& usage, std::string& finish_reason);
// True when `text` is one valid JSON object with a "data" array (an embeddings answer).
bool is_embeddings_answer(std::string_view text);

}  // namespace ferry::adapters
