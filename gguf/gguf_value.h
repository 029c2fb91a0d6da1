// GGUF metadata values: the thirteen GGUF value types, arrays of any of them (nested too).
// Plain value types; safe to copy between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::gguf {

// Numbered as the GGUF format numbers them.
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view value_type_name(ValueType type);
bool value_type_valid(uint32_t id);

// One metadata value. Scalars keep their exact GGUF type (so a file can be rewritten byte for
// byte); an array keeps its element type and fills exactly one of the vectors below:
// unsigned and bool elements in `uints`, signed in `ints`, floats in `floats`, strings in
// `strings`, nested arrays in `arrays`.
struct Value {
  ValueType type = ValueType::kUint32;
  uint64_t uint_value = 0;   // kUint8/16/32/64, kBool (0 or 1)
  int64_t int_value = 0;     // kInt8/16/32/64
  double float_value = 0;    // kFloat32/64
  std::string string_value;  // kString

  ValueType elem_type = ValueType::kUint8;  // kArray only
  std::vector<uint64_t> uints;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<Value> arrays;

  // Constructors for the common cases.
  static Value u32(uint32_t v);
  static Value u64(uint64_t v);
  static Value i32(int32_t v);
  static Value f32(float v);
  static Value boolean(bool v);
  static Value string(std::string v);
  static Value string_array(std::vector<std::string> v);
  static Value f32_array(std::vector<double> v);
  static Value i32_array(std::vector<int64_t> v);

  bool is_array() const { return type == ValueType::kArray; }
  // Number of elements of an array (0 for a scalar).
  size_t array_size() const;

  // Typed reads that convert only when lossless: as_uint of a negative int is nullopt,
  // as_int accepts any integer in range, as_float accepts floats and integers.
  std::optional<uint64_t> as_uint() const;
  std::optional<int64_t> as_int() const;
  std::optional<double> as_float() const;
  std::optional<bool> as_bool() const;
  std::optional<std::string_view> as_string() const;

  // Short human-readable form for `ferry model info` (arrays abbreviated).
  std::string to_display_string(size_t max_items = 8) const;
};

}  // namespace ferry::gguf
