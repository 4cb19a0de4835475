// K3's cross-layer residual mix ("attn_res", spec 4.1) on the GPU, for a batch of tokens:
//   out = Σ_i p_i·bank_i + p_last·x,  p = softmax([s(bank_0) .. s(bank_{n-1}), s(x)]),
//   s(c) = Σ_d rms(c)[d]·w[d]   (scores from RMS-normalized values, the sum from the raw ones).
// The same function as k3::cpu::ResidualMix per token. Two launches over a wide grid (partial
// sums per column split, then scores + blend per split), so one token uses many SMs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace k3::cuda {

inline constexpr int kResidualMixMaxCheckpoints = 8;  // ceil(93 / 12)

struct ResidualMixParams {
  const float* bank[kResidualMixMaxCheckpoints] = {};  // checkpoint i: [n_tokens][bank_stride] device
  int n_ckpt = 0;            // checkpoints in use, 0..kResidualMixMaxCheckpoints (0: out = x)
  int64_t bank_stride = 0;   // floats between token rows of every checkpoint
  const float* x;            // [n_tokens][x_stride] the stream
  const float* w;            // [n] the layer's res_score weight
  float* out;                // [n_tokens][out_stride]; may alias x exactly
  int64_t n_tokens;          // rows
  int64_t n;                 // hidden width (7168)
  int64_t x_stride;          // floats between token rows of x
  int64_t out_stride;        // floats between token rows of out
  float eps;                 // rms_eps
  float* workspace;          // ResidualMixWorkspaceFloats(n_tokens, n) floats, device
};

int64_t ResidualMixWorkspaceFloats(int64_t n_tokens, int64_t n);

cudaError_t ResidualMix(const ResidualMixParams& p, cudaStream_t stream);

}  // namespace k3::cuda
