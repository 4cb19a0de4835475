// AddMixNorm (delta add, bank copy, residual mix, RMS norm in one launch) against the CPU
// functions it fuses, per token: x' = x + (d0 + d1) (or d0 + d1 on a restart), cpu::ResidualMix
// over the checkpoints and x', cpu::RmsNorm. x' and the banked copy must equal the f32 sums
// exactly; y within 2e-5 of its largest |value| (the mix's scores are sums of n products in f32
// here, double on the CPU, and enter through a softmax). Widths: K3's 7168, the golden model's
// 512, 1000 and 33 (blocks' column ranges not multiples of the threads), 8192 (the largest);
// 0 to 8 checkpoints; decode-sized batches (the cluster kernel) and prefill chunks (one block per
// token).
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/norm.h"
#include "kernels/cpu/residual_mix.h"
#include "kernels/cuda/residual_mix/add_mix_norm.h"
#include "tests/cuda/cuda_test_util.h"

namespace k3::cuda::testing {
namespace {

struct Case {
  int n_ckpt;
  int64_t tokens, n;
  bool d0, d1, restart, bank_out;
};

void RunCase(const Case& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "ckpt " << c.n_ckpt << " tokens " << c.tokens << " n " << c.n << " d0 "
                                    << c.d0 << " d1 " << c.d1 << " restart " << c.restart << " bank_out "
                                    << c.bank_out);
  std::mt19937_64 rng(seed);
  const int64_t T = c.tokens, n = c.n, bs = n + 4, xs = n + 8, ds = n + 12, ys = n + 16;
  std::vector<std::vector<float>> bank;
  std::vector<DeviceBuffer<float>> d_bank(c.n_ckpt);
  for (int i = 0; i < c.n_ckpt; ++i) {
    bank.push_back(Normal(rng, T * bs, 0.0, 0.5 + i));
    d_bank[i].Resize(bank[i].size());
    d_bank[i].Upload(bank[i]);
  }
  const auto x = Normal(rng, T * xs, 0.1, 2.0);
  const auto d0 = Normal(rng, T * ds, 0.0, 1.0);
  const auto d1 = Normal(rng, T * ds, 0.0, 0.7);
  const auto sw = Normal(rng, n, 0.0, 0.05);  // scores O(1..10): a non-trivial softmax
  const auto nw = Normal(rng, n, 1.0, 0.2);
  DeviceBuffer<float> d_x(x), d_d0(d0), d_d1(d1), d_sw(sw), d_nw(nw), d_y(T * ys), d_bo(T * bs);
  d_y.Poison();
  d_bo.Poison();
  AddMixNormParams p;
  for (int i = 0; i < c.n_ckpt; ++i) p.bank[i] = d_bank[i].get();
  p.n_ckpt = c.n_ckpt;
  p.bank_stride = bs;
  p.x = d_x.get();
  p.x_stride = xs;
  p.d0 = c.d0 ? d_d0.get() : nullptr;
  p.d1 = c.d1 ? d_d1.get() : nullptr;
  p.d_stride = ds;
  p.restart = c.restart;
  p.bank_out = c.bank_out ? d_bo.get() : nullptr;
  p.score_w = d_sw.get();
  p.norm_w = d_nw.get();
  p.y = d_y.get();
  p.y_stride = ys;
  p.n_tokens = T;
  p.n = n;
  p.eps = kRmsEps;
  K3_ASSERT_LAUNCH(AddMixNorm(p, nullptr));
  const auto gx = d_x.Download(), gy = d_y.Download(), gbo = d_bo.Download();
  std::vector<float> got;
  std::vector<double> ref;
  int64_t x_mismatch = 0, bank_mismatch = 0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> xp(n), mix(n), y(n);
    for (int64_t i = 0; i < n; ++i) {
      float v = x[t * xs + i];
      if (c.d0) {
        float d = d0[t * ds + i];
        if (c.d1) d += d1[t * ds + i];
        v = c.restart ? d : v + d;
      }
      xp[i] = v;
      x_mismatch += gx[t * xs + i] != v;
      if (c.bank_out) bank_mismatch += gbo[t * bs + i] != v;
    }
    std::vector<const float*> rows;
    for (int i = 0; i < c.n_ckpt; ++i) rows.push_back(&bank[i][t * bs]);
    cpu::ResidualMix(rows.data(), c.n_ckpt, xp.data(), sw.data(), kRmsEps, n, mix.data());
    cpu::RmsNorm(mix.data(), nw.data(), kRmsEps, n, y.data());
    for (int64_t i = 0; i < n; ++i) {
      ref.push_back(y[i]);
      got.push_back(gy[t * ys + i]);
    }
  }
  EXPECT_EQ(x_mismatch, 0) << "x' differs from the f32 sums";
  EXPECT_EQ(bank_mismatch, 0) << "the banked copy differs from x'";
  EXPECT_TRUE(AllClose(got, ref, 1e-5, 2e-5 * MaxAbs(ref)));
}

TEST(CudaAddMixNormTest, MatchesCpu) {
  K3_REQUIRE_GPU();
  uint64_t seed = 1;
  // the engine's uses: a layer start (previous delta, maybe banked), mid-layer (maybe restarted),
  // the MoE's two deltas, the head (no delta left), layer 0 (no delta, no checkpoint)
  for (const Case& c : {Case{0, 1, kHidden, false, false, false, true}, Case{1, 1, kHidden, true, false, false, false},
                        Case{1, 3, kHidden, true, true, false, true}, Case{2, 1, kHidden, true, false, true, false},
                        Case{8, 1, kHidden, true, true, false, false}, Case{8, 5, kHidden, true, true, true, false},
                        Case{7, 32, kHidden, true, true, false, true}, Case{3, 2, 512, true, true, false, true},
                        Case{2, 2, 1000, true, false, true, false}, Case{4, 2, 4096, true, true, false, true},
                        Case{0, 4, 1000, true, true, true, false}, Case{5, 1, 33, false, false, false, false},
                        Case{2, 1, kAddMixNormMaxWidth, true, true, false, true},
                        // prefill chunks: the one-block-per-token kernel (kAddMixNormRowKernelMinTokens)
                        Case{1, 300, kHidden, true, true, false, true}, Case{8, 130, kHidden, true, true, true, false},
                        Case{0, 128, 1000, false, false, false, true}, Case{3, 200, 33, true, false, false, false},
                        Case{2, 129, kAddMixNormMaxWidth, true, true, false, true}}) {
    RunCase(c, seed++);
  }
}

TEST(CudaAddMixNormTest, RefusesBadArguments) {
  K3_REQUIRE_GPU();
  DeviceBuffer<float> buf(4 * 9000);
  AddMixNormParams p;
  p.x = p.y = buf.get();
  p.score_w = p.norm_w = buf.get();
  p.n_tokens = 1;
  p.n = kAddMixNormMaxWidth + 1;
  p.x_stride = p.y_stride = p.n;
  EXPECT_EQ(AddMixNorm(p, nullptr), cudaErrorInvalidValue);  // too wide for the registers
  p.n = 100;
  p.restart = true;
  EXPECT_EQ(AddMixNorm(p, nullptr), cudaErrorInvalidValue);  // a restart with no delta
  p.restart = false;
  p.n_ckpt = 1;
  p.bank_stride = 100;
  EXPECT_EQ(AddMixNorm(p, nullptr), cudaErrorInvalidValue);  // a checkpoint with no row pointer
  p.n_ckpt = kResidualMixMaxCheckpoints + 1;
  EXPECT_EQ(AddMixNorm(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace k3::cuda::testing
