// ShortConvSilu (spec 4.4, conv_silu) against a double-precision causal convolution:
//   out_t[c] = silu( Σ_{j=0..K-1} w[c][j] · p_{t-(K-1)+j}[c] ),  p_t = 0 for t < 0 (sequence start)
// tap K-1 multiplies the current token. Real KDA shape: d_inner 12288 channels, 4 taps; the
// input is a slice of a fused q|k|v projection row (in_stride 3·12288) and the output rows are
// padded (out_stride 12288+32) with sentinels that must survive. The kernel sums <= 16 products
// in f32: tolerance 4e-6·Σ|w·p| + 1e-6·|out| per element.
#include "kernels/cpu/short_conv.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace k3::cpu {
namespace {

using namespace k3::cpu::testing;

constexpr int64_t kC = kDInner;
constexpr int64_t kInStride = 3 * kDInner;
constexpr int64_t kInOffset = kDInner;  // the "k" third of a fused q|k|v row
constexpr int64_t kOutStride = kDInner + 32;
constexpr float kSentinel = 12345.0f;

struct Sequence {
  int64_t taps, n_tokens;
  std::vector<float> weight;  // [C][taps]
  std::vector<float> in;      // [T][kInStride], channels at kInOffset
  float input(int64_t t, int64_t c) const { return in[t * kInStride + kInOffset + c]; }
};

Sequence MakeSequence(std::mt19937_64& rng, int64_t taps, int64_t n_tokens) {
  Sequence s{taps, n_tokens, Normal(rng, kC * taps, 0.0, 0.7), Normal(rng, n_tokens * kInStride, 0.1, 2.0)};
  return s;
}

struct Ref {
  std::vector<double> out;  // [T][C]
  std::vector<double> tol;  // [T][C]
};

Ref Reference(const Sequence& s) {
  const int64_t K = s.taps, T = s.n_tokens;
  Ref r{std::vector<double>(T * kC), std::vector<double>(T * kC)};
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < kC; ++c) {
      double acc = 0, mag = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t src = t - (K - 1) + j;
        const double p = src >= 0 ? s.input(src, c) : 0.0;
        acc += static_cast<double>(s.weight[c * K + j]) * p;
        mag += std::fabs(s.weight[c * K + j] * p);
      }
      r.out[t * kC + c] = acc * SigmoidD(acc);
      r.tol[t * kC + c] = 4e-6 * mag;
    }
  }
  return r;
}

// Runs the sequence as consecutive calls of the given sizes, from a zero history.
// Returns the outputs [T][kOutStride] (padding included) and leaves the final history in *history.
std::vector<float> RunPieces(const Sequence& s, const std::vector<int64_t>& pieces, std::vector<float>* history) {
  const int64_t K = s.taps;
  history->assign(std::max<int64_t>(K - 1, 1) * kC, 0.0f);
  std::vector<float> out(s.n_tokens * kOutStride, kNaN);
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    std::fill(out.begin() + t * kOutStride + kC, out.begin() + (t + 1) * kOutStride, kSentinel);
  }
  int64_t t0 = 0;
  for (int64_t n : pieces) {
    ShortConvSilu({s.weight.data(), history->data(), s.in.data() + t0 * kInStride + kInOffset,
                   out.data() + t0 * kOutStride, kC, K, n, kInStride, kOutStride});
    t0 += n;
  }
  EXPECT_EQ(t0, s.n_tokens);
  return out;
}

// Packs the [T][kOutStride] output to [T][C] and checks the padding was not written.
std::vector<float> Unpad(const std::vector<float>& out, int64_t T) {
  std::vector<float> r(T * kC);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < kC; ++c) r[t * kC + c] = out[t * kOutStride + c];
    for (int64_t c = kC; c < kOutStride; ++c) {
      EXPECT_EQ(out[t * kOutStride + c], kSentinel) << "padding written at token " << t;
    }
  }
  return r;
}

// The history after a run: the last K-1 inputs of the sequence, oldest first, zeros before
// the start.
void ExpectHistory(const Sequence& s, const std::vector<float>& history) {
  const int64_t hist = s.taps - 1;
  for (int64_t i = 0; i < hist; ++i) {
    const int64_t src = s.n_tokens - hist + i;
    for (int64_t c = 0; c < kC; ++c) {
      const float want = src >= 0 ? s.input(src, c) : 0.0f;
      ASSERT_EQ(history[i * kC + c], want) << "history slot " << i << " channel " << c;
    }
  }
}

