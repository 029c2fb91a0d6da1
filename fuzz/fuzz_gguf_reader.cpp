// Fuzzes the GGUF reader (gguf/gguf_reader: GgufFile::from_bytes) with the reader's default
// limits. For a file it accepts: every metadata value is read through each typed accessor,
// the first and last byte of every tensor are touched (ASan checks the bounds the reader
// vouched for), and the file is rewritten with GgufWriter and read again, which must succeed
// and rewrite to the same bytes. A file that carries a vocabulary is also loaded as a
// tokenizer (tokenizer/gguf_vocab.cpp, which only takes a path: a temporary file).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"

using namespace ferry;

namespace {

void read_values(const gguf::GgufFile& file) {
  for (const auto& [key, value] : file.metadata()) {
    (void)value.as_uint();
    (void)value.as_int();
    (void)value.as_float();
    (void)value.as_bool();
    (void)value.as_string();
    (void)value.to_display_string();
    if (file.find(key) == nullptr) __builtin_trap();
  }
  (void)file.architecture();
}

void touch_tensors(const gguf::GgufFile& file) {
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.n_bytes == 0) continue;
    if (t.data < file.file_data() || t.n_bytes > file.file_size() ||
        static_cast<uint64_t>(t.data - file.file_data()) > file.file_size() - t.n_bytes) {
      __builtin_trap();  // a tensor outside the file
    }
    volatile uint8_t first = t.data[0];
    volatile uint8_t last = t.data[t.n_bytes - 1];
    (void)first;
    (void)last;
    if (file.find_tensor(t.name) == nullptr) __builtin_trap();
  }
}

// The file as GgufWriter writes it back; empty when the writer refuses a tensor.
std::vector<uint8_t> rewrite(const gguf::GgufFile& file) {
  gguf::GgufWriter writer(file.version());
  for (const auto& [key, value] : file.metadata()) writer.set(key, value);
  for (const gguf::TensorInfo& t : file.tensors()) {
    std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
    if (!writer.add_tensor(t.name, t.type, t.shape, std::move(bytes))) return {};
  }
  return writer.to_bytes();
}

void load_vocabulary(const uint8_t* data, size_t size) {
  char path[] = "/tmp/ferry-fuzz-XXXXXX.gguf";
  int fd = mkstemps(path, 5);
  if (fd < 0) return;
  bool written = write(fd, data, size) == static_cast<ssize_t>(size);
  close(fd);
  if (written) {
    auto tok = tokenizer::load_tokenizer(path);
    if (tok) (void)(*tok)->encode("Hello, world! <|im_end|> \xc3\xa9");
  }
  unlink(path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = gguf::GgufFile::from_bytes(data, size, "fuzz.gguf");
  if (!file) return 0;
  read_values(**file);
  touch_tensors(**file);

  std::vector<uint8_t> once = rewrite(**file);
  if (!once.empty()) {
    auto again = gguf::GgufFile::from_bytes(once.data(), once.size(), "rewritten.gguf");
    if (!again) __builtin_trap();  // the reader refused what the writer wrote
    if (rewrite(**again) != once) __builtin_trap();
  }
  if ((*file)->find("tokenizer.ggml.model") != nullptr) load_vocabulary(data, size);
  return 0;
}
