// The MoE router on the GPU (spec 4.6), for a batch of tokens: gate probabilities (sigmoid for
// K3, or softmax), top-k on probability + selection bias (ties to the lower expert index), the
// chosen experts' probabilities as weights, normalized (floored at 2^-14) and scaled.
// The same function as k3::cpu::RouteToken per token.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace k3::cuda {

struct MoeRouterParams {
  const float* logits;          // [n_tokens][logits_stride] router outputs (ffn_gate_inp · h)
  int64_t logits_stride;        // floats between token rows of logits (>= n_experts)
  const float* selection_bias;  // [n_experts] exp_probs_b, or nullptr
  int64_t n_tokens;             // rows
  int64_t n_experts;            // 896 (at most 4096)
  int64_t k;                    // experts per token, 16 (1..64, <= n_experts)
  bool sigmoid;                 // sigmoid gating (K3); false = softmax
  bool normalize;               // divide the chosen weights by their sum (floored at 6.103515625e-5)
  float scale;                  // multiply the weights unless 0 or 1
  int32_t* ids;                 // [n_tokens][k] chosen experts, best first
  float* weights;               // [n_tokens][k]
};

cudaError_t MoeRoute(const MoeRouterParams& p, cudaStream_t stream);

}  // namespace k3::cuda
