#include "kernels/cpu/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace k3::cpu {

void MlaAttention(const MlaAttentionParams& p) {
  auto row = [&](int64_t t) {
    return p.pages[t / p.page_size] + (t % p.page_size) * p.page_row_stride;
  };
  // Threads only for enough work (a parallel region costs a barrier).
  const bool threads = p.n_heads > 1 && p.n_heads * p.n_rows * p.row_width >= (int64_t{1} << 22);
#pragma omp parallel for schedule(dynamic, 1) if (threads)
  for (int64_t h = 0; h < p.n_heads; ++h) {
    const float* q = p.q + h * p.row_width;
    std::vector<double> score(p.n_rows);
    double mx = -INFINITY;
    for (int64_t t = 0; t < p.n_rows; ++t) {
      const float* r = row(t);
      double s = 0;
      for (int64_t d = 0; d < p.row_width; ++d) s += static_cast<double>(q[d]) * r[d];
      score[t] = s * p.scale;
      mx = std::max(mx, score[t]);
    }
    double sum = 0;
    for (double& s : score) {
      s = std::exp(s - mx);
      sum += s;
    }
    std::vector<double> acc(p.value_width, 0.0);
    for (int64_t t = 0; t < p.n_rows; ++t) {
      const float* r = row(t);
      const double w = score[t] / sum;
      for (int64_t d = 0; d < p.value_width; ++d) acc[d] += w * r[d];
    }
    float* o = p.out + h * p.value_width;
    for (int64_t d = 0; d < p.value_width; ++d) o[d] = static_cast<float>(acc[d]);
  }
}

}  // namespace k3::cpu
