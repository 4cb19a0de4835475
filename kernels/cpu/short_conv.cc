#include "kernels/cpu/short_conv.h"

#include <algorithm>

#include "kernels/cpu/activation.h"

namespace k3::cpu {

void ShortConvSilu(const ShortConvParams& p) {
  const int64_t C = p.channels, K = p.taps, hist = K - 1;
  const bool threads = C * p.n_tokens * K >= (int64_t{1} << 22);  // a region costs a barrier
#pragma omp parallel for schedule(dynamic, 256) if (threads)
  for (int64_t c = 0; c < C; ++c) {
    const float* w = p.weight + c * K;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      float acc = 0;
      for (int64_t j = 0; j < K; ++j) {
        // tap j multiplies the input K-1-j tokens back
        const int64_t lag = K - 1 - j;
        const int64_t src = t - lag;
        const float v = src >= 0 ? p.in[src * p.in_stride + c] : p.history[(hist + src) * C + c];
        acc += w[j] * v;
      }
      p.out[t * p.out_stride + c] = Silu(acc);
    }
    // Shift the history: keep the last taps-1 inputs of (history ++ run).
    float last[kMaxShortConvTaps];
    const int64_t keep = hist;
    for (int64_t i = 0; i < keep; ++i) {
      const int64_t src = p.n_tokens - keep + i;  // index into the run; negative = history
      last[i] = src >= 0 ? p.in[src * p.in_stride + c] : p.history[(hist + src) * C + c];
    }
    for (int64_t i = 0; i < keep; ++i) p.history[i * C + c] = last[i];
  }
}

}  // namespace k3::cpu
