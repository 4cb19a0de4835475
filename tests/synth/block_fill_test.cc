// Random valid blocks of every synthesizable type: decoded with the project's dequantizer they
// have the targeted std, and any block range is the same bytes as the whole fill.
#include "worker/synth/block_fill.h"

#include <cmath>
#include <cstdio>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/quant/dequantize.h"
#include "kernels/quant/half.h"

namespace k3::synth {
namespace {

using quant::GgmlType;

const GgmlType kAllTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,    GgmlType::kQ8_0,
                              GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,    GgmlType::kQ5_K,
                              GgmlType::kQ6_K, GgmlType::kIQ1_S, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS};

std::vector<uint8_t> Fill(GgmlType type, const ValueSpec& v, uint64_t key, uint64_t first, uint64_t n) {
  std::vector<uint8_t> out(n * quant::Traits(type).block_bytes);
  FillBlocks(type, v, key, first, n, out.data());
  return out;
}

std::vector<float> Decode(GgmlType type, const std::vector<uint8_t>& bytes) {
  const auto& t = quant::Traits(type);
  std::vector<float> v(bytes.size() / t.block_bytes * t.block_elems);
  quant::DequantizeRow(type, bytes.data(), v.data(), static_cast<int64_t>(v.size()));
  return v;
}

class EveryType : public ::testing::TestWithParam<GgmlType> {};

TEST_P(EveryType, DecodedWeightsHaveTheTargetedStd) {
  const GgmlType type = GetParam();
  ASSERT_TRUE(CanSynthesize(type));
  for (const float target : {0.0167f, 0.5f}) {  // 1/sqrt(3584) (an expert) and a wide one
    ValueSpec v;
    v.std = target;
    const uint64_t n = 131072 / quant::Traits(type).block_elems;
    const std::vector<float> w = Decode(type, Fill(type, v, 0xabcdef, 1000, n));
    double s = 0, s2 = 0;
    for (float x : w) {
      ASSERT_TRUE(std::isfinite(x));
      s += x;
      s2 += static_cast<double>(x) * x;
    }
    const double mean = s / w.size(), sd = std::sqrt(s2 / w.size() - mean * mean);
    std::printf("%-7s target std %.4f: decoded std/target %.4f, mean/target %+.4f\n",
                std::string(quant::TypeName(type)).c_str(), target, sd / target, mean / target);
    EXPECT_NEAR(sd / target, 1.0, 0.03) << quant::TypeName(type) << " target " << target;
    EXPECT_LT(std::fabs(mean), 0.02 * target) << quant::TypeName(type);
  }
}

TEST_P(EveryType, AnyBlockRangeIsTheSameBytesAsTheWholeFill) {
  const GgmlType type = GetParam();
  ValueSpec v;
  v.std = 0.02f;
  const uint32_t bb = quant::Traits(type).block_bytes;
  const std::vector<uint8_t> whole = Fill(type, v, 42, 0, 300);
  for (const auto& [first, n] : {std::pair<uint64_t, uint64_t>{0, 1}, {17, 40}, {299, 1}, {128, 172}}) {
    const std::vector<uint8_t> part = Fill(type, v, 42, first, n);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + first * bb)) << quant::TypeName(type) << " @" << first;
  }
  EXPECT_EQ(Fill(type, v, 42, 0, 300), whole);  // deterministic
  const std::vector<uint8_t> other = Fill(type, v, 43, 0, 300);
  size_t same = 0;
  for (size_t i = 0; i < whole.size(); ++i) same += whole[i] == other[i];
  EXPECT_LT(same, whole.size() / 4) << "another key must give other bytes";
}

INSTANTIATE_TEST_SUITE_P(Synth, EveryType, ::testing::ValuesIn(kAllTypes),
                         [](const auto& info) { return std::string(quant::TypeName(info.param)); });

// A kernel that reads the wrong block's scale must not get the right answer by luck.
TEST(BlockFill, SuperScalesVaryFromBlockToBlock) {
  ValueSpec v;
  v.std = 0.02f;
  const std::vector<uint8_t> q8 = Fill(GgmlType::kQ8_0, v, 5, 0, 64);
  const std::vector<uint8_t> iq1 = Fill(GgmlType::kIQ1_S, v, 5, 0, 64);
  std::set<uint16_t> d8, d1;
  for (int b = 0; b < 64; ++b) {
    d8.insert(static_cast<uint16_t>(q8[34 * b] | q8[34 * b + 1] << 8));
    d1.insert(static_cast<uint16_t>(iq1[50 * b] | iq1[50 * b + 1] << 8));
  }
  EXPECT_GE(d8.size(), 10u);
  EXPECT_GE(d1.size(), 10u);
}

TEST(BlockFill, PlainTypesCarryTheMeanAndSsmARange) {
  ValueSpec norm{ValueKind::kNormal, 1.0f, 0.1f, 0, 0};
  std::vector<uint8_t> b = Fill(GgmlType::kF32, norm, 9, 0, 4096);
  const std::vector<float> w = Decode(GgmlType::kF32, b);
  double s = 0;
  for (float x : w) s += x;
  EXPECT_NEAR(s / w.size(), 1.0, 0.01);
  ValueSpec a{ValueKind::kNegExpUniform, 0, 0, 0.0f, 2.7725887f};
  for (float x : Decode(GgmlType::kF32, Fill(GgmlType::kF32, a, 9, 0, 1000))) {
    EXPECT_LE(x, -1.0f);
    EXPECT_GE(x, -16.0f);
  }
}

TEST(BlockFill, UnitRmsIsMeasuredForEveryBlockType) {
  for (GgmlType t : kAllTypes) {
    if (quant::Traits(t).block_elems == 1) continue;
    EXPECT_GT(UnitRms(t), 0.0) << quant::TypeName(t);
  }
}

}  // namespace
}  // namespace k3::synth
