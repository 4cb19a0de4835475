#include "kernels/cuda/residual_mix/residual_mix.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kSplit = 256;  // columns per block: one per thread (28 blocks for a 7168 row, not 7)
// From this many tokens on (prefill chunks) a block takes a whole row instead: the tokens alone
// fill the GPU, and 256-column blocks spent their time starting, reducing and re-deriving the
// softmax (H200, 4096 x 7168, one checkpoint: 392 + 747 us per mix, ~7x its bytes at 4.4 TB/s).
constexpr int64_t kRowBlockMinTokens = 512;
constexpr int kVecs = kResidualMixMaxCheckpoints + 1;

struct MixArgs {
  const float* vec[kVecs];  // checkpoints then x
  int n_vec;
  int64_t bank_stride, x_stride, out_stride, n, split, n_splits;  // split: columns per block
  const float* w;
  float* out;
  float eps;
  float* ws;  // [n_tokens][n_splits][kVecs][2]: (sum of squares, dot with w)
};

__device__ __forceinline__ const float* Row(const MixArgs& a, int v, int64_t t) {
  return a.vec[v] + t * (v == a.n_vec - 1 ? a.x_stride : a.bank_stride);
}

__global__ void __launch_bounds__(kThreads) PartialKernel(const MixArgs a) {
  PdlEnter();
  __shared__ float red[kThreads / 32][2 * kVecs];
  const int64_t t = blockIdx.y, split = blockIdx.x;
  const int64_t lo = split * a.split, hi = min(a.n, lo + a.split);
  float ss[kVecs], dot[kVecs];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    ss[v] = 0.0f;
    dot[v] = 0.0f;
  }
  for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
    const float wi = a.w[i];
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      if (v < a.n_vec) {
        const float c = Row(a, v, t)[i];
        ss[v] = fmaf(c, c, ss[v]);
        dot[v] = fmaf(c, wi, dot[v]);
      }
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    if (v < a.n_vec) {
      const float s1 = detail::WarpSum(ss[v]), s2 = detail::WarpSum(dot[v]);
      if (lane == 0) {
        red[warp][2 * v] = s1;
        red[warp][2 * v + 1] = s2;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < 2 * a.n_vec) {
    float s = 0.0f;
    for (int k = 0; k < kThreads / 32; ++k) s += red[k][threadIdx.x];
    a.ws[((t * a.n_splits + split) * kVecs) * 2 + threadIdx.x] = s;
  }
}

__global__ void __launch_bounds__(kThreads) BlendKernel(const MixArgs a) {
  PdlEnter();
  __shared__ float p[kVecs];
  const int64_t t = blockIdx.y, split = blockIdx.x;
  // The splits' partial sums of vector v, summed by warp v % 8: lane j takes splits j, j + 32, ...,
  // then the butterfly (a fixed order). One thread walking the 28 splits of a 7168 row waited on
  // 28 dependent L2 loads: 6.5 us per mix on an H200.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int v = warp; v < a.n_vec; v += kThreads / 32) {
    float ss = 0.0f, dot = 0.0f;
    for (int64_t s = lane; s < a.n_splits; s += 32) {
      const float2 q = *reinterpret_cast<const float2*>(a.ws + ((t * a.n_splits + s) * kVecs + v) * 2);
      ss += q.x;
      dot += q.y;
    }
    ss = detail::WarpSum(ss);
    dot = detail::WarpSum(dot);
    if (lane == 0) p[v] = dot * rsqrtf(ss / static_cast<float>(a.n) + a.eps);
  }
  __syncthreads();
  // softmax over the n_vec scores, as the CPU does it (f32, max-shifted)
  float prob[kVecs];
  float mx = p[0];
  for (int v = 1; v < a.n_vec; ++v) mx = fmaxf(mx, p[v]);
  float sum = 0.0f;
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    prob[v] = v < a.n_vec ? expf(p[v] - mx) : 0.0f;
    sum += prob[v];
  }
#pragma unroll
  for (int v = 0; v < kVecs; ++v) prob[v] /= sum;
  const int last = a.n_vec - 1;
  const int64_t lo = split * a.split, hi = min(a.n, lo + a.split);
  for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
    float acc = prob[last] * Row(a, last, t)[i];
#pragma unroll
    for (int v = 0; v < kVecs - 1; ++v) {
      if (v < last) acc = fmaf(prob[v], Row(a, v, t)[i], acc);
    }
    a.out[t * a.out_stride + i] = acc;
  }
}

}  // namespace

int64_t ResidualMixWorkspaceFloats(int64_t n_tokens, int64_t n) {
  return n_tokens * detail::CeilDiv(n, kSplit) * kVecs * 2;
}

cudaError_t ResidualMix(const ResidualMixParams& p, cudaStream_t stream) {
  if (p.n_tokens < 0 || p.n < 1 || p.n_ckpt < 0 || p.n_ckpt > kResidualMixMaxCheckpoints) return cudaErrorInvalidValue;
  if (p.x == nullptr || p.out == nullptr || p.x_stride < p.n || p.out_stride < p.n) return cudaErrorInvalidValue;
  if (p.n_tokens == 0) return cudaSuccess;
  if (p.n_tokens > 65535) return cudaErrorInvalidValue;
  if (p.n_ckpt == 0) {
    if (p.out != p.x) {
      K3_CUDA_CHECK(cudaMemcpy2DAsync(p.out, p.out_stride * sizeof(float), p.x, p.x_stride * sizeof(float),
                                      p.n * sizeof(float), p.n_tokens, cudaMemcpyDeviceToDevice, stream));
    }
    return cudaSuccess;
  }
  if (p.w == nullptr || p.workspace == nullptr || p.bank_stride < p.n) return cudaErrorInvalidValue;
  MixArgs a{};
  for (int i = 0; i < p.n_ckpt; ++i) {
    if (p.bank[i] == nullptr) return cudaErrorInvalidValue;
    a.vec[i] = p.bank[i];
  }
  a.vec[p.n_ckpt] = p.x;
  a.n_vec = p.n_ckpt + 1;
  a.bank_stride = p.bank_stride;
  a.x_stride = p.x_stride;
  a.out_stride = p.out_stride;
  a.n = p.n;
  a.split = p.n_tokens >= kRowBlockMinTokens ? p.n : kSplit;
  a.n_splits = detail::CeilDiv(p.n, a.split);
  a.w = p.w;
  a.out = p.out;
  a.eps = p.eps;
  a.ws = p.workspace;
  const dim3 grid(static_cast<unsigned>(a.n_splits), static_cast<unsigned>(p.n_tokens));
  K3_CUDA_CHECK(LaunchKernel(PartialKernel, grid, kThreads, 0, stream, a));
  K3_CUDA_CHECK(LaunchKernel(BlendKernel, grid, kThreads, 0, stream, a));
  return cudaSuccess;
}

}  // namespace k3::cuda
