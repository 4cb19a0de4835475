// RmsNorm, RmsNormDot and L2Norm against double-precision references written from spec 4:
//   rms(x) = x / sqrt(mean(x^2) + eps), rms_w(x, w) = rms(x) * w, l2(x) = x / max(||x||_2, eps).
// The kernel sums squares in double, so the only f32 error is a couple of final roundings:
// the tolerance is 1e-6 relative per element.
#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace k3::cpu {
namespace {

using namespace k3::cpu::testing;

std::vector<double> RefRms(const std::vector<float>& x, const float* w, double eps) {
  const int64_t n = static_cast<int64_t>(x.size());
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * (w ? static_cast<double>(w[i]) : 1.0);
  return y;
}

std::vector<double> RefL2(const std::vector<float>& x, double eps) {
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double inv = 1.0 / std::max(std::sqrt(ss), eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv;
  return y;
}

constexpr double kRtol = 1e-6;
constexpr double kAtol = 1e-37;  // only so exact zeros compare; every nonzero check is relative

// The real K3 norm widths: hidden, MLA q_a / kv_a latents, expert latent, KDA / MLA head.
const int64_t kWidths[] = {kHidden, 1536, kKvLora, 3584, kHeadDim};

TEST(RmsNormTest, WithWeightMatchesDouble) {
  std::mt19937_64 rng(101);
  for (int64_t n : kWidths) {
    SCOPED_TRACE(n);
    const auto x = Normal(rng, n, 0.3, 2.0);
    const auto w = Normal(rng, n, 1.0, 0.5);
    auto y = Poisoned(n);
    RmsNorm(x.data(), w.data(), kRmsEps, n, y.data());
    EXPECT_TRUE(AllClose(y, RefRms(x, w.data(), kRmsEps), kRtol, kAtol));
  }
}

TEST(RmsNormTest, WithoutWeightMatchesDouble) {
  std::mt19937_64 rng(102);
  for (int64_t n : kWidths) {
    SCOPED_TRACE(n);
    const auto x = Normal(rng, n, -0.1, 3.0);
    auto y = Poisoned(n);
    RmsNorm(x.data(), nullptr, kRmsEps, n, y.data());
    EXPECT_TRUE(AllClose(y, RefRms(x, nullptr, kRmsEps), kRtol, kAtol));
  }
}

TEST(RmsNormTest, InPlaceAliasing) {
  std::mt19937_64 rng(103);
  const auto x = Normal(rng, kHidden);
  const auto w = Normal(rng, kHidden, 1.0, 0.2);
  for (const float* wp : {static_cast<const float*>(nullptr), w.data()}) {
    auto y = x;
    RmsNorm(y.data(), wp, kRmsEps, kHidden, y.data());
    EXPECT_TRUE(AllClose(y, RefRms(x, wp, kRmsEps), kRtol, kAtol)) << (wp ? "weighted" : "unweighted");
  }
}

// Small values: eps dominates mean(x^2), so a kernel that drops or misplaces eps fails.
TEST(RmsNormTest, EpsMattersForSmallInputs) {
  std::mt19937_64 rng(104);
  const auto x = Normal(rng, kHidden, 0.0, 1e-3);  // mean(x^2) ~ 1e-6 << eps = 1e-5
  auto y = Poisoned(kHidden);
  RmsNorm(x.data(), nullptr, kRmsEps, kHidden, y.data());
  EXPECT_TRUE(AllClose(y, RefRms(x, nullptr, kRmsEps), kRtol, kAtol));
  // Without eps the result would be ~3.3x larger.
  EXPECT_LT(std::fabs(y[0]), 0.5 * std::fabs(x[0]) / std::sqrt(1e-6));
}

TEST(RmsNormTest, ZeroVectorGivesZeros) {
  const std::vector<float> x(kHidden, 0.0f);
  const auto w = std::vector<float>(kHidden, 2.0f);
  auto y = Poisoned(kHidden);
  RmsNorm(x.data(), w.data(), kRmsEps, kHidden, y.data());
  for (float v : y) ASSERT_EQ(v, 0.0f);
}

// Squares of 1e19 overflow f32 (1e38 * 7168); the reduction must not.
TEST(RmsNormTest, HugeValuesDoNotOverflow) {
  std::mt19937_64 rng(105);
  const auto x = Normal(rng, kHidden, 0.0, 1e19);
  auto y = Poisoned(kHidden);
  RmsNorm(x.data(), nullptr, kRmsEps, kHidden, y.data());
  EXPECT_TRUE(AllClose(y, RefRms(x, nullptr, kRmsEps), kRtol, kAtol));
}

TEST(RmsNormDotTest, MatchesDouble) {
  std::mt19937_64 rng(106);
  for (int64_t n : kWidths) {
    SCOPED_TRACE(n);
    for (int rep = 0; rep < 4; ++rep) {
      const auto x = Normal(rng, n, 0.2, 1.5);
      const auto w = Normal(rng, n, 0.0, 0.05);
      const auto r = RefRms(x, nullptr, kRmsEps);
      double dot = 0, abs_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        dot += r[i] * w[i];
        abs_sum += std::fabs(r[i] * w[i]);
      }
      const float got = RmsNormDot(x.data(), w.data(), kRmsEps, n);
      // One f32 rounding of the result, plus slack for cancellation in the sum.
      EXPECT_NEAR(got, dot, 1e-6 * std::fabs(dot) + 1e-9 * abs_sum);
    }
  }
}

TEST(RmsNormDotTest, ScaleInvariant) {
  std::mt19937_64 rng(107);
  const auto x = Normal(rng, kHidden);
  const auto w = Normal(rng, kHidden, 0.0, 0.05);
  std::vector<float> x1000(x);
  for (float& v : x1000) v *= 1000.0f;
  const float a = RmsNormDot(x.data(), w.data(), kRmsEps, kHidden);
  const float b = RmsNormDot(x1000.data(), w.data(), kRmsEps, kHidden);
  EXPECT_NEAR(a, b, 1e-5 * std::fabs(a));
}

TEST(L2NormTest, PerHeadMatchesDouble) {
  std::mt19937_64 rng(108);
  for (float eps : {1e-6f, 1e-5f}) {
    for (int64_t n : {kHeadDim, kHidden}) {
      const auto x = Normal(rng, n, 0.1, 1.0);
      auto y = Poisoned(n);
      L2Norm(x.data(), eps, n, y.data());
      EXPECT_TRUE(AllClose(y, RefL2(x, eps), kRtol, kAtol)) << n;
      double nrm = 0;
      for (float v : y) nrm += static_cast<double>(v) * v;
      EXPECT_NEAR(std::sqrt(nrm), 1.0, 1e-6);
    }
  }
}

TEST(L2NormTest, ZeroVectorHitsEpsFloor) {
  const std::vector<float> x(kHeadDim, 0.0f);
  auto y = Poisoned(kHeadDim);
  L2Norm(x.data(), 1e-6f, kHeadDim, y.data());
  for (float v : y) ASSERT_EQ(v, 0.0f);  // 0 / eps, not 0 / 0
}

// ||x|| below eps: divided by eps, not normalized to unit length.
TEST(L2NormTest, TinyVectorDividedByEps) {
  std::mt19937_64 rng(109);
  const auto x = Normal(rng, kHeadDim, 0.0, 1e-9);  // ||x|| ~ 1.1e-8 < eps
  const float eps = 1e-6f;
  auto y = Poisoned(kHeadDim);
  L2Norm(x.data(), eps, kHeadDim, y.data());
  EXPECT_TRUE(AllClose(y, RefL2(x, eps), kRtol, kAtol));
  EXPECT_NEAR(y[3], static_cast<double>(x[3]) / eps, 1e-6 * std::fabs(x[3] / eps));
}

TEST(L2NormTest, InPlaceAliasing) {
  std::mt19937_64 rng(110);
  const auto x = Normal(rng, kHeadDim);
  auto y = x;
  L2Norm(y.data(), 1e-6f, kHeadDim, y.data());
  EXPECT_TRUE(AllClose(y, RefL2(x, 1e-6), kRtol, kAtol));
}

}  // namespace
}  // namespace k3::cpu
