// Direct-load GEMV for decode (1..8 tokens per pass): weights go from HBM straight to registers
// with 16-byte loads (no shared-memory staging), f32 activations, f32 accumulation:
//   y[t][r] = Σ_c W[r][c] · x[t][c]      for r < rows, t < n_tokens
// The same function as k3::quant::MatMul, up to f32 summation order. Design, expected and
// measured speed: kernels/cuda/README.md, "Direct GEMV".
//
// Weight types:
//   Q8_0  in the repacked GPU layout below (RepackQ8_0, once at load), not ggml's 34-byte blocks;
//   F32, F16, BF16 as they come: dense row-major [rows][cols], no repack.
//
// Repacked Q8_0 layout (RepackedQ8_0Bytes(rows, cols) bytes from the start `base`, 16-byte aligned):
//   quants  int8 [rows][cols]        at base                              row r at base + r * cols
//   scales  f16  [rows][cols / 32]   at base + RepackedQ8_0ScaleOffset(rows, cols)   (a multiple of 256)
// Element (r, c) is w = f16→f32(scales[r][c / 32]) · quants[r][c]: ggml's block d and qs[c % 32],
// moved, not converted, so every weight is the very f32 value quant::DequantizeRow gives. Bytes per
// weight stay 34/32 (1.0625), as in ggml. Each row is 16-byte aligned (cols % 32 == 0), so lane j
// of a warp reads quants [16 j, 16 j + 16) of a 512-column step with one LDG.128 and the 32 lanes
// read 512 contiguous bytes; the 16 scales of that step are 32 contiguous bytes.
//
// Numerics, and batch invariance. The summation order depends on (type, rows, cols) only, never on
// n_tokens, the other tokens, or the device: a row is cut into 16-byte chunks, lane j of a warp
// takes chunks j, j + 32, ... ("steps"), the steps are cut into `slices` contiguous ranges (the plan
// below), a lane forms its chain of f32 FMAs over one slice, the 32 lanes are summed by a fixed
// xor-butterfly tree, and the slices are added left to right. So a token's y is bit-identical
// whatever batch it comes in, and from run to run (no atomics; the slices of a row are added by one
// thread block, in order, through shared memory: no workspace, no second pass).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace k3::cuda {

inline constexpr int kQuantGemvDirectMaxTokens = 8;  // tokens per kernel pass; more are looped on the host

// ---- the repacked Q8_0 layout ------------------------------------------------------------------

// Byte offset of the scale plane: rows * cols rounded up to a multiple of 256.
size_t RepackedQ8_0ScaleOffset(int64_t rows, int64_t cols);
// Bytes of the whole repacked matrix (quants, padding, scales).
size_t RepackedQ8_0Bytes(int64_t rows, int64_t cols);

// Rewrites `rows` rows of ggml Q8_0 blocks (dense: row r at src + r * (cols / 32) * 34; `src`
// 2-byte aligned) into the layout above at `dst` (16-byte aligned, RepackedQ8_0Bytes(rows, cols)
// bytes, not overlapping `src`). cols % 32 == 0. One kernel on `stream`; exact (bytes are moved).
// cudaErrorInvalidValue / cudaErrorMisalignedAddress for bad arguments, nothing launched then.
cudaError_t RepackQ8_0(const void* src, int64_t rows, int64_t cols, void* dst, cudaStream_t stream);

// The same for a part: `rows` rows of ggml blocks become rows [dst_row0, dst_row0 + rows) of the
// repacked matrix of dst_rows rows at `dst` (RepackedQ8_0Bytes(dst_rows, cols) bytes), so matrices of
// one width can be stacked into one (a layer's projections of the same input, one GEMV launch).
cudaError_t RepackQ8_0Rows(const void* src, int64_t rows, int64_t cols, void* dst, int64_t dst_rows, int64_t dst_row0,
                           cudaStream_t stream);

// The inverse view, for tests and debugging: out[r][c] = w of the repacked matrix at `repacked`,
// as f32 (out: rows * cols floats, device), computed with the GEMV's own decoder.
cudaError_t DequantizeRepackedQ8_0(const void* repacked, int64_t rows, int64_t cols, float* out,
                                   cudaStream_t stream);

// ---- the product ---------------------------------------------------------------------------------

