// Hostile GGUF files: truncated at every byte, sizes and offsets that overflow, wrong types,
// absurd shapes, bombs. Each must be refused with an error; none may crash or read out of
// bounds (run under ASan too).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

namespace ferry::gguf {
namespace {

using model_format::TensorType;

// Raw little-endian byte building for files the writer would never produce.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& u8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  Bytes& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  Bytes& pad(size_t align) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
};

Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes h;
  h.u32(kMagic).u32(version).u64(n_tensors).u64(n_kv);
  return h;
}

std::string refuse(const std::vector<uint8_t>& bytes) {
  auto f = GgufFile::from_bytes(bytes.data(), bytes.size(), "hostile.gguf");
  if (f) return "";
  EXPECT_NE(f.error().message.find("hostile.gguf"), std::string::npos);
  return f.error().message;
}

#define EXPECT_REFUSED(bytes, fragment)                      \
  do {                                                       \
    const std::string msg = refuse(bytes);                   \
    EXPECT_FALSE(msg.empty()) << "accepted";                 \
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg; \
  } while (0)

std::vector<uint8_t> valid_file() {
  GgufWriter w;
  w.set("general.architecture", Value::string("llama"));
  w.set("tokens", Value::string_array({"a", "bb", "ccc"}));
  w.set("n", Value::u32(7));
  std::vector<uint8_t> q(34 * 2, 1);
  EXPECT_TRUE(w.add_tensor("w", TensorType::kQ8_0, {32, 2}, q));
  EXPECT_TRUE(w.add_tensor("norm", TensorType::kF32, {4}, std::vector<uint8_t>(16, 2)));
  return w.to_bytes();
}

TEST(GgufHostile, TruncatedAtEveryByte) {
  const auto full = valid_file();
  auto ok = GgufFile::from_bytes(full.data(), full.size());
  ASSERT_TRUE(ok);
  uint64_t needed = 0;
  for (const auto& t : (*ok)->tensors()) {
    needed = std::max(needed, (*ok)->data_offset() + t.offset + t.n_bytes);
  }
  for (size_t len = 0; len < full.size(); ++len) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(len));
    auto f = GgufFile::from_bytes(cut.data(), cut.size(), "cut.gguf");
    if (len < needed) {
      ASSERT_FALSE(f) << "accepted a file cut at " << len;
      ASSERT_FALSE(f.error().message.empty());
    } else {
      ASSERT_TRUE(f) << "refused a complete file cut in its trailing padding at " << len;
    }
  }
}

TEST(GgufHostile, BadMagicAndVersions) {
  EXPECT_REFUSED(Bytes().u32(0x12345678).u32(3).u64(0).u64(0).b, "bad magic");
  EXPECT_REFUSED(header(0, 0, 1).b, "version 1");
  EXPECT_REFUSED(header(0, 0, 0x03000000).b, "big-endian");
  EXPECT_REFUSED(header(0, 0, 4).b, "unsupported GGUF version 4");
  EXPECT_TRUE(refuse(header(0, 0).b).empty());  // an empty model is well-formed
}

TEST(GgufHostile, ImpossibleCounts) {
  EXPECT_REFUSED(header(~0ull, 0).b, "tensor count");
  EXPECT_REFUSED(header(0, ~0ull).b, "metadata count");
  EXPECT_REFUSED(header(1ull << 40, 1).b, "tensor count");
  EXPECT_REFUSED(header(0, 2).str("k").u32(4).u32(1).b, "metadata count");
  EXPECT_REFUSED(header(0, 2).str("k").u32(4).u32(1).raw("\0\0\0\0\0\0\0\0\0\0", 10).b,
                 "truncated");
}

