// Helpers shared by the CPU kernel tests: seeded random inputs, NaN poisoning, and an
// element-wise closeness check against a double-precision reference.
//
// Every reference in tests/kernels/ is written from the math of the spec, section 4
// (shared/spec/kimi-k3.md), in double, independently of the kernel's code.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace k3::cpu::testing {

// Real Kimi-K3 sizes (spec section 1).
inline constexpr int64_t kHidden = 7168;
inline constexpr int64_t kHeads = 96;
inline constexpr int64_t kHeadDim = 128;          // KDA head dim, MLA v head dim, qk nope
inline constexpr int64_t kDInner = kHeads * kHeadDim;  // 12288
inline constexpr int64_t kKvLora = 512;
inline constexpr int64_t kRope = 64;
inline constexpr int64_t kMlaRow = kKvLora + kRope;  // 576
inline constexpr int64_t kQkHeadDim = 192;           // 128 nope + 64 rope
inline constexpr int64_t kExperts = 896;
inline constexpr int64_t kTopK = 16;
inline constexpr int64_t kConvTaps = 4;
inline constexpr float kRmsEps = 1e-5f;

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline std::vector<float> Normal(std::mt19937_64& rng, int64_t n, double mean = 0.0, double sd = 1.0) {
  std::normal_distribution<double> d(mean, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

inline std::vector<float> Uniform(std::mt19937_64& rng, int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

inline std::vector<float> Poisoned(int64_t n) { return std::vector<float>(static_cast<size_t>(n), kNaN); }

inline std::vector<double> ToDouble(const float* x, int64_t n) { return std::vector<double>(x, x + n); }

// Passes when |actual[i] - expected[i]| <= atol + rtol * |expected[i]| for every i, NaN failing.
// `atol_per` (optional) gives a per-element absolute tolerance added to atol. The message names
// the worst element and the first few failures.
inline ::testing::AssertionResult AllClose(const float* actual, const double* expected, int64_t n,
                                           double rtol, double atol,
                                           const std::vector<double>* atol_per = nullptr) {
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0.0, max_abs = 0.0;
  std::ostringstream first;
  for (int64_t i = 0; i < n; ++i) {
    const double a = actual[i], e = expected[i];
    const double tol = atol + rtol * std::fabs(e) + (atol_per ? (*atol_per)[i] : 0.0);
    const double diff = std::fabs(a - e);
    if (!(diff <= tol)) {  // NaN fails here
      if (bad < 5) first << "\n  [" << i << "] got " << a << " want " << e << " (tol " << tol << ")";
      ++bad;
    }
    const double ratio = std::isnan(diff) ? std::numeric_limits<double>::infinity()
                                          : (tol > 0 ? diff / tol : (diff > 0 ? 1e300 : 0.0));
    if (ratio > worst_ratio || worst < 0) { worst_ratio = ratio; worst = i; }
    if (diff > max_abs) max_abs = diff;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " elements out of tolerance (rtol "
                                       << rtol << ", atol " << atol << "), max |diff| " << max_abs
                                       << ", worst index " << worst << first.str();
}

inline ::testing::AssertionResult AllClose(const std::vector<float>& actual,
                                           const std::vector<double>& expected, double rtol,
                                           double atol, const std::vector<double>* atol_per = nullptr) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  }
  return AllClose(actual.data(), expected.data(), static_cast<int64_t>(actual.size()), rtol, atol,
                  atol_per);
}

// Largest |x| of a double vector (for norm-relative tolerances).
inline double MaxAbs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return m;
}

// Bit-exact equality, NaN != NaN.
inline ::testing::AssertionResult BitEqual(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!(a[i] == b[i])) {
      return ::testing::AssertionFailure() << "first difference at [" << i << "]: " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Double-precision reference helpers, straight from the spec's notation.
inline double SigmoidD(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace k3::cpu::testing
