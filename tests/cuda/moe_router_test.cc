// MoeRoute against k3::cpu::RouteToken: 896 experts, top-16, sigmoid gating with selection bias
// and normalization (K3), exact ties (resolved to the lower index), softmax gating with a scale;
// k <= 32 on the top-32 merge kernel, up to 64 on the full sort, beyond 1024 experts the scan.
// Chosen ids must match exactly (inputs avoid near-ties of a few ulp), weights within 1e-6.
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/moe_router.h"
#include "kernels/cuda/moe/moe_router.h"
#include "tests/cuda/cuda_test_util.h"

namespace k3::cuda::testing {
namespace {

void RunRoute(const std::vector<float>& logits, const std::vector<float>* bias, int64_t T, int64_t E, int64_t K, bool sigmoid,
         bool normalize, float scale, int64_t stride) {
  DeviceBuffer<float> d_logits(logits), d_bias(bias ? *bias : std::vector<float>(E, 0.0f));
  DeviceBuffer<int32_t> d_ids(T * K);
  DeviceBuffer<float> d_w(T * K);
  d_ids.Poison();
  d_w.Poison();
  MoeRouterParams p{d_logits.get(), stride, bias ? d_bias.get() : nullptr, T, E, K, sigmoid, normalize, scale,
                    d_ids.get(), d_w.get()};
  K3_ASSERT_LAUNCH(MoeRoute(p, nullptr));
  const auto ids = d_ids.Download();
  const auto w = d_w.Download();
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> rid(K);
    std::vector<float> rw(K);
    cpu::RouteToken({&logits[t * stride], bias ? bias->data() : nullptr, E, K, sigmoid, normalize, scale, rid.data(),
                     rw.data()});
    for (int64_t j = 0; j < K; ++j) EXPECT_EQ(ids[t * K + j], rid[j]) << "token " << t << " rank " << j;
    EXPECT_TRUE(AllClose(&w[t * K], std::vector<double>(rw.begin(), rw.end()).data(), K, 1e-6, 1e-9)) << "token " << t;
  }
}

TEST(CudaMoeRouterTest, K3SigmoidBiasNormalized) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(1);
  const int64_t T = 8, E = kExperts, K = kTopK, stride = E + 4;
  const auto logits = Normal(rng, T * stride, 0.0, 2.0);
  const auto bias = Normal(rng, E, 0.0, 0.05);
  RunRoute(logits, &bias, T, E, K, true, true, 1.0f, stride);
  RunRoute(logits, nullptr, T, E, K, true, true, 2.5f, stride);
  RunRoute(logits, &bias, T, E, K, true, false, 1.0f, stride);
  // a prefill-sized batch: one block per token, 300 of them
  const auto many = Normal(rng, 300 * E, 0.0, 2.0);
  RunRoute(many, &bias, 300, E, K, true, true, 1.0f, E);
}

TEST(CudaMoeRouterTest, TiesGoToTheLowerIndex) {
  K3_REQUIRE_GPU();
  const int64_t T = 2, E = kExperts, K = kTopK;
  std::vector<float> logits(T * E, 0.0f);  // token 0: everything tied
  for (int64_t e = 0; e < E; ++e) logits[E + e] = static_cast<float>(e % 5);  // token 1: ties in blocks
  RunRoute(logits, nullptr, T, E, K, true, true, 1.0f, E);
}

TEST(CudaMoeRouterTest, SoftmaxAndSmallShapes) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(3);
  const auto logits = Normal(rng, 5 * 896, 0.0, 3.0);
  const auto bias_k3 = Normal(rng, 896, 0.0, 0.05);
  RunRoute(logits, nullptr, 5, 896, 16, false, false, 1.0f, 896);
  const auto small = Normal(rng, 3 * 32, 0.0, 1.0);
  const auto bias = Normal(rng, 32, 0.0, 0.1);
  RunRoute(small, &bias, 3, 32, 4, true, true, 1.0f, 32);  // golden model: 32 experts, top-4
  // 1024 experts: the largest the sorting kernel takes (one thread per expert); 13 tokens
  const auto edge = Normal(rng, 13 * 1024, 0.0, 1.0);
  const auto edge_bias = Normal(rng, 1024, 0.0, 0.1);
  RunRoute(edge, &edge_bias, 13, 1024, 16, true, true, 1.0f, 1024);
  // the top-32 merge kernel's edges: k = 32 (its largest), every expert chosen, a width that is not
  // a power of two (padding lanes), one warp; k = 33 and 64 go to the full sort
  const auto mid = Normal(rng, 3 * 896, 0.0, 2.0);
  RunRoute(mid, &bias_k3, 3, 896, 32, true, true, 1.0f, 896);
  RunRoute(mid, &bias_k3, 3, 896, 33, true, true, 1.0f, 896);
  RunRoute(mid, nullptr, 3, 896, 64, false, true, 1.0f, 896);
  RunRoute(small, &bias, 3, 32, 32, true, true, 1.0f, 32);
  const auto odd = Normal(rng, 4 * 100, 0.0, 1.0);
  RunRoute(odd, nullptr, 4, 100, 7, false, false, 2.0f, 100);
  // above it: the block-per-token kernel
  const auto wide = Normal(rng, 2 * 4096, 0.0, 1.0);
  RunRoute(wide, nullptr, 2, 4096, 64, true, true, 1.0f, 4096);
}

}  // namespace
}  // namespace k3::cuda::testing
