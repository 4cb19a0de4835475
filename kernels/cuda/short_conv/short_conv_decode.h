// KDA's three short convolutions (q, k, v) of a decode step, one token per sequence, in one
// launch, with the per-head L2 norm of q and k (spec 4.4) folded in:
//   out_w[c] = silu(Σ_j weight_w[c][j] · in_{-(taps-1)+j}[c])   (w = q, k, v; history as ShortConvSilu)
//   out_w    = out_w / max(||out_w[group]||_2, eps) per group of group_width channels, where l2[w]
// Bit-identical to ShortConvSilu (n_tokens = 1) followed by RowNorm(kL2) on q and k: the same
// products and sums in the same order (a warp per group, 4 channels per lane, as RowNorm's warp
// kernel). Five launches of the KDA layer in one.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/short_conv/short_conv.h"

namespace k3::cuda {

inline constexpr int64_t kShortConvDecodeMaxGroup = 128;  // channels per group (a warp, 4 per lane)

struct ShortConvDecodeParams {
  const float* weight[3] = {};   // [channels][taps] per convolution (q, k, v)
  float* history[3] = {};        // per convolution: slot s at history[w] + s * history_slot_stride,
                                 // [taps-1][channels]; updated
  int64_t history_slot_stride = 0;
  const int32_t* slots = nullptr;  // [n_seqs] device: slot of each sequence, or nullptr = index
  const float* in[3] = {};       // [n_seqs][in_stride] per convolution
  int64_t in_stride = 0;
  float* out[3] = {};            // [n_seqs][out_stride] per convolution; may not alias an input
  int64_t out_stride = 0;
  bool l2[3] = {};               // L2-normalize groups of this convolution's output
  int64_t n_seqs = 0;            // sequences, one token each
  int64_t channels = 0;          // per convolution (heads x head dim of this rank)
  int64_t group_width = 0;       // head dim: 1..kShortConvDecodeMaxGroup, divides channels
  int64_t taps = 0;              // 1..kShortConvMaxTaps
  float eps = 0.0f;              // the L2 norm's floor on ||x||
};

cudaError_t ShortConvSiluDecode(const ShortConvDecodeParams& p, cudaStream_t stream);

}  // namespace k3::cuda
