// Q8_0 quantization, byte-exact with ggml's reference quantizer.
#include "kernels/quant/quantize_q8_0.h"

#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/quant/blocks.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/half.h"
#include "quant_test_util.h"

namespace k3::quant {
namespace {

TEST(quantQuantizeQ80, MatchesGgmlBytes) {
  const auto manifest = testing::ReadManifest();
  if (!manifest) GTEST_SKIP() << "no quant-vectors manifest under " << K3_SHARED_DIR;
  const testing::ManifestEntry* q8 = nullptr;
  for (const auto& e : *manifest) {
    if (e.name == "Q8_0") q8 = &e;
  }
  ASSERT_NE(q8, nullptr);
  const auto g = testing::ReadGolden(*q8);
  ASSERT_TRUE(g.has_value());
  std::vector<uint8_t> out(g->blocks.size());
  // Row by row (as a tensor is quantized) and all at once must both agree with ggml.
  const int64_t row_bytes = q8->cols / 32 * 34;
  for (int64_t r = 0; r < q8->rows; ++r) {
    QuantizeRowQ8_0(g->source.data() + r * q8->cols, out.data() + r * row_bytes, q8->cols);
  }
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], g->blocks[i]) << "byte " << i;
  std::vector<uint8_t> out2(g->blocks.size());
  QuantizeRowQ8_0(g->source.data(), out2.data(), q8->rows * q8->cols);
  EXPECT_EQ(out2, g->blocks);
}

BlockQ8_0 QuantizeOne(const std::vector<float>& x) {
  BlockQ8_0 b;
  QuantizeRowQ8_0(x.data(), &b, 32);
  return b;
}

TEST(quantQuantizeQ80, EdgeCases) {
  // All zeros: d = 0 and every quant 0 (ggml's id = 0 path, no division by zero).
  BlockQ8_0 b = QuantizeOne(std::vector<float>(32, 0.0f));
  EXPECT_EQ(b.d, 0);
  for (int8_t q : b.qs) EXPECT_EQ(q, 0);

  // The largest magnitude maps to +-127; ties round away from zero (roundf), not to even.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;   // d = 1, id = 1
  x[1] = -127.0f;
  x[2] = 2.5f;     // tie -> 3
  x[3] = -2.5f;    // tie -> -3
  x[4] = 0.49f;
  b = QuantizeOne(x);
  EXPECT_EQ(F16ToF32(b.d), 1.0f);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], -127);
  EXPECT_EQ(b.qs[2], 3);
  EXPECT_EQ(b.qs[3], -3);
  EXPECT_EQ(b.qs[4], 0);
}

TEST(quantQuantizeQ80, RoundTripErrorIsWithinHalfAStep) {
  std::mt19937 rng(7);
  const auto x = testing::RandomFloats(4096, rng, 3.0f);
  std::vector<uint8_t> q(4096 / 32 * 34);
  QuantizeRowQ8_0(x.data(), q.data(), 4096);
  std::vector<float> back(4096);
  DequantizeRow(GgmlType::kQ8_0, q.data(), back.data(), 4096);
  for (int blk = 0; blk < 4096 / 32; ++blk) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[blk * 32 + j]));
    const float d = amax / 127.0f;
    for (int j = 0; j < 32; ++j) {
      // Half a step, plus the fp16 rounding of d (relative 2^-11) over at most 127 steps.
      EXPECT_LE(std::fabs(back[blk * 32 + j] - x[blk * 32 + j]), 0.5f * d + amax * 0x1p-11f * 1.01f);
    }
  }
}

}  // namespace
}  // namespace k3::quant
