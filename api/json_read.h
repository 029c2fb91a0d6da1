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

// A member looked for anywhere in a document: `found` is set when some object, at any depth,
// has a member whose value is of `type` and whose name (as decoded: escapes resolved) is `key`
// or ends in a quote and `key`. Those are all the members a scan of the text for `"key":` can
// see (the scan also sees `"key"` after an escaped quote at the end of a longer name), so where
// nothing is found such a scan finds nothing either.
struct MemberProbe {
  std::string_view key;
  simdjson::dom::element_type type;
  bool found = false;
};

// Walks `root` (every object and array in it, depth first) and sets each probe's `found`. The
// depth is the parser's (simdjson's max depth bounds the recursion). Thread-safe.
void probe_members(const simdjson::dom::element& root, MemberProbe* probes, size_t count);

// What a cut-off JSON object (a tool call's arguments ended by the output limit) says so far,
// as one valid JSON object: the members whose values are complete, a string value cut inside
// closed where it stops (never inside an escape or a UTF-8 sequence), a number kept when it
// ends in a digit, a key without its value and a cut literal dropped, the open containers
// closed. "{}" when `prefix` does not begin an object. A complete object is returned as it is
// (bytes after it dropped). Thread-safe.
std::string close_json_object_prefix(std::string_view prefix);

}  // namespace ferry::api
