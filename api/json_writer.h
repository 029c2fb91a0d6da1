// JsonWriter: appends JSON text to a caller's string (strings escaped, bytes that are not valid
// UTF-8 written as U+FFFD, integers without floating point). Not thread-safe: one per output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/json_text.h"

namespace ferry::api {

// Appends `s` as a JSON string literal (with its quotes) to `out`: common/json_text's escaper
// ('"', '\\' and control characters escaped as nlohmann::json::dump() does, each byte that is
// not well-formed UTF-8 replaced by U+FFFD).
inline void append_json_string(std::string& out, std::string_view s) {
  ferry::append_json_string(out, s);
}
// Appends the decimal text of `v`.
void append_json_int(std::string& out, int64_t v);

// Opens one SSE event: "event: <name>\ndata: " (no event line when `name` is empty); the caller
// writes the data (one line of JSON) and closes it with end_sse_event ("\n\n").
inline void begin_sse_event(std::string& out, std::string_view name) {
  if (!name.empty()) out.append("event: ").append(name).append("\n");
  out.append("data: ");
}
inline void end_sse_event(std::string& out) {
  out.append("\n\n");
}

// A thin builder over a string: the caller writes the punctuation it needs with raw(), the
// values with str()/num(), so that renderers read like the JSON they emit.
class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : out_(out) {}
  JsonWriter& raw(std::string_view text) {
    out_.append(text);
    return *this;
  }
  JsonWriter& str(std::string_view s) {
    append_json_string(out_, s);
    return *this;
  }
  JsonWriter& num(int64_t v) {
    append_json_int(out_, v);
    return *this;
  }
  // An id ferry made (make_random_id: letters and digits only), quoted without escaping.
  JsonWriter& quoted_id(std::string_view id) {
    out_.push_back('"');
    out_.append(id);
    out_.push_back('"');
    return *this;
  }
  // A string, or null when `s` is empty.
  JsonWriter& str_or_null(std::string_view s) { return s.empty() ? raw("null") : str(s); }
  std::string& out() { return out_; }

 private:
  std::string& out_;
};

}  // namespace ferry::api
