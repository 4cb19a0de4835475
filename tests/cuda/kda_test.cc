// KdaDecode against k3::cpu::KdaRecurrent (one token per sequence, 96 heads of 128 x 128, state
// slots permuted, several steps so the state is carried; and runs of many tokens per sequence,
// the prefill form), and KdaGate against the engine's
// formula (worker/engine/kda_layer.cc). The CPU sums in double, the GPU in f32: outputs and
// states within 2e-5 of the largest |value|.
#include <cmath>
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

void RunDecode(int64_t n_heads, int64_t dk, int64_t dv, int64_t n_seqs, int64_t steps, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "heads " << n_heads << " dk " << dk << " dv " << dv << " seqs " << n_seqs);
  std::mt19937_64 rng(seed);
  const int64_t n_slots = n_seqs + 1, slot_stride = n_heads * dk * dv + 32;
  std::vector<float> state = Normal(rng, n_slots * slot_stride, 0.0, 0.3);
  std::vector<int32_t> slots(n_seqs);
  for (int64_t s = 0; s < n_seqs; ++s) slots[s] = static_cast<int32_t>(n_slots - 1 - s);
  DeviceBuffer<float> d_state(state);
  DeviceBuffer<int32_t> d_slots(slots);
  const int64_t qks = n_heads * dk + 4, vs = n_heads * dv + 8, bs = n_heads + 2, os = n_heads * dv + 12;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t step = 0; step < steps; ++step) {
    auto q = Normal(rng, n_seqs * qks), k = Normal(rng, n_seqs * qks);
    for (int64_t s = 0; s < n_seqs; ++s) {
      for (int64_t h = 0; h < n_heads; ++h) {
        cpu::L2Norm(&q[s * qks + h * dk], 1e-5f, dk, &q[s * qks + h * dk]);
        cpu::L2Norm(&k[s * qks + h * dk], 1e-5f, dk, &k[s * qks + h * dk]);
      }
    }
    const auto g = Uniform(rng, n_seqs * qks, -5.0, 0.0);
    const auto v = Normal(rng, n_seqs * vs);
    const auto beta = Uniform(rng, n_seqs * bs, 0.0, 1.0);
    DeviceBuffer<float> dq(q), dk_(k), dg(g), dvv(v), db(beta), dout(n_seqs * os);
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
    p.n_heads = n_heads;
    p.dk = dk;
    p.dv = dv;
    p.qk_stride = qks;
    p.v_stride = vs;
    p.beta_stride = bs;
    p.out_stride = os;
    p.scale = scale;
    K3_ASSERT_LAUNCH(KdaDecode(p, nullptr));
    const auto out = dout.Download();
    std::vector<float> got, ref;
    for (int64_t s = 0; s < n_seqs; ++s) {
      std::vector<float> o(n_heads * dv);
      cpu::KdaParams cp{state.data() + slots[s] * slot_stride, &q[s * qks], &k[s * qks], &g[s * qks], &v[s * vs],
                        &beta[s * bs], o.data(), qks, vs, bs, n_heads * dv, n_heads, dk, dv, 1, scale};
      cpu::KdaRecurrent(cp);
      ref.insert(ref.end(), o.begin(), o.end());
      got.insert(got.end(), out.begin() + s * os, out.begin() + s * os + n_heads * dv);
    }
    const std::vector<double> refd(ref.begin(), ref.end());
    EXPECT_TRUE(AllClose(got, refd, 0.0, 2e-5 * MaxAbs(refd))) << "output, step " << step;
    const std::vector<double> stated(state.begin(), state.end());
    EXPECT_TRUE(AllClose(d_state.Download(), stated, 0.0, 2e-5 * MaxAbs(stated))) << "state, step " << step;
  }
}

// Runs of n_tokens per sequence in one launch (prefill): rows [seq][token], state carried over
// the run and over two consecutive runs.
void RunPrefill(int64_t n_heads, int64_t dk, int64_t dv, int64_t n_seqs, int64_t n_tokens, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "prefill heads " << n_heads << " dk " << dk << " dv " << dv << " seqs "
                                    << n_seqs << " tokens " << n_tokens);
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
  for (int run = 0; run < 2; ++run) {
    auto q = Normal(rng, rows * qks), k = Normal(rng, rows * qks);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < n_heads; ++h) {
        cpu::L2Norm(&q[r * qks + h * dk], 1e-5f, dk, &q[r * qks + h * dk]);
        cpu::L2Norm(&k[r * qks + h * dk], 1e-5f, dk, &k[r * qks + h * dk]);
      }
    }
    const auto g = Uniform(rng, rows * qks, -5.0, 0.0);
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
    K3_ASSERT_LAUNCH(KdaDecode(p, nullptr));
    const auto out = dout.Download();
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
    EXPECT_TRUE(AllClose(got, refd, 0.0, 5e-5 * MaxAbs(refd))) << "output, run " << run;
    const std::vector<double> stated(state.begin(), state.end());
    EXPECT_TRUE(AllClose(d_state.Download(), stated, 0.0, 5e-5 * MaxAbs(stated))) << "state, run " << run;
  }
}

TEST(CudaKdaTest, PrefillRunsK3Shape) {
  K3_REQUIRE_GPU();
  RunPrefill(kHeads, kHeadDim, kHeadDim, 1, 300, 21);
  RunPrefill(kHeads, kHeadDim, kHeadDim, 2, 33, 22);
}

TEST(CudaKdaTest, PrefillRunsOtherShapes) {
  K3_REQUIRE_GPU();
  RunPrefill(4, kHeadDim, kHeadDim, 3, 17, 23);  // golden model: 4 heads
  RunPrefill(3, 64, 96, 2, 9, 24);
  RunPrefill(2, 100, 40, 1, 1, 25);              // a run of one token = decode
}

TEST(CudaKdaTest, DecodeK3Shape) {
  K3_REQUIRE_GPU();
  RunDecode(kHeads, kHeadDim, kHeadDim, 2, 3, 1);
}

TEST(CudaKdaTest, DecodeOtherShapes) {
  K3_REQUIRE_GPU();
  RunDecode(4, kHeadDim, kHeadDim, 3, 2, 2);  // golden model: 4 heads
  RunDecode(3, 64, 96, 2, 2, 3);              // dk < 128, dv not a multiple of 32... of 32 tiles
  RunDecode(2, 100, 40, 1, 2, 4);
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
