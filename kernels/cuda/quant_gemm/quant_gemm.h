// Dequantizing matrix-matrix products on tensor cores, for PREFILL (many tokens):
//   y[p][r] = Σ_c W[r][c] · x[row(p)][c]      for r < rows, p < n_tokens
// with W in any ggml type the GPU GEMV decodes (quant_gemv/decode.cuh: the same 20 types as
// k3::quant::CanDequantize), f32 activations, f32 accumulation. Weights are decoded on the fly
// (f32 a·v + b, exactly the CPU decoder's value) and rounded to f16; activations are rounded to
// f16 (or, with split_x, carried as two f16 halves hi + lo); products run on mma.sync
// m16n8k16 with f32 accumulation. The same function as k3::quant::MatMul up to that rounding.
// Per output, with L1 = Σ_c |W[r][c] x[c]| and L2 = sqrt(Σ_c (W[r][c] x[c])²):
//   worst case    |y - y_cpu| <= ~2^-10 · L1 (every rounding at its bound), ~2^-11 · L1 with
//                 split_x (x keeps ~22 bits: only the weights are rounded);
//   in practice   rms ~3e-4 · L2, max ~1.7e-3 · L2 over millions of outputs (measured on the H200
//                 on the K3 shapes; split_x ~2/3 of that, ~1e-6 · L2 when the weights are exact
//                 in f16: F16, BF16). For random-sign terms |y| ~ L2, so that is a relative error
//                 of a few 1e-4 (tests/cuda/quant_gemm_test.cc emulates the roundings on the host).
// Activations must be finite and |x| < 65504 (the f16 range); weights likewise (any K3 weight is).
// Design and measured rates: kernels/cuda/README.md, "Quant GEMM (prefill)".
//
// Grouped form (MoE experts): n_groups matrices of one shape, matrix g at
//   weight + (mat_ids ? mat_ids[g] : g) * mat_stride_bytes,
// and a grouped token sequence of n_tokens rows in which group g owns rows
// [group_offsets[g], group_offsets[g+1]). group_offsets lives on the device (MoeGroupTokens
// computes it), so the launch geometry uses only n_tokens (an upper bound of the total) and
// n_groups: every launcher here can be captured in a CUDA graph. Row p of the sequence reads
// activation row x_rows ? x_rows[p] : p and writes y row p. Rows at or past
// group_offsets[n_groups] are not written.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace k3::cuda {

struct QuantGemmParams {
  quant::GgmlType type;               // weight type; QuantGemmSupports(type) must hold
  const void* weight;                 // [matrices][rows][row_bytes] device, 16-byte aligned
  int64_t rows;                       // output rows per matrix (ne[1]); any count >= 0
  int64_t cols;                       // input width (ne[0]): whole blocks of the type, multiple of 32, <= 2^25
  size_t row_bytes;                   // bytes per row; must equal cols / block_elems * block_bytes
  int64_t mat_stride_bytes = 0;       // bytes between matrices (grouped); multiple of 16, >= rows*row_bytes
  const int32_t* mat_ids = nullptr;   // [n_groups] device: matrix of group g, or nullptr = g
  const float* x;                     // [*][x_stride] device f32, 16-byte aligned
  int64_t x_stride;                   // floats between activation rows; multiple of 4, >= cols
  const int32_t* x_rows = nullptr;    // [n_tokens] device: activation row of sequence row p, or nullptr = p
                                      // (a negative entry reads zeros)
  float* y;                           // [n_tokens][y_stride] device f32
  int64_t y_stride;                   // floats between output rows, >= rows
  int64_t n_tokens;                   // rows of the (grouped) sequence: the exact count for a plain
                                      // product, an upper bound of group_offsets[n_groups] when grouped
  int64_t n_groups = 1;               // matrices / groups (experts); 1 for a plain product
  const int32_t* group_offsets = nullptr;  // [n_groups + 1] device, non-decreasing, [0] = 0 and
                                           // [n_groups] <= n_tokens; nullptr = one group of all
                                           // n_tokens rows (then n_groups must be 1)
  int64_t x_src_rows = 0;             // with x_rows: rows of x it may name (x is [x_src_rows][x_stride]);
                                      // ignored without x_rows (x then has n_tokens rows)
  bool split_x = false;               // x = hi + lo (two f16 halves, two products): activations keep
                                      // ~22 bits; about half the tensor-core rate
  void* workspace = nullptr;          // device scratch, 256-byte aligned, >= QuantGemmWorkspaceBytes(*this)
                                      // bytes: the f16 copy of x (rounded once, read by every row tile)
  size_t workspace_bytes = 0;         // its size
  // Knobs for tests and benchmarks; generic_decode and token_tile give the same results bit for bit.
  bool generic_decode = false;        // decode IQ1_S weights with the generic f32 decoder instead of
                                      // its f16 path (the same f16 values: see gemm_impl.cuh)
  int32_t token_tile = 0;             // tokens per block: 64 or 128, or 0 = chosen from the shape
                                      // (grouped: 128 once n_tokens / n_groups >= 56; that is the
                                      // bound, so a caller that knows the groups to be shorter, as
                                      // with experts spread over ranks, may set 64)
  // IQ1_S without split_x, generic_decode or token_tile runs on the wgmma kernel (gemm_iq1s_wgmma.cu;
  // an sm_90 GPU and an sm_90a build) unless this is false: the same products of the same f16 values,
  // summed in another order (so not bit for bit the mma.sync kernel's results; the same accuracy bounds).
  bool wgmma = true;
  // x already rounded to f16 in the wgmma kernel's layout (the pre-pass's plane, as
  // QuantGemmGateUpParams::y_half writes it): [x_rows ? x_src_rows : n_tokens][cols] device,
  // 256-byte aligned. The pre-pass is skipped; x and the workspace are then not used (may be null).
  // Only where the product runs on the wgmma kernel (IQ1_S, wgmma, no split_x or test knobs, an
  // sm_90 device and build: QuantGemmTakesHalfX), else cudaErrorInvalidValue.
  const void* x_half = nullptr;
  // IQ1_S weights in the ternary form (quant_gemv/iq1s_ternary.h: row_bytes must then be
  // Iq1sTernaryRowBytes(cols)), which only the wgmma kernel reads: the same f16 values, so the same
  // results bit for bit as the ggml rows. cudaErrorInvalidValue where the product would not run on
  // that kernel (another type, split_x or a test knob, no sm_90 device or build: QuantGemmTakesTernary).
  bool iq1s_ternary = false;
};

