#include "gguf/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace ferry::gguf {
namespace {

Error file_error(const std::string& name, uint64_t offset, const std::string& what) {
  return Error::make(ErrorCode::kInvalidRequest,
                     name + ": offset " + std::to_string(offset) + ": " + what);
}

// Bounds-checked little-endian reads over [base, base + size). Every read either succeeds
// entirely or records an error and leaves the cursor where the failing item began.
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size, const std::string& name)
      : base_(base), size_(size), name_(name) {}

  uint64_t offset() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const std::optional<Error>& error() const { return error_; }
  bool ok() const { return !error_; }

  void fail(const std::string& what) { fail_at(pos_, what); }
  void fail_at(uint64_t offset, const std::string& what) {
    if (!error_) error_ = file_error(name_, offset, what);
  }

  template <typename T>
  T read(const char* what) {
    T value{};
    if (!ok()) return value;
    if (remaining() < sizeof(T)) {
      fail(std::string("file truncated reading ") + what);
      return value;
    }
    std::memcpy(&value, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(const char* what, uint64_t max_bytes) {
    const uint64_t at = pos_;
    const auto len = read<uint64_t>(what);
    if (!ok()) return {};
    if (len > remaining()) {
      fail_at(at, std::string(what) + ": length " + std::to_string(len) + " exceeds the file");
      return {};
    }
    if (len > max_bytes) {
      fail_at(at, std::string(what) + ": length " + std::to_string(len) + " exceeds the limit " +
                      std::to_string(max_bytes));
      return {};
    }
    std::string out(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return out;
  }

  bool seek(uint64_t pos) {
    if (pos > size_) {
      fail("offset " + std::to_string(pos) + " is past the end of the file");
      return false;
    }
    pos_ = pos;
    return true;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  const std::string& name_;
  uint64_t pos_ = 0;
  std::optional<Error> error_;
};

uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
      return 8;
    case ValueType::kString:
      return 8;  // at least its length
    case ValueType::kArray:
      return 12;  // at least its type and count
  }
  return 1;
}

// Reads one scalar of type t into v (v.type set by the caller for scalars).
void read_scalar(Cursor& c, ValueType t, Value& v, const ReadLimits& limits) {
  switch (t) {
    case ValueType::kUint8:
      v.uint_value = c.read<uint8_t>("u8");
      break;
    case ValueType::kInt8:
      // An int8 value, sign-extended on purpose.
      v.int_value = c.read<int8_t>("i8");  // NOLINT(bugprone-signed-char-misuse)
      break;
    case ValueType::kUint16:
      v.uint_value = c.read<uint16_t>("u16");
      break;
    case ValueType::kInt16:
      v.int_value = c.read<int16_t>("i16");
      break;
    case ValueType::kUint32:
      v.uint_value = c.read<uint32_t>("u32");
      break;
    case ValueType::kInt32:
      v.int_value = c.read<int32_t>("i32");
      break;
    case ValueType::kUint64:
      v.uint_value = c.read<uint64_t>("u64");
      break;
    case ValueType::kInt64:
      v.int_value = c.read<int64_t>("i64");
      break;
    case ValueType::kFloat32:
      v.float_value = c.read<float>("f32");
      break;
    case ValueType::kFloat64:
      v.float_value = c.read<double>("f64");
      break;
    case ValueType::kBool: {
      const uint64_t at = c.offset();
      const auto b = c.read<uint8_t>("bool");
      if (c.ok() && b > 1) c.fail_at(at, "bool value " + std::to_string(b) + " is not 0 or 1");
      v.uint_value = b;
      break;
    }
    case ValueType::kString:
      v.string_value = c.read_string("string", limits.max_string_bytes);
      break;
    case ValueType::kArray:
      c.fail("array where a scalar was expected");
      break;
  }
}

void read_value(Cursor& c, ValueType t, Value& v, const ReadLimits& limits, int depth);

void read_array(Cursor& c, Value& v, const ReadLimits& limits, int depth) {
  const uint64_t at = c.offset();
  if (depth > limits.max_array_depth) {
    c.fail("arrays nested deeper than " + std::to_string(limits.max_array_depth));
    return;
  }
  const auto elem_id = c.read<uint32_t>("array element type");
  if (!c.ok()) return;
  if (!value_type_valid(elem_id)) {
    c.fail_at(at, "unknown array element type " + std::to_string(elem_id));
    return;
  }
  const auto elem = static_cast<ValueType>(elem_id);
  const auto count = c.read<uint64_t>("array length");
  if (!c.ok()) return;
  if (count > limits.max_array_elems) {
    c.fail_at(at, "array length " + std::to_string(count) + " exceeds the limit");
    return;
  }
  if (count > c.remaining() / scalar_size(elem)) {
    c.fail_at(at, "array of " + std::to_string(count) + " elements exceeds the file");
    return;
  }
  v.type = ValueType::kArray;
  v.elem_type = elem;
  const auto n = static_cast<size_t>(count);
  switch (elem) {
    case ValueType::kUint8:
    case ValueType::kUint16:
    case ValueType::kUint32:
    case ValueType::kUint64:
    case ValueType::kBool:
      v.uints.resize(n);
      for (size_t i = 0; i < n && c.ok(); ++i) {
        Value e;
        read_scalar(c, elem, e, limits);
        v.uints[i] = e.uint_value;
      }
      break;
    case ValueType::kInt8:
    case ValueType::kInt16:
    case ValueType::kInt32:
    case ValueType::kInt64:
      v.ints.resize(n);
      for (size_t i = 0; i < n && c.ok(); ++i) {
        Value e;
        read_scalar(c, elem, e, limits);
        v.ints[i] = e.int_value;
      }
      break;
    case ValueType::kFloat32:
    case ValueType::kFloat64:
      v.floats.resize(n);
      for (size_t i = 0; i < n && c.ok(); ++i) {
        Value e;
        read_scalar(c, elem, e, limits);
        v.floats[i] = e.float_value;
      }
      break;
    case ValueType::kString:
      v.strings.resize(n);
      for (size_t i = 0; i < n && c.ok(); ++i) {
        v.strings[i] = c.read_string("array string", limits.max_string_bytes);
      }
      break;
    case ValueType::kArray:
      v.arrays.resize(n);
      for (size_t i = 0; i < n && c.ok(); ++i) read_array(c, v.arrays[i], limits, depth + 1);
      break;
  }
}

void read_value(Cursor& c, ValueType t, Value& v, const ReadLimits& limits, int depth) {
  v.type = t;
  if (t == ValueType::kArray) {
    read_array(c, v, limits, depth + 1);
  } else {
    read_scalar(c, t, v, limits);
  }
}

// One metadata key and its value.
Result<std::pair<std::string, Value>> read_key_value(Cursor& c, const std::string& file,
                                                     const ReadLimits& limits) {
  const uint64_t at = c.offset();
  std::string key = c.read_string("metadata key", limits.max_string_bytes);
  const auto type_id = c.read<uint32_t>("metadata value type");
  if (!c.ok()) return *c.error();
  if (!value_type_valid(type_id)) {
    return file_error(file, at, "key '" + key + "': unknown value type " + std::to_string(type_id));
  }
  Value value;
  read_value(c, static_cast<ValueType>(type_id), value, limits, 0);
  if (!c.ok()) return *c.error();
  return std::pair{std::move(key), std::move(value)};
}

// One tensor info: name, shape (1 to 4 dimensions, no overflow), a known type whose blocks
// tile the rows, an aligned offset; its size in bytes. Where its data lies is checked later.
Result<TensorInfo> read_tensor_info(Cursor& c, const std::string& file, const ReadLimits& limits,
                                    uint64_t alignment) {
  const uint64_t at = c.offset();
  TensorInfo t;
  t.name = c.read_string("tensor name", limits.max_string_bytes);
  const auto n_dims = c.read<uint32_t>("tensor dimension count");
  if (!c.ok()) return *c.error();
  if (n_dims == 0 || n_dims > kMaxDims) {
    return file_error(
        file, at,
        "tensor '" + t.name + "': " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
  }
  uint64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const auto ne = c.read<uint64_t>("tensor dimension");
    if (!c.ok()) return *c.error();
    if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (ne != 0 && n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne)) {
      return file_error(file, at, "tensor '" + t.name + "': shape overflows");
    }
    n_elements *= ne;
    t.shape.push_back(static_cast<int64_t>(ne));
  }
  const auto type_id = c.read<uint32_t>("tensor type");
  t.offset = c.read<uint64_t>("tensor offset");
  if (!c.ok()) return *c.error();
  if (!model_format::tensor_type_known(type_id)) {
    return file_error(file, at, "tensor '" + t.name + "': unknown type " + std::to_string(type_id));
  }
  t.type = static_cast<TensorType>(type_id);
  const auto row = model_format::row_bytes(t.type, t.shape[0]);
  if (!row && t.shape[0] % model_format::block_elems(t.type) == 0) {
    return file_error(file, at, "tensor '" + t.name + "': size overflows");
  }
  if (!row) {
    return file_error(file, at,
                      "tensor '" + t.name + "': row of " + std::to_string(t.shape[0]) +
                          " is not a whole number of " +
                          std::string(model_format::tensor_type_name(t.type)) + " blocks");
  }
  const uint64_t n_rows = t.shape[0] == 0 ? 0 : n_elements / static_cast<uint64_t>(t.shape[0]);
  if (n_rows != 0 && *row > std::numeric_limits<uint64_t>::max() / n_rows) {
    return file_error(file, at, "tensor '" + t.name + "': size overflows");
  }
  t.n_elements = n_elements;
  t.n_bytes = *row * n_rows;
  if (t.offset % alignment != 0) {
    return file_error(file, at,
                      "tensor '" + t.name + "': offset " + std::to_string(t.offset) +
                          " is not a multiple of the alignment " + std::to_string(alignment));
  }
  return t;
}

}  // namespace