TEST(GgufHostile, StringLengths) {
  const std::vector<uint8_t> filler(64, 0);  // enough bytes that the counts are plausible
  EXPECT_REFUSED(header(0, 1).u64(~0ull).raw(filler.data(), 64).b, "exceeds the file");
  EXPECT_REFUSED(header(0, 1).u64(1ull << 62).raw(filler.data(), 64).b, "exceeds the file");
  EXPECT_REFUSED(header(0, 1).str("k").u32(8).u64(~0ull - 3).raw(filler.data(), 64).b,
                 "exceeds the file");
  ReadLimits tight;
  tight.max_string_bytes = 4;
  const auto bytes = header(0, 1).str("key").u32(8).str("longer than four").b;
  auto f = GgufFile::from_bytes(bytes.data(), bytes.size(), "x", tight);
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message.find("limit"), std::string::npos);
}

TEST(GgufHostile, ValueTypesAndArrays) {
  EXPECT_REFUSED(header(0, 1).str("k").u32(13).u32(0).b, "unknown value type 13");
  EXPECT_REFUSED(header(0, 1).str("k").u32(0xFFFFFFFF).b, "unknown value type");
  EXPECT_REFUSED(header(0, 1).str("k").u32(7).u8(2).b, "not 0 or 1");
  EXPECT_REFUSED(header(0, 1).str("k").u32(9).u32(77).u64(1).b, "unknown array element type");
  EXPECT_REFUSED(header(0, 1).str("k").u32(9).u32(4).u64(~0ull).b, "exceeds");
  EXPECT_REFUSED(header(0, 1).str("k").u32(9).u32(4).u64(1ull << 61).u32(1).b, "exceeds");
  EXPECT_REFUSED(header(0, 1).str("k").u32(9).u32(8).u64(1000).str("a").b, "exceeds the file");
  EXPECT_REFUSED(header(0, 1).str("k").u32(9).u32(8).u64(3).str("a").u64(99).b, "exceeds the file");
  // Arrays of arrays nested without end.
  Bytes bomb = header(0, 1).str("k").u32(9);
  for (int i = 0; i < 64; ++i) bomb.u32(9).u64(1);
  bomb.u32(4).u64(0);
  EXPECT_REFUSED(bomb.b, "nested deeper");
  EXPECT_REFUSED(header(0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2).b,
                 "duplicate metadata key");
}

TEST(GgufHostile, Alignment) {
  EXPECT_REFUSED(header(0, 1).str("general.alignment").u32(4).u32(0).b, "power of two");
  EXPECT_REFUSED(header(0, 1).str("general.alignment").u32(4).u32(48).b, "power of two");
  EXPECT_REFUSED(header(0, 1).str("general.alignment").u32(10).u64(32).b, "u32");
}

// One tensor info with the given fields, then padding and `data_bytes` of data.
std::vector<uint8_t> one_tensor(std::vector<uint64_t> dims, uint32_t type, uint64_t offset,
                                size_t data_bytes, uint32_t n_dims_override = 0) {
  Bytes b = header(1, 0);
  b.str("t").u32(n_dims_override ? n_dims_override : static_cast<uint32_t>(dims.size()));
  for (uint64_t d : dims) b.u64(d);
  b.u32(type).u64(offset).pad(32);
  b.b.resize(b.b.size() + data_bytes, 0);
  return b.b;
}

