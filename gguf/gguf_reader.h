// Reads GGUF v2/v3 files over a read-only mmap: header, every metadata type, tensor infos,
// alignment. Every count, size and offset is checked against the file before use, so a
// truncated or hostile file is refused with a clear Error (never a crash or an out-of-bounds
// read). A GgufFile is immutable after open(); share it freely between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/error.h"
#include "gguf/gguf_value.h"
#include "model_format/tensor_type.h"

namespace ferry::gguf {

using model_format::TensorType;

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;

struct TensorInfo {
  std::string name;
  TensorType type = TensorType::kF32;
  // GGUF order: shape[0] is the fastest-varying dimension (row length). 1 to 4 entries.
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // from the start of the data section (a multiple of alignment)
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // inside the mapping, n_bytes long

  int64_t ne(int i) const { return i < static_cast<int>(shape.size()) ? shape[i] : 1; }
};

// Limits a reader enforces besides the file's bounds (a hostile file can claim anything).
struct ReadLimits {
  uint64_t max_string_bytes = 1ull << 24;  // 16 MiB per string
  uint64_t max_array_elems = 1ull << 26;   // 64 Mi elements per array
  uint64_t max_kv = 1ull << 20;
  uint64_t max_tensors = 1ull << 20;
  int max_array_depth = 4;
};

class GgufFile {
 public:
  // Maps and parses `path`. Errors (kInvalidRequest) name the file, the byte offset and what
  // was wrong: "model.gguf: offset 24: string length 18446744073709551615 exceeds the file".
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path,
                                                const ReadLimits& limits = {});
  // Parses a copy of an in-memory image (tests, fuzzing). `name` appears in errors.
  static Result<std::unique_ptr<GgufFile>> from_bytes(const void* data, size_t size,
                                                      std::string name = "<memory>",
                                                      const ReadLimits& limits = {});
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
  const uint8_t* file_data() const { return base_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  // "general.architecture", or "" when absent.
  std::string_view architecture() const;

  // Tensors in file order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  Status parse(const ReadLimits& limits);

  std::string name_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  void* mapping_ = nullptr;     // mmap base when mapped
  std::vector<uint8_t> owned_;  // the copy when from_bytes
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace ferry::gguf
