// The reader on files written by the writer: every metadata type, v2 and v3, alignments,
// tensors of every type; mmap from disk; the shared test vocabulary when present.
#include "gguf/gguf_reader.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gguf/gguf_writer.h"

namespace ferry::gguf {
namespace {

using model_format::TensorType;

Value scalar(ValueType t, uint64_t u, int64_t i = 0, double f = 0) {
  Value v;
  v.type = t;
  v.uint_value = u;
  v.int_value = i;
  v.float_value = f;
  return v;
}

GgufWriter every_type_writer(uint32_t version) {
  GgufWriter w(version);
  w.set("u8", scalar(ValueType::kUint8, 200));
  w.set("i8", scalar(ValueType::kInt8, 0, -100));
  w.set("u16", scalar(ValueType::kUint16, 60000));
  w.set("i16", scalar(ValueType::kInt16, 0, -30000));
  w.set("u32", Value::u32(4000000000u));
  w.set("i32", Value::i32(-2000000000));
  w.set("u64", Value::u64(18000000000000000000ull));
  w.set("i64", scalar(ValueType::kInt64, 0, -9000000000000000000ll));
  w.set("f32", Value::f32(0.25f));
  w.set("f64", scalar(ValueType::kFloat64, 0, 0, 1e-300));
  w.set("bool", Value::boolean(true));
  w.set("str", Value::string("h\xC3\xA9llo"));
  w.set("empty", Value::string(""));
  w.set("strs", Value::string_array({"a", "", "ccc"}));
  w.set("floats", Value::f32_array({1.5, -2.0}));
  w.set("ints", Value::i32_array({-1, 0, 7}));
  Value bools;
  bools.type = ValueType::kArray;
  bools.elem_type = ValueType::kBool;
  bools.uints = {1, 0, 1};
  w.set("bools", bools);
  Value nested;
  nested.type = ValueType::kArray;
  nested.elem_type = ValueType::kArray;
  nested.arrays = {Value::i32_array({1, 2}), Value::string_array({"x"})};
  w.set("nested", nested);
  Value empty_arr;
  empty_arr.type = ValueType::kArray;
  empty_arr.elem_type = ValueType::kUint64;
  w.set("empty_arr", empty_arr);
  return w;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

void add_tensors(GgufWriter& w) {
  ASSERT_TRUE(w.add_tensor("f32", TensorType::kF32, {3}, pattern(12, 1)));
  ASSERT_TRUE(w.add_tensor("f16", TensorType::kF16, {5, 2}, pattern(20, 2)));
  ASSERT_TRUE(w.add_tensor("q8", TensorType::kQ8_0, {64, 3}, pattern(68 * 3, 3)));
  ASSERT_TRUE(w.add_tensor("q4k", TensorType::kQ4_K, {256, 1, 2}, pattern(144 * 2, 4)));
  ASSERT_TRUE(w.add_tensor("q6k", TensorType::kQ6_K, {256, 2, 1, 1}, pattern(420, 5)));
  ASSERT_TRUE(w.add_tensor("bf16", TensorType::kBF16, {7}, pattern(14, 6)));
  ASSERT_TRUE(w.add_tensor("empty", TensorType::kF32, {0, 4}, {}));
}

void check_metadata(const GgufFile& f) {
  EXPECT_EQ(f.get_uint("u8"), 200u);
  EXPECT_EQ(f.get_int("i8"), -100);
  EXPECT_EQ(f.get_uint("u16"), 60000u);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_uint("u32"), 4000000000u);
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_EQ(f.get_uint("u64"), 18000000000000000000ull);
  EXPECT_FALSE(f.get_int("u64").has_value());  // does not fit in int64
  EXPECT_EQ(f.get_int("i64"), -9000000000000000000ll);
  EXPECT_FALSE(f.get_uint("i64").has_value());
  EXPECT_EQ(f.get_float("f32"), 0.25);
  EXPECT_EQ(f.get_float("f64"), 1e-300);
  EXPECT_EQ(f.get_bool("bool"), true);
  EXPECT_EQ(f.get_string("str"), "h\xC3\xA9llo");
  EXPECT_EQ(f.get_string("empty"), "");
  EXPECT_FALSE(f.get_string("u8").has_value());
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_EQ(f.find("strs")->strings, (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.find("floats")->floats, (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(f.find("ints")->ints, (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(f.find("ints")->elem_type, ValueType::kInt32);
  EXPECT_EQ(f.find("bools")->uints, (std::vector<uint64_t>{1, 0, 1}));
  const Value* nested = f.find("nested");
  ASSERT_EQ(nested->arrays.size(), 2u);
  EXPECT_EQ(nested->arrays[0].ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(nested->arrays[1].strings, (std::vector<std::string>{"x"}));
  EXPECT_EQ(f.find("empty_arr")->array_size(), 0u);
  EXPECT_EQ(f.metadata().front().first, "u8");  // file order kept
}

void check_tensors(const GgufFile& f) {
  ASSERT_EQ(f.tensors().size(), 7u);
  const TensorInfo* q8 = f.find_tensor("q8");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->type, TensorType::kQ8_0);
  EXPECT_EQ(q8->shape, (std::vector<int64_t>{64, 3}));
  EXPECT_EQ(q8->n_elements, 192u);
  EXPECT_EQ(q8->n_bytes, 204u);
  EXPECT_EQ(std::vector<uint8_t>(q8->data, q8->data + q8->n_bytes), pattern(204, 3));
  const TensorInfo* q6 = f.find_tensor("q6k");
  EXPECT_EQ(q6->ne(1), 2);
  EXPECT_EQ(q6->ne(3), 1);
  EXPECT_EQ(std::vector<uint8_t>(q6->data, q6->data + q6->n_bytes), pattern(420, 5));
  EXPECT_EQ(f.find_tensor("empty")->n_bytes, 0u);
  for (const auto& t : f.tensors()) {
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_EQ(static_cast<uint64_t>(t.data - f.file_data()) % f.alignment(), 0u);
  }
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(GgufReader, ReadsEveryMetadataTypeAndTensorV3AndV2) {
  for (uint32_t version : {3u, 2u}) {
    GgufWriter w = every_type_writer(version);
    add_tensors(w);
    const auto bytes = w.to_bytes();
    auto f = GgufFile::from_bytes(bytes.data(), bytes.size());
    ASSERT_TRUE(f) << f.error().message;
    EXPECT_EQ((*f)->version(), version);
    EXPECT_EQ((*f)->alignment(), 32u);
    check_metadata(**f);
    check_tensors(**f);
  }
}

TEST(GgufReader, CustomAlignment) {
  GgufWriter w;
  w.set("general.alignment", Value::u32(64));
  add_tensors(w);
  const auto bytes = w.to_bytes();
  auto f = GgufFile::from_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  check_tensors(**f);
}

// A file without tensors has no data section, so nothing to align: a 1 GiB general.alignment
// (a power of two, which the reader accepts, as llama.cpp's does) must not make the writer pad
// a copy of the file to 1 GiB (found by fuzz_gguf_reader: an out-of-memory).
TEST(GgufReader, AHugeAlignmentWithoutTensorsPadsNothing) {
  GgufWriter w;
  w.set("general.architecture", Value::string("llama"));
  w.set("general.alignment", Value::u32(1u << 30));
  const auto bytes = w.to_bytes();
  EXPECT_LT(bytes.size(), 256u);
  auto f = GgufFile::from_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ((*f)->alignment(), 1u << 30);
  EXPECT_TRUE((*f)->tensors().empty());
  GgufWriter again;
  for (const auto& [k, v] : (*f)->metadata()) again.set(k, v);
  EXPECT_EQ(again.to_bytes(), bytes);
}

TEST(GgufReader, RewriteIsByteIdentical) {
  GgufWriter w = every_type_writer(3);
  add_tensors(w);
  const auto bytes = w.to_bytes();
  auto f = GgufFile::from_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(f);
  GgufWriter again;
  for (const auto& [k, v] : (*f)->metadata()) again.set(k, v);
  for (const auto& t : (*f)->tensors()) {
    ASSERT_TRUE(again.add_tensor(t.name, t.type, t.shape,
                                 std::vector<uint8_t>(t.data, t.data + t.n_bytes)));
  }
  EXPECT_EQ(again.to_bytes(), bytes);
}

TEST(GgufReader, OpensFilesThroughMmap) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ferry_gguf_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.gguf").string();
  GgufWriter w = every_type_writer(3);
  add_tensors(w);
  ASSERT_TRUE(w.write_file(path));
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f) << f.error().message;
  check_metadata(**f);
  check_tensors(**f);
  EXPECT_EQ((*f)->file_size(), std::filesystem::file_size(path));

  auto missing = GgufFile::open((dir / "missing.gguf").string());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  std::ofstream(dir / "empty.gguf").close();
  auto empty = GgufFile::open((dir / "empty.gguf").string());
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message.find("truncated"), std::string::npos) << empty.error().message;
  auto directory = GgufFile::open(dir.string());
  EXPECT_FALSE(directory);
  std::filesystem::remove_all(dir);
}

TEST(GgufReader, SharedTestVocabulary) {
  const char* shared = std::getenv("FERRY_SHARED_DIR");
  const std::string path =
      std::string(shared ? shared : "../shared") + "/models/llama-2-tiny-random.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ((*f)->architecture(), "llama");
  const Value* tokens = (*f)->find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_GT(tokens->strings.size(), 100u);
  EXPECT_FALSE((*f)->tensors().empty());
  for (const auto& t : (*f)->tensors()) EXPECT_NE(t.data, nullptr);
}

}  // namespace
}  // namespace ferry::gguf
