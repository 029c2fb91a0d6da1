#include "adapters/openai_wire.h"

#include <nlohmann/json.hpp>

#include <cstring>

namespace ferry::adapters {

size_t json_value_end(std::string_view text, size_t open) {
  int depth = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  for (const char* p = begin + open; p < end; ++p) {
    char c = *p;
    if (c == '"') {
      // Jump to the closing quote: memchr runs at memory speed over long string contents.
      for (;;) {
        const char* q = static_cast<const char*>(std::memchr(p + 1, '"', static_cast<size_t>(end - p - 1)));
        if (q == nullptr) return std::string_view::npos;
        size_t backslashes = 0;
        for (const char* b = q - 1; b > p && *b == '\\'; --b) ++backslashes;
        p = q;
        if (backslashes % 2 == 0) break;  // not escaped
      }
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return static_cast<size_t>(p - begin) + 1;
    }
  }
  return std::string_view::npos;
}

namespace {

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// Index of the value after `"key"` + ':' (searching from the end when `last`), or npos.
size_t find_key_value(std::string_view s, std::string_view quoted_key, bool last) {
  size_t pos = last ? s.rfind(quoted_key) : s.find(quoted_key);
  while (pos != std::string_view::npos) {
    size_t i = skip_ws(s, pos + quoted_key.size());
    if (i < s.size() && s[i] == ':') return skip_ws(s, i + 1);
    if (last) {
      if (pos == 0) break;
      pos = s.rfind(quoted_key, pos - 1);
    } else {
      pos = s.find(quoted_key, pos + 1);
    }
  }
  return std::string_view::npos;
}

int64_t int_or(const nlohmann::json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return fallback;
  return it->get<int64_t>();
}

}  // namespace

std::optional<Usage> find_usage(std::string_view json) {
  size_t v = find_key_value(json, "\"usage\"", /*last=*/true);
  if (v == std::string_view::npos || v >= json.size() || json[v] != '{') return std::nullopt;
  size_t end = json_value_end(json, v);
  if (end == std::string_view::npos) return std::nullopt;
  auto obj = nlohmann::json::parse(json.substr(v, end - v), nullptr, /*allow_exceptions=*/false);
  if (!obj.is_object()) return std::nullopt;
  Usage u;
  u.prompt_tokens = int_or(obj, "prompt_tokens", -1);
  u.completion_tokens = int_or(obj, "completion_tokens", -1);
  u.total_tokens = int_or(obj, "total_tokens", -1);
  if (auto d = obj.find("prompt_tokens_details"); d != obj.end() && d->is_object()) {
    u.cached_tokens = int_or(*d, "cached_tokens", 0);
  }
  if (auto d = obj.find("completion_tokens_details"); d != obj.end() && d->is_object()) {
    u.reasoning_tokens = int_or(*d, "reasoning_tokens", 0);
  }
  return u;
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
    size_t next = json.find("\"finish_reason\"", v);
    if (next == std::string_view::npos) break;
    v = find_key_value(json.substr(next), "\"finish_reason\"", false);
    if (v != std::string_view::npos) v += next;
  }
  return {};
}

ChunkAction inspect_stream_chunk(std::string_view data, bool client_wants_usage) {
  ChunkAction action;
  size_t v = find_key_value(data, "\"usage\"", /*last=*/true);
  // `"usage": null` (sent on every chunk by some servers) needs nothing: clients ignore it.
  if (v == std::string_view::npos || v >= data.size() || data[v] != '{') return action;
  action.usage = find_usage(data);
  if (client_wants_usage) return action;
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