TEST(GgufHostile, TensorShapesTypesAndOffsets) {
  EXPECT_TRUE(refuse(one_tensor({32, 2}, 8, 0, 68)).empty());  // the well-formed baseline
  EXPECT_REFUSED(one_tensor({}, 0, 0, 0), "dimensions");
  EXPECT_REFUSED(one_tensor({1, 1, 1, 1, 1}, 0, 0, 4), "dimensions");
  EXPECT_REFUSED(one_tensor({4}, 0, 0, 16, 1000000), "dimensions");
  EXPECT_REFUSED(one_tensor({4}, 99, 0, 16), "unknown type 99");
  EXPECT_REFUSED(one_tensor({4}, 4, 0, 16), "unknown type 4");
  EXPECT_REFUSED(one_tensor({33, 2}, 8, 0, 68), "whole number");
  EXPECT_REFUSED(one_tensor({1ull << 62, 1ull << 62}, 0, 0, 64), "overflows");
  EXPECT_REFUSED(one_tensor({~0ull}, 0, 0, 64), "overflows");
  EXPECT_REFUSED(one_tensor({1ull << 61}, 0, 0, 64), "outside the file");  // 2^63 bytes
  EXPECT_REFUSED(one_tensor({1ull << 62}, 0, 0, 64), "overflows");         // 2^64 bytes
  EXPECT_REFUSED(one_tensor({1ull << 40, 1ull << 20}, 0, 0, 64), "outside the file");
  EXPECT_REFUSED(one_tensor({32, 2}, 8, 8, 68), "alignment");
  EXPECT_REFUSED(one_tensor({32, 2}, 8, 32, 68), "outside the file");
  EXPECT_REFUSED(one_tensor({32, 2}, 8, ~0ull - 31, 68), "outside the file");
  EXPECT_REFUSED(one_tensor({32, 2}, 8, 0, 67), "outside the file");
  // Two tensors with one name.
  Bytes dup = header(2, 0);
  for (int i = 0; i < 2; ++i) dup.str("t").u32(1).u64(4).u32(0).u64(0);
  dup.pad(32).b.resize(dup.b.size() + 16);
  EXPECT_REFUSED(dup.b, "duplicate tensor name");
}

// Every block type llama.cpp writes (the 32-element Q4_1 / Q5_0 / Q5_1 / IQ4_NL fallbacks, the
// K-quants, IQ4_XS): the exact size is accepted; one byte short, a row that is not whole blocks,
// and a shape whose byte count overflows are refused.
TEST(GgufHostile, EveryBlockTypeIsSizedExactly) {
  struct Case {
    uint32_t id;
    uint64_t block_elems, block_bytes;
  };
  const Case cases[] = {{2, 32, 18},    {3, 32, 20},    {6, 32, 22},    {7, 32, 24},
                        {8, 32, 34},    {20, 32, 18},   {10, 256, 84},  {11, 256, 110},
                        {12, 256, 144}, {13, 256, 176}, {14, 256, 210}, {23, 256, 136},
                        {30, 1, 2}};
  for (const Case& c : cases) {
    const uint64_t cols = 3 * c.block_elems, rows = 5;
    const size_t bytes = static_cast<size_t>(3 * c.block_bytes * rows);
    EXPECT_TRUE(refuse(one_tensor({cols, rows}, c.id, 0, bytes)).empty()) << c.id;
    EXPECT_REFUSED(one_tensor({cols, rows}, c.id, 0, bytes - 1), "outside the file");
    if (c.block_elems > 1) {
      EXPECT_REFUSED(one_tensor({cols + 1, rows}, c.id, 0, bytes + c.block_bytes), "whole number");
    }
    EXPECT_REFUSED(one_tensor({cols, 1ull << 40}, c.id, 0, bytes), "outside the file");
    EXPECT_REFUSED(one_tensor({c.block_elems << 40, 1ull << 40}, c.id, 0, bytes), "overflows");
  }
}

// Random corruption of a valid file: whatever the reader answers, it must not crash, and
// every tensor it accepts lies inside the buffer.
TEST(GgufHostile, RandomCorruptionNeverCrashes) {
  const auto full = valid_file();
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto bytes = full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % bytes.size();
      bytes[at] =
          (rng() % 2) ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(bytes[at] ^ 0x80);
    }
    auto f = GgufFile::from_bytes(bytes.data(), bytes.size());
    if (!f) continue;
    ++accepted;
    for (const auto& t : (*f)->tensors()) {
      ASSERT_GE(t.data, (*f)->file_data());
      ASSERT_LE(t.data + t.n_bytes, (*f)->file_data() + (*f)->file_size());
    }
  }
  EXPECT_GT(accepted, 0);  // flips inside tensor data leave a valid file
}

}  // namespace
}  // namespace ferry::gguf
