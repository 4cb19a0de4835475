// One row's candidates after penalties, in sampling order (penalized logit descending, ties to
// the lower id), plus what is known about the tokens NOT in the pool.
//
// From full logits the pool is the whole vocabulary and everything is exact. From the top-N
// candidates and the full logsumexp L, every token outside the pool has
//   total raw mass  X = e^L - sum over candidates of e^raw  (L trusted to 8 float ulps),
//                   and X <= (V - N) e^(N-th logit) when the vocabulary size V is known,
//   raw logit <= B := min(the N-th candidate's logit (on a tie, a higher id), log X),
// and after penalties, since each penalty step is non-decreasing in the logit:
//   an unpenalized outside token keeps a logit <= B,
//   a penalized outside token s (one in the penalty window) has a logit <= Penalize(B) =: U_s.
// From these the pool gives certain(): how many best entries provably rank above every
// outside token, and OutsideMass(t): bounds on the outside tokens' tempered mass. The chain
// (chain.h) decides only when these bounds leave a single answer.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/sampler/candidates.h"
#include "coordinator/sampler/penalties.h"
#include "coordinator/sampler/sampling_params.h"

namespace k3::sampling {

struct PoolEntry {
  int32_t token = 0;
  float logit = 0;  // after penalties
  float raw = 0;    // the model's
};

// A candidate's unnormalized probability at temperature t, relative to the logit ref. Every
// sum of weights goes through this one formula so that full-logits and top-N inputs agree.
inline double Weight(float logit, double ref, double t) { return std::exp((logit - ref) / t); }

struct MassBounds {
  double lo = 0;
  double hi = 0;  // may be +inf: nothing is known
};

// The pool's buffers, handed from one step's pool to the next so that a full-vocabulary step
// does not allocate.
struct PoolStorage {
  std::vector<PoolEntry> entries;
  std::vector<float> by_id;
};

class CandidatePool {
 public:
  // `storage` holds the buffers (Release() hands them back).
  static absl::StatusOr<CandidatePool> FromLogits(std::span<const float> logits,
                                                  const SamplingParams& p,
                                                  const PenaltyWindow& window,
                                                  PoolStorage storage);
  // vocab_size 0 = unknown.
  static absl::StatusOr<CandidatePool> FromTop(std::span<const TokenLogit> top, float logsumexp,
                                               int64_t vocab_size, const SamplingParams& p,
                                               const PenaltyWindow& window,
                                               PoolStorage storage);

  bool complete() const { return complete_; }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  // The i-th entry in sampling order (sorts lazily: a sample rarely looks past a few hundred).
  const PoolEntry& Sorted(int64_t i);
  // How many leading entries provably rank above every token outside the pool.
  int64_t certain() const { return certain_; }
  // An upper bound on the penalized logit of any token outside the pool (-inf when complete).
  float outside_max() const { return outside_max_; }
  // sum over the pool of exp((logit - ref) / t).
  double PoolMass(double ref, double t) const;
  // Bounds on sum over tokens outside the pool of exp((logit - ref) / t); ref must be the best
  // penalized logit. For t > 1 without the vocabulary size hi = +inf (many unseen tiny tokens
  // could carry any mass).
  MassBounds OutsideMass(double ref, double t) const;
  // The raw logsumexp of the whole vocabulary (computed from full logits, else as given).
  double logsumexp() const { return logsumexp_; }

  PoolStorage Release() && { return {std::move(entries_), std::move(by_id_)}; }

 private:
  CandidatePool() = default;

  std::vector<PoolEntry> entries_;
  std::vector<float> by_id_;  // full logits only: the penalized logits in id order
  int64_t sorted_ = 0;  // entries_[0, sorted_) are the best, in order
  bool complete_ = false;
  int64_t certain_ = 0;
  float outside_max_ = -INFINITY;
  double logsumexp_ = 0;
  // Top-N only: see the header comment.
  float boundary_ = 0;                  // B, rounded up to float
  double log_outside_lo_ = -INFINITY;   // log of the bounds on X
  double log_outside_hi_ = -INFINITY;
  int64_t n_outside_ = -1;                // V - N, or -1 when V is unknown
  std::vector<float> penalized_outside_;  // U_s for each penalized token outside the pool
};

}  // namespace k3::sampling
