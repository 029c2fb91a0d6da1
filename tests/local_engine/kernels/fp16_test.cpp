#include "local_engine/kernels/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "local_engine/kernels/kernels.h"

namespace ferry::kernels {
namespace {

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // rounds past the max: infinity
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);         // tie to even
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -24)), 0x0002);         // tie to even, upward
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie to even
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(3.0f, -11)), 0x3C02);
  EXPECT_FLOAT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_FLOAT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0xFC00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7E00)));
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_FLOAT_EQ(bf16_to_fp32(0x4049), 3.140625f);
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Fp16, RowHelpersMatchScalar) {
  std::vector<float> src(1003);
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::sin(static_cast<float>(i)) * 1000.0f;
  std::vector<uint16_t> half(src.size());
  fp32_to_fp16_row(src.data(), half.data(), static_cast<int64_t>(src.size()));
  std::vector<float> back(src.size());
  fp16_to_fp32_row(half.data(), back.data(), static_cast<int64_t>(src.size()));
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(half[i], fp32_to_fp16(src[i])) << i;
    ASSERT_EQ(back[i], fp16_to_fp32(half[i])) << i;
  }
}

}  // namespace
}  // namespace ferry::kernels
