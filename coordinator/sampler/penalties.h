// Repetition / presence / frequency penalties: the window of recent tokens a sequence keeps,
// and the per-token logit change (llama.cpp's penalties sampler, llama-sampling.cpp).
//
// The window holds the last `penalty_last_n` tokens of the sequence, prompt and generated
// alike (-1 = all of them, 0 = none). Per token it counts
//   all       occurrences in the window     -> repetition_penalty (HF / llama.cpp: the prompt counts)
//   generated generated occurrences in it   -> presence / frequency (OpenAI / vLLM: output only)
// and a token's logit becomes, in float as llama.cpp computes it,
//   l = all > 0 ? (l > 0 ? l / r : l * r) : l;   then   l -= generated * freq + (generated > 0) * presence
// Both steps are non-decreasing in l, which the top-N bounds in candidate_pool.cc rely on.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "coordinator/sampler/sampling_params.h"

namespace k3::sampling {

struct TokenCounts {
  int32_t all = 0;
  int32_t generated = 0;
};

class PenaltyWindow {
 public:
  explicit PenaltyWindow(int32_t last_n) : last_n_(last_n) {}

  void Add(int32_t token, bool generated);
  TokenCounts Get(int32_t token) const;
  // Every token currently in the window, with its counts.
  const absl::flat_hash_map<int32_t, TokenCounts>& counts() const { return counts_; }

 private:
  int32_t last_n_;
  std::deque<std::pair<int32_t, bool>> window_;  // (token, generated), oldest first
  absl::flat_hash_map<int32_t, TokenCounts> counts_;
};

// Whether the penalties of `p` can change the logit of a token with counts `c`.
bool Penalizes(const SamplingParams& p, TokenCounts c);

// The penalized logit (unchanged when !Penalizes(p, c)).
float Penalize(const SamplingParams& p, TokenCounts c, float logit);

}  // namespace k3::sampling
