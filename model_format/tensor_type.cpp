#include "model_format/tensor_type.h"

#include <array>
#include <cctype>
#include <limits>

namespace ferry::model_format {
namespace {

struct TypeInfo {
  uint32_t id;
  std::string_view name;
  int64_t block_elems;
  int64_t block_bytes;
  bool runs;
};

// Block geometry of every ggml type (elements per block, bytes per block).
constexpr std::array<TypeInfo, 31> kTypes{{
    {0, "F32", 1, 4, true},          {1, "F16", 1, 2, true},
    {2, "Q4_0", 32, 18, true},       {3, "Q4_1", 32, 20, true},
    {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},       {9, "Q8_1", 32, 36, false},
    {10, "Q2_K", 256, 84, true},     {11, "Q3_K", 256, 110, true},
    {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true},    {15, "Q8_K", 256, 292, false},
    {16, "IQ2_XXS", 256, 66, false}, {17, "IQ2_XS", 256, 74, false},
    {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
    {20, "IQ4_NL", 32, 18, true},    {21, "IQ3_S", 256, 110, false},
    {22, "IQ2_S", 256, 82, false},   {23, "IQ4_XS", 256, 136, true},
    {24, "I8", 1, 1, false},         {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},        {27, "I64", 1, 8, false},
    {28, "F64", 1, 8, false},        {29, "IQ1_M", 256, 56, false},
    {30, "BF16", 1, 2, true},        {34, "TQ1_0", 256, 54, false},
    {35, "TQ2_0", 256, 66, false},
}};

const TypeInfo* info(uint32_t id) {
  for (const auto& t : kTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

}  // namespace

std::string_view tensor_type_name(TensorType type) {
  const TypeInfo* t = info(static_cast<uint32_t>(type));
  return t ? t->name : std::string_view("?");
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  for (const auto& t : kTypes) {
    if (t.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i) {
      if (std::toupper(static_cast<unsigned char>(name[i])) != t.name[i]) {
        same = false;
        break;
      }
    }
    if (same) return static_cast<TensorType>(t.id);
  }
  return std::nullopt;
}

bool tensor_type_known(uint32_t id) {
  return info(id) != nullptr;
}

bool tensor_type_runs(TensorType type) {
  const TypeInfo* t = info(static_cast<uint32_t>(type));
  return t && t->runs;
}

int64_t block_elems(TensorType type) {
  const TypeInfo* t = info(static_cast<uint32_t>(type));
  return t ? t->block_elems : 0;
}

int64_t block_bytes(TensorType type) {
  const TypeInfo* t = info(static_cast<uint32_t>(type));
  return t ? t->block_bytes : 0;
}

std::optional<uint64_t> row_bytes(TensorType type, int64_t n) {
  const TypeInfo* t = info(static_cast<uint32_t>(type));
  if (!t || n < 0 || n % t->block_elems != 0) return std::nullopt;
  const uint64_t blocks = static_cast<uint64_t>(n / t->block_elems);
  const uint64_t per = static_cast<uint64_t>(t->block_bytes);
  if (blocks > std::numeric_limits<uint64_t>::max() / per) return std::nullopt;
  return blocks * per;
}

}  // namespace ferry::model_format
