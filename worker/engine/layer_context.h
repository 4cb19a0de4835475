// What every layer's forward function needs besides its weights.
#pragma once

#include <cstdint>

#include "worker/engine/sequence_cache.h"
#include "worker/engine/token_batch.h"
#include "worker/model/k3_config.h"

namespace k3::engine {

struct LayerContext {
  const model::K3Config& config;
  const TokenBatch& batch;
  SequenceCache& cache;
  int64_t kda_chunk = 16;  // chunk length of the chunked KDA form used for runs of > 1 token
};

}  // namespace k3::engine
