// Sigmoid, Silu, Softplus and K3's situ (spec 4.3) against double-precision references:
//   situ(g, u) = beta*tanh(g/beta)*sigmoid(g) * lambda*tanh(u/lambda); lambda <= 0 leaves u.
// The kernels evaluate exp/tanh in f32, a few ulp each: tolerance 2e-6 relative per element.
#include "kernels/cpu/activation.h"

#include <cmath>
#include <iterator>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace k3::cpu {
namespace {

using namespace k3::cpu::testing;

constexpr double kBeta = 4.0;     // activation.situ_beta
constexpr double kLambda = 25.0;  // activation.situ_linear_beta
constexpr double kRtol = 2e-6;
constexpr double kAtol = 1e-30;   // lets values that underflow in f32 compare to ~0

double RefSitu(double g, double u, double beta, double lambda) {
  const double a = beta * std::tanh(g / beta) * SigmoidD(g);
  const double b = lambda > 0 ? lambda * std::tanh(u / lambda) : u;
  return a * b;
}

// Inputs spread over the interesting range plus saturating extremes.
std::vector<float> Spread(std::mt19937_64& rng, int64_t n, double sd) {
  auto v = Normal(rng, n, 0.0, sd);
  const float edges[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 80.0f, -80.0f, 1e3f, -1e3f, 1e30f, -1e30f};
  for (size_t i = 0; i < std::size(edges) && i < v.size(); ++i) v[i * 7] = edges[i];
  return v;
}

TEST(ActivationTest, SigmoidSiluSoftplus) {
  std::mt19937_64 rng(201);
  auto x = Normal(rng, 20000, 0.0, 8.0);
  for (float e : {0.0f, 20.0f, 20.5f, 19.5f, -20.0f, 60.0f, -60.0f, 80.0f, -80.0f}) x.push_back(e);
  for (float v : x) {
    const double s = SigmoidD(v);
    EXPECT_NEAR(Sigmoid(v), s, kRtol * s + kAtol) << v;
    EXPECT_NEAR(Silu(v), v * s, kRtol * std::fabs(v * s) + kAtol) << v;
    if (v > -60.0f) {  // below that exp(x) is denormal in f32
      const double sp = std::log1p(std::exp(static_cast<double>(v)));
      EXPECT_NEAR(Softplus(v), sp, kRtol * sp + kAtol) << v;
    }
  }
  // Far tails: no NaN, the right limits.
  EXPECT_EQ(Sigmoid(-1e4f), 0.0f);
  EXPECT_EQ(Sigmoid(1e4f), 1.0f);
  EXPECT_EQ(Silu(-1e4f), -0.0f);
  EXPECT_EQ(Silu(1e4f), 1e4f);
  EXPECT_EQ(Softplus(1e4f), 1e4f);
  EXPECT_EQ(Softplus(-1e4f), 0.0f);
}

// A dense-FFN row (33792) and an expert row (3072), K3's betas.
TEST(ActivationTest, SituRowMatchesDouble) {
  std::mt19937_64 rng(202);
  for (int64_t n : {int64_t{33792}, int64_t{3072}}) {
    const auto g = Spread(rng, n, 6.0);
    const auto u = Spread(rng, n, 40.0);  // |u| up to ~150: well into lambda's saturation
    auto out = Poisoned(n);
    SituRow(g.data(), u.data(), kBeta, kLambda, n, out.data());
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = RefSitu(g[i], u[i], kBeta, kLambda);
    EXPECT_TRUE(AllClose(out, ref, kRtol, kAtol)) << n;
  }
}

// lambda <= 0 leaves u unchanged (no tanh clamp); lambda = 0 must not divide by zero.
TEST(ActivationTest, SituNonPositiveLambdaPassesUThrough) {
  std::mt19937_64 rng(203);
  const int64_t n = 6144;  // shared-expert width
  const auto g = Spread(rng, n, 6.0);
  const auto u = Normal(rng, n, 0.0, 100.0);
  for (float lambda : {0.0f, -1.0f, -25.0f}) {
    auto out = Poisoned(n);
    SituRow(g.data(), u.data(), kBeta, lambda, n, out.data());
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) {
      ref[i] = kBeta * std::tanh(g[i] / kBeta) * SigmoidD(g[i]) * static_cast<double>(u[i]);
    }
    EXPECT_TRUE(AllClose(out, ref, kRtol, kAtol)) << "lambda " << lambda;
  }
  // And lambda > 0 really clamps: |situ| <= beta * 1 * lambda.
  auto out = Poisoned(n);
  SituRow(g.data(), u.data(), kBeta, kLambda, n, out.data());
  for (float v : out) ASSERT_LE(std::fabs(v), kBeta * kLambda);
}

// out may alias g or u.
TEST(ActivationTest, SituRowInPlace) {
  std::mt19937_64 rng(204);
  const int64_t n = 3072;
  const auto g = Normal(rng, n, 0.0, 5.0);
  const auto u = Normal(rng, n, 0.0, 30.0);
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = RefSitu(g[i], u[i], kBeta, kLambda);
  auto gg = g;
  SituRow(gg.data(), u.data(), kBeta, kLambda, n, gg.data());
  EXPECT_TRUE(AllClose(gg, ref, kRtol, kAtol)) << "out == g";
  auto uu = u;
  SituRow(g.data(), uu.data(), kBeta, kLambda, n, uu.data());
  EXPECT_TRUE(AllClose(uu, ref, kRtol, kAtol)) << "out == u";
}

}  // namespace
}  // namespace k3::cpu