TEST(ShortConvTest, WholeRunMatchesDouble) {
  std::mt19937_64 rng(401);
  const auto s = MakeSequence(rng, kConvTaps, 11);
  std::vector<float> history;
  const auto out = Unpad(RunPieces(s, {11}, &history), 11);
  const auto ref = Reference(s);
  EXPECT_TRUE(AllClose(out, ref.out, 1e-6, 0.0, &ref.tol));
  ExpectHistory(s, history);
}

// Zeros at sequence start: token 0 sees only tap 3, token 1 taps 2..3, token 2 taps 1..3.
TEST(ShortConvTest, ZerosAtSequenceStart) {
  std::mt19937_64 rng(402);
  const auto s = MakeSequence(rng, kConvTaps, 3);
  std::vector<float> history;
  const auto out = Unpad(RunPieces(s, {3}, &history), 3);
  for (int64_t c = 0; c < kC; c += 97) {
    const float* w = &s.weight[c * 4];
    const double a0 = static_cast<double>(w[3]) * s.input(0, c);
    const double a1 = static_cast<double>(w[2]) * s.input(0, c) + static_cast<double>(w[3]) * s.input(1, c);
    const double a2 = static_cast<double>(w[1]) * s.input(0, c) + static_cast<double>(w[2]) * s.input(1, c) +
                      static_cast<double>(w[3]) * s.input(2, c);
    EXPECT_NEAR(out[0 * kC + c], a0 * SigmoidD(a0), 1e-5 * (1 + std::fabs(a0))) << c;
    EXPECT_NEAR(out[1 * kC + c], a1 * SigmoidD(a1), 1e-5 * (1 + std::fabs(a1))) << c;
    EXPECT_NEAR(out[2 * kC + c], a2 * SigmoidD(a2), 1e-5 * (1 + std::fabs(a2))) << c;
  }
}

// History carried across calls: the run split in pieces (including pieces shorter than the
// 3-token history, and single-token decode steps) equals the whole run, bit for bit.
TEST(ShortConvTest, SplitRunEqualsWholeRun) {
  std::mt19937_64 rng(403);
  const auto s = MakeSequence(rng, kConvTaps, 13);
  std::vector<float> h_whole, h_split, h_decode;
  const auto whole = Unpad(RunPieces(s, {13}, &h_whole), 13);
  const auto split = Unpad(RunPieces(s, {2, 1, 5, 1, 4}, &h_split), 13);
  const auto decode = Unpad(RunPieces(s, std::vector<int64_t>(13, 1), &h_decode), 13);
  EXPECT_TRUE(BitEqual(split.data(), whole.data(), 13 * kC));
  EXPECT_TRUE(BitEqual(decode.data(), whole.data(), 13 * kC));
  EXPECT_TRUE(BitEqual(h_split.data(), h_whole.data(), 3 * kC));
  EXPECT_TRUE(BitEqual(h_decode.data(), h_whole.data(), 3 * kC));
  const auto ref = Reference(s);
  EXPECT_TRUE(AllClose(split, ref.out, 1e-6, 0.0, &ref.tol));
  ExpectHistory(s, h_split);
}

// A run shorter than the history keeps older history entries (shifted) and zeros.
TEST(ShortConvTest, ShortRunsShiftHistory) {
  std::mt19937_64 rng(404);
  const auto s = MakeSequence(rng, kConvTaps, 2);
  std::vector<float> history;
  const auto out = Unpad(RunPieces(s, {2}, &history), 2);
  ExpectHistory(s, history);  // [0, p0, p1]
  const auto ref = Reference(s);
  EXPECT_TRUE(AllClose(out, ref.out, 1e-6, 0.0, &ref.tol));
}

// Other tap counts the kernel accepts: 1 (no history), 2, 16 (kMaxShortConvTaps).
TEST(ShortConvTest, OtherTapCounts) {
  std::mt19937_64 rng(405);
  for (int64_t taps : {int64_t{1}, int64_t{2}, kMaxShortConvTaps}) {
    SCOPED_TRACE(taps);
    const int64_t T = 21;
    const auto s = MakeSequence(rng, taps, T);
    std::vector<float> h_whole, h_split;
    const auto whole = Unpad(RunPieces(s, {T}, &h_whole), T);
    const auto split = Unpad(RunPieces(s, {7, 1, 1, 12}, &h_split), T);
    const auto ref = Reference(s);
    EXPECT_TRUE(AllClose(whole, ref.out, 1e-6, 0.0, &ref.tol));
    EXPECT_TRUE(BitEqual(split.data(), whole.data(), T * kC));
    if (taps > 1) ExpectHistory(s, h_split);
  }
}

}  // namespace
}  // namespace k3::cpu
