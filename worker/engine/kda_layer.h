// The KDA attention block of one layer (spec 4.4) for a batch of token runs.
#pragma once

#include <cstdint>

#include "worker/engine/layer_context.h"
#include "worker/engine/model_weights.h"

namespace k3::engine {

// h: [n_tokens][hidden] normed layer input; out: [n_tokens][hidden], this rank's partial sum
// (its heads only; the caller all-reduces). kda_index is the layer's
// slot among the KDA layers (its state in the cache).
void KdaForward(const LayerContext& ctx, const KdaWeights& w, int64_t kda_index, const float* h,
                float* out);

}  // namespace k3::engine
