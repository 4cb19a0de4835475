// The MoE router of one token (spec 4.6): gate probabilities, top-k selection with a bias that
// only affects the choice, then the weights of the chosen experts.
#pragma once

#include <cstdint>

namespace k3::cpu {

struct RouterParams {
  const float* logits;          // [n_experts] router outputs for this token
  const float* selection_bias;  // [n_experts] exp_probs_b, or nullptr
  int64_t n_experts;
  int64_t k;                    // experts per token
  bool sigmoid;                 // sigmoid gating (K3); false = softmax
  bool normalize;               // divide the chosen weights by their sum (floored at 2^-14)
  float scale;                  // multiply the weights unless 0 or 1
  int32_t* ids;                 // [k] chosen experts, best first; ties go to the lower index
  float* weights;               // [k]
};

void RouteToken(const RouterParams& p);

}  // namespace k3::cpu
