// What every layer's forward function needs besides its weights.
#pragma once

#include <cstdint>

#include "collectives/communicator.h"
#include "worker/common/trace.h"
#include "worker/engine/sequence_cache.h"
#include "worker/engine/token_batch.h"
#include "worker/model/k3_config.h"
#include "worker/model/shard_rules.h"

namespace k3::engine {

struct LayerContext {
  const model::K3Config& config;
  const model::RankShard& shard;  // this rank's heads, bands and experts
  coll::Communicator& comm;       // the worker group (a local no-op for one rank)
  const TokenBatch& batch;
  SequenceCache& cache;
  int64_t kda_chunk = 16;  // chunk length of the chunked KDA form used for runs of > 1 token
  Tracer* tracer = nullptr;  // per-rank timeline, or null (off)
};

}  // namespace k3::engine
