// ShortConvSilu against k3::cpu::ShortConvSilu: decode steps and prefill runs through one harness
// (RunConv: several sequences, state slots permuted, several launches so the history is carried),
// a run from a zeroed history without slots, 12288 channels and 4 taps as K3, plus other tap counts.
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/short_conv.h"
#include "kernels/cuda/short_conv/short_conv.h"
#include "tests/cuda/cuda_test_util.h"

namespace k3::cuda::testing {
namespace {

// `launches` runs of n_tokens per sequence in a row (decode steps: n_tokens = 1; prefill runs:
// token tiles of 16 spread a run over many blocks, and only the first tile reads, then rewrites,
// the history), from a mid-sequence history with the state slots permuted, so each launch reads
// the history the previous one wrote.
void RunConv(int64_t channels, int64_t taps, int64_t n_seqs, int64_t n_tokens, int launches, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "channels " << channels << " taps " << taps << " seqs " << n_seqs << " tokens "
                                    << n_tokens);
  std::mt19937_64 rng(seed);
  const int64_t hist = taps - 1, n_slots = n_seqs + 2, slot_stride = hist * channels + 16;
  const auto weight = Normal(rng, channels * taps, 0.0, 0.5);
  std::vector<float> history = Normal(rng, n_slots * slot_stride, 0.0, 1.0);
  std::vector<int32_t> slots(n_seqs);
  for (int64_t s = 0; s < n_seqs; ++s) slots[s] = static_cast<int32_t>((s * 3 + 1) % n_slots);
  DeviceBuffer<float> d_w(weight), d_hist(history);
  DeviceBuffer<int32_t> d_slots(slots);
  const int64_t in_stride = channels + 4, out_stride = channels + 8, rows = n_seqs * n_tokens;
  for (int run = 0; run < launches; ++run) {
    const auto in = Normal(rng, rows * in_stride, 0.0, 1.0);
    DeviceBuffer<float> d_in(in), d_out(rows * out_stride);
    d_out.Poison();
    ShortConvParams p;
    p.weight = d_w.get();
    p.history = d_hist.get();
    p.history_slot_stride = slot_stride;
    p.slots = d_slots.get();
    p.in = d_in.get();
    p.out = d_out.get();
    p.n_seqs = n_seqs;
    p.n_tokens = n_tokens;
    p.channels = channels;
    p.taps = taps;
    p.in_stride = in_stride;
    p.out_stride = out_stride;
    K3_ASSERT_LAUNCH(ShortConvSilu(p, nullptr));
    const auto out = d_out.Download();
    std::vector<float> got;
    std::vector<double> ref;
    for (int64_t s = 0; s < n_seqs; ++s) {
      std::vector<float> r(n_tokens * channels);
      cpu::ShortConvSilu({weight.data(), history.data() + slots[s] * slot_stride, &in[s * n_tokens * in_stride],
                          r.data(), channels, taps, n_tokens, in_stride, channels});
      ref.insert(ref.end(), r.begin(), r.end());
      for (int64_t t = 0; t < n_tokens; ++t) {
        const auto row = out.begin() + (s * n_tokens + t) * out_stride;
        got.insert(got.end(), row, row + channels);
      }
    }
    EXPECT_TRUE(AllClose(got, ref, 1e-5, 1e-6)) << "run " << run;
    EXPECT_TRUE(AllClose(d_hist.Download(), std::vector<double>(history.begin(), history.end()), 0.0, 0.0))
        << "history, run " << run;
  }
}

TEST(CudaShortConvTest, DecodeK3Shape) {
  K3_REQUIRE_GPU();
  RunConv(kDInner, kConvTaps, 3, 1, 5, 1);
}

TEST(CudaShortConvTest, DecodeOtherTaps) {
  K3_REQUIRE_GPU();
  RunConv(512, 1, 2, 1, 2, 2);
  RunConv(512, 2, 2, 1, 3, 3);
  RunConv(300, 16, 2, 1, 18, 4);
}

TEST(CudaShortConvTest, PrefillRunMatchesCpu) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(9);
  const int64_t C = kDInner, K = kConvTaps, T = 7;
  const auto weight = Normal(rng, C * K, 0.0, 0.5);
  std::vector<float> history((K - 1) * C, 0.0f);  // sequence start: zeros
  const auto in = Normal(rng, T * C, 0.0, 1.0);
  DeviceBuffer<float> d_w(weight), d_hist(history), d_in(in), d_out(T * C);
  d_out.Poison();
  ShortConvParams p;
  p.weight = d_w.get();
  p.history = d_hist.get();
  p.history_slot_stride = 0;
  p.in = d_in.get();
  p.out = d_out.get();
  p.n_seqs = 1;
  p.n_tokens = T;
  p.channels = C;
  p.taps = K;
  p.in_stride = C;
  p.out_stride = C;
  K3_ASSERT_LAUNCH(ShortConvSilu(p, nullptr));
  std::vector<float> ref(T * C);
  cpu::ShortConvSilu({weight.data(), history.data(), in.data(), ref.data(), C, K, T, C, C});
  EXPECT_TRUE(AllClose(d_out.Download(), std::vector<double>(ref.begin(), ref.end()), 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(d_hist.Download(), std::vector<double>(history.begin(), history.end()), 0.0, 0.0));
}

TEST(CudaShortConvTest, PrefillTilesMatchCpu) {
  K3_REQUIRE_GPU();
  RunConv(kDInner, kConvTaps, 1, 300, 2, 11);  // 19 tiles, the last partial
  RunConv(kDInner, kConvTaps, 2, 33, 2, 12);
  RunConv(1000, kConvTaps, 3, 16, 2, 13);  // exactly one tile
  RunConv(1000, kConvTaps, 2, 17, 2, 14);  // one token into the second tile
  RunConv(300, kConvTaps, 1, 2, 2, 15);    // fewer tokens than the history: old and new mixed
  RunConv(300, 2, 2, 40, 2, 16);
  RunConv(300, 1, 1, 20, 2, 17);   // no history at all
  RunConv(256, 16, 1, 50, 2, 18);  // the widest window: 15 inputs back
}

}  // namespace
}  // namespace k3::cuda::testing
