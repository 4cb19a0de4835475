// The Q8_0 GEMV for stacks of short rows (gemv_q8_0_short.cu): QuantGemv's path for the MLA
// heads' absorbed products (k_b: 96 matrices of 512 x 128, v_b: 96 of 128 x 512, one per head,
// each with its own x and y slices), where the block GEMV leaves half its lanes without work (a
// 128-wide row is 16 runs of 8 weights for 32 lanes) and reduces kRows x tokens sums across the
// warp per 4-row tile.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

// True when LaunchQ8_0Short takes a product of this shape: Q8_0 stacks (n_mats > 1 or mat_ids)
// of rows of 128, 256 or 512 weights (4, 8 or 16 blocks: a thread per 4 blocks of a row).
bool Q8_0ShortApplies(quant::GgmlType type, const Args& a);

// y = W·x for the a.n_tokens (<= kQuantGemvMaxTokens) tokens of every slot: per thread, per
// block of 32 weights s = Σ_j q_j·x_j (f32 fmaf in column order), acc += d·s over its 4 blocks in
// order, then the 1, 2 or 4 threads of a row summed by a butterfly. Deterministic; a token's
// outputs do not depend on the other tokens.
cudaError_t LaunchQ8_0Short(const Args& a, cudaStream_t stream);

}  // namespace k3::cuda::qgemv
