// JSON text without a DOM: the one string escaper (and UTF-8 check) of every writer of JSON text
// (access log, ledger tags, wire rewrites), and the scanner primitives over JSON text that the
// hot paths use instead of a parse. Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ferry {

// True when `text` is well-formed UTF-8 (simdjson's validator: no overlongs, no surrogates,
// nothing above U+10FFFF).
bool is_valid_utf8(std::string_view text);

// How control characters (below 0x20) are written inside a JSON string.
enum class JsonControls : unsigned char {
  kShort,    // \b \f \n \r \t, others \u00XX: byte for byte what nlohmann::json::dump() writes
  kUnicode,  // every control character as \u00XX (the access log's form)
};

// Escaping writes at most this many bytes per input byte (a control character as \u00XX), and
// may store up to kJsonEscapeSlack bytes past the end it returns (it stores 8 bytes at a time).
inline constexpr size_t kJsonEscapedMaxPerByte = 6;
inline constexpr size_t kJsonEscapeSlack = 8;

// The spare capacity a request body's string keeps past its end, so that the JSON parser (which
// reads up to this many bytes past the last one) parses it where it is instead of copying it
// (api::ParseOptions::readable_past_end).
inline constexpr size_t kJsonReadSlack = 64;

// Writes the contents of a JSON string for `s` (no quotes) at `out`, which has room for
// s.size() * kJsonEscapedMaxPerByte + kJsonEscapeSlack bytes, and returns the end. '"' and '\'
// are escaped, control characters as `controls` says, other bytes copied; bytes that are not
// well-formed UTF-8 become U+FFFD, one for each such byte (never a throw).
char* escape_json(char* out, std::string_view s, JsonControls controls = JsonControls::kShort);

// Appends `s` as a quoted JSON string (escape_json's rules).
void append_json_string(std::string& out, std::string_view s,
                        JsonControls controls = JsonControls::kShort);
// `s` as a quoted JSON string literal.
std::string json_string(std::string_view s, JsonControls controls = JsonControls::kShort);

// ---------------------------------------------------------------------------------------
// Scanning JSON text that is known (or checked elsewhere) to be valid.

// The first index at or after `i` that is not JSON whitespace (space, tab, LF, CR).
size_t skip_json_ws(std::string_view text, size_t i);

// Given text and the index of a string's opening '"', returns the index one past its closing
// quote (an unescaped '"'); npos when unterminated. Runs at memchr speed over the contents.
size_t json_string_end(std::string_view text, size_t open_quote);

// Given text and the index of a '{' or '[', returns the index one past its matching close,
// honouring JSON strings and escapes; npos when unbalanced.
size_t json_value_end(std::string_view text, size_t open);

// One past the end of the value starting at `i`: an object or array (json_value_end), a string
// (json_string_end) or a scalar token (a number, true, false, null: its run of letters, digits
// and + - . E, so whatever else follows a scalar makes the caller's next check fail); npos
// when `i` is past the end or the value is cut short.
size_t json_element_end(std::string_view text, size_t i);

// Calls on_member(key, value_start) for each member of the object whose '{' is at `open`, in
// order; `key` is as written between its quotes, and a key holding a backslash ends the scan
// (npos: the caller falls back to a full parse). on_member returns the index one past the
// member's value, or npos to give up. Returns the index one past the object's closing brace,
// or npos.
template <typename OnMember>
size_t for_each_json_member(std::string_view s, size_t open, OnMember&& on_member) {
  size_t i = skip_json_ws(s, open + 1);
  while (i < s.size() && s[i] != '}') {
    if (s[i] != '"') return std::string_view::npos;
    size_t key_end = s.find('"', i + 1);
    if (key_end == std::string_view::npos) return std::string_view::npos;
    std::string_view key = s.substr(i + 1, key_end - i - 1);
    if (key.find('\\') != std::string_view::npos) return std::string_view::npos;
    i = skip_json_ws(s, key_end + 1);
    if (i >= s.size() || s[i] != ':') return std::string_view::npos;
    i = skip_json_ws(s, i + 1);
    size_t end = on_member(key, i);
    if (end == std::string_view::npos || end > s.size()) return std::string_view::npos;
    i = skip_json_ws(s, end);
    if (i < s.size() && s[i] == ',') i = skip_json_ws(s, i + 1);
  }
  return i < s.size() ? i + 1 : std::string_view::npos;
}

}  // namespace ferry
