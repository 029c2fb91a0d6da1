#include "api/json_read.h"

#include <cstring>
#include <utility>

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

namespace {

// `name` is `key`, or ends in '"' and `key`.
bool probe_name(std::string_view name, std::string_view key) {
  if (name.size() < key.size() || name.back() != key.back()) return false;
  if (name.size() == key.size()) return name == key;
  return name.ends_with(key) && name[name.size() - key.size() - 1] == '"';
}

void probe(const simdjson::dom::element& v, MemberProbe* probes, size_t count) {
  switch (v.type()) {
    case simdjson::dom::element_type::OBJECT: {
      const simdjson::dom::object object = v.get_object().value_unsafe();
      for (auto field : object) {
        const simdjson::dom::element_type type = field.value.type();
        for (size_t i = 0; i < count; ++i) {
          if (type == probes[i].type && probe_name(field.key, probes[i].key)) {
            probes[i].found = true;
          }
        }
        if (type == simdjson::dom::element_type::OBJECT ||
            type == simdjson::dom::element_type::ARRAY) {
          probe(field.value, probes, count);
        }
      }
      return;
    }
    case simdjson::dom::element_type::ARRAY: {
      const simdjson::dom::array array = v.get_array().value_unsafe();
      for (simdjson::dom::element e : array) {
        if (e.is_object() || e.is_array()) probe(e, probes, count);
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace

void probe_members(const simdjson::dom::element& root, MemberProbe* probes, size_t count) {
  probe(root, probes, count);
}

}  // namespace ferry::api

// ---------------------------------------------------------------------------------------------
// close_json_object_prefix

namespace ferry::api {
namespace {

// A scan of a JSON prefix that remembers the last place it could be cut and closed.
class PrefixCloser {
 public:
  explicit PrefixCloser(std::string_view text) : text_(text) {}
  std::string run();

 private:
  enum class Want : uint8_t { kKey, kColon, kValue, kCommaOrEnd };
  void mark(size_t end, bool close_string = false);  // a safe cut after byte end-1
  void value_done(size_t end);
  bool scan_string(size_t& i);  // false when the text ends inside it
  bool scan_scalar(size_t& i);  // false when the text ends (or breaks) inside it
  bool step(size_t& i);         // one token; false ends the scan

  std::string_view text_;
  std::string stack_;  // '{' and '[' open, innermost last
  Want want_ = Want::kValue;
  size_t cut_ = 0;
  std::string closers_ = "{}";  // what follows text_[0, cut_) (the whole answer when cut_ is 0)
  bool done_ = false;           // the root object closed
  bool fresh_ = false;          // a container just opened (it may close empty)
};

void PrefixCloser::mark(size_t end, bool close_string) {
  cut_ = end;
  closers_.clear();
  if (close_string) closers_.push_back('"');
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
    closers_.push_back(*it == '{' ? '}' : ']');
  }
}

void PrefixCloser::value_done(size_t end) {
  want_ = Want::kCommaOrEnd;
  mark(end);
}

// The bytes of one UTF-8 sequence led by `lead` (1 for a byte that leads none).
size_t utf8_length(unsigned char lead) {
  if (lead >= 0xf0) return 4;
  if (lead >= 0xe0) return 3;
  if (lead >= 0xc0) return 2;
  return 1;
}

// The bytes of the escape at the start of `s`: \uXXXX, a surrogate pair as one, or two.
size_t escape_length(std::string_view s) {
  if (s.size() < 2 || s[1] != 'u') return 2;
  bool high =
      s.size() >= 4 && (s[2] == 'd' || s[2] == 'D') && std::strchr("89abAB", s[3]) != nullptr;
  return high ? 12 : 6;
}

bool PrefixCloser::scan_string(size_t& i) {
  const bool key = want_ == Want::kKey;
  ++i;  // the opening quote
  while (i < text_.size()) {
    char c = text_[i];
    if (c == '"') {
      ++i;
      if (key) {
        want_ = Want::kColon;
      } else {
        value_done(i);
      }
      return true;
    }
    size_t n =
        c == '\\' ? escape_length(text_.substr(i)) : utf8_length(static_cast<unsigned char>(c));
    if (i + n > text_.size()) break;  // cut inside an escape or a character
    i += n;
    if (!key) mark(i, /*close_string=*/true);
  }
  return false;
}

bool PrefixCloser::scan_scalar(size_t& i) {
  size_t start = i;
  while (i < text_.size() && std::strchr(",]} \t\r\n", text_[i]) == nullptr) ++i;
  std::string_view token = text_.substr(start, i - start);
  bool literal = token == "true" || token == "false" || token == "null";
  bool number = !token.empty() && std::strchr("-0123456789", token.front()) != nullptr &&
                token.back() >= '0' && token.back() <= '9';
  if (i == text_.size()) {  // cut: a number that ends in a digit is what was written so far
    if (number) value_done(i);
    return false;
  }
  if (!literal && !number) return false;
  value_done(i);
  return true;
}

bool PrefixCloser::step(size_t& i) {
  char c = text_[i];
  if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
    ++i;
    return true;
  }
  const bool fresh = std::exchange(fresh_, false);
  switch (want_) {
    case Want::kKey:
      if (c == '}' && fresh) break;  // an empty object closes below
      return c == '"' && scan_string(i);
    case Want::kColon:
      if (c != ':') return false;
      want_ = Want::kValue;
      ++i;
      return true;
    case Want::kCommaOrEnd:
      if (c == ',') {
        want_ = stack_.back() == '{' ? Want::kKey : Want::kValue;
        ++i;
        return true;
      }
      break;
    case Want::kValue:
      if (c == '"') return scan_string(i);
      if (c == '{' || c == '[') {
        stack_ += c;
        want_ = c == '{' ? Want::kKey : Want::kValue;
        fresh_ = true;
        mark(++i);
        return true;
      }
      if (c == ']' && fresh) break;  // an empty array closes below
      return scan_scalar(i);
  }
  // A container closes: `}` after a member or an empty object, `]` after a value or `[`.
  if (stack_.empty() || c != (stack_.back() == '{' ? '}' : ']')) return false;
  stack_.pop_back();
  ++i;
  value_done(i);
  done_ = stack_.empty();
  return !done_;
}

std::string PrefixCloser::run() {
  size_t i = 0;
  while (i < text_.size() && std::strchr(" \t\r\n", text_[i]) != nullptr) ++i;
  if (i == text_.size() || text_[i] != '{') return "{}";
  while (i < text_.size() && step(i)) {
  }
  if (cut_ == 0) return "{}";
  std::string out(text_.substr(0, cut_));
  out += closers_;
  return is_json_object(out) ? out : "{}";
}

}  // namespace

std::string close_json_object_prefix(std::string_view prefix) {
  return PrefixCloser(prefix).run();
}

}  // namespace ferry::api
