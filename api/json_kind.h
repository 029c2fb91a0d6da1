// How the front-ends' error messages name a JSON value's kind ("an array", "a string", ...), in
// one place for every parser. Pure; thread-safe.
#pragma once

#include <simdjson.h>

namespace ferry::api {

inline const char* json_kind(const simdjson::dom::element& v) {
  using simdjson::dom::element_type;
  switch (v.type()) {
    case element_type::NULL_VALUE:
      return "null";
    case element_type::OBJECT:
      return "an object";
    case element_type::ARRAY:
      return "an array";
    case element_type::STRING:
      return "a string";
    case element_type::BOOL:
      return "a boolean";
    case element_type::INT64:
    case element_type::UINT64:
      return "an integer";
    case element_type::DOUBLE:
      return "a number";
  }
  return "an unsupported value";
}

}  // namespace ferry::api
