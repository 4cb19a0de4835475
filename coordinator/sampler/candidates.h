// What the sampler receives for one output row: either the whole vocabulary's logits, or the
// best N candidates and the full vocabulary's logsumexp (worker/runtime/step.h's RowOutput,
// which the caller copies into these views' backing storage).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace k3::sampling {

struct TokenLogit {
  int32_t token = 0;
  float logit = 0;
};

struct Candidates {
  // The N best tokens, logit descending, ties to the lower id (what the worker returns).
  // Ignored when `logits` is set.
  std::span<const TokenLogit> top;
  // log(sum(exp(logit))) over the whole vocabulary; with `top`, trusted to 8 float ulps.
  float logsumexp = 0;
  // The whole vocabulary's logits (-inf allowed for masked tokens), or empty.
  std::span<const float> logits;
  // With `top`: the vocabulary size, or 0 if unknown. Knowing it bounds the mass outside the
  // top-N (at most (vocab_size - N) * e^(N-th logit)), which decides far more steps when
  // penalties push a dominant token down or temperature is above 1.
  int64_t vocab_size = 0;
};

// The order candidates come in and are sampled in: logit descending, ties to the lower id.
inline bool Better(int32_t token_a, float logit_a, int32_t token_b, float logit_b) {
  return logit_a != logit_b ? logit_a > logit_b : token_a < token_b;
}

// log(sum(exp(x))) in double; -inf when every x is -inf.
double LogSumExp(std::span<const float> logits);

// The n best of `logits` in candidate order, as a worker would return them.
std::vector<TokenLogit> TopCandidates(std::span<const float> logits, int32_t n);

}  // namespace k3::sampling