struct QuantGemvDirectParams {
  quant::GgmlType type;   // kQ8_0 (repacked, see above), kF32, kF16 or kBF16
  const void* weight;     // device, 16-byte aligned. Q8_0: RepackQ8_0's output for (rows, cols);
                          // F32/F16/BF16: [rows][cols] dense row-major
  int64_t rows;           // output rows (ne[1]), >= 0
  int64_t cols;           // input width (ne[0]), 1..2^28; Q8_0: multiple of 32, F32: of 4, F16/BF16: of 8
  const float* x;         // [n_tokens][x_stride] device, 16-byte aligned; not written
  int64_t x_stride;       // floats between token rows of x; multiple of 4, >= cols, <= 2^28
  float* y;               // [n_tokens][y_stride] device; only y[t][0 .. rows) is written; must not overlap x
  int64_t y_stride;       // floats between token rows of y, >= rows
  int64_t n_tokens;       // token rows, >= 0 (passes of kQuantGemvDirectMaxTokens)
  // The epilogue (QuantGemvDirect and QuantGemvMma): y[t][r] = s + add[t][r], then
  // with `accumulate` y[t][r] = y[t][r] + that, s being the row's sum. The same f32 adds, in the
  // same order, as the product into a buffer followed by separate element-wise adds (a residual
  // stream's x += W·o + shared, one launch instead of three).
  const float* add = nullptr;  // [n_tokens][add_stride] device, or nullptr; must not overlap y
  int64_t add_stride = 0;      // floats between token rows of add, >= rows when add is set
  bool accumulate = false;     // y += (sum + add) instead of y = sum + add
  // QuantGemvDirect only, for benchmarks: the cut forced (QuantGemvDirectPlanWith's slices and
  // groups_per_block; 0 = the plan's). The slices change the summation order (not the batch
  // invariance); the groups per block change nothing but speed.
  int plan_slices = 0;
  int plan_groups_per_block = 0;
  // QuantGemvMma only: its second form (gemv_direct_mma.cu, MmaSharedXKernel: x staged once per 4
  // warps in shared memory, the columns split over a thread-block cluster). The same products, the
  // sums in another order (the engine's CudaEngineOptions::mma_shared_x decides, on by default).
  bool mma_shared_x = false;
  // With mma_shared_x: a scratch (device, 16-byte aligned, at least QuantGemvMmaXHalfBytes(n_tokens,
  // cols) bytes) where one launch first rounds all of x to the f16 A fragments the blocks would
  // form, which they then copy by cp.async, the next chunk in flight while they work on one (no
  // per-block rounding, half the bytes of f32 x through L2). The same values: the same results, bit
  // for bit. nullptr: each block rounds its x itself.
  void* x_half = nullptr;
  size_t x_half_bytes = 0;
};

// True for kQ8_0 (repacked), kF32, kF16, kBF16.
bool QuantGemvDirectSupports(quant::GgmlType type);

// Launches the product on `stream`: one kernel per pass of up to 8 tokens, no allocation, no host
// synchronization, so it can be captured in a CUDA graph. cudaErrorInvalidValue for a bad type,
// shape, stride or null pointer, cudaErrorMisalignedAddress for a misaligned weight or x (nothing
// launched then); otherwise the launch's error, if any. rows == 0 or n_tokens == 0: nothing to do.
cudaError_t QuantGemvDirect(const QuantGemvDirectParams& p, cudaStream_t stream);

// Bytes the launch reads at least (weights once, x once) and writes (y): the numerator of the
// achieved-bandwidth figure.
size_t QuantGemvDirectMinBytes(const QuantGemvDirectParams& p);

// How a shape is cut (a pure function of type, rows and cols). Exposed for tests and benchmarks.
struct QuantGemvDirectPlan {
  int elems_per_chunk = 0;  // weights per 16-byte load: Q8_0 16, F16/BF16 8, F32 4
  int64_t chunks = 0;       // 16-byte chunks per row (cols / elems_per_chunk)
  int steps = 0;            // ceil(chunks / 32): a lane's chunks in one row
  int slices = 0;           // contiguous step ranges per row, each one warp's job (1..16)
  int rows_per_warp = 0;    // rows a warp streams side by side (4, or 1 for narrow outputs)
  int groups_per_block = 0; // row groups (of rows_per_warp rows) per thread block
  int items_per_block = 0;  // groups_per_block * slices: (group, slice) items, one warp's job each
  int64_t blocks = 0;       // thread blocks of one pass (the warps per block depend on the pass's M)
};
// False for an unsupported type or a shape QuantGemvDirect would refuse.
bool QuantGemvDirectPlanFor(quant::GgmlType type, int64_t rows, int64_t cols, QuantGemvDirectPlan* plan);
// The same with the cut forced, for benchmarks that search it: `slices` in 1..min(steps, 16),
// `groups_per_block` in 1..64 with groups_per_block * slices <= 256; 0 takes the plan's choice
// (groups_per_block's is then 1 for 4 rows per warp, else 8 / slices, at least 1). False also for a choice out
// of range. QuantGemvDirectPlanFor(t, r, c, p) is QuantGemvDirectPlanWith(t, r, c, 0, 0, p).
bool QuantGemvDirectPlanWith(quant::GgmlType type, int64_t rows, int64_t cols, int slices, int groups_per_block,
                             QuantGemvDirectPlan* plan);

// ---- the small-batch product on tensor cores (gemv_direct_mma.cu) ------------------------------

// The same product for a few tokens on mma.sync (m16n8k16, f16 operands, f32 accumulation): the
// repacked Q8_0 weights straight to registers as f16(d·q), x rounded to f16, one pass per 16
// tokens reading every weight once (the f32 GEMV pays one FMA per weight and token; from ~8 tokens
// that, not HBM, is its limit). Not the f32 GEMV's numbers (~1e-3 relative per product, the tile
// GEMM's class); deterministic, and a token's result does not depend on the others of the call.
inline constexpr int kQuantGemvMmaTokens = 16;  // tokens per pass; more are looped on the host
// With mma_shared_x: tokens per pass of the second form, as up to 4 tiles of 16 that share each
// step's weights (each weight read and turned into f16 once per 64 tokens). A token's result is the
// same in any tile and pass.
inline constexpr int kQuantGemvMmaSharedXTokens = 64;

// Bytes QuantGemvDirectParams::x_half needs for n_tokens rows of cols: whole tiles of 16 tokens, f16.
size_t QuantGemvMmaXHalfBytes(int64_t n_tokens, int64_t cols);

// True for kQ8_0 (repacked) with cols a multiple of 64.
bool QuantGemvMmaSupports(quant::GgmlType type, int64_t cols);

// As QuantGemvDirect (same params and epilogue, same checks and errors; one kernel per pass of 16
// tokens, of 64 with mma_shared_x).
cudaError_t QuantGemvMma(const QuantGemvDirectParams& p, cudaStream_t stream);

}  // namespace k3::cuda
