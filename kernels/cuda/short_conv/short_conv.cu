#include "kernels/cuda/short_conv/short_conv.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMax = static_cast<int>(kShortConvMaxTaps);
constexpr int kTileTokens = 16;  // tokens per thread: a prompt chunk spreads over many blocks

static_assert(kTileTokens >= kMax, "only the first token tile may read the history");

// Thread = (channel, tile of kTileTokens tokens, sequence): the window of the taps-1 inputs before
// the tile (from `in`, or for the first tile from the history) lives in registers (constant
// indices only: every loop is unrolled to kMax and guarded by `taps`). The first tile's thread
// also writes the channel's new history, after it has read the old one; no other tile reads it.
__global__ void __launch_bounds__(kThreads) ShortConvKernel(const ShortConvParams p) {
  PdlEnter();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t tile = blockIdx.y, s = blockIdx.z;
  if (c >= p.channels) return;
  const int taps = static_cast<int>(p.taps), hist = taps - 1;
  const int64_t slot = p.slots != nullptr ? static_cast<int64_t>(p.slots[s]) : s;
  float* h = p.history + slot * p.history_slot_stride;
  const int64_t row0 = s * p.n_tokens;
  // Input u of the sequence: token u's row for u >= 0, history row u + hist before it.
  auto input = [&](int64_t u) { return u >= 0 ? p.in[(row0 + u) * p.in_stride + c] : h[(u + hist) * p.channels + c]; };
  const int64_t t0 = tile * kTileTokens;
  const int64_t t1 = t0 + kTileTokens < p.n_tokens ? t0 + kTileTokens : p.n_tokens;
  float w[kMax], win[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    w[j] = j < taps ? p.weight[c * taps + j] : 0.0f;
    win[j] = j < hist ? input(t0 - hist + j) : 0.0f;
  }
  // w[taps-1] (the current token's tap), selected with constant indices
  float wl = 0.0f;
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (j == taps - 1) wl = w[j];
  }
  for (int64_t t = t0; t < t1; ++t) {
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
  if (tile != 0) return;
  // The new history: the last hist inputs of the sequence. A run within one tile (decode) ends
  // with exactly them in the window; a longer one (more than kTileTokens >= hist tokens) has them
  // all in `in`.
  const bool one_tile = t1 == p.n_tokens;
#pragma unroll
  for (int j = 0; j < kMax - 1; ++j) {
    if (j < hist) h[j * p.channels + c] = one_tile ? win[j] : p.in[(row0 + p.n_tokens - hist + j) * p.in_stride + c];
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
  const int64_t tiles = detail::CeilDiv(p.n_tokens, kTileTokens);
  if (p.in_stride < p.channels || p.out_stride < p.channels || p.n_seqs > 65535 || tiles > 65535) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(detail::CeilDiv(p.channels, kThreads)), static_cast<unsigned>(tiles),
                  static_cast<unsigned>(p.n_seqs));
  K3_CUDA_CHECK(LaunchKernel(ShortConvKernel, grid, kThreads, 0, stream, p));
  return cudaSuccess;
}

}  // namespace k3::cuda
