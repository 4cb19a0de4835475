#include "kernels/cuda/activation/activation.h"

#include "kernels/cuda/activation/situ.cuh"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

using detail::SigmoidF;

constexpr int kThreads = 256;

// Grid: (column blocks, min(rows, kMaxGridRows)), rows strided by gridDim.y (a prefill chunk of
// 4096 tokens has 65536 expert rows, past the grid's y limit).
constexpr int64_t kMaxGridRows = 65535;

__global__ void SituKernel(const SituParams p) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= p.width) return;
  for (int64_t t = blockIdx.y; t < p.n_tokens; t += gridDim.y) {
    p.out[t * p.out_stride + i] = detail::SituValue(p.g[t * p.g_stride + i], p.u[t * p.u_stride + i], p.beta, p.lambda);
  }
}

__global__ void GateMulKernel(const SigmoidGateMulParams p) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= p.width) return;
  for (int64_t t = blockIdx.y; t < p.n_tokens; t += gridDim.y) {
    p.x[t * p.x_stride + i] *= SigmoidF(p.gate[t * p.gate_stride + i]);
  }
}

__global__ void SigmoidKernel(const float* x, float* y, int64_t n) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) y[i] = SigmoidF(x[i]);
}

bool GridOk(int64_t width) { return detail::CeilDiv(width, kThreads) <= 0x7fffffff; }

dim3 RowGrid(int64_t width, int64_t rows) {
  return dim3(static_cast<unsigned>(detail::CeilDiv(width, kThreads)),
              static_cast<unsigned>(rows < kMaxGridRows ? rows : kMaxGridRows));
}

}  // namespace

cudaError_t Situ(const SituParams& p, cudaStream_t stream) {
  if (p.n_tokens < 0 || p.width < 0 || !GridOk(p.width)) return cudaErrorInvalidValue;
  if (p.n_tokens == 0 || p.width == 0) return cudaSuccess;
  if (p.g == nullptr || p.u == nullptr || p.out == nullptr || p.beta == 0.0f) return cudaErrorInvalidValue;
  K3_CUDA_CHECK(LaunchKernel(SituKernel, RowGrid(p.width, p.n_tokens), kThreads, 0, stream, p));
  return cudaSuccess;
}

cudaError_t SigmoidGateMul(const SigmoidGateMulParams& p, cudaStream_t stream) {
  if (p.n_tokens < 0 || p.width < 0 || !GridOk(p.width)) return cudaErrorInvalidValue;
  if (p.n_tokens == 0 || p.width == 0) return cudaSuccess;
  if (p.x == nullptr || p.gate == nullptr) return cudaErrorInvalidValue;
  K3_CUDA_CHECK(LaunchKernel(GateMulKernel, RowGrid(p.width, p.n_tokens), kThreads, 0, stream, p));
  return cudaSuccess;
}

cudaError_t Sigmoid(const SigmoidParams& p, cudaStream_t stream) {
  if (p.n < 0 || !GridOk(p.n)) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  if (p.x == nullptr || p.y == nullptr) return cudaErrorInvalidValue;
  K3_CUDA_CHECK(LaunchKernel(SigmoidKernel, static_cast<unsigned>(detail::CeilDiv(p.n, kThreads)), kThreads, 0, stream,
                             p.x, p.y, p.n));
  return cudaSuccess;
}

}  // namespace k3::cuda
