// KdaDecode against k3::cpu::KdaRecurrent (one token per sequence, 96 heads of 128 x 128, state
// slots permuted, several steps so the state is carried; and runs of many tokens per sequence,
// the prefill form, token by token and chunked on tensor cores), and KdaGate against the engine's
// formula (worker/engine/kda_layer.cc). The CPU sums in double, the GPU in f32: outputs and
// states within 2e-5 of the largest |value|.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/kda.h"
#include "kernels/cpu/norm.h"
#include "kernels/cuda/kda/kda.h"
#include "tests/cuda/cuda_test_util.h"

namespace k3::cuda::testing {
namespace {

// `launches` consecutive launches of n_tokens per sequence each: decode steps (n_tokens = 1) or
// prefill runs (rows [seq][token]); the state is carried over the run and from launch to launch.
// Outputs and states within 2e-5 (one token) / 5e-5 (runs) of the largest |value|.
// chunked: KdaDecodeParams::chunked (the tensor-core chunked form where it takes the run); the log
// decays drawn from [g_lo, g_hi]; pipelined, split_chains: KdaDecodeParams'. gpu_out: if given,
// every launch's outputs and the states after it appended there.
void RunKda(int64_t n_heads, int64_t dk, int64_t dv, int64_t n_seqs, int64_t n_tokens, int launches, uint64_t seed,
            bool chunked = false, double g_lo = -5.0, double g_hi = 0.0, bool pipelined = false,
            bool split_chains = false, std::vector<float>* gpu_out = nullptr) {
  SCOPED_TRACE(::testing::Message() << "heads " << n_heads << " dk " << dk << " dv " << dv << " seqs " << n_seqs
                                    << " tokens " << n_tokens << (chunked ? " chunked" : "")
                                    << (pipelined ? " pipelined" : "") << (split_chains ? " split chains" : "")
                                    << " g in " << g_lo << ".." << g_hi);
  const double tol = n_tokens == 1 ? 2e-5 : 5e-5;
  std::mt19937_64 rng(seed);
  const int64_t n_slots = n_seqs + 1, slot_stride = n_heads * dk * dv + 32;
  std::vector<float> state = Normal(rng, n_slots * slot_stride, 0.0, 0.3);
  std::vector<int32_t> slots(n_seqs);
  for (int64_t s = 0; s < n_seqs; ++s) slots[s] = static_cast<int32_t>(n_slots - 1 - s);
  DeviceBuffer<float> d_state(state);
  DeviceBuffer<int32_t> d_slots(slots);
  const int64_t rows = n_seqs * n_tokens;
  const int64_t qks = n_heads * dk + 4, vs = n_heads * dv + 8, bs = n_heads + 2, os = n_heads * dv + 12;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int run = 0; run < launches; ++run) {
    auto q = Normal(rng, rows * qks), k = Normal(rng, rows * qks);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < n_heads; ++h) {
        cpu::L2Norm(&q[r * qks + h * dk], 1e-5f, dk, &q[r * qks + h * dk]);
        cpu::L2Norm(&k[r * qks + h * dk], 1e-5f, dk, &k[r * qks + h * dk]);
      }
    }
    const auto g = Uniform(rng, rows * qks, g_lo, g_hi);
    const auto v = Normal(rng, rows * vs);
    const auto beta = Uniform(rng, rows * bs, 0.0, 1.0);
    DeviceBuffer<float> dq(q), dk_(k), dg(g), dvv(v), db(beta), dout(rows * os);
    dout.Poison();
    KdaDecodeParams p;
    p.state = d_state.get();
    p.state_slot_stride = slot_stride;
    p.slots = d_slots.get();
    p.q = dq.get();
    p.k = dk_.get();
    p.g = dg.get();
    p.v = dvv.get();
    p.beta = db.get();
    p.out = dout.get();
    p.n_seqs = n_seqs;
    p.n_tokens = n_tokens;
    p.n_heads = n_heads;
    p.dk = dk;
    p.dv = dv;
    p.qk_stride = qks;
    p.v_stride = vs;
    p.beta_stride = bs;
    p.out_stride = os;
    p.scale = scale;
    p.chunked = chunked;
    p.pipelined = pipelined;
    p.split_chains = split_chains;
    K3_ASSERT_LAUNCH(KdaDecode(p, nullptr));
    const auto out = dout.Download();
    if (gpu_out != nullptr) {
      const auto st = d_state.Download();
      gpu_out->insert(gpu_out->end(), out.begin(), out.end());
      gpu_out->insert(gpu_out->end(), st.begin(), st.end());
    }
    std::vector<float> got, ref;
    for (int64_t s = 0; s < n_seqs; ++s) {
      std::vector<float> o(n_tokens * n_heads * dv);
      const int64_t r0 = s * n_tokens;
      cpu::KdaParams cp{state.data() + slots[s] * slot_stride, &q[r0 * qks], &k[r0 * qks], &g[r0 * qks], &v[r0 * vs],
                        &beta[r0 * bs], o.data(), qks, vs, bs, n_heads * dv, n_heads, dk, dv, n_tokens, scale};
      cpu::KdaRecurrent(cp);
      ref.insert(ref.end(), o.begin(), o.end());
      for (int64_t t = 0; t < n_tokens; ++t) {
        got.insert(got.end(), out.begin() + (r0 + t) * os, out.begin() + (r0 + t) * os + n_heads * dv);
      }
      // Padding between rows stays poisoned (nothing but the outputs is written).
      for (int64_t t = 0; t < n_tokens; ++t) EXPECT_TRUE(std::isnan(out[(r0 + t) * os + n_heads * dv]));
    }
    const std::vector<double> refd(ref.begin(), ref.end());
    EXPECT_TRUE(AllClose(got, refd, 0.0, tol * MaxAbs(refd))) << "output, launch " << run;
    const std::vector<double> stated(state.begin(), state.end());
    EXPECT_TRUE(AllClose(d_state.Download(), stated, 0.0, tol * MaxAbs(stated))) << "state, launch " << run;
  }
}