GgufFile::~GgufFile() {
  if (mapping_) munmap(mapping_, static_cast<size_t>(size_));
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path,
                                                 const ReadLimits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Error::make(ErrorCode::kNotFound, path + ": cannot open: " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error::make(ErrorCode::kInvalidRequest, path + ": not a regular file");
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = path;
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* map = mmap(nullptr, static_cast<size_t>(file->size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Error::make(ErrorCode::kInternal, path + ": mmap failed: " + std::strerror(err));
    }
    file->mapping_ = map;
    file->base_ = static_cast<const uint8_t*>(map);
  }
  ::close(fd);
  if (Status s = file->parse(limits); !s) return s.error();
  return file;
}

Result<std::unique_ptr<GgufFile>> GgufFile::from_bytes(const void* data, size_t size,
                                                       std::string name, const ReadLimits& limits) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = std::move(name);
  // Keep the data section as aligned as a mapping would be.
  file->owned_.resize(size);
  if (size) std::memcpy(file->owned_.data(), data, size);
  file->base_ = file->owned_.data();
  file->size_ = size;
  if (Status s = file->parse(limits); !s) return s.error();
  return file;
}

Status GgufFile::parse(const ReadLimits& limits) {
  Cursor c(base_, size_, name_);
  const auto magic = c.read<uint32_t>("magic");
  if (!c.ok()) return *c.error();
  if (magic != kMagic) return file_error(name_, 0, "not a GGUF file (bad magic)");
  version_ = c.read<uint32_t>("version");
  if (!c.ok()) return *c.error();
  if (version_ != 2 && version_ != 3) {
    if (version_ == 1) return file_error(name_, 4, "GGUF version 1 is not supported");
    if ((version_ & 0xFFFF) == 0) return file_error(name_, 4, "big-endian GGUF is not supported");
    return file_error(name_, 4, "unsupported GGUF version " + std::to_string(version_));
  }
  const auto n_tensors = c.read<uint64_t>("tensor count");
  const auto n_kv = c.read<uint64_t>("metadata count");
  if (!c.ok()) return *c.error();
  // A tensor info takes at least 8 + 4 + 8 + 4 + 8 bytes and a key/value at least 8 + 4 + 1.
  if (n_tensors > limits.max_tensors || n_tensors > c.remaining() / 32) {
    return file_error(name_, 8, "tensor count " + std::to_string(n_tensors) + " is impossible");
  }
  if (n_kv > limits.max_kv || n_kv > c.remaining() / 13) {
    return file_error(name_, 16, "metadata count " + std::to_string(n_kv) + " is impossible");
  }

  metadata_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = c.offset();
    auto kv = read_key_value(c, name_, limits);
    if (!kv) return kv.error();
    if (!metadata_index_.emplace(kv->first, metadata_.size()).second) {
      return file_error(name_, at, "duplicate metadata key '" + kv->first + "'");
    }
    metadata_.push_back(std::move(kv).value());
  }

  if (const Value* align = find("general.alignment")) {
    const auto a = align->as_uint();
    if (align->type != ValueType::kUint32 || !a || *a == 0 || (*a & (*a - 1)) != 0) {
      return file_error(name_, 0, "general.alignment must be a u32 power of two");
    }
    alignment_ = *a;
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = c.offset();
    auto info = read_tensor_info(c, name_, limits, alignment_);
    if (!info) return info.error();
    TensorInfo& t = info.value();
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return file_error(name_, at, "duplicate tensor name '" + t.name + "'");
    }
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t end_of_infos = c.offset();
  const uint64_t pad = (alignment_ - end_of_infos % alignment_) % alignment_;
  data_offset_ = end_of_infos + pad;
  if (n_tensors > 0 && data_offset_ > size_) {
    return file_error(name_, end_of_infos, "file truncated before the tensor data");
  }
  for (auto& t : tensors_) {
    const uint64_t avail = size_ >= data_offset_ ? size_ - data_offset_ : 0;
    if (t.offset > avail || t.n_bytes > avail - t.offset) {
      return file_error(name_, data_offset_,
                        "tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", +" +
                            std::to_string(t.n_bytes) + ") lies outside the file (truncated?)");
    }
    t.data = base_ + data_offset_ + t.offset;
  }
  return {};
}

const Value* GgufFile::find(std::string_view key) const {
  const auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_uint() : std::nullopt;
}
std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_int() : std::nullopt;
}
std::optional<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_float() : std::nullopt;
}
std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_bool() : std::nullopt;
}
std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_string() : std::nullopt;
}

std::string_view GgufFile::architecture() const {
  return get_string("general.architecture").value_or("");
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace ferry::gguf
