// simdjson DOM values as the request parsers read them (openai_parse, anthropic_parse,
// responses_parse): their kind in an error message, the views of a checked string, array or
// object, and a value kept as JSON. Stateless functions; thread-safe.
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>

#include "api/chat_request.h"

namespace ferry::api {

// "null", "an object", "an array", "a string", "a boolean", "an integer", or `fraction` for a
// number written with a fraction or an exponent ("a number" in chat's words; Responses says
// "a decimal").
const char* kind_of(const simdjson::dom::element& v, const char* fraction = "a number");

bool is_integer(const simdjson::dom::element& v);
bool is_number(const simdjson::dom::element& v);

// The string, array or object a checked element holds (as named values: a range-for over the
// temporary simdjson_result trips GCC's maybe-uninitialized).
std::string_view string_of(const simdjson::dom::element& v);
simdjson::dom::array array_of(const simdjson::dom::element& v);
simdjson::dom::object object_of(const simdjson::dom::element& v);

// The value as kept JSON: members in their order, numbers as nlohmann reads them (a
// non-negative integer unsigned), so a template or a renderer sees what it would have parsed.
Json to_json(const simdjson::dom::element& v);

// Appends the text to_json(v).dump() writes (compact; a member named twice where it first
// appears, with its last value; strings through common/json_text's escaper, which writes what
// dump() does), without building the tree. Recursion as deep as the document (simdjson's
// max depth bounds it).
void append_dom_json(std::string& out, const simdjson::dom::element& v);

}  // namespace ferry::api