TEST(CudaKdaTest, PrefillRunsK3Shape) {
  K3_REQUIRE_GPU();
  RunKda(kHeads, kHeadDim, kHeadDim, 1, 300, 2, 21);
  RunKda(kHeads, kHeadDim, kHeadDim, 2, 33, 2, 22);
}

TEST(CudaKdaTest, PrefillRunsOtherShapes) {
  K3_REQUIRE_GPU();
  RunKda(4, kHeadDim, kHeadDim, 3, 17, 2, 23);  // golden model: 4 heads
  RunKda(3, 64, 96, 2, 9, 2, 24);
}

// The chunked tensor-core form (kda_chunked.cu) against the token-by-token CPU reference: runs
// ending inside a chunk (300 = 18 x 16 + 12, 33, 17), several sequences with permuted slots, the
// state carried across launches, a long run, and strong decays (every g near the K3 gate's -5).
// Every form of the kernel (KdaDecodeParams::pipelined and split_chains off and on); runs of one
// chunk, short and whole, and of two whole chunks (the pipelined loop's exits) too.
TEST(CudaKdaTest, ChunkedPrefillK3Shape) {
  K3_REQUIRE_GPU();
  for (bool pipelined : {false, true}) {
    for (bool split : {false, true}) {
      RunKda(kHeads, kHeadDim, kHeadDim, 1, 300, 2, 31, true, -5.0, 0.0, pipelined, split);
      RunKda(kHeads, kHeadDim, kHeadDim, 2, 33, 2, 32, true, -5.0, 0.0, pipelined, split);
      RunKda(4, kHeadDim, kHeadDim, 3, 17, 2, 33, true, -5.0, 0.0, pipelined, split);  // golden model: 4 heads
      RunKda(8, kHeadDim, kHeadDim, 1, 2048, 1, 34, true, -5.0, 0.0, pipelined, split);
      RunKda(8, kHeadDim, kHeadDim, 1, 160, 2, 35, true, -5.0, -4.99, pipelined, split);
      RunKda(4, kHeadDim, kHeadDim, 2, 5, 2, 37, true, -5.0, 0.0, pipelined, split);   // one chunk, short
      RunKda(4, kHeadDim, kHeadDim, 1, 16, 2, 38, true, -5.0, 0.0, pipelined, split);  // one whole chunk
      RunKda(4, kHeadDim, kHeadDim, 1, 32, 2, 39, true, -5.0, 0.0, pipelined, split);  // two whole chunks
    }
  }
}

