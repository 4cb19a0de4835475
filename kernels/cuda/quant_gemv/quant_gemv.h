// Dequantizing matrix-vector and skinny matrix-matrix products on the GPU:
//   y[t][r] = Σ_c W[r][c] · x[t][c]      for r < rows, t < n_tokens (1..16 per launch pass)
// with W in any ggml type the CPU can decode (kernels/quant/dequantize.h), f32 activations and
// f32 accumulation. The same function as k3::quant::MatMul, up to f32 summation order.
//
// Batched form (MoE experts): n_mats matrices of one shape, matrix i being
//   weight + (mat_ids ? mat_ids[i] : i) * mat_stride_bytes,
// each with its own x and y slices (x_mat_stride may be 0: every matrix reads the same x).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace k3::cuda {

inline constexpr int kQuantGemvMaxTokens = 16;  // tokens per kernel pass; more are looped on the host

struct QuantGemvParams {
  quant::GgmlType type;       // weight type; QuantGemvSupports(type) must hold
  const void* weight;         // [n_mats][rows][row_bytes] device, 16-byte aligned
  int64_t rows;               // output rows per matrix (ne[1])
  int64_t cols;               // input width (ne[0]); whole blocks, and a multiple of 8
  size_t row_bytes;           // bytes per row; must equal cols / block_elems * block_bytes (dense)
  int64_t n_mats = 1;         // matrices in this launch (experts); 1 for a plain GEMV
  int64_t mat_stride_bytes = 0;   // bytes between consecutive matrices; multiple of 16
  const int32_t* mat_ids = nullptr;  // [n_mats] device: matrix index per slot, or nullptr = slot i
  const float* x;             // [n_mats][n_tokens][x_stride] device, 16-byte aligned
  int64_t x_stride;           // floats between token rows of x; multiple of 4, >= cols
  int64_t x_mat_stride = 0;   // floats between the x of consecutive slots (0: shared x)
  float* y;                   // [n_mats][n_tokens][y_stride] device
  int64_t y_stride;           // floats between token rows of y, >= rows
  int64_t y_mat_stride = 0;   // floats between the y of consecutive slots
  int64_t n_tokens;           // token rows, >= 1 (looped in passes of kQuantGemvMaxTokens)
  // IQ1_S at decode sizes (n_tokens <= 8, cols <= 8192: the routed experts) only, ignored
  // otherwise: x rounded to int8 per 32 columns (q = rn(x·127/amax), x ≈ amax/127·q, the scale of
  // ggml's q8 blocks) and the products in integer DP4A, Σx kept exact. ~4x fewer instructions per
  // weight; each x carries a rounding error of up to amax/254 (not the exact function any more).
  bool int8_x = false;
  // With int8_x, one-token products of IQ1_S rows of up to 3584 weights take the lane-per-row
  // kernel (gemv_iq1s_rows.cu; token by token when n_tokens > 1, so a token's output does not
  // depend on the others); false keeps the sub-block kernel (the A/B switch of the benchmarks).
  bool iq1s_row_lanes = true;
  // The weights are IQ1_S rows in their ternary form (iq1s_ternary.h: row_bytes must be
  // Iq1sTernaryRowBytes(cols)), which only the lane-per-row kernel reads: int8_x and
  // iq1s_row_lanes must be set and the shape one it takes (cudaErrorInvalidValue otherwise). The
  // outputs are bit for bit those of the same product on the ggml rows.
  bool iq1s_ternary = false;
};

// True for every type with a GPU decoder (the same set as quant::CanDequantize).
bool QuantGemvSupports(quant::GgmlType type);

// Launches the product on `stream`. cudaErrorInvalidValue for a bad shape, type, stride or
// alignment (nothing is launched then); otherwise the launch's error, if any.
cudaError_t QuantGemv(const QuantGemvParams& p, cudaStream_t stream);

// The routed experts' gate and up products and their activation in one launch (decode, int8 x):
// for slot i and token t, y = situ(G_i·x, U_i·x), G the stack of `gate` (its matrices, ids, x and
// y) and U the stack at up_weight, of gate's shape and strides. The values are exactly those of
// QuantGemv on each stack (int8_x) followed by Situ (kernels/cuda/activation/activation.h): half
// the launches, and no pass over the two outputs.
struct QuantGemvGateUpParams {
  QuantGemvParams gate;        // type IQ1_S, int8_x; QuantGemvGateUpSupports(gate) must hold
  const void* up_weight;       // [n_mats][rows][row_bytes] device, 16-byte aligned
  float situ_beta;             // activation.situ_beta (4)
  float situ_lambda;           // activation.situ_linear_beta (25); <= 0 leaves the up value as is
};

// True when QuantGemvGateUpSitu takes gate's shape: the lane-per-row IQ1_S kernel's (int8 x, rows
// of up to 3584 weights, 16-byte aligned matrices).
bool QuantGemvGateUpSupports(const QuantGemvParams& gate);

// cudaErrorInvalidValue when the shape is not supported (nothing is launched then).
cudaError_t QuantGemvGateUpSitu(const QuantGemvGateUpParams& p, cudaStream_t stream);

// Expert-grouped decode form (int8 x, the lane-per-row IQ1_S kernel): the (token, expert) pairs
// sorted by expert (MoeGroupTokens' positions, kernels/cuda/quant_gemm/quant_gemm.h) in passes of
// up to kQuantGemvPassRows consecutive positions of one matrix (MoeGroupPasses). A pass reads and
// decodes its matrix's rows once for all its positions: for pass i and p in [row0[i], row0[i] + n_rows[i]),
//   y + p·y_stride  =  W_{mat[i]} · (x + (x_rows ? x_rows[p] : p)·x_stride),
// each position's values exactly QuantGemv's (int8_x) for that matrix and x. QuantGemvParams gives
// the type (IQ1_S, int8_x), weight, rows, cols, row_bytes, mat_stride_bytes, x, x_stride, y, y_stride;
// n_mats, x_mat_stride, y_mat_stride and n_tokens are not used, mat_ids must be nullptr.
inline constexpr int kQuantGemvPassRows = 2;
struct QuantGemvPasses {
  const int32_t* n_passes;          // [1] device: passes in use, 0..max_passes
  const int32_t* mat;               // [max_passes] device: matrix of pass i (weight + mat·mat_stride_bytes)
  const int32_t* row0;              // [max_passes] device: first position of pass i
  const int32_t* n_rows;            // [max_passes] device: 1..kQuantGemvPassRows positions
  const int32_t* x_rows = nullptr;  // [positions] device: x row of each position, or nullptr (the position)
  int64_t max_passes;               // host bound on *n_passes (the launch is sized for it)
};

// True when the grouped form takes p's shape (the lane-per-row kernel's, as QuantGemvGateUpSupports).
bool QuantGemvGroupedSupports(const QuantGemvParams& p);

// cudaErrorInvalidValue for a shape, stride or pass array it does not take (nothing is launched).
cudaError_t QuantGemvGrouped(const QuantGemvParams& p, const QuantGemvPasses& g, cudaStream_t stream);

// The gate|up form of it: y rows situ(G·x, U·x) (QuantGemvGateUpSitu's values per position).
cudaError_t QuantGemvGateUpSituGrouped(const QuantGemvGateUpParams& p, const QuantGemvPasses& g, cudaStream_t stream);

// Bytes the launch reads at least (weights once, x once per matrix) and writes: the numerator of
// the achieved-bandwidth figure.
size_t QuantGemvMinBytes(const QuantGemvParams& p);

}  // namespace k3::cuda
