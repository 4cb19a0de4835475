#include "kernels/cpu/residual_mix.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/norm.h"

namespace k3::cpu {

void ResidualMix(const float* const* bank, int n_ckpt, const float* x, const float* w, float eps,
                 int64_t n, float* out) {
  if (n_ckpt == 0) {
    if (out != x) std::copy(x, x + n, out);
    return;
  }
  std::vector<float> p(n_ckpt + 1);
  for (int i = 0; i < n_ckpt; ++i) p[i] = RmsNormDot(bank[i], w, eps, n);
  p[n_ckpt] = RmsNormDot(x, w, eps, n);
  const float mx = *std::max_element(p.begin(), p.end());
  float sum = 0;
  for (float& v : p) {
    v = std::exp(v - mx);
    sum += v;
  }
  for (float& v : p) v /= sum;
  for (int64_t d = 0; d < n; ++d) {
    float acc = p[n_ckpt] * x[d];
    for (int i = 0; i < n_ckpt; ++i) acc += p[i] * bank[i][d];
    out[d] = acc;
  }
}

}  // namespace k3::cpu
