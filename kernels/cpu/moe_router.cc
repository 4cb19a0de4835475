#include "kernels/cpu/moe_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/activation.h"

namespace k3::cpu {

void RouteToken(const RouterParams& p) {
  const int64_t E = p.n_experts;
  std::vector<float> prob(E);
  if (p.sigmoid) {
    for (int64_t e = 0; e < E; ++e) prob[e] = Sigmoid(p.logits[e]);
  } else {
    const float mx = *std::max_element(p.logits, p.logits + E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += prob[e] = std::exp(p.logits[e] - mx);
    for (int64_t e = 0; e < E; ++e) prob[e] = static_cast<float>(prob[e] / sum);
  }
  std::vector<float> choice(E);
  for (int64_t e = 0; e < E; ++e) choice[e] = prob[e] + (p.selection_bias ? p.selection_bias[e] : 0.0f);
  std::vector<int32_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + p.k, order.end(), [&](int32_t a, int32_t b) {
    return choice[a] != choice[b] ? choice[a] > choice[b] : a < b;
  });
  double sum = 0;
  for (int64_t i = 0; i < p.k; ++i) {
    p.ids[i] = order[i];
    p.weights[i] = prob[order[i]];
    sum += p.weights[i];
  }
  if (p.normalize) {
    const float denom = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (int64_t i = 0; i < p.k; ++i) p.weights[i] /= denom;
  }
  if (p.scale != 0.0f && p.scale != 1.0f) {
    for (int64_t i = 0; i < p.k; ++i) p.weights[i] *= p.scale;
  }
}

}  // namespace k3::cpu
