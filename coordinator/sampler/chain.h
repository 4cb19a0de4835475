// The sampling chain over one CandidatePool, in llama.cpp's default order (common/sampling.cpp):
//
//   penalties (already in the pool) -> top-k -> top-p -> min-p -> temperature -> draw
//
// So top-p and min-p judge the temperature-1 distribution after penalties (top-p renormalized
// over the top-k survivors), and temperature only reshapes what survives. top-p keeps the
// shortest best-first prefix whose mass reaches top_p (the crossing token included); min-p
// keeps logits >= best + log(min_p). Temperature 0 is the argmax after penalties (no draw).
// The draw inverts the survivors' CDF in sampling order with one uniform u: the first i whose
// cumulative weight exceeds u * (total weight).
//
// With a top-N pool every step runs against the pool's bounds on the tokens outside it; a step
// whose answer those bounds do not pin down leaves the result undecided (the caller must supply
// the full logits) rather than guess.
#pragma once

#include "coordinator/sampler/candidate_pool.h"
#include "coordinator/sampler/sampling_params.h"

namespace k3::sampling {

struct ChainResult {
  bool decided = false;
  const char* why_undecided = "";
  PoolEntry chosen;
};

// `u` in [0, 1) is unused when temperature is 0.
ChainResult RunChain(const SamplingParams& p, CandidatePool& pool, double u);

}  // namespace k3::sampling
