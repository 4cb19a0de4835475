// DotRow: fused decode-and-dot against a double-precision dot of DequantizeRow's output.
#include "kernels/quant/dot.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/quant/dequantize.h"
#include "quant_test_util.h"

namespace k3::quant {
namespace {

std::vector<GgmlType> DecodableTypes() {
  std::vector<GgmlType> out;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = FindType(id);
    if (t && CanDequantize(t->type)) out.push_back(t->type);
  }
  return out;
}

// Checks DotRow(row, x) against Σ w·x in double over the dequantized row. The bound is the
// classic one for f32 recursive summation: each of the 16 partial sums adds n/16 products, then
// 4 pairwise levels, so |error| <= (n/16 + 5) * 2^-24 * Σ|w·x| (to first order).
void ExpectDotMatches(GgmlType type, const uint8_t* row, const std::vector<float>& x, double* worst_rel) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> w(x.size());
  DequantizeRow(type, row, w.data(), n);
  double ref = 0.0, abs_sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    ref += static_cast<double>(w[i]) * x[i];
    abs_sum += std::fabs(static_cast<double>(w[i]) * x[i]);
  }
  const double got = DotRow(type, row, x.data(), n);
  const double bound = (static_cast<double>(n) / 16 + 5) * 0x1p-24 * abs_sum * 1.01;
  ASSERT_LE(std::fabs(got - ref), bound) << TypeName(type) << " n=" << n << " got " << got << " ref " << ref;
  if (abs_sum > 0) *worst_rel = std::max(*worst_rel, std::fabs(got - ref) / abs_sum);
}

TEST(quantDotRow, MatchesDoubleReferenceOnRandomBlocksOfEveryType) {
  std::mt19937 rng(1234);
  double worst = 0.0;
  for (GgmlType type : DecodableTypes()) {
    SCOPED_TRACE(std::string(TypeName(type)));
    // Sizes: one block, a few blocks, and K3 widths; plain types also get odd lengths.
    std::vector<int64_t> sizes = {256, 1024, 3584, 7168};
    if (Traits(type).block_elems == 1) sizes.insert(sizes.end(), {1, 15, 17, 257, 1001});
    if (Traits(type).block_elems == 32) sizes.insert(sizes.end(), {32, 96, 288});
    for (int64_t n : sizes) {
      const auto row = testing::RandomRow(type, n, rng);
      const auto x = testing::RandomFloats(n, rng);
      ExpectDotMatches(type, row.data(), x, &worst);
    }
  }
  std::ostringstream worst_text;
  worst_text << std::scientific << worst;
  RecordProperty("worst_relative_error", worst_text.str());
  EXPECT_LT(worst, 1e-6);  // what "matches to ~1e-6 relative" means here: relative to Σ|w·x|
}

TEST(quantDotRow, MatchesDoubleReferenceOnGgmlData) {
  const auto manifest = testing::ReadManifest();
  if (!manifest) GTEST_SKIP() << "no quant-vectors manifest under " << K3_SHARED_DIR;
  std::mt19937 rng(99);
  double worst = 0.0;
  for (const auto& e : *manifest) {
    SCOPED_TRACE(e.name);
    const auto g = testing::ReadGolden(e);
    ASSERT_TRUE(g.has_value());
    const int64_t row_bytes = e.cols / e.block_elems * e.block_bytes;
    for (int64_t r = 0; r < e.rows; ++r) {
      const auto x = testing::RandomFloats(e.cols, rng);
      ExpectDotMatches(g->type, g->blocks.data() + r * row_bytes, x, &worst);
    }
  }
  EXPECT_LT(worst, 1e-6);
}

// The documented summation order: 16 lanes by index mod 16, then pairwise. Checked exactly on
// an F32 row where every partial sum is chosen so that a different order would round differently.
TEST(quantDotRow, UsesTheDocumentedSummationOrder) {
  std::mt19937 rng(5);
  for (int64_t n : {16, 64, 1000, 4096}) {
    const auto w = testing::RandomFloats(n, rng);
    const auto x = testing::RandomFloats(n, rng);
    float lanes[16] = {};
    for (int64_t i = 0; i < n; ++i) {
      const float p = w[i] * x[i];
      lanes[i % 16] = lanes[i % 16] + p;
    }
    for (int width = 8; width > 0; width /= 2) {
      for (int l = 0; l < width; ++l) lanes[l] = lanes[l] + lanes[l + width];
    }
    const float got = DotRow(GgmlType::kF32, w.data(), x.data(), n);
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(lanes[0])) << n;
  }
}

}  // namespace
}  // namespace k3::quant
