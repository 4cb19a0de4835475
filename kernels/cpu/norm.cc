#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>

namespace k3::cpu {
namespace {

// Sum of squares in double: the reference must not lose digits on 7168-wide rows.
double SumSquares(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace

void RmsNorm(const float* x, const float* w, float eps, int64_t n, float* y) {
  const float scale = static_cast<float>(1.0 / std::sqrt(SumSquares(x, n) / n + eps));
  if (w != nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

float RmsNormDot(const float* x, const float* w, float eps, int64_t n) {
  const double scale = 1.0 / std::sqrt(SumSquares(x, n) / n + eps);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * w[i];
  return static_cast<float>(s * scale);
}

void L2Norm(const float* x, float eps, int64_t n, float* y) {
  const double norm = std::sqrt(SumSquares(x, n));
  const float scale = static_cast<float>(1.0 / std::max(norm, static_cast<double>(eps)));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
}

}  // namespace k3::cpu
