// What one request asks of the sampler, its validation, and how many candidates per step make
// sampling exact. The chain these parameters drive is described in sampler.h.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace k3::sampling {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax after penalties); else divides the logits
  int32_t top_k = 0;         // keep the k best; 0 = off
  float top_p = 1.0f;        // keep the smallest best-first prefix with mass >= top_p; 1 = off
  float min_p = 0.0f;        // keep tokens with p >= min_p * p_max; 0 = off

  // Penalties, llama.cpp's llama_sampler_init_penalties over the last `penalty_last_n` tokens
  // of the sequence (-1 = the whole sequence, 0 = penalties off). Prompt tokens enter the
  // window too, but only repetition_penalty counts them; presence and frequency count only
  // generated tokens of the window (OpenAI / vLLM semantics). See penalties.h.
  float repetition_penalty = 1.0f;  // seen: logit > 0 ? logit / r : logit * r; 1 = off
  float presence_penalty = 0.0f;    // logit -= presence * [count > 0]; 0 = off
  float frequency_penalty = 0.0f;   // logit -= frequency * count; 0 = off
  int32_t penalty_last_n = 64;

  uint64_t seed = 0;       // same seed, same inputs -> same tokens on every platform
  int32_t n_logprobs = 0;  // report the n best raw logprobs of each step

  absl::Status Validate() const;
};

inline constexpr int32_t kMaxLogprobs = 20;  // OpenAI's top_logprobs limit
inline constexpr float kMaxAbsPresenceFrequency = 2.0f;  // OpenAI's range for both
// Beyond these a penalized logit can overflow float (logit / r) or the setting is meaningless.
inline constexpr float kMinRepetitionPenalty = 0.01f;
inline constexpr float kMaxRepetitionPenalty = 100.0f;

// Whether the penalties can change any logit.
bool PenaltiesActive(const SamplingParams& p);
// Whether a penalty can raise a logit (repetition_penalty < 1, negative presence/frequency).
bool PenaltiesBoost(const SamplingParams& p);

// No N exists: the caller must ask for the full logits, or ask for a large N and fall back to
// the full logits when Sample reports the candidates insufficient.
inline constexpr int32_t kNeedsFullLogits = -1;

// The smallest top-N that makes Sample exact for any logits and any history of the sequence
// (bar exact float ties at the truncation boundary), or kNeedsFullLogits. Greedy needs 1,
// top_k = k needs k; decreasing penalties add penalty_last_n (a penalized candidate may fall
// below tokens outside the top-N); top_p / min_p / plain temperature depend on the logits, and
// boosting penalties on unseen logits, so they give kNeedsFullLogits. At least n_logprobs.
// Sampler::RequiredTopN() gives a tighter answer from a sequence's actual history.
int32_t RequiredTopN(const SamplingParams& p);

// The same with the number of distinct tokens the penalties currently affect.
int32_t RequiredTopN(const SamplingParams& p, int64_t penalized_tokens);

}  // namespace k3::sampling
