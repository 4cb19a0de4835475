#include "kernels/cuda/short_conv/short_conv.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMax = static_cast<int>(kShortConvMaxTaps);

// One thread per (sequence, channel): the window of the last taps-1 inputs lives in registers
// (constant indices only: every loop is unrolled to kMax and guarded by `taps`).
__global__ void __launch_bounds__(kThreads) ShortConvKernel(const ShortConvParams p) {
  PdlEnter();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t s = blockIdx.y;
  if (c >= p.channels) return;
  const int taps = static_cast<int>(p.taps), hist = taps - 1;
  const int64_t slot = p.slots != nullptr ? static_cast<int64_t>(p.slots[s]) : s;
  float* h = p.history + slot * p.history_slot_stride;
  float w[kMax], win[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    w[j] = j < taps ? p.weight[c * taps + j] : 0.0f;
    win[j] = j < hist ? h[j * p.channels + c] : 0.0f;
  }
  // w[taps-1] (the current token's tap), selected with constant indices
  float wl = 0.0f;
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (j == taps - 1) wl = w[j];
  }
  const int64_t row0 = s * p.n_tokens;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const float cur = p.in[(row0 + t) * p.in_stride + c];
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kMax - 1; ++j) {
      if (j < hist) acc = fmaf(w[j], win[j], acc);
    }
    acc = fmaf(wl, cur, acc);
    p.out[(row0 + t) * p.out_stride + c] = acc * detail::SigmoidF(acc);
    // shift the window: oldest out, cur in at position hist-1
#pragma unroll
    for (int j = 0; j < kMax - 1; ++j) {
      if (j < hist - 1) win[j] = win[j + 1];
      else if (j == hist - 1) win[j] = cur;
    }
  }
#pragma unroll
  for (int j = 0; j < kMax - 1; ++j) {
    if (j < hist) h[j * p.channels + c] = win[j];
  }
}

}  // namespace

cudaError_t ShortConvSilu(const ShortConvParams& p, cudaStream_t stream) {
  if (p.taps < 1 || p.taps > kShortConvMaxTaps || p.channels < 0 || p.n_seqs < 0 || p.n_tokens < 0) {
    return cudaErrorInvalidValue;
  }
  if (p.channels == 0 || p.n_seqs == 0 || p.n_tokens == 0) return cudaSuccess;
  if (p.weight == nullptr || p.in == nullptr || p.out == nullptr || (p.taps > 1 && p.history == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (p.in_stride < p.channels || p.out_stride < p.channels || p.n_seqs > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(detail::CeilDiv(p.channels, kThreads)), static_cast<unsigned>(p.n_seqs));
  K3_CUDA_CHECK(LaunchKernel(ShortConvKernel, grid, kThreads, 0, stream, p));
  return cudaSuccess;
}

}  // namespace k3::cuda
