// ShortConvSiluDecode (q, k, v convolutions of a decode step with the L2 norm of q and k) against
// what it replaces on the GPU, bit for bit: ShortConvSilu (n_tokens = 1, itself tested against the
// CPU in short_conv_test.cc) on each input, then RowNorm(kL2) per group on q and k, several steps in
// a row so each reads the history the previous wrote, state slots permuted. Shapes: K3's 96 heads
// x 128 (12288 channels, 4 taps), one and 16 sequences, the stacked q|k|v|g row as the input
// (in_stride 4 x channels), a narrower head (48: lanes past the group), other tap counts.
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/norm/norm.h"
#include "kernels/cuda/short_conv/short_conv.h"
#include "kernels/cuda/short_conv/short_conv_decode.h"
#include "tests/cuda/cuda_test_util.h"

namespace k3::cuda::testing {
namespace {

void RunDecode(int64_t channels, int64_t group, int64_t taps, int64_t n_seqs, int steps, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "channels " << channels << " group " << group << " taps " << taps << " seqs "
                                    << n_seqs);
  std::mt19937_64 rng(seed);
  const int64_t hist = taps - 1, n_slots = n_seqs + 2, per_conv = hist * channels;
  const int64_t slot_stride = 3 * per_conv + 16;
  const float eps = 1e-5f;
  std::vector<float> weights[3];
  std::vector<DeviceBuffer<float>> d_w(3);
  for (int w = 0; w < 3; ++w) {
    weights[w] = Normal(rng, channels * taps, 0.0, 0.5);
    d_w[w].Resize(weights[w].size());
    d_w[w].Upload(weights[w]);
  }
  const auto history = Normal(rng, n_slots * slot_stride, 0.0, 1.0);
  DeviceBuffer<float> d_hist_ref(history), d_hist(history);
  std::vector<int32_t> slots(n_seqs);
  for (int64_t s = 0; s < n_seqs; ++s) slots[s] = static_cast<int32_t>(n_slots - 1 - s);  // distinct, permuted
  DeviceBuffer<int32_t> d_slots(slots);
  const int64_t in_stride = 4 * channels, out_stride = channels + 8;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const auto in = Normal(rng, n_seqs * in_stride, 0.0, 1.0);
    DeviceBuffer<float> d_in(in);
    std::vector<DeviceBuffer<float>> ref_out(3), out(3);
    ShortConvDecodeParams p;
    for (int w = 0; w < 3; ++w) {
      ref_out[w].Resize(n_seqs * out_stride);
      out[w].Resize(n_seqs * out_stride);
      ref_out[w].Poison();
      out[w].Poison();
      ShortConvParams c;
      c.weight = d_w[w].get();
      c.history = d_hist_ref.get() + w * per_conv;
      c.history_slot_stride = slot_stride;
      c.slots = d_slots.get();
      c.in = d_in.get() + w * channels;
      c.out = ref_out[w].get();
      c.n_seqs = n_seqs;
      c.n_tokens = 1;
      c.channels = channels;
      c.taps = taps;
      c.in_stride = in_stride;
      c.out_stride = out_stride;
      K3_ASSERT_LAUNCH(ShortConvSilu(c, nullptr));
      if (w < 2) {
        RowNormParams r;
        r.x = r.y = ref_out[w].get();
        r.n_tokens = n_seqs;
        r.n_groups = channels / group;
        r.width = group;
        r.x_stride = r.y_stride = out_stride;
        r.eps = eps;
        r.kind = NormKind::kL2;
        K3_ASSERT_LAUNCH(RowNorm(r, nullptr));
      }
      p.weight[w] = d_w[w].get();
      p.history[w] = d_hist.get() + w * per_conv;
      p.in[w] = d_in.get() + w * channels;
      p.out[w] = out[w].get();
      p.l2[w] = w < 2;
    }
    p.history_slot_stride = slot_stride;
    p.slots = d_slots.get();
    p.in_stride = in_stride;
    p.out_stride = out_stride;
    p.n_seqs = n_seqs;
    p.channels = channels;
    p.group_width = group;
    p.taps = taps;
    p.eps = eps;
    K3_ASSERT_LAUNCH(ShortConvSiluDecode(p, nullptr));
    for (int w = 0; w < 3; ++w) {
      const auto a = out[w].Download(), b = ref_out[w].Download();
      int64_t diff = 0;
      for (int64_t s = 0; s < n_seqs; ++s) {
        for (int64_t c = 0; c < channels; ++c) diff += a[s * out_stride + c] != b[s * out_stride + c];
      }
      EXPECT_EQ(diff, 0) << "outputs of convolution " << w << " differ";
    }
    EXPECT_EQ(d_hist.Download(), d_hist_ref.Download()) << "histories differ";
  }
}

TEST(CudaShortConvDecodeTest, MatchesUnfusedBitForBit) {
  K3_REQUIRE_GPU();
  RunDecode(kDInner, 128, kConvTaps, 1, 3, 1);
  RunDecode(kDInner, 128, kConvTaps, 16, 3, 2);
  RunDecode(48 * 5, 48, kConvTaps, 3, 2, 3);
  RunDecode(256, 64, 1, 2, 2, 4);
  RunDecode(256, 32, 16, 2, 17, 5);
}

TEST(CudaShortConvDecodeTest, RefusesBadArguments) {
  K3_REQUIRE_GPU();
  DeviceBuffer<float> buf(1024);
  ShortConvDecodeParams p;
  for (int w = 0; w < 3; ++w) {
    p.weight[w] = p.in[w] = buf.get();
    p.history[w] = p.out[w] = buf.get();
  }
  p.n_seqs = 1;
  p.channels = 256;
  p.in_stride = p.out_stride = 256;
  p.taps = 4;
  p.group_width = 256;  // wider than a warp's 4 values per lane
  EXPECT_EQ(ShortConvSiluDecode(p, nullptr), cudaErrorInvalidValue);
  p.group_width = 96;  // does not divide the channels
  EXPECT_EQ(ShortConvSiluDecode(p, nullptr), cudaErrorInvalidValue);
  p.group_width = 128;
  p.taps = kShortConvMaxTaps + 1;
  EXPECT_EQ(ShortConvSiluDecode(p, nullptr), cudaErrorInvalidValue);
  p.taps = 4;
  p.history[1] = nullptr;
  EXPECT_EQ(ShortConvSiluDecode(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace k3::cuda::testing
