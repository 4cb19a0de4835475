// The pieces both IQ1_S wgmma kernels share: gemm_iq1s_wgmma.cu (the weights decoded into the
// A-operand registers of the warpgroups that issue the wgmma) and gemm_iq1s_wgmma_ws.cu (producer
// warpgroups decode into shared memory, a consumer warpgroup issues the wgmma): the tile geometry, the
// 128-byte-swizzle descriptors, the decode of an IQ1_S group (grid or ternary form) into 16 f16
// pairs, and the raw chunk copies of a tile's weight rows.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/quant_gemm/gemm_impl.cuh"
#include "kernels/cuda/quant_gemv/iq1s_ternary.h"

namespace k3::cuda::qgemm::iq1s_wgmma {

using F = qgemv::FmtIQ1_S;
using G = Geo<F>;  // raw chunk = one 256-element block per row (50 bytes in a region of 80)

constexpr int kBN = kWgmmaTokens;         // tokens per tile
constexpr int kWK = 128;                  // K elements per window
constexpr int kRawStages = 3;             // chunk c reuses c - 3's stage (each kernel states its condition)
constexpr int kRawBytes = kRawStages * kBM * G::kRegion;
constexpr int kCodeGridBytes = 2048 * 4;  // StageIq1sCodeGrid
static_assert(G::kChunkElems == 2 * kWK && G::kChunkBlocks == 1);

// The descriptors' high word (A and B alike): bits 32-45 the stride between 8-row groups (1024
// bytes >> 4), bit 62 (bit 30 of this word) the 128-byte swizzle. The low word is DescSw128Lo's.
constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);

// Low word of the matrix descriptor of a K-major tile with the 128-byte swizzle at shared address
// `addr` (the swizzle atom, 8 rows × 128 bytes, 1024-byte aligned; a k16 step inside it adds 32
// bytes): start >> 4 in bits 0-13, leading offset 1 (unused with this swizzle) in bits 16-29; the
// high word is kDescHi. Adding (bytes >> 4) for a step inside the tile never carries out of the
// start field (shared addresses < 256 KiB).
__device__ __forceinline__ uint32_t DescSw128Lo(uint32_t addr) { return ((addr & 0x3ffffu) >> 4) | (1u << 16); }

// ---- IQ1_S decode by byte selection --------------------------------------------------------------

// A group's 32 weights take only three values, w(g) = f16(d·K·(g + δ)) for g in {-1, 0, 1},
// computed with the f16 decode's own instructions (DecodeRuns4F16: HFMA2(g, K, K·δ) exact, then
// HMUL2 by d), so the same f16 values. They sit in two registers, lo = w(0)|w(0) (bytes 0-3) and
// hi = w(-1)|w(+1) (bytes 4-7), and each pair of weights is one PRMT of them whose selector holds,
// per weight, the byte pair of its value (nibbles: w(0) 0,1; w(-1) 4,5; w(+1) 6,7). Those
// selector bytes (0x10, 0x54, 0x76) sit in one register, kSelectorBytes, and the staged grid
// holds per grid row its 8 values' codes (0: w(0), 1: w(-1), 2: w(+1)), a nibble each: 4 bytes an
// entry, so one PRMT of kSelectorBytes by an entry's low (high) half gives the 4 selector bytes of
// values 0-3 (4-7). Against a table of the selectors themselves (8 bytes an entry): 2 PRMT and a
// shift more per grid row, but a 4-byte load whose random rows cost the shared memory ~3.5
// wavefronts instead of ~6 for the 8-byte one (Nsight Compute: 6.1 per LDS.64, a third of the
// kernel's wavefronts), and half the table.
constexpr uint32_t kSelectorBytes = 0x00765410u;  // byte c = the PRMT selector byte of code c
__device__ __forceinline__ const uint32_t* StageIq1sCodeGrid(uint8_t* smem) {
  uint32_t* const dst = reinterpret_cast<uint32_t*>(smem);
  const uint2* const src = reinterpret_cast<const uint2*>(iqdev::kIq1sGrid);
  auto code = [](uint32_t b) { return b == 0 ? 0u : (b & 0x80u) ? 1u : 2u; };  // grid byte -1 = 0xff
  auto codes4 = [&](uint32_t w) {
    return code(w & 0xffu) | code((w >> 8) & 0xffu) << 4 | code((w >> 16) & 0xffu) << 8 | code(w >> 24) << 12;
  };
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) {
    const uint2 g = src[i];
    dst[i] = codes4(g.x) | codes4(g.y) << 16;
  }
  return dst;
}

