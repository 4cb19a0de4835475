// RMS and L2 normalization of one vector (the CPU reference the GPU kernels are checked against).
#pragma once

#include <cstdint>

namespace k3::cpu {

// y = x / sqrt(mean(x^2) + eps) (* w when w is not null). y may alias x.
void RmsNorm(const float* x, const float* w, float eps, int64_t n, float* y);

// Σ_d rms(x)[d] * w[d]: the score of the cross-layer residual mix, without materializing rms(x).
float RmsNormDot(const float* x, const float* w, float eps, int64_t n);

// y = x / max(||x||_2, eps). y may alias x.
void L2Norm(const float* x, float eps, int64_t n, float* y);

}  // namespace k3::cpu
