// JsonReader: simdjson's validating DOM parse over a padded buffer it reuses, and the JSON checks
// the renderers need. Not thread-safe: one reader per thread and per user (a document stays
// valid until that reader's next parse, so nested users keep their own).
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>

namespace ferry::api {

class JsonReader {
 public:
  // The document `text` holds (UTF-8, syntax, exactly one value checked), valid until the
  // next parse on this reader.
  simdjson::simdjson_result<simdjson::dom::element> parse(std::string_view text);

 private:
  simdjson::dom::parser parser_;
  std::string padded_;  // simdjson reads SIMDJSON_PADDING bytes past the end
};

// True when `text` is exactly one valid JSON object. Thread-safe (a reader per thread).
bool is_json_object(std::string_view text);

// What a cut-off JSON object (a tool call's arguments ended by the output limit) says so far,
// as one valid JSON object: the members whose values are complete, a string value cut inside
// closed where it stops (never inside an escape or a UTF-8 sequence), a number kept when it
// ends in a digit, a key without its value and a cut literal dropped, the open containers
// closed. "{}" when `prefix` does not begin an object. A complete object is returned as it is
// (bytes after it dropped). Thread-safe.
std::string close_json_object_prefix(std::string_view prefix);

}  // namespace ferry::api
