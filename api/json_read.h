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

}  // namespace ferry::api
