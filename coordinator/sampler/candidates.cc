#include "coordinator/sampler/candidates.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace k3::sampling {

double LogSumExp(std::span<const float> logits) {
  if (logits.empty()) return -INFINITY;
  const double mx = *std::max_element(logits.begin(), logits.end());
  if (std::isinf(mx)) return mx;
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  return mx + std::log(sum);
}

std::vector<TokenLogit> TopCandidates(std::span<const float> logits, int32_t n) {
  const int64_t k = std::clamp<int64_t>(n, 0, static_cast<int64_t>(logits.size()));
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return Better(a, logits[a], b, logits[b]); });
  std::vector<TokenLogit> top(k);
  for (int64_t i = 0; i < k; ++i) top[i] = {idx[i], logits[idx[i]]};
  return top;
}

}  // namespace k3::sampling
