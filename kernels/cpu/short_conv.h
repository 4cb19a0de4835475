// KDA's causal short convolution with SiLU, over a run of tokens of one sequence.
#pragma once

#include <cstdint>

namespace k3::cpu {

inline constexpr int64_t kMaxShortConvTaps = 16;

struct ShortConvParams {
  const float* weight;  // [channels][taps]: taps contiguous per channel; tap taps-1 = current token
  float* history;       // [taps-1][channels]: the previous taps-1 inputs, oldest first; updated
  const float* in;      // [n_tokens][in_stride]: this run's projected inputs
  float* out;           // [n_tokens][out_stride]: silu(conv), may not alias `in`
  int64_t channels;
  int64_t taps;         // 1..kMaxShortConvTaps
  int64_t n_tokens;
  int64_t in_stride;
  int64_t out_stride;
};

void ShortConvSilu(const ShortConvParams& p);

}  // namespace k3::cpu
