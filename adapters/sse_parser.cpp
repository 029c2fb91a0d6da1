#include "adapters/sse_parser.h"

#include "adapters/backend.h"

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

namespace {

// A usage member as find_usage takes it: an integer within int64 is the count; null leaves
// `fallback`; anything else (a fraction, 1e300, a string, an integer over INT64_MAX) leaves it
// and marks the usage malformed.
int64_t usage_int(simdjson::dom::element v, int64_t fallback, bool& malformed) {
  int64_t n = 0;
  if (v.get_int64().get(n) == simdjson::SUCCESS) return n;
  if (!v.is_null()) malformed = true;
  return fallback;
}

// `out` from the member `key` of `details` as usage_int reads it (0 when absent), when
// `details` is an object; left as it is otherwise (null).
void read_detail(simdjson::dom::element details, std::string_view key, int64_t& out,
                 bool& malformed) {
  simdjson::dom::object obj;
  if (details.get_object().get(obj) != simdjson::SUCCESS) return;
  out = 0;
  for (auto field : obj) {
    if (field.key == key) out = usage_int(field.value, 0, malformed);
  }
}

void read_usage(simdjson::dom::object obj, Usage& u) {
  u = Usage{};
  for (auto field : obj) {
    const std::string_view k = field.key;
    if (k == "prompt_tokens") {
      u.prompt_tokens = usage_int(field.value, -1, u.malformed);
    } else if (k == "completion_tokens") {
      u.completion_tokens = usage_int(field.value, -1, u.malformed);
    } else if (k == "total_tokens") {
      u.total_tokens = usage_int(field.value, -1, u.malformed);
    } else if (k == "prompt_tokens_details") {
      read_detail(field.value, "cached_tokens", u.cached_tokens, u.malformed);
    } else if (k == "completion_tokens_details") {
      read_detail(field.value, "reasoning_tokens", u.reasoning_tokens, u.malformed);
    }
  }
}

}  // namespace

bool read_openai_answer(std::string_view text, Usage& usage, std::string& finish_reason) {
  finish_reason.clear();
  simdjson::dom::object obj;
  if (parse_object(text).get(obj) != simdjson::SUCCESS) return false;
  simdjson::dom::array choices;
  if (obj["choices"].get_array().get(choices) != simdjson::SUCCESS) return false;
  simdjson::dom::element last_usage;
  bool seen = false;
  for (auto field : obj) {
    if (field.key == "usage") {
      last_usage = field.value;
      seen = true;
    }
  }
  simdjson::dom::object usage_obj;
  if (seen && last_usage.get_object().get(usage_obj) == simdjson::SUCCESS) {
    read_usage(usage_obj, usage);
  }
  for (auto choice : choices) {
    std::string_view reason;
    if (choice["finish_reason"].get_string().get(reason) == simdjson::SUCCESS) {
      finish_reason.assign(reason);
      break;
    }
  }
  return true;
}

bool is_embeddings_answer(std::string_view text) {
  simdjson::dom::object obj;
  if (parse_object(text).get(obj) != simdjson::SUCCESS) return false;
  return obj["data"].is_array();
}

}  // namespace ferry::adapters
