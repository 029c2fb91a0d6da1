// ModelSource over a GGUF file (ferry::gguf::GgufFile): metadata and mmapped tensor bytes.
// Immutable after open; safe to read from several threads.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "common/error.h"
#include "gguf/gguf_reader.h"
#include "local_engine/model_source.h"

namespace ferry::engine {

class GgufSource : public ModelSource {
 public:
  static Result<std::shared_ptr<GgufSource>> open(const std::string& path);
  explicit GgufSource(std::unique_ptr<gguf::GgufFile> file);

  std::optional<int64_t> get_int(std::string_view key) const override;
  std::optional<double> get_float(std::string_view key) const override;
  std::optional<std::string> get_string(std::string_view key) const override;
  std::vector<std::string> get_string_array(std::string_view key) const override;
  bool has_key(std::string_view key) const override { return file_->find(key) != nullptr; }
  const SourceTensor* tensor(std::string_view name) const override;

  const gguf::GgufFile& file() const { return *file_; }

 private:
  std::unique_ptr<gguf::GgufFile> file_;
  std::unordered_map<std::string, SourceTensor> tensors_;
};

}  // namespace ferry::engine
