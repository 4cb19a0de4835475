// ResidualMix against k3::cpu::ResidualMix per token, hidden 7168, 0 / 1 / 8 checkpoints, a batch
// of tokens (decode-sized, and prefill chunks of >= 512 that take a row per block), in place and not. Scores come from
// sums of 7168 products (f32 here, double on the CPU), and enter through a softmax: 1e-5 relative to the largest
// |input| per element.
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/residual_mix.h"
#include "kernels/cuda/residual_mix/residual_mix.h"
#include "tests/cuda/cuda_test_util.h"

namespace k3::cuda::testing {
namespace {

void RunMix(int n_ckpt, int64_t T, int64_t n, bool in_place, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "ckpt " << n_ckpt << " tokens " << T << " n " << n << " in_place " << in_place);
  std::mt19937_64 rng(seed);
  const int64_t bs = n + 4, xs = n + 8, os = n + 12;
  std::vector<std::vector<float>> bank;
  std::vector<DeviceBuffer<float>> d_bank(n_ckpt);
  for (int i = 0; i < n_ckpt; ++i) {
    bank.push_back(Normal(rng, T * bs, 0.0, 0.5 + i));
    d_bank[i].Resize(bank[i].size());
    d_bank[i].Upload(bank[i]);
  }
  const auto x = Normal(rng, T * xs, 0.1, 2.0);
  const auto w = Normal(rng, n, 0.0, 0.05);  // scores O(1..10): a non-trivial softmax
  DeviceBuffer<float> d_x(x), d_w(w), d_out(T * (in_place ? xs : os));
  DeviceBuffer<float> d_ws(ResidualMixWorkspaceFloats(T, n));
  d_out.Poison();
  d_ws.Poison();
  ResidualMixParams p;
  for (int i = 0; i < n_ckpt; ++i) p.bank[i] = d_bank[i].get();
  p.n_ckpt = n_ckpt;
  p.bank_stride = bs;
  p.x = d_x.get();
  p.w = d_w.get();
  p.out = in_place ? d_x.get() : d_out.get();
  p.n_tokens = T;
  p.n = n;
  p.x_stride = xs;
  p.out_stride = in_place ? xs : os;
  p.eps = kRmsEps;
  p.workspace = d_ws.get();
  K3_ASSERT_LAUNCH(ResidualMix(p, nullptr));
  const auto out = in_place ? d_x.Download() : d_out.Download();
  const int64_t ostride = in_place ? xs : os;
  std::vector<float> got;
  std::vector<double> ref;
  double scale = 0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<const float*> rows;
    for (int i = 0; i < n_ckpt; ++i) rows.push_back(&bank[i][t * bs]);
    std::vector<float> r(n);
    cpu::ResidualMix(rows.data(), n_ckpt, &x[t * xs], w.data(), kRmsEps, n, r.data());
    for (int64_t d = 0; d < n; ++d) {
      ref.push_back(r[d]);
      got.push_back(out[t * ostride + d]);
      scale = std::max(scale, std::fabs(static_cast<double>(x[t * xs + d])));
      for (int i = 0; i < n_ckpt; ++i) scale = std::max(scale, std::fabs(static_cast<double>(bank[i][t * bs + d])));
    }
  }
  EXPECT_TRUE(AllClose(got, ref, 1e-5, 1e-5 * scale));
}

TEST(CudaResidualMixTest, MatchesCpu) {
  K3_REQUIRE_GPU();
  RunMix(0, 2, kHidden, false, 1);
  RunMix(1, 1, kHidden, false, 2);
  RunMix(1, 3, kHidden, true, 3);
  RunMix(8, 1, kHidden, false, 4);
  RunMix(8, 5, kHidden, true, 5);
  RunMix(3, 2, 512, false, 6);   // golden model width
  RunMix(2, 2, 1000, false, 7);  // not a multiple of the split
  // Prefill chunks (>= 512 tokens): a whole row per block.
  RunMix(1, 600, kHidden, false, 8);
  RunMix(8, 512, kHidden, true, 9);
  RunMix(2, 513, 1000, true, 10);
}

}  // namespace
}  // namespace k3::cuda::testing
