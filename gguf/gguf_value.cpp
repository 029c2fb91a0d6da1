#include "gguf/gguf_value.h"

#include <cstdio>
#include <limits>

namespace ferry::gguf {

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
      return "u8";
    case ValueType::kInt8:
      return "i8";
    case ValueType::kUint16:
      return "u16";
    case ValueType::kInt16:
      return "i16";
    case ValueType::kUint32:
      return "u32";
    case ValueType::kInt32:
      return "i32";
    case ValueType::kFloat32:
      return "f32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "str";
    case ValueType::kArray:
      return "arr";
    case ValueType::kUint64:
      return "u64";
    case ValueType::kInt64:
      return "i64";
    case ValueType::kFloat64:
      return "f64";
  }
  return "?";
}

bool value_type_valid(uint32_t id) {
  return id <= static_cast<uint32_t>(ValueType::kFloat64);
}

Value Value::u32(uint32_t v) {
  Value out;
  out.type = ValueType::kUint32;
  out.uint_value = v;
  return out;
}
Value Value::u64(uint64_t v) {
  Value out;
  out.type = ValueType::kUint64;
  out.uint_value = v;
  return out;
}
Value Value::i32(int32_t v) {
  Value out;
  out.type = ValueType::kInt32;
  out.int_value = v;
  return out;
}
Value Value::f32(float v) {
  Value out;
  out.type = ValueType::kFloat32;
  out.float_value = v;
  return out;
}
Value Value::boolean(bool v) {
  Value out;
  out.type = ValueType::kBool;
  out.uint_value = v ? 1 : 0;
  return out;
}
Value Value::string(std::string v) {
  Value out;
  out.type = ValueType::kString;
  out.string_value = std::move(v);
  return out;
}
Value Value::string_array(std::vector<std::string> v) {
  Value out;
  out.type = ValueType::kArray;
  out.elem_type = ValueType::kString;
  out.strings = std::move(v);
  return out;
}
Value Value::f32_array(std::vector<double> v) {
  Value out;
  out.type = ValueType::kArray;
  out.elem_type = ValueType::kFloat32;
  out.floats = std::move(v);
  return out;
}
Value Value::i32_array(std::vector<int64_t> v) {
  Value out;
  out.type = ValueType::kArray;
  out.elem_type = ValueType::kInt32;
  out.ints = std::move(v);
  return out;
}

size_t Value::array_size() const {
  if (type != ValueType::kArray) return 0;
  return uints.size() + ints.size() + floats.size() + strings.size() + arrays.size();
}

namespace {
bool is_unsigned(ValueType t) {
  return t == ValueType::kUint8 || t == ValueType::kUint16 || t == ValueType::kUint32 ||
         t == ValueType::kUint64;
}
bool is_signed(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 ||
         t == ValueType::kInt64;
}
}  // namespace

std::optional<uint64_t> Value::as_uint() const {
  if (is_unsigned(type)) return uint_value;
  if (is_signed(type) && int_value >= 0) return static_cast<uint64_t>(int_value);
  return std::nullopt;
}

std::optional<int64_t> Value::as_int() const {
  if (is_signed(type)) return int_value;
  if (is_unsigned(type) &&
      uint_value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(uint_value);
  }
  return std::nullopt;
}

std::optional<double> Value::as_float() const {
  if (type == ValueType::kFloat32 || type == ValueType::kFloat64) return float_value;
  if (is_signed(type)) return static_cast<double>(int_value);
  if (is_unsigned(type)) return static_cast<double>(uint_value);
  return std::nullopt;
}

std::optional<bool> Value::as_bool() const {
  if (type == ValueType::kBool) return uint_value != 0;
  return std::nullopt;
}

std::optional<std::string_view> Value::as_string() const {
  if (type == ValueType::kString) return std::string_view(string_value);
  return std::nullopt;
}

namespace {
std::string quoted(std::string_view s, size_t max_chars) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
    const char c = s[i];
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"') {
      out += "\\\"";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  if (s.size() > max_chars) out += "...";
  out += "\"";
  return out;
}
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}
}  // namespace

std::string Value::to_display_string(size_t max_items) const {
  switch (type) {
    case ValueType::kString:
      return quoted(string_value, 200);
    case ValueType::kBool:
      return uint_value ? "true" : "false";
    case ValueType::kFloat32:
    case ValueType::kFloat64:
      return number(float_value);
    case ValueType::kArray: {
      std::string out = "[" + std::string(value_type_name(elem_type)) + " x " +
                        std::to_string(array_size()) + "]";
      if (array_size() == 0) return out;
      out += " ";
      const size_t n = std::min(max_items, array_size());
      for (size_t i = 0; i < n; ++i) {
        if (i) out += ", ";
        if (!strings.empty()) out += quoted(strings[i], 40);
        if (!uints.empty()) out += std::to_string(uints[i]);
        if (!ints.empty()) out += std::to_string(ints[i]);
        if (!floats.empty()) out += number(floats[i]);
        if (!arrays.empty()) out += arrays[i].to_display_string(2);
      }
      if (n < array_size()) out += ", ...";
      return out;
    }
    default:
      if (is_signed(type)) return std::to_string(int_value);
      return std::to_string(uint_value);
  }
}

}  // namespace ferry::gguf
