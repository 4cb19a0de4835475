// fp16 / bf16 conversions: exhaustive round trips and every rounding boundary.
#include "kernels/quant/half.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

namespace k3::quant {
namespace {

bool IsNanF16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool IsNanBf16(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

TEST(quantHalf, F16RoundTripIsExactForEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (IsNanF16(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_TRUE(IsNanF16(F32ToF16(f))) << std::hex << h;
      continue;
    }
    EXPECT_EQ(F32ToF16(f), h) << std::hex << h;
  }
}

TEST(quantHalf, F16DecodesKnownValues) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F16ToF32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(F16ToF32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(F16ToF32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(F16ToF32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(F16ToF32(0x8000)));
  EXPECT_EQ(F16ToF32(0x8000), 0.0f);
}

// Around each pair of neighbours (h, h+1), including 0x7bff -> 0x7c00 (overflow to inf): the
// exact midpoint goes to the even one, one f32 ulp either side goes to the nearer one.
TEST(quantHalf, F32ToF16RoundsToNearestEvenAtEveryBoundary) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float lo = F16ToF32(static_cast<uint16_t>(h));
    const float hi = h + 1 == 0x7c00 ? 65536.0f : F16ToF32(static_cast<uint16_t>(h + 1));
    const float mid = (lo + hi) / 2;  // exact: fp16 values need at most 11 significant bits
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(F32ToF16(s * mid), sign | even) << std::hex << h;
      ASSERT_EQ(F32ToF16(s * std::nextafter(mid, 0.0f)), sign | h) << std::hex << h;
      ASSERT_EQ(F32ToF16(s * std::nextafter(mid, 1e9f)), sign | (h + 1)) << std::hex << h;
      ASSERT_EQ(F32ToF16(s * lo), sign | h) << std::hex << h;
    }
  }
}

TEST(quantHalf, F32ToF16EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.99f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);
  EXPECT_EQ(F32ToF16(1e10f), 0x7c00);
  EXPECT_EQ(F32ToF16(-1e10f), 0xfc00);
  EXPECT_EQ(F32ToF16(inf), 0x7c00);
  EXPECT_EQ(F32ToF16(-inf), 0xfc00);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(F32ToF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24: even is 0
  EXPECT_EQ(F32ToF16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(F32ToF16(-std::ldexp(1.0f, -26)), 0x8000);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie, even is 2
  EXPECT_EQ(F32ToF16(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into the normal range
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_EQ(F32ToF16(0.1f), 0x2e66);
  EXPECT_TRUE(IsNanF16(F32ToF16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(IsNanF16(F32ToF16(std::bit_cast<float>(0x7f800001u))));  // payload only in low bits
  EXPECT_TRUE(IsNanF16(F32ToF16(std::bit_cast<float>(0xff800001u))));
  EXPECT_EQ(F32ToF16(std::bit_cast<float>(0xff800001u)) & 0x8000, 0x8000);
}

TEST(quantHalf, Bf16RoundTripIsExactForEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = Bf16ToF32(static_cast<uint16_t>(b));
    EXPECT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    if (IsNanBf16(static_cast<uint16_t>(b))) {
      EXPECT_TRUE(IsNanBf16(F32ToBf16(f))) << std::hex << b;
      continue;
    }
    EXPECT_EQ(F32ToBf16(f), b) << std::hex << b;
  }
}

TEST(quantHalf, F32ToBf16RoundsToNearestEvenAtEveryBoundary) {
  for (uint32_t b = 0; b < 0x7f80; ++b) {
    const uint32_t lo_bits = b << 16;
    const float mid = std::bit_cast<float>(lo_bits | 0x8000u);  // halfway to the next bf16
    const uint32_t even = (b & 1) ? b + 1 : b;
    for (uint32_t sign : {0u, 0x8000u}) {
      const uint32_t s = sign << 16;
      ASSERT_EQ(F32ToBf16(std::bit_cast<float>(std::bit_cast<uint32_t>(mid) | s)), sign | even);
      ASSERT_EQ(F32ToBf16(std::bit_cast<float>((lo_bits | 0x7fffu) | s)), sign | b);
      ASSERT_EQ(F32ToBf16(std::bit_cast<float>((lo_bits | 0x8001u) | s)), sign | (b + 1));
    }
  }
}

TEST(quantHalf, Bf16EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(F32ToBf16(inf), 0x7f80);
  EXPECT_EQ(F32ToBf16(-inf), 0xff80);
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past the largest
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x00018000u)), 0x0002);  // subnormal tie, to even
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_TRUE(IsNanBf16(F32ToBf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(IsNanBf16(F32ToBf16(std::bit_cast<float>(0x7f800001u))));  // would round to inf
  EXPECT_TRUE(IsNanBf16(F32ToBf16(std::bit_cast<float>(0xffffffffu))));
  EXPECT_TRUE(std::isnan(Bf16ToF32(0x7fc0)));
  EXPECT_EQ(Bf16ToF32(0xff80), -inf);
}

static_assert(F16ToF32(F32ToF16(0.5f)) == 0.5f, "usable in constant expressions");
static_assert(Bf16ToF32(F32ToBf16(-3.0f)) == -3.0f);

}  // namespace
}  // namespace k3::quant
