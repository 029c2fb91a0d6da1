#include "local_engine/gguf_source.h"

namespace ferry::engine {

Result<std::shared_ptr<GgufSource>> GgufSource::open(const std::string& path) {
  auto file = gguf::GgufFile::open(path);
  if (!file) return std::move(file).error();
  return std::make_shared<GgufSource>(std::move(file).value());
}

GgufSource::GgufSource(std::unique_ptr<gguf::GgufFile> file) : file_(std::move(file)) {
  for (const gguf::TensorInfo& info : file_->tensors()) {
    SourceTensor& t = tensors_[info.name];
    t.name = info.name;
    t.ggml_type = static_cast<uint32_t>(info.type);
    t.dims = info.shape;
    t.data = info.data;
    t.n_bytes = info.n_bytes;
  }
}

std::optional<int64_t> GgufSource::get_int(std::string_view key) const {
  if (auto v = file_->get_int(key)) return v;
  if (auto b = file_->get_bool(key)) return *b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> GgufSource::get_float(std::string_view key) const {
  return file_->get_float(key);
}

std::optional<std::string> GgufSource::get_string(std::string_view key) const {
  const auto s = file_->get_string(key);
  if (!s) return std::nullopt;
  return std::string(*s);
}

std::vector<std::string> GgufSource::get_string_array(std::string_view key) const {
  const gguf::Value* v = file_->find(key);
  if (v == nullptr || !v->is_array() || v->elem_type != gguf::ValueType::kString) return {};
  return v->strings;
}

const SourceTensor* GgufSource::tensor(std::string_view name) const {
  const auto it = tensors_.find(std::string(name));
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace ferry::engine
