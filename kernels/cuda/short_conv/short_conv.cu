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

// Thread = (channel, tile of kTileTokens tokens, sequence). The taps are right-aligned in
// registers (w[kMax - taps + j] = tap j, zeros before) and so are the inputs: x[k] is the input
// at token t0 - (kMax - 1) + k, zero before the sequence's history. Every input of the tile is
// loaded before the first output is computed (independent loads in flight together; `out` may not
// alias `in`), and every index is a constant after unrolling (registers, no local memory); the
// padding taps are skipped, so each output is the taps-long dot product in the order it always
// was. The first tile's thread also writes the channel's new history after it
// has read the old one; no other tile reads it.
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
  const int n = static_cast<int>(t0 + kTileTokens < p.n_tokens ? kTileTokens : p.n_tokens - t0);
  float w[kMax], x[kMax - 1 + kTileTokens];
#pragma unroll
  for (int j = 0; j < kMax; ++j) w[j] = j >= kMax - taps ? p.weight[c * taps + j - (kMax - taps)] : 0.0f;
#pragma unroll
  for (int k = 0; k < kMax - 1; ++k) x[k] = k >= kMax - 1 - hist ? input(t0 - (kMax - 1) + k) : 0.0f;
#pragma unroll
  for (int i = 0; i < kTileTokens; ++i) x[kMax - 1 + i] = i < n ? p.in[(row0 + t0 + i) * p.in_stride + c] : 0.0f;
#pragma unroll
  for (int i = 0; i < kTileTokens; ++i) {
    if (i >= n) break;
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kMax; ++j) {
      if (j >= kMax - taps) acc = fmaf(w[j], x[i + j], acc);
    }
    p.out[(row0 + t0 + i) * p.out_stride + c] = acc * detail::SigmoidF(acc);
  }
  if (tile != 0) return;
    // The new history: the last hist inputs of the sequence, in ascending order: input(u) for u < 0
    // reads old row n_tokens + j > j, not yet overwritten.
#pragma unroll
  for (int j = 0; j < kMax - 1; ++j) {
    if (j < hist) h[j * p.channels + c] = input(p.n_tokens - hist + j);
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
