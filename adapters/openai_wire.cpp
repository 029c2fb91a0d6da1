#include "adapters/openai_wire.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

namespace ferry::adapters {

namespace {

// The last index at or before `from` where `needle` (two bytes or more) occurs, or npos.
// memrchr jumps to each earlier occurrence of needle[1] (a quoted key's first letter: rarer
// than quotes); string_view::rfind would compare the whole needle at every position.
size_t rfind_from(std::string_view s, std::string_view needle, size_t from) {
  if (needle.size() < 2 || s.size() < needle.size()) return std::string_view::npos;
  // Candidates for needle[1] lie in [1, limit).
  size_t limit = std::min(from, s.size() - needle.size()) + 2;
  while (limit > 1) {
    const void* hit = memrchr(s.data() + 1, needle[1], limit - 1);
    if (hit == nullptr) return std::string_view::npos;
    size_t pos = static_cast<size_t>(static_cast<const char*>(hit) - s.data()) - 1;
    if (s.compare(pos, needle.size(), needle) == 0) return pos;
    limit = pos + 1;
  }
  return std::string_view::npos;
}

// The first index at or after `from` where `needle` (two bytes or more) occurs, or npos. As
// rfind_from, memchr jumps to each occurrence of needle[1]: string_view::find stops at every
// occurrence of needle[0], for a quoted key the quote, a JSON text's commonest byte (~1.3k
// instructions to find "model" in a 200-byte stream chunk; glibc's memmem ~1k).
size_t find_from(std::string_view s, std::string_view needle, size_t from) {
  if (needle.size() < 2 || from > s.size() || s.size() - from < needle.size()) {
    return std::string_view::npos;
  }
  const char* begin = s.data();
  const char* last = begin + (s.size() - needle.size());  // the last possible start
  const char* p = begin + from + 1;                       // where needle[1] may first be
  while (p <= last + 1) {
    const void* hit = std::memchr(p, needle[1], static_cast<size_t>(last + 2 - p));
    if (hit == nullptr) return std::string_view::npos;
    const char* start = static_cast<const char*>(hit) - 1;
    if (std::memcmp(start, needle.data(), needle.size()) == 0) {
      return static_cast<size_t>(start - begin);
    }
    p = static_cast<const char*>(hit) + 1;
  }
  return std::string_view::npos;
}

// Index of the value after `"key"` + ':' (searching from the end when `last`), or npos.
size_t find_key_value(std::string_view s, std::string_view quoted_key, bool last) {
  size_t pos = last ? rfind_from(s, quoted_key, s.size()) : find_from(s, quoted_key, 0);
  while (pos != std::string_view::npos) {
    size_t i = skip_json_ws(s, pos + quoted_key.size());
    if (i < s.size() && s[i] == ':') return skip_json_ws(s, i + 1);
    if (last) {
      if (pos == 0) break;
      pos = rfind_from(s, quoted_key, pos - 1);
    } else {
      pos = find_from(s, quoted_key, pos + 1);
    }
  }
  return std::string_view::npos;
}

// The usage members, read by a scanner over the text (valid JSON from a backend) without
// building a DOM; the scanner gives up on anything unexpected, and the caller falls back to a
// full parse.
struct UsageScan {
  int64_t prompt = -1, completion = -1, total = -1, cached = 0, reasoning = 0;
};

bool scan_int(std::string_view s, size_t& i, int64_t& out) {
  size_t start = i;
  bool neg = i < s.size() && s[i] == '-';
  if (neg) ++i;
  int64_t v = 0;
  size_t digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9' && digits < 18) {
    v = v * 10 + (s[i] - '0');
    ++i;
    ++digits;
  }
  if (digits == 0 || (i < s.size() && (s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
                                       (s[i] >= '0' && s[i] <= '9')))) {
    i = start;
    return false;
  }
  out = neg ? -v : v;
  return true;
}

// Reads the usage object at `open`; returns the index one past it, or npos when the scanner
// does not expect what it finds.
size_t scan_usage(std::string_view s, size_t open, UsageScan& u) {
  auto member = [&](std::string_view key, size_t at) -> size_t {
    int64_t* slot = key_is(key, "prompt_tokens")       ? &u.prompt
                    : key_is(key, "completion_tokens") ? &u.completion
                    : key_is(key, "total_tokens")      ? &u.total
                                                       : nullptr;
    if (slot != nullptr && at < s.size() && s[at] != 'n') {
      size_t i = at;
      if (!scan_int(s, i, *slot)) return std::string_view::npos;
      return i;
    }
    bool prompt_details = key_is(key, "prompt_tokens_details");
    bool completion_details = key_is(key, "completion_tokens_details");
    if ((prompt_details || completion_details) && at < s.size() && s[at] == '{') {
      const char* want = prompt_details ? "cached_tokens" : "reasoning_tokens";
      int64_t* out = prompt_details ? &u.cached : &u.reasoning;
      return for_each_json_member(s, at, [&](std::string_view k, size_t v) -> size_t {
        if (k == want && v < s.size() && s[v] != 'n') {
          size_t i = v;
          if (!scan_int(s, i, *out)) return std::string_view::npos;
          return i;
        }
        return json_element_end(s, v);
      });
    }
    return json_element_end(s, at);
  };
  return for_each_json_member(s, open, member);
}

// The integer member `key`, or `fallback` when absent or null; `malformed` is set when it is
// present but not an integer within int64 (a float, a string, a uint64 above INT64_MAX).
int64_t int_or(const nlohmann::json& j, const char* key, int64_t fallback, bool& malformed) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    malformed = true;
    return fallback;
  }
  return it->get<int64_t>();
}

