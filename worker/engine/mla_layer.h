// The MLA attention block of one layer (spec 4.5, absorbed form) for a batch of token runs.
#pragma once

#include <cstdint>

#include "worker/engine/layer_context.h"
#include "worker/engine/model_weights.h"

namespace k3::engine {

// h: [n_tokens][hidden] normed layer input; out: [n_tokens][hidden], this rank's partial sum
// (its heads only; the caller all-reduces). Every rank caches the full row (replicated). Appends each token's
// 576-wide latent row to the cache (slot mla_index) before attending, so a prompt run is causal.
void MlaForward(const LayerContext& ctx, const MlaWeights& w, int64_t mla_index, const float* h,
                float* out);

}  // namespace k3::engine
