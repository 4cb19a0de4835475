#include "kernels/cuda/short_conv/short_conv_decode.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps, a group each (K3 decode: 288 groups per sequence, 72 blocks)
constexpr int kPerLane = 4;    // channels lane, lane + 32, lane + 64, lane + 96 of the group

// Warp = (group, convolution, sequence). Lane j takes channels j + 32k of its group: the
// convolution per channel as ShortConvKernel computes it (taps in order, fmaf from 0, then silu),
// the history shifted after it was read, then RowNorm's warp-kernel L2 norm (Σ over k in order,
// then the butterfly; 1 / max(sqrt, eps)). kTaps > 0: the tap count fixed at compile time (K3's 4),
// so every load of the lane (weights, history, input of its 4 channels) is issued before the first
// product; kTaps = 0: any count, a loop per channel (a memory latency per tap).
template <int kTaps>
__global__ void __launch_bounds__(kThreads) ShortConvDecodeKernel(const ShortConvDecodeParams p) {
  PdlEnter();
  const int lane = threadIdx.x & 31;
  const int64_t groups = p.channels / p.group_width;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (item >= groups * 3 * p.n_seqs) return;
  const int64_t g = item % groups, rest = item / groups;
  const int w = static_cast<int>(rest % 3);
  const int64_t s = rest / 3;
  const int taps = kTaps > 0 ? kTaps : static_cast<int>(p.taps), hist = taps - 1;
  const int64_t slot = p.slots != nullptr ? static_cast<int64_t>(p.slots[s]) : s;
  // the convolution's pointers picked by selects (a dynamic index into the parameter arrays would
  // copy them to local memory)
  auto pick = [w](auto a0, auto a1, auto a2) { return w == 0 ? a0 : (w == 1 ? a1 : a2); };
  float* h = pick(p.history[0], p.history[1], p.history[2]) + slot * p.history_slot_stride;
  const float* in = pick(p.in[0], p.in[1], p.in[2]) + s * p.in_stride;
  const float* wt = pick(p.weight[0], p.weight[1], p.weight[2]);
  const bool l2 = pick(p.l2[0], p.l2[1], p.l2[2]);
  const int64_t c0 = g * p.group_width;
  float v[kPerLane];
  if constexpr (kTaps > 0) {
    float x[kPerLane][kTaps], tw[kPerLane][kTaps];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t i = lane + 32 * k, c = c0 + i;
#pragma unroll
      for (int j = 0; j < kTaps; ++j) {
        x[k][j] = i < p.group_width ? (j < hist ? h[j * p.channels + c] : in[c]) : 0.0f;
        tw[k][j] = i < p.group_width ? wt[c * kTaps + j] : 0.0f;
      }
    }
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t i = lane + 32 * k, c = c0 + i;
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kTaps; ++j) acc = fmaf(tw[k][j], x[k][j], acc);
      v[k] = i < p.group_width ? acc * detail::SigmoidF(acc) : 0.0f;
      if (i < p.group_width) {
#pragma unroll
        for (int j = 0; j < kTaps - 1; ++j) h[j * p.channels + c] = x[k][j + 1];  // the inputs, one row on
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t i = lane + 32 * k, c = c0 + i;
      v[k] = 0.0f;
      if (i < p.group_width) {
        const float cur = in[c];
        float acc = 0.0f;
        for (int j = 0; j < taps; ++j) acc = fmaf(wt[c * taps + j], j < hist ? h[j * p.channels + c] : cur, acc);
        // the new history: old rows 1 .. hist-1, then this token's input (row j+1 read before it is written)
        for (int j = 0; j < hist; ++j) h[j * p.channels + c] = j + 1 < hist ? h[(j + 1) * p.channels + c] : cur;
        v[k] = acc * detail::SigmoidF(acc);
      }
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) ss = fmaf(v[k], v[k], ss);
  float scale = 1.0f;
  if (l2) scale = 1.0f / fmaxf(sqrtf(detail::WarpSum(ss)), p.eps);
  float* out = pick(p.out[0], p.out[1], p.out[2]) + s * p.out_stride + c0;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t i = lane + 32 * k;
    if (i < p.group_width) out[i] = l2 ? v[k] * scale : v[k];
  }
}

}  // namespace

cudaError_t ShortConvSiluDecode(const ShortConvDecodeParams& p, cudaStream_t stream) {
  if (p.taps < 1 || p.taps > kShortConvMaxTaps || p.channels < 0 || p.n_seqs < 0 || p.group_width < 1 ||
      p.group_width > kShortConvDecodeMaxGroup) {
    return cudaErrorInvalidValue;
  }
  if (p.channels % p.group_width != 0) return cudaErrorInvalidValue;
  if (p.channels == 0 || p.n_seqs == 0) return cudaSuccess;
  if (p.in_stride < p.channels || p.out_stride < p.channels) return cudaErrorInvalidValue;
  for (int w = 0; w < 3; ++w) {
    if (p.weight[w] == nullptr || p.in[w] == nullptr || p.out[w] == nullptr || (p.taps > 1 && p.history[w] == nullptr)) {
      return cudaErrorInvalidValue;
    }
  }
  const int64_t warps = p.channels / p.group_width * 3 * p.n_seqs;
  const int64_t blocks = detail::CeilDiv(warps, kThreads / 32);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  if (p.taps == 4) {
    K3_CUDA_CHECK(LaunchKernel(ShortConvDecodeKernel<4>, static_cast<unsigned>(blocks), kThreads, 0, stream, p));
  } else {
    K3_CUDA_CHECK(LaunchKernel(ShortConvDecodeKernel<0>, static_cast<unsigned>(blocks), kThreads, 0, stream, p));
  }
  return cudaSuccess;
}

}  // namespace k3::cuda