// The usage object whose value starts at `v` (just after `"usage":`), or nullopt.
std::optional<Usage> usage_at(std::string_view json, size_t v) {
  if (v == std::string_view::npos || v >= json.size() || json[v] != '{') return std::nullopt;
  UsageScan scan;
  if (scan_usage(json, v, scan) != std::string_view::npos) {
    Usage u;
    u.prompt_tokens = scan.prompt;
    u.completion_tokens = scan.completion;
    u.total_tokens = scan.total;
    u.cached_tokens = scan.cached;
    u.reasoning_tokens = scan.reasoning;
    return u;
  }
  size_t end = json_value_end(json, v);
  if (end == std::string_view::npos) return std::nullopt;
  // Anything the scanner does not expect (escaped keys, odd numbers): the full parser decides.
  auto obj = nlohmann::json::parse(json.substr(v, end - v), nullptr, /*allow_exceptions=*/false);
  if (!obj.is_object()) return std::nullopt;
  Usage u;
  u.prompt_tokens = int_or(obj, "prompt_tokens", -1, u.malformed);
  u.completion_tokens = int_or(obj, "completion_tokens", -1, u.malformed);
  u.total_tokens = int_or(obj, "total_tokens", -1, u.malformed);
  if (auto d = obj.find("prompt_tokens_details"); d != obj.end() && d->is_object()) {
    u.cached_tokens = int_or(*d, "cached_tokens", 0, u.malformed);
  }
  if (auto d = obj.find("completion_tokens_details"); d != obj.end() && d->is_object()) {
    u.reasoning_tokens = int_or(*d, "reasoning_tokens", 0, u.malformed);
  }
  return u;
}

}  // namespace

std::optional<Usage> find_usage(std::string_view json) {
  return usage_at(json, find_key_value(json, "\"usage\"", /*last=*/true));
}

std::string find_finish_reason(std::string_view json) {
  size_t v = find_key_value(json, "\"finish_reason\"", /*last=*/false);
  while (v != std::string_view::npos) {
    if (v < json.size() && json[v] == '"') {
      size_t end = json.find('"', v + 1);
      if (end == std::string_view::npos) return {};
      return std::string(json.substr(v + 1, end - v - 1));
    }
    // null: look for a later one (another choice).
    size_t next = find_from(json, "\"finish_reason\"", v);
    if (next == std::string_view::npos) break;
    v = find_key_value(json.substr(next), "\"finish_reason\"", false);
    if (v != std::string_view::npos) v += next;
  }
  return {};
}

std::string quote_model(std::string_view model) {
  return json_string(model);
}

std::optional<std::string> with_model(std::string_view json, std::string_view model) {
  return with_quoted_model(json, quote_model(model));
}

std::optional<std::string> with_quoted_model(std::string_view json, std::string_view quoted) {
  size_t v = find_key_value(json, "\"model\"", /*last=*/false);
  if (v == std::string_view::npos || v >= json.size() || json[v] != '"') return std::nullopt;
  size_t end = json_string_end(json, v);
  if (end == std::string_view::npos) return std::nullopt;
  if (json.substr(v, end - v) == quoted) return std::nullopt;
  std::string out;
  out.reserve(json.size() + quoted.size());
  out.append(json.substr(0, v)).append(quoted).append(json.substr(end));
  return out;
}

ChunkAction inspect_stream_chunk(std::string_view data, bool client_wants_usage) {
  ChunkAction action;
  size_t v = find_key_value(data, "\"usage\"", /*last=*/true);
  // `"usage": null` (sent on every chunk by some servers) needs nothing: clients ignore it.
  if (v == std::string_view::npos || v >= data.size() || data[v] != '{') return action;
  action.usage = usage_at(data, v);
  if (client_wants_usage) return action;
  // The usual case, the final usage chunk with `"choices": []`, is dropped without a parse.
  // (A quoted key cannot occur inside a JSON string, where quotes are escaped.)
  size_t c = find_key_value(data, "\"choices\"", /*last=*/false);
  if (c != std::string_view::npos && c < data.size() && data[c] == '[') {
    size_t close = skip_json_ws(data, c + 1);
    if (close < data.size() && data[close] == ']') {
      action.forward = false;
      return action;
    }
  }
  auto chunk = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!chunk.is_object()) return action;
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) {
    action.forward = false;
    return action;
  }
  chunk.erase("usage");
  action.rewritten = chunk.dump();
  return action;
}

}  // namespace ferry::adapters