// PRMT with the selector's 4 nibbles used as they are (__byte_perm masks them with 0x7777 first).
__device__ __forceinline__ uint32_t Prmt(uint32_t lo, uint32_t hi, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(lo), "r"(hi), "r"(sel));
  return d;
}

// The group's three weight values as two registers: .x = w(0)|w(0), .y = w(-1)|w(+1), computed with
// the f16 decode's own instructions (so the same f16 values in both forms of the rows).
__device__ __forceinline__ uint2 GroupValues(const Iq1sGroupF16& q) {
  return make_uint2(AsU32(__hmul2(q.kd2, q.d2)), AsU32(__hmul2(__hfma2(AsHalf2(0x3c00bc00u), q.k2, q.kd2), q.d2)));
}

// The 32 weights of group ib of the IQ1_S block at `blk` (shared, 2-byte aligned) as 16 f16 pairs:
// pairs[4l + j] = weights 8l + 2j, 8l + 2j + 1 (low half first). !valid: all zeros (the scale is
// taken as 0, so `blk` may hold anything; no branch around the decode). The four grid rows
// (Iq1sGroupF16::GridRow: qs byte l | 3 bits of qh << 8) are put together by PRMT from the two
// halves of qs and two words holding the qh bits byte by byte: 3 instructions fewer per row than
// shifting and masking each (the same rows).
__device__ __forceinline__ void DecodeIq1sGroup(const uint8_t* blk, int ib, bool valid, const uint32_t* code_grid,
                                                uint32_t (&pairs)[16]) {
  const Iq1sGroupF16 q(blk, ib, valid);
  const uint2 v = GroupValues(q);
  const uint32_t lo = v.x, hi = v.y;  // w(0)|w(0), w(-1)|w(+1)
  const uint32_t h01 = (q.qh & 7u) | ((q.qh << 5) & 0x700u);          // bytes: qh bits 0-2, 3-5
  const uint32_t h23 = ((q.qh >> 6) & 7u) | ((q.qh >> 1) & 0x700u);   // bytes: qh bits 6-8, 9-11
  const uint32_t rows[4] = {__byte_perm(q.qs, h01, 0x7640u), __byte_perm(q.qs, h01, 0x7651u),
                            __byte_perm(q.qs, h23, 0x7642u), __byte_perm(q.qs, h23, 0x7653u)};
#pragma unroll
  for (int l = 0; l < 4; ++l) {
    const uint32_t e = code_grid[rows[l]];
    const uint2 s = make_uint2(Prmt(kSelectorBytes, 0u, e), Prmt(kSelectorBytes, 0u, e >> 16));
    pairs[4 * l + 0] = Prmt(lo, hi, s.x);  // PRMT reads the low 16 bits of the selector
    pairs[4 * l + 1] = Prmt(lo, hi, s.x >> 16);
    pairs[4 * l + 2] = Prmt(lo, hi, s.y);
    pairs[4 * l + 3] = Prmt(lo, hi, s.y >> 16);
  }
}

// The same 16 pairs from group ib of a block in the ternary form at `blk` (shared, 8-byte aligned):
// trit words 2ib and 2ib + 1 hold the group's weights, weight 16j + 4i + m of the block in byte m,
// bits 2i, 2i + 1 of word j as t = g + 1, so pair 4l + j (weights 8l + 2j, 8l + 2j + 1: bytes m =
// 2(j % 2), + 1 of word l / 2 at i = 2(l % 2) + j / 2) is one mask away. With lo' = w(-1)|w(0) and
// hi' = w(+1) (PRMT(hi, lo, 0x5410) and hi >> 16 of DecodeIq1sGroup's registers: the same f16
// values), value t sits at byte pair (2t, 2t + 1), whose selector byte is 0x10 + 0x22·t: one IMAD
// per 4 weights gives their 4 selector bytes, the low two for m = 0, 1 and the high two for 2, 3.
__device__ __forceinline__ void DecodeTernaryGroup(const uint8_t* blk, int ib, bool valid, uint32_t (&pairs)[16]) {
  const uint2 trits = *reinterpret_cast<const uint2*>(blk + 8 * ib);
  const uint2 hd = *reinterpret_cast<const uint2*>(blk + 64);  // the qh nibbles, then d
  const uint2 v = GroupValues(Iq1sGroupF16(((hd.x >> (4 * ib)) & 15u) << 12, 0u, hd.y & 0xffffu, valid));
  const uint32_t lo2 = Prmt(v.y, v.x, 0x5410u), hi2 = v.y >> 16;  // w(-1)|w(0), w(+1)
#pragma unroll
  for (int l = 0; l < 4; ++l) {
    const uint32_t word = l < 2 ? trits.x : trits.y;
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int i = 2 * (l % 2) + jj;
      const uint32_t sel = ((word >> (2 * i)) & 0x03030303u) * 0x22u + 0x10101010u;
      pairs[4 * l + 2 * jj] = Prmt(lo2, hi2, sel);
      pairs[4 * l + 2 * jj + 1] = Prmt(lo2, hi2, sel >> 16);
    }
  }
}