// The pipelined form runs the same products on the same operands as the unpipelined one: the
// same outputs and states, bit for bit (odd and even chunk counts, a partial last chunk, 2 seqs),
// with one accumulator per product and with split chains. The split chains sum in another order:
// not those bits, but within a few f32 roundings of them.
TEST(CudaKdaTest, ChunkedPipelinedIsUnpipelinedBitForBit) {
  K3_REQUIRE_GPU();
  for (int64_t n_tokens : {int64_t{16}, int64_t{45}, int64_t{64}, int64_t{300}}) {
    std::vector<float> one_chain;
    for (bool split : {false, true}) {
      std::vector<float> plain, piped;
      RunKda(kHeads, kHeadDim, kHeadDim, 2, n_tokens, 2, 41, true, -5.0, 0.0, false, split, &plain);
      RunKda(kHeads, kHeadDim, kHeadDim, 2, n_tokens, 2, 41, true, -5.0, 0.0, true, split, &piped);
      ASSERT_EQ(plain.size(), piped.size());
      ASSERT_FALSE(plain.empty());
      EXPECT_EQ(0, std::memcmp(plain.data(), piped.data(), plain.size() * sizeof(float)))
          << n_tokens << " tokens" << (split ? ", split chains" : "");
      if (!split) {
        one_chain = plain;
        continue;
      }
      ASSERT_EQ(one_chain.size(), plain.size());
      EXPECT_NE(0, std::memcmp(one_chain.data(), plain.data(), plain.size() * sizeof(float)))
          << "split_chains did not change the summation order, " << n_tokens << " tokens";
      double scale = 0.0, worst = 0.0;
      for (size_t i = 0; i < plain.size(); ++i) {
        scale = std::max(scale, std::fabs(static_cast<double>(one_chain[i])));
        worst = std::max(worst, std::fabs(static_cast<double>(plain[i]) - one_chain[i]));
      }
      EXPECT_LE(worst, 1e-5 * scale) << n_tokens << " tokens: split against one chain";
    }
  }
}

// Where the chunked form does not take a run, KdaDecode runs the token-by-token kernel.
TEST(CudaKdaTest, ChunkedTakesOnlyK3ShapedAlignedRuns) {
  K3_REQUIRE_GPU();
  RunKda(3, 64, 96, 2, 9, 2, 36, true);
  RunKda(kHeads, kHeadDim, kHeadDim, 2, 1, 2, 37, true);  // decode: one token
  alignas(16) float buf[8] = {};
  KdaDecodeParams p;
  p.q = p.k = p.g = p.v = buf;
  p.n_seqs = 1;
  p.n_heads = kHeads;
  p.dk = p.dv = kHeadDim;
  p.n_tokens = 64;
  p.qk_stride = p.v_stride = kHeads * kHeadDim;
  EXPECT_FALSE(KdaChunkedTakes(p));  // not asked
  p.chunked = true;
  EXPECT_TRUE(KdaChunkedTakes(p));
  p.n_tokens = 1;
  EXPECT_FALSE(KdaChunkedTakes(p));
  p.n_tokens = 64;
  p.qk_stride += 2;  // rows no longer 16-byte aligned
  EXPECT_FALSE(KdaChunkedTakes(p));
  p.qk_stride -= 2;
  p.v = buf + 1;
  EXPECT_FALSE(KdaChunkedTakes(p));
  p.v = buf;
  p.dv = 64;
  EXPECT_FALSE(KdaChunkedTakes(p));
}

TEST(CudaKdaTest, DecodeK3Shape) {
  K3_REQUIRE_GPU();
  RunKda(kHeads, kHeadDim, kHeadDim, 2, 1, 3, 1);
}

TEST(CudaKdaTest, DecodeOtherShapes) {
  K3_REQUIRE_GPU();
  RunKda(4, kHeadDim, kHeadDim, 3, 1, 2, 2);  // golden model: 4 heads
  RunKda(3, 64, 96, 2, 1, 2, 3);              // dk < 128, dv not a multiple of 32... of 32 tiles
  RunKda(2, 100, 40, 1, 1, 2, 4);
}

TEST(CudaKdaTest, GateMatchesEngineFormula) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(11);
  const int64_t T = 3, H = kHeads, hd = kHeadDim, D = H * hd, ps = D + 4, gs = D + 8;
  const auto pre = Normal(rng, T * ps, 0.0, 3.0), bias = Normal(rng, D, 0.0, 1.0);
  std::vector<float> a(H);
  for (auto& x : a) x = -std::exp(static_cast<float>(Normal(rng, 1, 0.0, 1.0)[0]));
  DeviceBuffer<float> dpre(pre), dbias(bias), da(a), dg(T * gs);
  for (bool lb : {true, false}) {
    dg.Poison();
    KdaGateParams p{dpre.get(), dbias.get(), da.get(), dg.get(), T, H, hd, ps, gs, lb, -5.0f};
    K3_ASSERT_LAUNCH(KdaGate(p, nullptr));
    const auto g = dg.Download();
    std::vector<float> got;
    std::vector<double> ref;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < D; ++c) {
        const float x = pre[t * ps + c] + bias[c];
        const float ah = a[c / hd];
        ref.push_back(lb ? -5.0f * cpu::Sigmoid(-(ah * x)) : ah * cpu::Softplus(x));
        got.push_back(g[t * gs + c]);
      }
    }
    EXPECT_TRUE(AllClose(got, ref, 2e-6, 1e-7)) << "lower bound " << lb;
  }
}

}  // namespace
}  // namespace k3::cuda::testing
