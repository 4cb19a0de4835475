#include "kernels/cuda/norm/norm.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

using detail::SigmoidF;
using detail::WarpSum;

struct NormArgs {
  const float* x;
  float* y;
  const float* w;
  const float* gate;
  int64_t n_tokens, n_groups, width, x_stride, y_stride, gate_stride;
  float eps;
  int kind;
};

__device__ __forceinline__ float Scale(float ss, const NormArgs& a) {
  if (a.kind == static_cast<int>(NormKind::kRms)) return rsqrtf(ss / static_cast<float>(a.width) + a.eps);
  return 1.0f / fmaxf(sqrtf(ss), a.eps);
}

__device__ __forceinline__ float Finish(float v, float scale, int64_t i, const float* gate_row, const NormArgs& a) {
  float r = v * scale;
  if (a.w != nullptr) r *= a.w[i];
  if (gate_row != nullptr) r *= SigmoidF(gate_row[i]);
  return r;
}

// One warp per group (width <= 1024): the group's values stay in registers between the two passes.
template <int kPerLane>
__global__ void __launch_bounds__(256) NormWarpKernel(const NormArgs a) {
  PdlEnter();
  const int lane = threadIdx.x & 31;
  const int64_t group = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  if (group >= a.n_tokens * a.n_groups) return;
  const int64_t t = group / a.n_groups, g = group - t * a.n_groups;
  const float* x = a.x + t * a.x_stride + g * a.width;
  float* y = a.y + t * a.y_stride + g * a.width;
  const float* gate = a.gate != nullptr ? a.gate + t * a.gate_stride + g * a.width : nullptr;
  float v[kPerLane];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t i = lane + 32 * k;
    v[k] = i < a.width ? x[i] : 0.0f;
    ss = fmaf(v[k], v[k], ss);
  }
  const float scale = Scale(WarpSum(ss), a);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t i = lane + 32 * k;
    if (i < a.width) y[i] = Finish(v[k], scale, i, gate, a);
  }
}

// One block per group (wide rows such as the 7168 hidden state). Thread j sums elements j,
// j + blockDim, ... in that order. Up to kBlockPer elements per thread are kept in registers, their
// loads all issued before the first use (a loop of dependent loads costs one memory latency per
// element: a 7168 row took ~8.6 us, for 28 KB); wider rows are read twice.
constexpr int kBlockPer = 8;

__global__ void __launch_bounds__(1024) NormBlockKernel(const NormArgs a) {
  PdlEnter();
  __shared__ float scratch[32];
  const int64_t group = blockIdx.x;
  const int64_t t = group / a.n_groups, g = group - t * a.n_groups;
  const float* x = a.x + t * a.x_stride + g * a.width;
  float* y = a.y + t * a.y_stride + g * a.width;
  const float* gate = a.gate != nullptr ? a.gate + t * a.gate_stride + g * a.width : nullptr;
  const int64_t step = blockDim.x;
  if (a.width <= kBlockPer * step) {
    float v[kBlockPer];
#pragma unroll
    for (int k = 0; k < kBlockPer; ++k) {
      const int64_t i = threadIdx.x + k * step;
      v[k] = i < a.width ? x[i] : 0.0f;
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kBlockPer; ++k) {
      if (threadIdx.x + k * step < a.width) ss = fmaf(v[k], v[k], ss);
    }
    const float scale = Scale(detail::BlockSum(ss, scratch), a);
#pragma unroll
    for (int k = 0; k < kBlockPer; ++k) {
      const int64_t i = threadIdx.x + k * step;
      if (i < a.width) y[i] = Finish(v[k], scale, i, gate, a);
    }
    return;
  }
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < a.width; i += step) ss = fmaf(x[i], x[i], ss);
  const float scale = Scale(detail::BlockSum(ss, scratch), a);
  // Every read of x above happened before the barrier inside BlockSum: writing y (which may be x)
  // is safe now.
  for (int64_t i = threadIdx.x; i < a.width; i += step) y[i] = Finish(x[i], scale, i, gate, a);
}

}  // namespace

cudaError_t RowNorm(const RowNormParams& p, cudaStream_t stream) {
  if (p.n_tokens < 0 || p.n_groups < 1 || p.width < 1 || p.x == nullptr || p.y == nullptr) return cudaErrorInvalidValue;
  if (p.x_stride < p.n_groups * p.width || p.y_stride < p.n_groups * p.width) return cudaErrorInvalidValue;
  if (p.gate != nullptr && p.gate_stride < p.n_groups * p.width) return cudaErrorInvalidValue;
  if (p.kind == NormKind::kL2 && p.weight != nullptr) return cudaErrorInvalidValue;
  const int64_t n = p.n_tokens * p.n_groups;
  if (n == 0) return cudaSuccess;
  const NormArgs a{p.x, p.y, p.weight, p.gate, p.n_tokens, p.n_groups, p.width, p.x_stride, p.y_stride,
                   p.gate_stride, p.eps, static_cast<int>(p.kind)};
  const int warp_blocks = static_cast<int>(detail::CeilDiv(n, 8));
  if (p.width <= 128) {
    K3_CUDA_CHECK(LaunchKernel(NormWarpKernel<4>, warp_blocks, 256, 0, stream, a));
  } else if (p.width <= 256) {
    K3_CUDA_CHECK(LaunchKernel(NormWarpKernel<8>, warp_blocks, 256, 0, stream, a));
  } else if (p.width <= 512) {
    K3_CUDA_CHECK(LaunchKernel(NormWarpKernel<16>, warp_blocks, 256, 0, stream, a));
  } else {
    const int threads = p.width >= 4096 ? 1024 : (p.width >= 2048 ? 512 : 256);
    if (n > 0x7fffffff) return cudaErrorInvalidValue;
    K3_CUDA_CHECK(LaunchKernel(NormBlockKernel, static_cast<unsigned>(n), threads, 0, stream, a));
  }
  K3_CUDA_CHECK(cudaGetLastError());
  return cudaSuccess;
}

}  // namespace k3::cuda
