// The ternary form of IQ1_S rows: the same values as ggml's IQ1_S blocks, re-encoded so that a GEMV
// decodes them with masks instead of grid lookups (the lane-per-row kernel, gemv_iq1s_rows.cu, with
// QuantGemvParams::iq1s_ternary).
//
// Why: an IQ1_S weight is d·(2·ls + 1)·(g + δ) with g ∈ {-1, 0, 1} taken 8 at a time from a
// 2048-entry grid by an 11-bit index. At decode the expert GEMV is bound by that lookup (a random
// shared-memory read per 8 weights, ~3 bank wavefronts, plus the index arithmetic: ~53 instructions
// per row and 32 weights), not by HBM (kernels/cuda/README.md). Stored as 2-bit fields g + 1, eight
// weights need two masks and two DP4A, no memory access: 2.25 bits a weight instead of 1.5625 (44%
// more bytes) for about half the instructions and none of the lookups.
//
// Layout, per 256-weight block (72 bytes, the ggml block's 50 re-encoded):
//   bytes  0..63  16 words of trits: word j holds weights 16j .. 16j + 15 of the block, weight
//                 16j + 4i + m (i, m in 0..3) in bits 8m + 2i, 8m + 2i + 1 as g + 1 (0, 1 or 2);
//                 so word & (0x03030303 << 2i) is weights 16j + 4i .. 16j + 4i + 3 as bytes·4^i
//   bytes 64..67  the 8 sub-blocks' qh >> 12: nibble ib (bits 4ib .. 4ib + 3) = ls (3 bits) and
//                 the sign of δ (bit 3: δ = -1/8)
//   bytes 68..69  d (f16), as in the ggml block
//   bytes 70..71  zero
// A row is its blocks in order, then 8 zero bytes where the blocks alone would make an even
// number of 8-byte words (Iq1sTernaryRowBytes): rows an odd number of 8-byte words apart put a
// 64-row tile's lanes in distinct shared-memory banks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant/iq1s_ternary_layout.h"

namespace k3::cuda {

// The form's sizes (kernels/quant/iq1s_ternary_layout.h, shared with the CPU-side fit check).
using quant::Iq1sTernaryRowBytes;
using quant::Iq1sTernaryTakesCols;
using quant::kIq1sTernaryBlockBytes;
using quant::kIq1sTernaryMaxCols;

// `rows` IQ1_S rows of `cols` weights (dense: 50·cols/256 bytes each, from src) into the ternary
// form at dst (Iq1sTernaryRowBytes(cols) bytes each). Host code: the reference the GPU form is
// tested against.
void Iq1sToTernaryHost(const void* src, int64_t rows, int64_t cols, void* dst);

// The same on the GPU: src and dst device memory, 8-byte aligned dst. cudaErrorInvalidValue for a
// bad shape or pointer (nothing launched).
struct Iq1sToTernaryParams {
  const void* src;  // [rows][50·cols/256] IQ1_S rows, dense
  void* dst;        // [rows][Iq1sTernaryRowBytes(cols)]
  int64_t rows;     // rows of every matrix of a stack together (matrices dense in both)
  int64_t cols;     // a multiple of 256
};
cudaError_t Iq1sToTernary(const Iq1sToTernaryParams& p, cudaStream_t stream);

}  // namespace k3::cuda
