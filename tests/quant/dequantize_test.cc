// DequantizeRow against ggml's own dequantization of ggml-quantized data (quant-vectors).
#include "kernels/quant/dequantize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "quant_test_util.h"

namespace k3::quant {
namespace {

using testing::Golden;
using testing::ReadGolden;
using testing::ReadManifest;

TEST(quantDequantize, CanDequantizeAgreesWithTheTypeTable) {
  int n = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = FindType(id);
    if (!t) continue;
    EXPECT_EQ(CanDequantize(t->type), t->can_dequantize) << t->name;
    n += CanDequantize(t->type);
  }
  EXPECT_EQ(n, 20);  // the 19 types of the golden vectors plus F32
}

TEST(quantDequantize, F32IsACopy) {
  const std::vector<float> src = {1.5f, -0.0f, 3e-40f, -7.25f};
  std::vector<float> dst(4);
  DequantizeRow(GgmlType::kF32, src.data(), dst.data(), 4);
  EXPECT_EQ(0, std::memcmp(src.data(), dst.data(), 16));
}

// Every type of the manifest: ggml's blocks decode to ggml's floats within 1e-6 relative.
TEST(quantDequantize, MatchesGgmlGoldenVectors) {
  const auto manifest = ReadManifest();
  if (!manifest) GTEST_SKIP() << "no quant-vectors manifest under " << K3_SHARED_DIR;
  ASSERT_EQ(manifest->size(), 19u);
  for (const auto& e : *manifest) {
    SCOPED_TRACE(e.name);
    const auto g = ReadGolden(e);
    ASSERT_TRUE(g.has_value()) << "missing golden files for " << e.name;
    const TypeTraits& t = Traits(g->type);
    ASSERT_EQ(t.name, e.name);
    ASSERT_EQ(t.block_elems, e.block_elems);
    ASSERT_EQ(t.block_bytes, e.block_bytes);
    ASSERT_TRUE(CanDequantize(g->type));
    ASSERT_EQ(static_cast<int64_t>(g->blocks.size()), e.bytes);
    ASSERT_EQ(static_cast<int64_t>(g->dequant.size()), e.rows * e.cols);

    const int64_t row_bytes = e.cols / e.block_elems * e.block_bytes;
    std::vector<float> out(static_cast<size_t>(e.cols));
    int64_t exact = 0;
    for (int64_t r = 0; r < e.rows; ++r) {
      DequantizeRow(g->type, g->blocks.data() + r * row_bytes, out.data(), e.cols);
      const float* want = g->dequant.data() + r * e.cols;
      float row_max = 0.0f;
      for (int64_t c = 0; c < e.cols; ++c) row_max = std::max(row_max, std::fabs(want[c]));
      for (int64_t c = 0; c < e.cols; ++c) {
        const float tol = 1e-6f * std::max(std::fabs(want[c]), 1e-6f * row_max);
        ASSERT_LE(std::fabs(out[c] - want[c]), tol) << "row " << r << " col " << c << ": got " << out[c]
                                                    << ", ggml " << want[c];
        exact += out[c] == want[c];
      }
    }
    // Informational: the decoders follow ggml's operation order, so nearly all are bit-exact.
    RecordProperty(e.name + "_bit_exact", static_cast<int>(exact));
    EXPECT_GE(exact, e.rows * e.cols * 99 / 100);

    // The whole 16-row tensor in one call gives the same floats as row by row.
    std::vector<float> all(static_cast<size_t>(e.rows * e.cols));
    DequantizeRow(g->type, g->blocks.data(), all.data(), e.rows * e.cols);
    for (int64_t r = 0; r < e.rows; ++r) {
      DequantizeRow(g->type, g->blocks.data() + r * row_bytes, out.data(), e.cols);
      ASSERT_EQ(0, std::memcmp(out.data(), all.data() + r * e.cols, out.size() * sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace k3::quant
