// The feed-forward blocks: the dense FFN of the leading layers and the latent MoE (spec 4.3, 4.6).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

#include "worker/engine/layer_context.h"
#include "worker/engine/model_weights.h"

namespace k3::engine {

// out = ffn_down · situ(ffn_gate · h, ffn_up · h). h, out: [n_tokens][hidden]; out is this
// rank's partial sum over its FFN band (the caller all-reduces).
void DenseFfnForward(const LayerContext& ctx, const DenseFfnWeights& w, const float* h, float* out);

// out = routed_up · rms_w(Σ_e w_e · expert_e(routed_down · h)) + shared(h), complete on every
// rank: the expert and shared-expert partials meet in one all-reduce inside.
absl::Status MoeForward(const LayerContext& ctx, const MoeWeights& w, const float* h, float* out);

}  // namespace k3::engine
