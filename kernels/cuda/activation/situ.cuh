// The FFN activation situ(g, u) as one device function (spec 4.3), shared by the element-wise
// kernel (activation.cu) and the kernels that apply it to their own outputs (the fused gate|up
// expert GEMV, gemv_iq1s_rows.cu), so both give the same bits.
#pragma once

#include "kernels/cuda/common.cuh"

namespace k3::cuda::detail {

// beta·tanh(g/beta)·sigmoid(g) · (lambda > 0 ? lambda·tanh(u/lambda) : u); accurate tanhf/expf
// (the CPU reference uses libm).
__device__ __forceinline__ float SituValue(float g, float u, float beta, float lambda) {
  const float a = beta * tanhf(g / beta) * SigmoidF(g);
  const float b = lambda > 0.0f ? lambda * tanhf(u / lambda) : u;
  return a * b;
}

}  // namespace k3::cuda::detail
