// Random expert groups cut into the passes of the expert-grouped GEMV (QuantGemvPasses) for the
// GPU tests: n_groups groups, each a random matrix of n_pool and 1..max_group positions with random
// x rows of n_x, cut into passes of up to kQuantGemvPassRows positions (MoeGroupPasses' cut).
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/quant_gemv/quant_gemv.h"

namespace k3::cuda::testing {

struct ExpertPasses {
  std::vector<int32_t> pos_mat, x_rows;              // per position: its matrix, its x row
  std::vector<int32_t> pass_mat, pass_row0, pass_n;  // per pass: matrix, first position, positions
};

inline ExpertPasses RandomExpertPasses(int64_t n_pool, int64_t n_groups, int64_t n_x, int max_group,
                                       std::mt19937_64& rng) {
  ExpertPasses e;
  for (int64_t gi = 0; gi < n_groups; ++gi) {
    const int32_t mat = static_cast<int32_t>(rng() % n_pool);
    const int n = 1 + static_cast<int>(rng() % max_group);
    const int32_t p0 = static_cast<int32_t>(e.pos_mat.size());
    for (int r = 0; r < n; r += kQuantGemvPassRows) {
      e.pass_mat.push_back(mat);
      e.pass_row0.push_back(p0 + r);
      e.pass_n.push_back(std::min(kQuantGemvPassRows, n - r));
    }
    for (int r = 0; r < n; ++r) {
      e.pos_mat.push_back(mat);
      e.x_rows.push_back(static_cast<int32_t>(rng() % n_x));
    }
  }
  return e;
}

}  // namespace k3::cuda::testing
