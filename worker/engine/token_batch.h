// One forward pass's tokens, flattened: runs of consecutive tokens, one run per sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/engine/sequence_cache.h"

namespace k3::engine {

struct TokenRun {
  SeqId seq = 0;
  int64_t begin = 0;      // first row of this run in the flattened batch
  int64_t count = 0;      // tokens in the run
  int64_t start_pos = 0;  // position of the first token in its sequence
};

struct TokenBatch {
  std::vector<int32_t> tokens;  // [n_tokens]
  std::vector<TokenRun> runs;
  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace k3::engine
