// The coordinator's sampler: one Sampler per sequence (not thread-safe), holding that
// sequence's random stream and penalty window. Each decode step hands it the worker's row
// (full logits, or top-N candidates + the full logsumexp) and gets back a token.
//
// Chain (chain.h, llama.cpp's default order): penalties -> top-k -> top-p -> min-p ->
// temperature -> draw; temperature 0 is greedy after penalties.
//
// Exactness with top-N input: the result is the one the full logits give, or Sample says
// `insufficient` and changes nothing (no random number consumed, no token recorded), so the
// caller can repeat the step with full logits and get the very token the full logits give
// under the same seed. How a caller picks what to ask the worker for:
//   n = sampler.RequiredTopN();
//   n != kNeedsFullLogits  -> ask for top_n = n: never insufficient (bar exact float ties);
//   otherwise              -> ask for full logits, or (cheaper on most steps) a large top_n
//                             such as 1024 with Candidates::vocab_size set, and full logits on
//                             the rare insufficient step.
// With full logits, the row's logsumexp is ignored (recomputed in double).
//
// Reproducibility: the stream is xoshiro256** seeded from `seed` by splitmix64 (rng.h); greedy
// steps draw nothing, every other successful step draws exactly one uniform. Tokens then follow
// from integer arithmetic and IEEE float/double with std::exp (results can differ across libms
// only when a draw falls within rounding of a boundary).
//
// Logprobs (OpenAI's convention, not llama.cpp's post-chain probabilities): the raw
// log-softmax of the model's logits, logit - logsumexp, before penalties, temperature and
// truncation; exact from top-N input since the logsumexp covers the full vocabulary.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/sampler/candidate_pool.h"
#include "coordinator/sampler/candidates.h"
#include "coordinator/sampler/penalties.h"
#include "coordinator/sampler/rng.h"
#include "coordinator/sampler/sampling_params.h"

namespace k3::sampling {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct SampleResult {
  // The candidates cannot decide exactly: repeat with full logits (or RequiredTopN / more).
  bool insufficient = false;
  std::string reason;  // why, when insufficient

  int32_t token = -1;
  float logprob = 0;                       // raw log-softmax of the chosen token
  std::vector<TokenLogprob> top_logprobs;  // the n_logprobs best raw logprobs, best first
};

class Sampler {
 public:
  // InvalidArgument (from SamplingParams::Validate) for out-of-range parameters.
  static absl::StatusOr<Sampler> Create(const SamplingParams& params);

  // The prompt, in order, before the first Sample. It enters the penalty window, where only
  // repetition_penalty counts it.
  void AddPrompt(std::span<const int32_t> tokens);
  // A generated token appended without Sample (e.g. forced by the caller). Sample records its
  // own choice; do not pass that here again.
  void AcceptGenerated(int32_t token);

  // Chooses the next token. InvalidArgument for malformed input (no candidates, unsorted or
  // duplicate candidates, NaN logits, a logsumexp below the candidates' own).
  absl::StatusOr<SampleResult> Sample(const Candidates& row);

  // The top-N that suffices for the next step given this sequence's penalty window (tighter
  // than RequiredTopN(params) when penalties are on), or kNeedsFullLogits.
  int32_t RequiredTopN() const;

  const SamplingParams& params() const { return params_; }

 private:
  explicit Sampler(const SamplingParams& params)
      : params_(params), rng_(params.seed), window_(params.penalty_last_n) {}

  SamplingParams params_;
  Xoshiro256 rng_;
  PenaltyWindow window_;
  PoolStorage scratch_;  // the pool's buffers, reused across steps
};

}  // namespace k3::sampling
