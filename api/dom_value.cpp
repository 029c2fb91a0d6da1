#include "api/dom_value.h"

#include <array>
#include <unordered_map>
#include <vector>

#include "common/json_text.h"

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

namespace {

// The members of an object, each name once at its first place with its last value (as
// to_json's ordered_json keeps them); members in `fields`.
using Field = std::pair<std::string_view, element>;
void unique_members(const simdjson::dom::object& obj, std::vector<Field>& fields) {
  for (auto [key, value] : obj) fields.emplace_back(key, value);
  constexpr size_t kPairwise = 16;  // up to this many members, names compared pairwise
  if (fields.size() <= kPairwise) {
    bool twice = false;
    for (size_t i = 1; i < fields.size() && !twice; ++i) {
      for (size_t j = 0; j < i && !twice; ++j) twice = fields[j].first == fields[i].first;
    }
    if (!twice) return;
  }
  std::vector<Field> kept;
  std::unordered_map<std::string_view, size_t> at;
  for (const Field& f : fields) {
    auto [it, fresh] = at.emplace(f.first, kept.size());
    if (fresh) {
      kept.push_back(f);
    } else {
      kept[it->second].second = f.second;
    }
  }
  fields.swap(kept);
}

// Writes members [0, n) of an object whose names are each once.
void append_members(std::string& out, const Field* fields, size_t n) {
  out.push_back('{');
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out.push_back(',');
    append_json_string(out, fields[i].first);
    out.push_back(':');
    append_dom_json(out, fields[i].second);
  }
  out.push_back('}');
}

// An object's members in place when it has few and each name once (most objects: no
// allocation), else through unique_members.
void append_object(std::string& out, const simdjson::dom::object& obj) {
  constexpr size_t kFew = 16;
  std::array<Field, kFew> few;
  size_t n = 0;
  bool more = false;
  for (auto [key, value] : obj) {
    if (n == kFew) {
      more = true;
      break;
    }
    few[n++] = Field(key, value);
  }
  bool twice = false;
  for (size_t i = 1; i < n && !more && !twice; ++i) {
    for (size_t j = 0; j < i && !twice; ++j) twice = few[j].first == few[i].first;
  }
  if (!more && !twice) return append_members(out, few.data(), n);
  std::vector<Field> fields;
  unique_members(obj, fields);
  append_members(out, fields.data(), fields.size());
}

}  // namespace

void append_dom_json(std::string& out, const element& v) {
  switch (v.type()) {
    case element_type::OBJECT:
      append_object(out, object_of(v));
      return;
    case element_type::ARRAY: {
      out.push_back('[');
      bool first = true;
      for (element x : array_of(v)) {
        if (!first) out.push_back(',');
        first = false;
        append_dom_json(out, x);
      }
      out.push_back(']');
      return;
    }
    case element_type::STRING:
      append_json_string(out, string_of(v));
      return;
    case element_type::INT64:
      out.append(std::to_string(v.get_int64().value_unsafe()));
      return;
    case element_type::UINT64:
      out.append(std::to_string(v.get_uint64().value_unsafe()));
      return;
    case element_type::DOUBLE:  // nlohmann's own formatting of a double
      out.append(Json(v.get_double().value_unsafe()).dump());
      return;
    case element_type::BOOL:
      out.append(v.get_bool().value_unsafe() ? "true" : "false");
      return;
    case element_type::NULL_VALUE:
      out.append("null");
      return;
  }
}

}  // namespace ferry::api
