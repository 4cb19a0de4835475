// ResidualMix (spec 4.1, "attn_res") against a double-precision reference:
//   s(c) = Σ_d rms(c)[d]·w[d] (rms without weight), p = softmax([s(c_0) .. s(c_n-1), s(x)]),
//   out = Σ p_i·c_i + p_last·x  — scores from normalized values, the sum from raw ones.
// Real width 7168, 0..8 checkpoints (ceil(93/12) = 8). The kernel's softmax and 9-term sums are
// f32: tolerance 1e-5 relative to Σ p_i·|c_i[d]| per element.
#include "kernels/cpu/residual_mix.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace k3::cpu {
namespace {

using namespace k3::cpu::testing;

constexpr double kRtol = 1e-5;

double RefScore(const std::vector<float>& c, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (float v : c) ss += static_cast<double>(v) * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(c.size()) + eps);
  double s = 0;
  for (size_t d = 0; d < c.size(); ++d) s += (c[d] * inv) * w[d];
  return s;
}

// Softmax weights over [bank..., x].
std::vector<double> RefWeights(const std::vector<std::vector<float>>& bank, const std::vector<float>& x,
                               const std::vector<float>& w, double eps) {
  std::vector<double> s;
  for (const auto& c : bank) s.push_back(RefScore(c, w, eps));
  s.push_back(RefScore(x, w, eps));
  const double mx = *std::max_element(s.begin(), s.end());
  double sum = 0;
  for (double& v : s) sum += (v = std::exp(v - mx));
  for (double& v : s) v /= sum;
  return s;
}

struct RefMix {
  std::vector<double> out;
  std::vector<double> scale;  // Σ p_i |c_i[d]|: what f32 rounding is relative to
};