// Scratch QuantGemm needs for `p` (type, cols, n_tokens, x_rows, x_src_rows, split_x matter):
// (x_rows ? x_src_rows : n_tokens) · cols · 2 bytes, twice with split_x, rounded up to 256.
size_t QuantGemmWorkspaceBytes(const QuantGemmParams& p);

// True for every type with a GPU decoder (the same set as QuantGemvSupports).
bool QuantGemmSupports(quant::GgmlType type);

// Launches the product on `stream`: a pre-pass rounding x to f16 into the workspace, then the
// product. cudaErrorInvalidValue (or cudaErrorMisalignedAddress) for a bad shape, type, stride,
// pointer, alignment or a short workspace, nothing launched then; otherwise the launch's error, if
// any. No allocation, no host synchronization: capturable in a CUDA graph.
cudaError_t QuantGemm(const QuantGemmParams& p, cudaStream_t stream);

// The MoE experts' gate and up products and their activation in one launch:
//   gate.y[p][r] = situ(Σ_c G[r][c]·x[row(p)][c], Σ_c U[r][c]·x[row(p)][c])
// with G = gate.weight's matrices and U = up_weight's (the same type, form, shape and strides), i.e.
// QuantGemm(gate) and QuantGemm(up) followed by Situ (activation.h), bit for bit: the same
// kernel's sums (tile for tile the same tokens and wgmma sequence), the same device situ. Only
// on the IQ1_S wgmma kernel (QuantGemmGateUpSupports); the workspace is gate's
// (QuantGemmWorkspaceBytes(gate)): x is rounded once for both.
struct QuantGemmGateUpParams {
  QuantGemmParams gate;   // the gate product: shape, x, grouping, workspace; y receives situ
  const void* up_weight;  // [matrices][rows][row_bytes] device, 16-byte aligned: up, gate's layout
  float situ_beta;        // activation.situ_beta (SituParams::beta)
  float situ_lambda;      // activation.situ_linear_beta (SituParams::lambda)
  // Or: situ rounded to f16 straight into the next product's x_half plane ([n_tokens][rows]
  // device, 256-byte aligned; rows a multiple of 128), gate.y then not written: the same halves
  // as gate.y through that product's pre-pass, without the f32 round trip. nullptr: f32 into gate.y.
  void* y_half = nullptr;
};

// True when QuantGemmGateUpSitu takes `gate` (IQ1_S, no split_x or test knobs, a matrix of under
// 2 GiB, the wgmma kernel on this device and build).
bool QuantGemmGateUpSupports(const QuantGemmParams& gate);

// True when p may take x_half (the same condition: p runs on the wgmma kernel).
bool QuantGemmTakesHalfX(const QuantGemmParams& p);

// True when p may take its IQ1_S weights in the ternary form (iq1s_ternary): it runs on the wgmma
// kernel (the same condition again, for p with that form).
bool QuantGemmTakesTernary(const QuantGemmParams& p);

// cudaErrorInvalidValue when !QuantGemmGateUpSupports(p.gate) or for QuantGemm's bad inputs; no
// allocation, no host synchronization: capturable in a CUDA graph.
cudaError_t QuantGemmGateUpSitu(const QuantGemmGateUpParams& p, cudaStream_t stream);

// Multiply-adds ×2 the launch does for `grouped_rows` sequence rows: 2 · rows · cols · grouped_rows
// (the numerator of a TFLOP/s figure).
double QuantGemmFlops(const QuantGemmParams& p, int64_t grouped_rows);

