#include "worker/runtime/band_merge.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace k3::runtime {
namespace {

bool Better(const Candidate& a, const Candidate& b) {
  return a.logit != b.logit ? a.logit > b.logit : a.token < b.token;
}

}  // namespace

void SummarizeBand(const float* logits, int64_t band_width, int64_t band_begin, int32_t n,
                   Candidate* top, float* logsumexp) {
  const float mx = *std::max_element(logits, logits + band_width);
  double sum = 0;
  for (int64_t v = 0; v < band_width; ++v) sum += std::exp(static_cast<double>(logits[v]) - mx);
  *logsumexp = static_cast<float>(mx + std::log(sum));
  const int64_t k = std::min<int64_t>(n, band_width);
  std::vector<int32_t> idx(band_width);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  for (int64_t i = 0; i < n; ++i) {
    // A band narrower than n pads with -inf candidates, which never win a merge.
    top[i] = i < k ? Candidate{static_cast<int32_t>(band_begin + idx[i]), logits[idx[i]]}
                   : Candidate{INT32_MAX, -INFINITY};
  }
}

RowOutput MergeBands(std::span<const Candidate* const> band_tops, std::span<const float> band_lse, int32_t n) {
  RowOutput out;
  std::vector<Candidate> all;
  for (const Candidate* t : band_tops) all.insert(all.end(), t, t + n);
  std::sort(all.begin(), all.end(), Better);
  for (int32_t i = 0; i < n && i < static_cast<int32_t>(all.size()) && std::isfinite(all[i].logit); ++i) {
    out.top.push_back(all[i]);
  }
  const float mx = *std::max_element(band_lse.begin(), band_lse.end());
  double sum = 0;
  for (float l : band_lse) sum += std::exp(static_cast<double>(l) - mx);
  out.logsumexp = static_cast<float>(mx + std::log(sum));
  return out;
}

}  // namespace k3::runtime