// The raw chunk copies of a tile (RawChunkCopy's, gemm_impl.cuh, for IQ1_S's one block per chunk)
// with 32-bit offsets inside the matrix (GemmLaunchIq1sWgmma takes matrices of < 2^31 bytes): a
// thread's two rows (passes) and their offsets are fixed for the tile, so a chunk costs each pass
// an add, a mask and the clamp of its byte count before the cp.async (RawChunkCopy's 64-bit
// arithmetic took ~50 instructions per thread and chunk). A piece that holds any of the chunk is
// copied whole, 16 bytes, the next block's bytes included (only the matrix's end clamps it): the
// decode reads only the chunk's 50 bytes, and pieces cut at the chunk's end cost the L1 ~3.5x their
// ideal wavefronts (Nsight Compute: 28 per copy instruction against 8; whole pieces, -3% time).
// kTernary: 72-byte blocks, 8-byte aligned: five pieces, at 8 lanes a row (lanes 5-7 copy nothing:
// their pieces would be the next row's), so four passes of 32 rows.
template <bool kGateUp, bool kTernary>
struct Iq1sChunkCopy {
  static constexpr int kBlockBytes = kTernary ? static_cast<int>(kIq1sTernaryBlockBytes) : F::kBlockBytes;
  static constexpr int kLanes = kTernary ? 8 : G::kLanesPerRow, kRowsPerPass = 32 / kLanes;
  static constexpr int kPassRows = 8 * kRowsPerPass, kPasses = kBM / kPassRows;
  static_assert(kBM == kPasses * kPassRows && kPasses % 2 == 0, "whole passes, half of them up's (kGateUp)");
  static_assert(!kTernary || (kBlockBytes + 8 + 15) / 16 * 16 <= G::kRegion, "a ternary chunk fits a row's region");
  const uint8_t* base[kPasses];  // the pass's matrix (kGateUp: the second half of the passes is up's)
  uint32_t row_off[kPasses];     // the row's byte offset in its matrix
  uint32_t dst[kPasses];         // the piece's shared offset in a stage
  uint32_t piece16;        // 16·piece
  uint32_t mat_bytes;      // bytes of a matrix (gate and up alike): no piece reads past it
  bool valid[kPasses];
  bool copies;             // the lane has a piece (kTernary: pieces 0-4)

  __device__ __forceinline__ Iq1sChunkCopy(const Args& a, const uint8_t* wbase, const uint8_t* wbase_up, int64_t r0,
                                           int n_rows, int tid) {
    const int lane = tid & 31, warp = tid >> 5, piece = lane % kLanes;
    const int row_first = warp * kRowsPerPass + lane / kLanes;
    piece16 = 16u * piece;
    copies = !kTernary || piece < 5;
    mat_bytes = static_cast<uint32_t>(a.rows * a.row_bytes);
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const int r = row_first + ps * kPassRows;      // stage row
      const int mrow = kGateUp ? r % (kBM / 2) : r;  // the row's place in the tile of its matrix
      base[ps] = kGateUp && ps >= kPasses / 2 ? wbase_up : wbase;
      row_off[ps] = static_cast<uint32_t>((r0 + mrow) * a.row_bytes);
      dst[ps] = static_cast<uint32_t>(r * G::kRegion) + piece16;
      valid[ps] = mrow < n_rows;
    }
  }

  // Chunk c (block c of every row) into `stage` ([kBM][kRegion] bytes): the piece's 16 bytes from
  // the 16-byte boundary at or before the chunk when any of them is the chunk's (pieces wholly past
  // its end, and rows past the tile, zero-filled with no read), nothing read past the matrix.
  __device__ __forceinline__ void Issue(int c, uint8_t* stage) const {
    if (kTernary && !copies) return;
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const uint32_t g = row_off[ps] + static_cast<uint32_t>(c) * kBlockBytes;
      const uint32_t src = (g & ~15u) + piece16;
      const int left = static_cast<int>(g + kBlockBytes - src);  // the chunk's bytes from src on
      const uint32_t bytes = valid[ps] && left > 0 ? min(16u, mat_bytes - src) : 0u;  // src < mat_bytes
      CpAsync16Zfill(stage + dst[ps], base[ps] + (bytes != 0 ? src : 0u), bytes);
    }
  }
};

}  // namespace k3::cuda::qgemm::iq1s_wgmma