// ---- building blocks of the cuBLAS form (blas_gemm.h) -----------------------------------------

// Rows [row_begin, row_begin + n_rows) of a matrix decoded to f16, row-major [n_rows][cols]: the
// same f16 values QuantGemm's tiles multiply (the decoder's exact value, rounded to nearest).
struct QuantDequantF16Params {
  quant::GgmlType type;  // QuantGemmSupports(type) must hold
  const void* weight;    // [rows][row_bytes] device, 16-byte aligned (row 0 of the matrix)
  int64_t cols;          // whole blocks of the type, multiple of 32
  size_t row_bytes;      // must equal cols / block_elems * block_bytes
  int64_t row_begin;     // first row decoded
  int64_t n_rows;        // rows decoded, >= 0
  void* out;             // [n_rows][cols] f16 device, 16-byte aligned
};
cudaError_t QuantDequantF16(const QuantDequantF16Params& p, cudaStream_t stream);

// x f32 [n_rows][x_stride] -> f16 [n_rows][cols], round to nearest (QuantGemm's pre-pass).
// cols a multiple of 8, x_stride a multiple of 4 and >= cols, x and out 16-byte aligned.
cudaError_t RoundRowsToHalf(const float* x, int64_t x_stride, int64_t n_rows, int64_t cols, void* out,
                            cudaStream_t stream);

// ---- MoE token grouping and combination -------------------------------------------------------

// Groups the router's choices by expert for the grouped QuantGemm, deterministically: grouped
// position p runs over expert 0's (token, choice) pairs, then expert 1's, ...; within an expert
// by token, then choice (i.e. by flat index t·k + j). Three small kernels (per-chunk counts,
// one-block scan, per-chunk stable placement); no atomics whose order could matter.
struct MoeGroupParams {
  const int32_t* ids;        // [n_tokens][k] device: chosen expert (global index)
  int64_t n_tokens;          // tokens (rows of ids), >= 0
  int64_t k;                 // choices per token, 1..64
  int64_t n_experts;         // experts on this rank, 1..4096: local index = id - expert_begin
  int32_t expert_begin = 0;  // first expert of this rank; ids outside [expert_begin,
                             // expert_begin + n_experts) (-1 included) are not on this rank
  int32_t* group_offsets;    // [n_experts + 1] out: exclusive prefix sum of the per-expert counts
  int32_t* x_rows;           // [n_tokens * k] out: grouped position p -> token row (entries at or
                             // past group_offsets[n_experts] are left untouched)
  int32_t* slot_of;          // [n_tokens * k] out: (t, j) -> its grouped position p, or -1
  void* workspace;           // device scratch of MoeGroupWorkspaceBytes(n_tokens, k, n_experts) bytes
  // > 0: the positions also cut into passes for the expert-grouped GEMV (QuantGemvPasses):
  // expert e's positions in runs of pass_rows (the last shorter), experts in order.
  int32_t pass_rows = 0;
  int32_t* n_passes = nullptr;   // [1] out: the passes
  int32_t* pass_mat = nullptr;   // [n_tokens * k] out: pass i's local expert
  int32_t* pass_row0 = nullptr;  // [n_tokens * k] out: its first position
  int32_t* pass_n = nullptr;     // [n_tokens * k] out: its positions, 1..pass_rows
};

// Scratch bytes MoeGroupTokens needs (a multiple of 256).
size_t MoeGroupWorkspaceBytes(int64_t n_tokens, int64_t k, int64_t n_experts);

cudaError_t MoeGroupTokens(const MoeGroupParams& p, cudaStream_t stream);

// out[t][c] (+)= Σ_j weights[t][j] · y[slot_of[t][j]][c] over the choices with slot >= 0 (0 when
// none), summed in increasing slot order, i.e. in expert-index order like the CPU engine
// (worker/engine/ffn_layers.cc): out = ((0 + w·y) + w·y) + ..., each term w·y rounded, then added.
struct MoeCombineParams {
  const float* y;          // [n_grouped][y_stride] device: the grouped expert outputs
  int64_t y_stride;        // floats between rows of y, >= cols
  const int32_t* slot_of;  // [n_tokens][k] device (MoeGroupTokens' output)
  const float* weights;    // [n_tokens][k] device: the router's weights
  int64_t n_tokens;        // >= 0
  int64_t k;               // 1..64
  int64_t cols;            // width of a row, >= 1
  float* out;              // [n_tokens][out_stride] device
  int64_t out_stride;      // >= cols
  bool accumulate = false; // add to out instead of overwriting it
  // The terms in each token's choice order (j = 0..k-1), acc = fmaf(w, y, acc): the per-pair
  // decode combine's arithmetic (engine_cuda CombineExperts), so an expert-grouped decode step
  // gives that path's bits.
  bool choice_order = false;
};

cudaError_t MoeCombineGrouped(const MoeCombineParams& p, cudaStream_t stream);

}  // namespace k3::cuda
