// One residual step of a batch of tokens in one launch (a decode step's few tokens: a cluster of 8
// blocks per token; from kAddMixNormRowKernelMinTokens tokens, one block per token): the
// layer's delta added into the stream, the stream banked (a checkpoint layer), the cross-layer
// residual mix (residual_mix.h) and the RMS norm of the mix:
//   x'   = restart ? (d0 + d1) : x + (d0 + d1)      (d1 optional; no d0: x' = x)
//   bank_out = x'                                   (optional)
//   y    = RmsNorm(ResidualMix(bank[0..n_ckpt), x', score_w), norm_w)
// The engine's AddInto + ResidualMix (two launches) + RowNorm in one (CudaEngineOptions::
// fused_residual, off by default: it did not shorten the graph-replayed step). The same function
// per token as k3::cpu; x' exactly the engine's two adds (d0 + d1 first, then x + that).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/residual_mix/residual_mix.h"

namespace k3::cuda {

inline constexpr int64_t kAddMixNormMaxWidth = 8 * 256 * 4;  // 8 blocks x 256 threads x 4 values in registers
// From this many tokens on (prefill chunks), one block per token instead of a cluster of 8.
inline constexpr int64_t kAddMixNormRowKernelMinTokens = 128;

struct AddMixNormParams {
  const float* bank[kResidualMixMaxCheckpoints] = {};  // checkpoint i: [n_tokens][bank_stride]
  int n_ckpt = 0;              // checkpoints in use (the mix reads them; bank_out is not one of them)
  int64_t bank_stride = 0;     // floats between token rows of every checkpoint and of bank_out
  float* x = nullptr;          // [n_tokens][x_stride] the stream, updated in place to x'
  int64_t x_stride = 0;
  const float* d0 = nullptr;   // [n_tokens][d_stride] delta, or nullptr (x' = x)
  const float* d1 = nullptr;   // [n_tokens][d_stride] second delta (the shared experts'), or nullptr
  int64_t d_stride = 0;
  bool restart = false;        // x' = d0 + d1 (a banked layer restarts the stream)
  float* bank_out = nullptr;   // [n_tokens][bank_stride] x' copied here, or nullptr
  const float* score_w = nullptr;  // [n] the layer's res_score weight
  const float* norm_w = nullptr;   // [n] the RMS norm's weight
  float* y = nullptr;          // [n_tokens][y_stride] normalized mix; must not alias x or a bank row
  int64_t y_stride = 0;
  int64_t n_tokens = 0;
  int64_t n = 0;               // width, 1..kAddMixNormMaxWidth
  float eps = 0.0f;            // rms_eps (the mix's scores and the norm)
};

cudaError_t AddMixNorm(const AddMixNormParams& p, cudaStream_t stream);

}  // namespace k3::cuda
