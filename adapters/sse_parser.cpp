#include "adapters/sse_parser.h"

#include <simdjson.h>

#include <cstring>
#include <string>

namespace ferry::adapters {

bool SseParser::take_line() {
  if (line_.front() == ':') return true;  // comment
  std::string_view line = line_;
  std::string_view field = line;
  std::string_view value;
  if (auto colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
    if (data_.size() > max_event_bytes_) return fail("an SSE event exceeds the size limit");
  } else if (field == "event") {
    event_.assign(value);
  }
  return true;
}

namespace {

// The object `text` holds, valid until the next call on this thread; an error when `text` is
// not exactly one valid JSON object.
simdjson::simdjson_result<simdjson::dom::object> parse_object(std::string_view text) {
  thread_local simdjson::dom::parser parser;
  // simdjson reads SIMDJSON_PADDING bytes past the end: the text is copied into a padded
  // buffer reused per thread (realloc_if_needed would allocate and free one per call).
  thread_local std::string padded;
  if (padded.size() < text.size() + simdjson::SIMDJSON_PADDING) {
    padded.resize(text.size() + simdjson::SIMDJSON_PADDING);
  }
  std::memcpy(padded.data(), text.data(), text.size());
  return parser.parse(padded.data(), text.size(), /*realloc_if_needed=*/false).get_object();
}

}  // namespace

bool is_json_object(std::string_view text) {
  return parse_object(text).error() == simdjson::SUCCESS;
}

bool is_openai_answer(std::string_view text) {
  simdjson::dom::object obj;
  if (parse_object(text).get(obj) != simdjson::SUCCESS) return false;
  return obj["choices"].is_array();
}

bool is_embeddings_answer(std::string_view text) {
  simdjson::dom::object obj;
  if (parse_object(text).get(obj) != simdjson::SUCCESS) return false;
  return obj["data"].is_array();
}

}  // namespace ferry::adapters
