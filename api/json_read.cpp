#include "api/json_read.h"

#include <cstring>

namespace ferry::api {

simdjson::simdjson_result<simdjson::dom::element> JsonReader::parse(std::string_view text) {
  if (padded_.size() < text.size() + simdjson::SIMDJSON_PADDING) {
    padded_.resize(text.size() + simdjson::SIMDJSON_PADDING);
  }
  std::memcpy(padded_.data(), text.data(), text.size());
  return parser_.parse(padded_.data(), text.size(), /*realloc_if_needed=*/false);
}

bool is_json_object(std::string_view text) {
  thread_local JsonReader reader;
  simdjson::dom::object obj;
  return reader.parse(text).get_object().get(obj) == simdjson::SUCCESS;
}

}  // namespace ferry::api
