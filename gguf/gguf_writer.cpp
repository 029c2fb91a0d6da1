#include "gguf/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "gguf/gguf_reader.h"

namespace ferry::gguf {
namespace {

class VectorSink {
 public:
  explicit VectorSink(std::vector<uint8_t>& out) : out_(out) {}
  void write(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  uint64_t position() const { return out_.size(); }

 private:
  std::vector<uint8_t>& out_;
};

class FileSink {
 public:
  explicit FileSink(std::FILE* f) : f_(f) {}
  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) ok_ = false;
    pos_ += n;
  }
  uint64_t position() const { return pos_; }
  bool ok() const { return ok_; }

 private:
  std::FILE* f_;
  uint64_t pos_ = 0;
  bool ok_ = true;
};

template <typename Sink, typename T>
void put(Sink& s, T v) {
  s.write(&v, sizeof(T));
}

template <typename Sink>
void put_string(Sink& s, const std::string& str) {
  put<Sink, uint64_t>(s, str.size());
  s.write(str.data(), str.size());
}

template <typename Sink>
void put_scalar(Sink& s, ValueType t, uint64_t u, int64_t i, double f, const std::string* str) {
  switch (t) {
    case ValueType::kUint8:
      put(s, static_cast<uint8_t>(u));
      break;
    case ValueType::kInt8:
      put(s, static_cast<int8_t>(i));
      break;
    case ValueType::kUint16:
      put(s, static_cast<uint16_t>(u));
      break;
    case ValueType::kInt16:
      put(s, static_cast<int16_t>(i));
      break;
    case ValueType::kUint32:
      put(s, static_cast<uint32_t>(u));
      break;
    case ValueType::kInt32:
      put(s, static_cast<int32_t>(i));
      break;
    case ValueType::kUint64:
      put(s, static_cast<uint64_t>(u));
      break;
    case ValueType::kInt64:
      put(s, static_cast<int64_t>(i));
      break;
    case ValueType::kFloat32:
      put(s, static_cast<float>(f));
      break;
    case ValueType::kFloat64:
      put(s, f);
      break;
    case ValueType::kBool:
      put(s, static_cast<uint8_t>(u ? 1 : 0));
      break;
    case ValueType::kString:
      put_string(s, *str);
      break;
    case ValueType::kArray:
      break;
  }
}

template <typename Sink>
void put_value(Sink& s, const Value& v) {
  if (v.type != ValueType::kArray) {
    put_scalar(s, v.type, v.uint_value, v.int_value, v.float_value, &v.string_value);
    return;
  }
  put(s, static_cast<uint32_t>(v.elem_type));
  put<Sink, uint64_t>(s, v.array_size());
  for (uint64_t u : v.uints) put_scalar(s, v.elem_type, u, 0, 0, nullptr);
  for (int64_t i : v.ints) put_scalar(s, v.elem_type, 0, i, 0, nullptr);
  for (double f : v.floats) put_scalar(s, v.elem_type, 0, 0, f, nullptr);
  for (const auto& str : v.strings) put_string(s, str);
  for (const auto& a : v.arrays) put_value(s, a);
}

template <typename Sink>
void pad_to(Sink& s, uint64_t alignment) {
  static const uint8_t kZeros[256] = {};
  uint64_t pad = (alignment - s.position() % alignment) % alignment;
  while (pad > 0) {
    const uint64_t n = pad < sizeof(kZeros) ? pad : sizeof(kZeros);
    s.write(kZeros, static_cast<size_t>(n));
    pad -= n;
  }
}

}  // namespace

void GgufWriter::set(const std::string& key, Value value) {
  for (auto& kv : metadata_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::remove(const std::string& key) {
  for (auto it = metadata_.begin(); it != metadata_.end(); ++it) {
    if (it->first == key) {
      metadata_.erase(it);
      return;
    }
  }
}

Status GgufWriter::add_tensor(std::string name, model_format::TensorType type,
                              std::vector<int64_t> shape, std::vector<uint8_t> data) {
  if (shape.empty() || shape.size() > static_cast<size_t>(kMaxDims)) {
    return Error::make(ErrorCode::kInvalidRequest, name + ": 1 to 4 dimensions required");
  }
  const auto row = model_format::row_bytes(type, shape[0]);
  if (!row) {
    return Error::make(ErrorCode::kInvalidRequest,
                       name + ": row length is not a whole number of blocks");
  }
  uint64_t rows = 1;
  for (size_t i = 1; i < shape.size(); ++i) rows *= static_cast<uint64_t>(shape[i]);
  if (*row * rows != data.size()) {
    return Error::make(ErrorCode::kInvalidRequest, name + ": " + std::to_string(data.size()) +
                                                       " bytes given, " +
                                                       std::to_string(*row * rows) + " expected");
  }
  tensors_.push_back(PendingTensor{std::move(name), type, std::move(shape), std::move(data)});
  return {};
}

uint64_t GgufWriter::alignment() const {
  for (const auto& kv : metadata_) {
    if (kv.first == "general.alignment") {
      const auto a = kv.second.as_uint();
      if (a && *a > 0 && (*a & (*a - 1)) == 0) return *a;
    }
  }
  return kDefaultAlignment;
}

template <typename Sink>
void GgufWriter::emit(Sink& sink) const {
  const uint64_t align = alignment();
  put(sink, kMagic);
  put(sink, version_);
  put<Sink, uint64_t>(sink, tensors_.size());
  put<Sink, uint64_t>(sink, metadata_.size());
  for (const auto& kv : metadata_) {
    put_string(sink, kv.first);
    put(sink, static_cast<uint32_t>(kv.second.type));
    put_value(sink, kv.second);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(sink, t.name);
    put(sink, static_cast<uint32_t>(t.shape.size()));
    for (int64_t ne : t.shape) put(sink, static_cast<uint64_t>(ne));
    put(sink, static_cast<uint32_t>(t.type));
    put(sink, offset);
    offset += t.data.size();
    offset += (align - offset % align) % align;
  }
  // The data section starts aligned; a file without tensors has none, so nothing is padded
  // (a hostile general.alignment of 1 GiB, which the reader accepts, would pad a copy to 1 GiB).
  if (!tensors_.empty()) pad_to(sink, align);
  for (const auto& t : tensors_) {
    sink.write(t.data.data(), t.data.size());
    pad_to(sink, align);
  }
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out;
  VectorSink sink(out);
  emit(sink);
  return out;
}

Status GgufWriter::write_file(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    return Error::make(ErrorCode::kInternal, tmp + ": cannot create: " + std::strerror(errno));
  }
  FileSink sink(f);
  emit(sink);
  const bool closed = std::fclose(f) == 0;
  if (!sink.ok() || !closed) {
    std::remove(tmp.c_str());
    return Error::make(ErrorCode::kInternal, tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Error::make(ErrorCode::kInternal, path + ": rename failed: " + std::strerror(errno));
  }
  return {};
}

}  // namespace ferry::gguf
