#include "coordinator/sampler/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace k3::sampling {

absl::Status SamplingParams::Validate() const {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (!std::isfinite(temperature) || temperature < 0) {
    return bad("temperature must be a finite number >= 0 (0 = greedy), got ", temperature);
  }
  if (top_k < 0) return bad("top_k must be >= 0 (0 = off), got ", top_k);
  if (!(top_p > 0 && top_p <= 1)) return bad("top_p must be in (0, 1] (1 = off), got ", top_p);
  if (!(min_p >= 0 && min_p <= 1)) return bad("min_p must be in [0, 1] (0 = off), got ", min_p);
  if (!(repetition_penalty >= kMinRepetitionPenalty && repetition_penalty <= kMaxRepetitionPenalty)) {
    return bad("repetition_penalty must be in [", kMinRepetitionPenalty, ", ", kMaxRepetitionPenalty,
               "] (1 = off), got ", repetition_penalty);
  }
  if (!(std::fabs(presence_penalty) <= kMaxAbsPresenceFrequency)) {
    return bad("presence_penalty must be in [-2, 2] (0 = off), got ", presence_penalty);
  }
  if (!(std::fabs(frequency_penalty) <= kMaxAbsPresenceFrequency)) {
    return bad("frequency_penalty must be in [-2, 2] (0 = off), got ", frequency_penalty);
  }
  if (penalty_last_n < -1) {
    return bad("penalty_last_n must be -1 (whole sequence), 0 (off) or a window size, got ",
               penalty_last_n);
  }
  if (n_logprobs < 0 || n_logprobs > kMaxLogprobs) {
    return bad("n_logprobs must be in [0, ", kMaxLogprobs, "], got ", n_logprobs);
  }
  return absl::OkStatus();
}

bool PenaltiesActive(const SamplingParams& p) {
  return p.penalty_last_n != 0 &&
         (p.repetition_penalty != 1 || p.presence_penalty != 0 || p.frequency_penalty != 0);
}

bool PenaltiesBoost(const SamplingParams& p) {
  return PenaltiesActive(p) &&
         (p.repetition_penalty < 1 || p.presence_penalty < 0 || p.frequency_penalty < 0);
}

int32_t RequiredTopN(const SamplingParams& p, int64_t penalized_tokens) {
  if (PenaltiesBoost(p)) return kNeedsFullLogits;
  int64_t base;
  if (p.temperature == 0) {
    base = 1;
  } else if (p.top_k > 0) {
    base = p.top_k;
  } else {
    return kNeedsFullLogits;
  }
  const int64_t n = std::max<int64_t>(base + (PenaltiesActive(p) ? penalized_tokens : 0), p.n_logprobs);
  return n > std::numeric_limits<int32_t>::max() ? kNeedsFullLogits : static_cast<int32_t>(n);
}

int32_t RequiredTopN(const SamplingParams& p) {
  // An unbounded window: only a sequence's own history bounds the penalized tokens.
  if (PenaltiesActive(p) && p.penalty_last_n < 0) return kNeedsFullLogits;
  return RequiredTopN(p, p.penalty_last_n);
}

}  // namespace k3::sampling
