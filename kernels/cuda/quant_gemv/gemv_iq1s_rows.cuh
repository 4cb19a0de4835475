// The IQ1_S int8-activation GEMV with a lane per row (gemv_iq1s_rows.cu): QuantGemv's path for
// the routed experts' one-token products (QuantGemvParams::int8_x, rows of up to
// kIq1sRowsMaxCols weights).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

// The widest rows the kernel takes (a warp per 256-weight block of the row): its shared memory (the
// grid's 64 KiB and three 64-row stages) fits a 227 KiB Hopper block up to 14 blocks per row.
inline constexpr int kIq1sRowsMaxCols = 3584;

// True when LaunchIq1sRows takes a product of this shape: IQ1_S rows of at most kIq1sRowsMaxCols
// weights (a.bpr blocks) whose matrices start 16-byte aligned (QuantGemv checks the rest).
bool Iq1sRowsApplies(const Args& a);

// y = W·x for ONE token per matrix (a.n_tokens must be 1; QuantGemv loops over tokens), x rounded
// to int8 per 32 columns exactly as the sub-block kernel's int8 path rounds it
// (LaunchIq1sSub(a, true, ...)): the same per-(row, sub-block) terms, summed in another order.
cudaError_t LaunchIq1sRows(const Args& a, cudaStream_t stream);

// The gate and up products of one token per matrix and their activation in one launch:
// y = situ(G·x, U·x), G the stack of `gate` (a's shape, ids, x, y) and U the stack at `up` (16-byte
// aligned, gate's shape and strides). Each product's sums are exactly LaunchIq1sRows's, the
// activation exactly Situ's (detail::SituValue).
cudaError_t LaunchIq1sRowsGateUp(const Args& gate, const uint8_t* up, float situ_beta, float situ_lambda,
                                 cudaStream_t stream);

// Positions per pass of the grouped form (each tile's rows decoded once for that many x).
inline constexpr int kIq1sRowsPassRows = 2;

// The grouped form's passes (device arrays; QuantGemvPasses is the public form).
struct RowPasses {
  const int32_t* n_passes;  // [1]
  const int32_t* mat;       // [passes]: matrix index
  const int32_t* row0;      // [passes]: first position
  const int32_t* n_rows;    // [passes]: 1..kIq1sRowsPassRows positions
  const int32_t* x_rows;    // [positions]: x row of a position, or nullptr (the position)
};

// Expert-grouped: for pass i and p in [row0[i], row0[i] + n_rows[i]), y row p = W_{mat[i]}·(x row
// x_rows[p]), a.x_mat_stride and a.y_mat_stride being the x and y row strides, a.n_mats the most
// passes (a.mat_ids nullptr, a.n_tokens 1). Each position's outputs are exactly LaunchIq1sRows's
// for its matrix and x.
cudaError_t LaunchIq1sRowsGrouped(const Args& a, const RowPasses& g, cudaStream_t stream);
cudaError_t LaunchIq1sRowsGateUpGrouped(const Args& gate, const uint8_t* up, float situ_beta, float situ_lambda,
                                        const RowPasses& g, cudaStream_t stream);

}  // namespace k3::cuda::qgemv