RefMix Mix(const std::vector<std::vector<float>>& bank, const std::vector<float>& x,
           const std::vector<float>& w, double eps) {
  const size_t n = x.size();
  RefMix r{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  if (bank.empty()) {
    for (size_t d = 0; d < n; ++d) r.out[d] = x[d];
    return r;
  }
  const auto p = RefWeights(bank, x, w, eps);
  for (size_t d = 0; d < n; ++d) {
    for (size_t i = 0; i < bank.size(); ++i) {
      r.out[d] += p[i] * bank[i][d];
      r.scale[d] += p[i] * std::fabs(bank[i][d]);
    }
    r.out[d] += p.back() * x[d];
    r.scale[d] += p.back() * std::fabs(x[d]);
  }
  for (double& s : r.scale) s *= kRtol;
  return r;
}

std::vector<float> RunMix(const std::vector<std::vector<float>>& bank, const std::vector<float>& x,
                          const std::vector<float>& w) {
  std::vector<const float*> rows;
  for (const auto& c : bank) rows.push_back(c.data());
  auto out = Poisoned(static_cast<int64_t>(x.size()));
  ResidualMix(rows.data(), static_cast<int>(rows.size()), x.data(), w.data(), kRmsEps,
              static_cast<int64_t>(x.size()), out.data());
  return out;
}

// Score weights scaled so the scores are O(1) and the softmax is far from one-hot.
std::vector<float> ScoreWeights(std::mt19937_64& rng, double spread) {
  return Normal(rng, kHidden, 0.0, spread / std::sqrt(static_cast<double>(kHidden)));
}

// Checkpoints of different magnitudes and means, like layer inputs at different depths.
std::vector<std::vector<float>> Bank(std::mt19937_64& rng, int n) {
  std::vector<std::vector<float>> bank;
  for (int i = 0; i < n; ++i) bank.push_back(Normal(rng, kHidden, 0.05 * i, 0.5 + i));
  return bank;
}

TEST(ResidualMixTest, NoCheckpointsCopies) {
  std::mt19937_64 rng(301);
  const auto x = Normal(rng, kHidden);
  const auto w = ScoreWeights(rng, 2.0);
  auto out = Poisoned(kHidden);
  ResidualMix(nullptr, 0, x.data(), w.data(), kRmsEps, kHidden, out.data());
  EXPECT_TRUE(BitEqual(out.data(), x.data(), kHidden));
  auto y = x;  // aliased: unchanged
  ResidualMix(nullptr, 0, y.data(), w.data(), kRmsEps, kHidden, y.data());
  EXPECT_TRUE(BitEqual(y.data(), x.data(), kHidden));
}

TEST(ResidualMixTest, OneToEightCheckpointsMatchDouble) {
  std::mt19937_64 rng(302);
  for (int n_ckpt = 1; n_ckpt <= 8; ++n_ckpt) {
    SCOPED_TRACE(n_ckpt);
    const auto bank = Bank(rng, n_ckpt);
    const auto x = Normal(rng, kHidden, -0.02, 3.0);
    const auto w = ScoreWeights(rng, 2.0);
    const auto ref = Mix(bank, x, w, kRmsEps);
    EXPECT_TRUE(AllClose(RunMix(bank, x, w), ref.out, kRtol, 0.0, &ref.scale));
    // The reference is not degenerate: no single weight above 0.95.
    const auto p = RefWeights(bank, x, w, kRmsEps);
    EXPECT_LT(*std::max_element(p.begin(), p.end()), 0.95);
  }
}

// Large score weights: scores in the hundreds, softmax near one-hot, still no overflow.
TEST(ResidualMixTest, LargeScoresStable) {
  std::mt19937_64 rng(303);
  const auto bank = Bank(rng, 5);
  const auto x = Normal(rng, kHidden);
  const auto w = Normal(rng, kHidden, 0.0, 1.0);  // scores ~ N(0, 7168)
  const auto ref = Mix(bank, x, w, kRmsEps);
  EXPECT_TRUE(AllClose(RunMix(bank, x, w), ref.out, kRtol, 0.0, &ref.scale));
}

// Scaling a checkpoint by 1000 leaves its score (and so every p) unchanged but multiplies its
// contribution: out' = out + 999·p_j·c_j.
TEST(ResidualMixTest, ScoresUseNormalizedValuesSumUsesRaw) {
  std::mt19937_64 rng(304);
  // mean(c^2) >= 4 >> eps, so rms(c) and rms(1000·c) agree to ~1e-6 (eps/(2·mean(c^2))).
  std::vector<std::vector<float>> bank;
  for (int i = 0; i < 4; ++i) bank.push_back(Normal(rng, kHidden, 0.1 * i, 2.0 + i));
  const auto x = Normal(rng, kHidden, 0.0, 2.0);
  const auto w = ScoreWeights(rng, 2.0);
  const auto p = RefWeights(bank, x, w, kRmsEps);
  // Scale the checkpoint with the most weight, so the test is sensitive to its contribution.
  const int j = static_cast<int>(std::max_element(p.begin(), p.end() - 1) - p.begin());
  const auto before = RunMix(bank, x, w);

  for (float& v : bank[j]) v *= 1000.0f;
  const auto p_scaled = RefWeights(bank, x, w, kRmsEps);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p_scaled[i], p[i], 1e-5 * p[i]);  // scores unchanged
  const auto after = RunMix(bank, x, w);
  const auto ref = Mix(bank, x, w, kRmsEps);
  EXPECT_TRUE(AllClose(after, ref.out, kRtol, 0.0, &ref.scale));

  // The difference is exactly the extra raw contribution of the scaled checkpoint.
  std::vector<double> diff_ref(kHidden), diff_tol(kHidden);
  std::vector<float> diff(kHidden);
  for (int64_t d = 0; d < kHidden; ++d) {
    diff[d] = after[d] - before[d];
    diff_ref[d] = p[j] * (bank[j][d] - bank[j][d] / 1000.0);
    diff_tol[d] = ref.scale[d] * 2;
  }
  EXPECT_TRUE(AllClose(diff, diff_ref, kRtol, 0.0, &diff_tol));
  // The test is only sensitive if checkpoint j carries real weight.
  EXPECT_GT(p[j], 0.05);
}

// out may alias x (the engine mixes in place).
TEST(ResidualMixTest, InPlaceOverX) {
  std::mt19937_64 rng(305);
  const auto bank = Bank(rng, 3);
  const auto x = Normal(rng, kHidden);
  const auto w = ScoreWeights(rng, 2.0);
  const auto ref = Mix(bank, x, w, kRmsEps);
  std::vector<const float*> rows;
  for (const auto& c : bank) rows.push_back(c.data());
  auto y = x;
  ResidualMix(rows.data(), 3, y.data(), w.data(), kRmsEps, kHidden, y.data());
  EXPECT_TRUE(AllClose(y, ref.out, kRtol, 0.0, &ref.scale));
}

// Same value in the bank and as x: equal scores; and a zero checkpoint (score 0, no NaN).
TEST(ResidualMixTest, DuplicateAndZeroCheckpoints) {
  std::mt19937_64 rng(306);
  const auto x = Normal(rng, kHidden);
  const auto w = ScoreWeights(rng, 2.0);
  std::vector<std::vector<float>> bank = {x, std::vector<float>(kHidden, 0.0f)};
  const auto ref = Mix(bank, x, w, kRmsEps);
  EXPECT_TRUE(AllClose(RunMix(bank, x, w), ref.out, kRtol, 0.0, &ref.scale));
}

}  // namespace
}  // namespace k3::cpu
