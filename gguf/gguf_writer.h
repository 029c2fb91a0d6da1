// Writes GGUF v3 (or v2) files: metadata in insertion order, tensor infos, aligned data.
// Used by `ferry model synth/quantize` and by tests to build (also deliberately broken) files.
// Not thread-safe; one writer per thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "gguf/gguf_value.h"
#include "model_format/tensor_type.h"

namespace ferry::gguf {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  // Sets a key (replacing an existing one in place). "general.alignment" also sets the
  // alignment the data section uses.
  void set(const std::string& key, Value value);
  void remove(const std::string& key);
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }

  // Adds a tensor; `data` must be row_bytes(type, shape[0]) * (product of other dims) bytes.
  // shape[0] is the row length (GGUF order).
  Status add_tensor(std::string name, model_format::TensorType type, std::vector<int64_t> shape,
                    std::vector<uint8_t> data);
  size_t tensor_count() const { return tensors_.size(); }

  // The whole file image, and writing it (to path + ".tmp", then renamed).
  std::vector<uint8_t> to_bytes() const;
  Status write_file(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    model_format::TensorType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  uint64_t alignment() const;
  template <typename Sink>
  void emit(Sink& sink) const;

  uint32_t version_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace ferry::gguf
