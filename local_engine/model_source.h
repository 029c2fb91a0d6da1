// Where a model's metadata and tensor bytes come from: a GGUF file (gguf_source.h) or, in
// tests, memory. The engine reads only through this interface. Implementations are read-only
// after construction and safe to read from several threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::engine {

struct SourceTensor {
  std::string name;
  uint32_t ggml_type = 0;         // GGUF tensor type number
  std::vector<int64_t> dims;      // ne[0] (innermost, contiguous) first
  const uint8_t* data = nullptr;  // the tensor's bytes, valid while the source lives
  size_t n_bytes = 0;             // checked against type and dims by the source
};

class ModelSource {
 public:
  virtual ~ModelSource() = default;
  // Integer metadata of any integer (or bool) type; nullopt when absent or not an integer.
  virtual std::optional<int64_t> get_int(std::string_view key) const = 0;
  // Floating metadata (f32/f64, or an integer); nullopt when absent.
  virtual std::optional<double> get_float(std::string_view key) const = 0;
  virtual std::optional<std::string> get_string(std::string_view key) const = 0;
  // The strings of a string-array key (empty when absent or not strings).
  virtual std::vector<std::string> get_string_array(std::string_view key) const = 0;
  // Whether the key is there at all; GgufSource also sees arrays of any element type.
  virtual bool has_key(std::string_view key) const {
    return get_int(key) || get_float(key) || get_string(key) || !get_string_array(key).empty();
  }
  virtual const SourceTensor* tensor(std::string_view name) const = 0;
};

}  // namespace ferry::engine
