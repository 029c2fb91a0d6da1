#include "api/dom_value.h"

namespace ferry::api {

using simdjson::dom::element;
using simdjson::dom::element_type;

const char* kind_of(const element& v, const char* fraction) {
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
      return fraction;
  }
  return "an unsupported value";
}

bool is_integer(const element& v) {
  return v.type() == element_type::INT64 || v.type() == element_type::UINT64;
}

bool is_number(const element& v) {
  return is_integer(v) || v.type() == element_type::DOUBLE;
}

std::string_view string_of(const element& v) {
  return v.get_string().value_unsafe();
}

simdjson::dom::array array_of(const element& v) {
  simdjson::dom::array a = v.get_array().value_unsafe();
  return a;
}

simdjson::dom::object object_of(const element& v) {
  simdjson::dom::object o = v.get_object().value_unsafe();
  return o;
}

Json to_json(const element& v) {
  switch (v.type()) {
    case element_type::OBJECT: {
      Json out = Json::object();
      for (auto [key, value] : object_of(v)) out[std::string(key)] = to_json(value);
      return out;
    }
    case element_type::ARRAY: {
      Json out = Json::array();
      for (element x : array_of(v)) out.push_back(to_json(x));
      return out;
    }
    case element_type::STRING:
      return std::string(string_of(v));
    case element_type::INT64: {
      const int64_t n = v.get_int64().value_unsafe();
      if (n >= 0) return static_cast<uint64_t>(n);
      return n;
    }
    case element_type::UINT64:
      return v.get_uint64().value_unsafe();
    case element_type::DOUBLE:
      return v.get_double().value_unsafe();
    case element_type::BOOL:
      return v.get_bool().value_unsafe();
    case element_type::NULL_VALUE:
      return nullptr;
  }
  return nullptr;
}

}  // namespace ferry::api
