#include "kernels/cpu/activation.h"

namespace k3::cpu {

void SituRow(const float* g, const float* u, float beta, float lambda, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Situ(g[i], u[i], beta, lambda);
}

}  // namespace k3::cpu
