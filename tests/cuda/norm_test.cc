// RowNorm against k3::cpu::RmsNorm / L2Norm (and Sigmoid for the gated form) at the real K3
// widths: hidden 7168, q_a 1536, kv_lora 512, expert latent 3584, per-head 96 x 128.
// Tolerance 2e-6 relative per element (f32 vs the CPU's double sum of squares).
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/norm.h"
#include "kernels/cuda/norm/norm.h"
#include "tests/cuda/cuda_test_util.h"

namespace k3::cuda::testing {
namespace {

constexpr double kRtol = 2e-6;

struct NormCase {
  int64_t n_tokens, n_groups, width;
  bool weight, gate, in_place;
  NormKind kind;
};

void RunNorm(const NormCase& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "tokens " << c.n_tokens << " groups " << c.n_groups << " width " << c.width
                                    << " weight " << c.weight << " gate " << c.gate << " in_place " << c.in_place
                                    << " kind " << static_cast<int>(c.kind));
  std::mt19937_64 rng(seed);
  const int64_t row = c.n_groups * c.width, stride = row + 8;
  const auto x = Normal(rng, c.n_tokens * stride, 0.2, 1.5);
  const auto w = Normal(rng, c.width, 1.0, 0.3);
  const auto gate = Normal(rng, c.n_tokens * stride, 0.0, 2.0);
  DeviceBuffer<float> d_x(x), d_w(w), d_gate(gate), d_y(c.n_tokens * stride);
  d_y.Poison();
  RowNormParams p;
  p.x = d_x.get();
  p.y = c.in_place ? d_x.get() : d_y.get();
  p.weight = c.weight ? d_w.get() : nullptr;
  p.gate = c.gate ? d_gate.get() : nullptr;
  p.n_tokens = c.n_tokens;
  p.n_groups = c.n_groups;
  p.width = c.width;
  p.x_stride = stride;
  p.y_stride = stride;
  p.gate_stride = stride;
  p.eps = kRmsEps;
  p.kind = c.kind;
  K3_ASSERT_LAUNCH(RowNorm(p, nullptr));
  const auto y = c.in_place ? d_x.Download() : d_y.Download();
  std::vector<float> got, ref;
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    for (int64_t g = 0; g < c.n_groups; ++g) {
      const int64_t o = t * stride + g * c.width;
      std::vector<float> r(c.width);
      if (c.kind == NormKind::kRms) {
        cpu::RmsNorm(&x[o], c.weight ? w.data() : nullptr, kRmsEps, c.width, r.data());
      } else {
        cpu::L2Norm(&x[o], kRmsEps, c.width, r.data());
      }
      if (c.gate) {
        for (int64_t i = 0; i < c.width; ++i) r[i] *= cpu::Sigmoid(gate[o + i]);
      }
      ref.insert(ref.end(), r.begin(), r.end());
      got.insert(got.end(), y.begin() + o, y.begin() + o + c.width);
    }
    if (!c.in_place) {
      for (int64_t i = row; i < stride; ++i) EXPECT_TRUE(std::isnan(y[t * stride + i])) << "padding written";
    }
  }
  EXPECT_TRUE(AllClose(got, std::vector<double>(ref.begin(), ref.end()), kRtol, 1e-30));
}

TEST(CudaNormTest, RmsWithWeightRealWidths) {
  K3_REQUIRE_GPU();
  uint64_t seed = 1;
  for (int64_t width : {kHidden, int64_t{1536}, kKvLora, int64_t{3584}, int64_t{256}, int64_t{100}}) {
    for (int64_t tokens : {1, 5}) RunNorm({tokens, 1, width, true, false, false, NormKind::kRms}, ++seed);
  }
}

TEST(CudaNormTest, RmsWithoutWeightAndInPlace) {
  K3_REQUIRE_GPU();
  RunNorm({3, 1, kHidden, false, false, false, NormKind::kRms}, 20);
  RunNorm({3, 1, kHidden, true, false, true, NormKind::kRms}, 21);
  RunNorm({2, kHeads, kHeadDim, true, false, true, NormKind::kRms}, 22);
}

TEST(CudaNormTest, L2PerHead) {
  K3_REQUIRE_GPU();
  RunNorm({1, kHeads, kHeadDim, false, false, false, NormKind::kL2}, 30);
  RunNorm({4, kHeads, kHeadDim, false, false, true, NormKind::kL2}, 31);
}

TEST(CudaNormTest, GatedRmsPerHeadKdaOutput) {
  K3_REQUIRE_GPU();
  RunNorm({1, kHeads, kHeadDim, true, true, false, NormKind::kRms}, 40);
  RunNorm({3, kHeads, kHeadDim, true, true, true, NormKind::kRms}, 41);
}

}  // namespace
}  // namespace k3::cuda::testing
