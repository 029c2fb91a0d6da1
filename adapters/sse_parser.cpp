#include "adapters/sse_parser.h"

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

}  // namespace ferry::adapters
