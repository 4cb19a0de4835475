// The IQ1_S GEMV of the routed experts at decode (one token per matrix, int8 activations): a lane
// per output row (two rows: a 64-row tile), a warp per 256-weight block column, whole tiles staged
// by bulk copies (or cp.async for tiles of odd sizes), and the grid in shared memory in 8 copies
// spread over the banks.
//
// Why a second IQ1_S kernel: the sub-block kernel (gemv_iq1s_sub.cu: a lane per 32-weight column
// of every row) is bound by the L1/shared-memory pipe, not by HBM (ncu, session 9: pipe 73% busy,
// DRAM 15-17%, 35-37 us for 16 experts 3584 -> 3072 against an HBM floor of 7.9 us): per 32 weights
// of a row a lane spends four random 8-byte grid lookups (~6 wavefronts each: 16 random addresses
// per half-warp phase over 16 bank pairs) and four 2-byte global loads spread over four 50-byte
// blocks, then a cross-lane reduction per row. Here:
//   - the grid as 4-byte entries (8 biased nibbles g + 1), 8 copies: entry i of copy c is word
//     8·i + c, so copy c lies in banks c, c + 8, c + 16, c + 24 and lane l reads copy l % 8: four
//     lanes share 4 banks, ~3 wavefronts per lookup (16 copies in 128 KiB, 2 wavefronts, measured
//     the same: 23.9 | 23.9 us against 24.2 | 23.5, and left no room for a third stage);
//   - a lane per row: a tile's 64 rows (64·row_bytes contiguous bytes) land in shared memory by
//     one bulk copy per matrix from thread 0 (kBulk; 16-byte cp.async by every thread where a
//     tile is not whole 16-byte units), two tiles in flight; a lane reads its row's 50-byte block
//     as 13 aligned words (rows 700 bytes apart = 175 words, odd: the 32 lanes' words fall in 32
//     banks);
//   - no cross-lane reduction: a lane sums its rows' 8 sub-blocks of the block, the warps'
//     partials meet once per tile in shared memory; x (rounded to int8 once per matrix, the same
//     256 values for every lane of a warp) is read from shared memory by broadcast, once per
//     sub-block for both rows.
// Per 8 weights: one PRMT (grid index), one IMAD (address), one LDS, two LOP3 (the two nibble
// halves) and two IDP.4A; the SASS of a sub-block is ~53 instructions per row (ncu: ~69 per row and
// sub-block with the loop, 11.9 M warp instructions for 16 experts).
//
// H200, 16 experts, one token, int8 x (k3_cuda_gemv_bench --only=int8x, stream / single launch):
// gate 3584 -> 3072 24.2 / 31.1 us, down 3072 -> 3584 23.5 / 29.1 us, against the sub-block kernel's
// 35.0 / 41.4 and 35.7 / 41.0 (HBM floor 7.9 us); 256 experts (batch 16) 290 us against 438
// (session 5's figure). Slower for several tokens per matrix (4: 93 us against 63, token by token
// here, the weights read once for 4 there); the engine's expert products are one token each.
// What limits it now (ncu, gate): issue 44% (3.5 warps per scheduler: 14 warps of 128 registers per
// SM), stalls on the two barriers' skew (13%), MIO (13%), the ALU pipe (9%, half of the
// instructions are ALU at half rate), fixed-latency dependencies (10%); DRAM 29%.
// Versions measured this session (gate, stream): a warp per block column and 32-row tiles with x
// in 88 registers 31.0 us (14 warps; 64-bit divisions per tile); two warps per block column, x in
// shared memory 27.2 (28 warps, 64 registers; ~94 instructions per row and sub-block); explicit LDS
// addresses 25.4; this form (64-row tiles, the id and x of the next matrix a tile ahead) 23.9-24.2.
//
// kTernary (QuantGemvParams::iq1s_ternary): the rows in their ternary form (iq1s_ternary.h, 72-byte
// blocks, rows an odd number of 8-byte words apart), no grid: a sub-block of a row is two words of
// 2-bit fields g + 1, each word masked four ways (0x03030303 << 2i: weights 4i .. 4i + 3 as bytes
// times 4^i) into four DP4A chains, which are then shifted back and added: the same integer Σ g·q,
// so the same outputs, bit for bit, as the grid form (~31 instructions per row and sub-block against
// ~53, and no shared-memory lookups). The tiles are 44% larger (72 bytes per 256 weights, not 50).
//
// Numerics: per (row, sub-block) exactly the sub-block kernel's int8 term
// dl·(sx·Σ_j g_j·q_j + δ·Σx) (the same rounding of x, the same integers, dl and δ·Σx formed the
// same way), accumulated per lane over the block's 8 sub-blocks in order (fmaf), then over the
// blocks in order. The order depends on the shape only.
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/activation/situ.cuh"
#include "kernels/cuda/bulk_copy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_ptx.cuh"
#include "kernels/cuda/quant_gemv/gemv_iq1s_rows.cuh"
#include "kernels/cuda/quant_gemv/iq1s_ternary.h"

namespace k3::cuda::qgemv {
namespace {

constexpr int kTileRows = 64;                          // two rows per lane: lane and lane + 32
constexpr int kHalfRows = kTileRows / 2;               // gate|up: a tile holds 32 rows of each
constexpr int kStages = 3;                             // tiles in shared memory: two in flight
constexpr int kGridCopies = 8;                         // copy c in banks c, c + 8, c + 16, c + 24
constexpr int kTabBytes = 2048 * kGridCopies * 4;      // 64 KiB
constexpr int kEntryShift = 5;                         // bytes per entry (all copies): 4·kGridCopies
static_assert(4 * kGridCopies == 1 << kEntryShift);
constexpr int kMaxWarps = kIq1sRowsMaxCols / 256;      // a warp per block column
constexpr int kBlockWords = 13;                        // aligned words covering a 50-byte block
constexpr int kTernaryBlockBytes = 72;                 // iq1s_ternary.h
static_assert(kTernaryBlockBytes == kIq1sTernaryBlockBytes);
static_assert(kIq1sTernaryMaxCols == kIq1sRowsMaxCols);
constexpr int kXWords = 12;                            // per sub-block: 8 words of int8 x, -Σq, sx, Σx/8, 0
constexpr int kPassRows = kIq1sRowsPassRows;           // grouped: positions per pass

struct RowArgs {
  const uint8_t* w;        // matrix 0; matrices 16-byte aligned (gate|up: the gate stack)
  const uint8_t* w_up;     // gate|up: the up stack (w's shape and strides); nullptr otherwise
  int64_t mat_stride;      // bytes
  const int32_t* mat_ids;  // or nullptr
  int32_t rows;            // rows per matrix
  int32_t row_bytes;       // 50 * blocks per row (kTernary: Iq1sTernaryRowBytes)
  int32_t tiles_per_mat;   // ceil(rows / rows per tile): kTileRows, or kHalfRows for gate|up
  int64_t n_tiles;         // matrices * tiles_per_mat (< 2^31)
  int64_t n_mats;
  int32_t nw;              // warps per block = blocks per row
  int32_t stage_bytes;     // kTileRows * row_bytes (a multiple of 16: row_bytes is even, or 8k)
  const float* x;          // one token per matrix
  int64_t x_mat_stride;
  float* y;
  int64_t y_mat_stride;
  float situ_beta, situ_lambda;  // gate|up: y = situ(gate row, up row)
  // grouped (kGrouped): the launch's "matrices" are passes (mat_ids = the passes' experts), pass i
  // multiplying positions row0[i] .. row0[i] + n_rows[i] - 1 (x rows x_rows[p], or p; y rows p;
  // x_mat_stride and y_mat_stride are then per row)
  const int32_t* n_passes;   // [1] device
  const int32_t* pass_row0;  // [n_passes]
  const int32_t* pass_rows;  // [n_passes]: 1..kPassRows
  const int32_t* x_rows;     // [positions] or nullptr
};

// A position in the launch's (matrix, tile) order; a tile is `step` rows of the matrix (64, or 32
// rows of gate and the same 32 of up).
struct TileCursor {
  int mat, row0;
  __device__ __forceinline__ void Next(int rows, int step) {
    row0 += step;
    if (row0 >= rows) row0 = 0, ++mat;
  }
};

// A grid entry by shared address (LEA + LDS; as a plain array index the compiler merges the copy's
// lane offset into the index and spends three instructions on the address). Not volatile: the
// table is written once, before the first barrier, and never again.
__device__ __forceinline__ uint32_t LdsGrid(uint32_t addr) {
  uint32_t v;
  asm("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}

// The block's bytes from the 13 words loaded at its start rounded down to 4 (kShift = 0 or 2
// bytes into word 0); `byte` is a constant after unrolling, so these fold to at most one shift.
template <int kShift>
__device__ __forceinline__ uint32_t BlockHalf(const uint32_t (&wd)[kBlockWords], int byte) {
  const int p = byte + kShift;
  return (p & 2) ? wd[p >> 2] >> 16 : wd[p >> 2] & 0xffffu;
}
template <int kShift>
__device__ __forceinline__ uint32_t BlockWord(const uint32_t (&wd)[kBlockWords], int byte) {
  const int p = byte + kShift;
  return (p & 2) ? __funnelshift_r(wd[p >> 2], wd[(p >> 2) + 1], 16) : wd[p >> 2];
}

// x of one warp's 256 columns (8 sub-blocks) into xs (kXWords per sub-block), rounded to int8 as
// QuantizeX32 rounds it: lane l rounds columns 8l .. 8l + 7 (group l % 4 of sub-block l / 4) with
// its sub-block's amax (over 4 lanes); Σx in XSum32's order; Σq.
__device__ __forceinline__ void LoadX8(const float* xb, int lane, float4& a, float4& b) {
  a = __ldg(reinterpret_cast<const float4*>(xb + 8 * lane));
  b = __ldg(reinterpret_cast<const float4*>(xb + 8 * lane + 4));
}
__device__ __forceinline__ void StoreXBlock(const float4& a, const float4& b, int lane, uint32_t* xs) {
  const float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(f[k]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float g = ((f[0] + f[1]) + (f[2] + f[3])) + ((f[4] + f[5]) + (f[6] + f[7]));
  const float g2 = g + __shfl_xor_sync(0xffffffffu, g, 1);       // (g0 + g1) or (g2 + g3)
  const float xsum = g2 + __shfl_xor_sync(0xffffffffu, g2, 2);   // (g0 + g1) + (g2 + g3)
  const float sx = amax / 127.0f;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  uint32_t w[2] = {0, 0};
  int qsum = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int q = __float2int_rn(f[k] * inv);
    qsum += q;
    w[k >> 2] |= (static_cast<uint32_t>(q) & 0xffu) << (8 * (k & 3));
  }
  qsum += __shfl_xor_sync(0xffffffffu, qsum, 1);
  qsum += __shfl_xor_sync(0xffffffffu, qsum, 2);
  uint32_t* const dst = xs + (lane >> 2) * kXWords;
  *reinterpret_cast<uint2*>(dst + 2 * (lane & 3)) = make_uint2(w[0], w[1]);
  if ((lane & 3) == 0) {
    *reinterpret_cast<uint4*>(dst + 8) =
        make_uint4(static_cast<uint32_t>(-qsum), __float_as_uint(sx), __float_as_uint(xsum * 0.125f), 0u);
  }
  __syncwarp();
}

// One token's x words of sub-block ib (StoreXBlock's layout at xt): a = int8 x 0-15, b = 16-31,
// c = -Σq, sx, Σx/8, 0.
struct XSub {
  uint4 a, b, c;
};
__device__ __forceinline__ XSub LoadXSub(const uint32_t* xt, int ib) {
  const uint32_t* const p = xt + kXWords * ib;
  return {*reinterpret_cast<const uint4*>(p), *reinterpret_cast<const uint4*>(p + 4),
          *reinterpret_cast<const uint4*>(p + 8)};
}

// One row's sub-block ib as read from its block: the four grid entries (biased nibbles) and qh.
struct SubWeights {
  uint32_t e0, e1, e2, e3, qh;
};
template <int kShift>
__device__ __forceinline__ SubWeights DecodeSub(const uint32_t (&wd)[kBlockWords], int ib, uint32_t tab_lane) {
  const uint32_t qs = BlockWord<kShift>(wd, 2 + 4 * ib);
  const uint32_t qh = BlockHalf<kShift>(wd, 34 + 2 * ib);
  // grid index of group l: qs byte l | 3 bits of qh << 8 (PRMT from a word whose bytes 2, 3 are 0)
  const uint32_t h01 = (qh & 7u) | ((qh << 5) & 0x700u);
  const uint32_t h23 = ((qh >> 6) & 7u) | ((qh >> 1) & 0x700u);
  return {LdsGrid(tab_lane + (__byte_perm(qs, h01, 0x7640u) << kEntryShift)),
          LdsGrid(tab_lane + (__byte_perm(qs, h01, 0x7651u) << kEntryShift)),
          LdsGrid(tab_lane + (__byte_perm(qs, h23, 0x7642u) << kEntryShift)),
          LdsGrid(tab_lane + (__byte_perm(qs, h23, 0x7653u) << kEntryShift)), qh};
}

// The sub-block's term from its integer Σ_j g_j·q_j (si), the top bits of its qh (ls in bits 12-14,
// δ's sign in bit 15; higher bits ignored), the block's d and x's words xc: dl·(sx·si + δ·Σx), added
// to acc. Both forms of the rows end here: their outputs are the same bits.
__device__ __forceinline__ float SubTerm(int si, uint32_t qh, float d, const uint4& xc, float acc) {
  const float dxs = __uint_as_float(xc.z ^ ((qh & 0x8000u) << 16));  // δ·Σx, δ = ±1/8
  const float dl = d * static_cast<float>(static_cast<int>(((qh >> 11) & 0xeu) | 1u));  // d·(2·ls + 1)
  return fmaf(dl, fmaf(__uint_as_float(xc.y), static_cast<float>(si), dxs), acc);
}

// The row's term of the sub-block with x's words xa, xb, xc: dl·(sx·Σ_j g_j·q_j + δ·Σx), added to acc.
__device__ __forceinline__ float DotSub(const SubWeights& w, float d, const uint4& xa, const uint4& xb,
                                        const uint4& xc, float acc) {
  // low nibbles: values 0..3 of a group (g + 1); high nibbles: values 4..7, 16·(g + 1)
  int lo = static_cast<int>(xc.x), hi = 0;
  lo = __dp4a(static_cast<int>(w.e0 & 0x0f0f0f0fu), static_cast<int>(xa.x), lo);
  hi = __dp4a(static_cast<int>(w.e0 & 0xf0f0f0f0u), static_cast<int>(xa.y), hi);
  lo = __dp4a(static_cast<int>(w.e1 & 0x0f0f0f0fu), static_cast<int>(xa.z), lo);
  hi = __dp4a(static_cast<int>(w.e1 & 0xf0f0f0f0u), static_cast<int>(xa.w), hi);
  lo = __dp4a(static_cast<int>(w.e2 & 0x0f0f0f0fu), static_cast<int>(xb.x), lo);
  hi = __dp4a(static_cast<int>(w.e2 & 0xf0f0f0f0u), static_cast<int>(xb.y), hi);
  lo = __dp4a(static_cast<int>(w.e3 & 0x0f0f0f0fu), static_cast<int>(xb.z), lo);
  hi = __dp4a(static_cast<int>(w.e3 & 0xf0f0f0f0u), static_cast<int>(xb.w), hi);
  return SubTerm(lo + (hi >> 4), w.qh, d, xc, acc);  // Σ g·q exact: hi is a multiple of 16
}

// Both rows of this lane over the block (8 sub-blocks in order) for kTok tokens (x of token t at
// xq + t·x_tok_words): each sub-block's weights decoded once, its x words read once for both rows.
// acc[t][r] for row r (lane, lane + 32) and token t; each token's sums exactly the one-token ones.
template <int kShift, int kTok>
__device__ __forceinline__ void RowPair(const uint32_t* src0, const uint32_t* src1, uint32_t tab_lane,
                                        const uint32_t* xq, int x_tok_words, float (&acc)[kTok][2]) {
  uint32_t w0[kBlockWords], w1[kBlockWords];
#pragma unroll
  for (int k = 0; k < kBlockWords; ++k) w0[k] = src0[k], w1[k] = src1[k];
  const float d0 = HalfToFloat(BlockHalf<kShift>(w0, 0)), d1 = HalfToFloat(BlockHalf<kShift>(w1, 0));
#pragma unroll
  for (int t = 0; t < kTok; ++t) acc[t][0] = 0.0f, acc[t][1] = 0.0f;
#pragma unroll
  for (int ib = 0; ib < 8; ++ib) {
    const SubWeights s0 = DecodeSub<kShift>(w0, ib, tab_lane), s1 = DecodeSub<kShift>(w1, ib, tab_lane);
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      const XSub x = LoadXSub(xq + t * x_tok_words, ib);
      acc[t][0] = DotSub(s0, d0, x.a, x.b, x.c, acc[t][0]);
      acc[t][1] = DotSub(s1, d1, x.a, x.b, x.c, acc[t][1]);
    }
  }
}

// Σ a_k·b_k over the four bytes, a unsigned (a trit mask's bytes reach 0x80), b signed, plus c.
__device__ __forceinline__ int Dp4aUS(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// DotSub for a ternary sub-block: t = its two trit words, nib = its qh >> 12 (in bits 0-3; higher
// bits ignored), d the block's scale.
// Chain i collects the bytes masked by 0x03030303 << 2i, i.e. 4^i·(g + 1) of weights 4i .. 4i + 3
// of each word (x words xa.i and xb.i); the chains are exact multiples of 4^i, so shifting them
// back gives Σ(g + 1)·q exactly, and chain 0 starts at -Σq: si is DotSub's Σ g·q.
__device__ __forceinline__ float DotSubTernary(const uint2& t, uint32_t nib, float d, const uint4& xa,
                                               const uint4& xb, const uint4& xc, float acc) {
  int c0 = static_cast<int>(xc.x), c1 = 0, c2 = 0, c3 = 0;
  c0 = Dp4aUS(t.x & 0x03030303u, xa.x, c0);
  c1 = Dp4aUS(t.x & 0x0c0c0c0cu, xa.y, c1);
  c2 = Dp4aUS(t.x & 0x30303030u, xa.z, c2);
  c3 = Dp4aUS(t.x & 0xc0c0c0c0u, xa.w, c3);
  c0 = Dp4aUS(t.y & 0x03030303u, xb.x, c0);
  c1 = Dp4aUS(t.y & 0x0c0c0c0cu, xb.y, c1);
  c2 = Dp4aUS(t.y & 0x30303030u, xb.z, c2);
  c3 = Dp4aUS(t.y & 0xc0c0c0c0u, xb.w, c3);
  return SubTerm(c0 + (c1 >> 2) + (c2 >> 4) + (c3 >> 6), nib << 12, d, xc, acc);  // exact: c_i is a multiple of 4^i
}

// RowPair for ternary rows: src0, src1 = the two rows' 72-byte blocks (8-byte aligned).
template <int kTok>
__device__ __forceinline__ void RowPairTernary(const uint32_t* src0, const uint32_t* src1, const uint32_t* xq,
                                               int x_tok_words, float (&acc)[kTok][2]) {
  const uint2 m0 = *reinterpret_cast<const uint2*>(src0 + 16), m1 = *reinterpret_cast<const uint2*>(src1 + 16);
  const float d0 = HalfToFloat(m0.y & 0xffffu), d1 = HalfToFloat(m1.y & 0xffffu);
#pragma unroll
  for (int t = 0; t < kTok; ++t) acc[t][0] = 0.0f, acc[t][1] = 0.0f;
#pragma unroll
  for (int ib = 0; ib < 8; ++ib) {
    const uint2 t0 = *reinterpret_cast<const uint2*>(src0 + 2 * ib);
    const uint2 t1 = *reinterpret_cast<const uint2*>(src1 + 2 * ib);
    const uint32_t n0 = m0.x >> (4 * ib), n1 = m1.x >> (4 * ib);
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      const XSub x = LoadXSub(xq + t * x_tok_words, ib);
      acc[t][0] = DotSubTernary(t0, n0, d0, x.a, x.b, x.c, acc[t][0]);
      acc[t][1] = DotSubTernary(t1, n1, d1, x.a, x.b, x.c, acc[t][1]);
    }
  }
}

// Sums one token's partials of a tile in warp order into y (the tile's output row: y[r] for tile
// row r, with rows at or past a.rows - row0 left alone). part 0: rows 0-31 (lane rows), part 1: rows
// 32-63. gate|up: part p takes rows 16·p .. 16·p + 15 of the tile, lanes 0-15 their gate sums and
// lanes 16-31 their up sums (the same loads per warp as the plain tile's), then lane j < 16 gets
// lane j + 16's sum and writes the situ of the two.
template <bool kGateUp>
__device__ __forceinline__ void StoreTilePart(const RowArgs& a, const float* red, float* y, int row0, int part,
                                              int lane) {
  if constexpr (kGateUp) {
    const int r = 16 * part + (lane & 15), idx = (lane >> 4) * kHalfRows + r;
    float v = red[idx];
#pragma unroll 4
    for (int w = 1; w < a.nw; ++w) v += red[w * kTileRows + idx];
    const float u = __shfl_xor_sync(0xffffffffu, v, 16);
    if (lane < 16 && row0 + r < a.rows) y[row0 + r] = detail::SituValue(v, u, a.situ_beta, a.situ_lambda);
    return;
  }
  const int r = 32 * part + lane;
  float v = red[r];
#pragma unroll 4
  for (int w = 1; w < a.nw; ++w) v += red[w * kTileRows + r];
  if (row0 + r < a.rows) y[row0 + r] = v;
}

// Grid: one block per SM over a contiguous range of the launch's (matrix, 64-row tile) order; warp
// c owns block column c of every row, lane l rows l and l + 32 of every tile. Tiles stream through
// kStages shared-memory stages (one commit group each). The warps' partials of tile li go to
// red[li & 1][token][warp][row], and after the next tile's barrier warps 0 and 1 (and 2, 3 for a
// second token) sum them in warp order.
// A warp re-rounds its 256 columns of x when the tile's matrix has another x (each warp reads only
// what it wrote: no block barrier); the next matrix's x and expert id are loaded a tile ahead.
// kGateUp: a tile is rows row0 .. row0 + 31 of the gate matrix (lane rows) and the same rows of the
// up matrix (lane + 32 rows), and y gets situ(gate, up): every row's two sums exactly as the plain
// kernel forms them (a lane's two rows are independent chains), then the activation.
// kBulk (tiles of whole 16-byte units, BulkTiles): thread 0 fetches a tile with one bulk copy per
// matrix (ptx::BulkCopy) counted on the stage's mbarrier, and the warps wait on that barrier for
// the tile, instead of every thread issuing its share of 16-byte cp.async (~100 instructions per
// warp and tile, an eighth of the kernel's).
// kGrouped: the matrices are passes of one expert over up to kPassRows positions (RowArgs): a
// tile's rows are read and decoded once and dotted with each position's x (rounded at the pass's
// first tile, both read then: a block meets few passes); every position's sums are exactly the
// one-token kernel's. The pass count is read on the device, the grid sized for the most passes.
template <bool kGateUp, bool kBulk, bool kGrouped, bool kTernary>
__global__ void __launch_bounds__(32 * kMaxWarps, 1) Iq1sRowsKernel(const RowArgs a) {
  PdlEnter();
  constexpr int kTok = kGrouped ? kPassRows : 1;
  constexpr int kTab = kTernary ? 0 : kTabBytes;
  constexpr int kBlk = kTernary ? kTernaryBlockBytes : 50;  // bytes of a row's 256-weight block
  extern __shared__ __align__(16) uint8_t dsm[];
  uint32_t* const tab = reinterpret_cast<uint32_t*>(dsm);
  uint8_t* const stages = dsm + kTab;
  uint32_t* const xs = reinterpret_cast<uint32_t*>(stages + kStages * a.stage_bytes);
  const int nw = a.nw, nthreads = 32 * nw;
  const int x_tok_words = 8 * nw * kXWords;  // one token's rounded x
  const int red_tok = nw * kTileRows;        // one token's partials of a tile
  float* const red = reinterpret_cast<float*>(xs + kTok * x_tok_words);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // kBulk: a barrier per stage, after the partials and LaunchRows's 16 spare bytes
  const uint32_t bar0 = ptx::SmemAddr(red + 2 * kTok * red_tok) + 16;
  if (kBulk && tid == 0) {
    for (int st = 0; st < kStages; ++st) ptx::MbarInit(bar0 + 8 * st, 1);
    ptx::MbarInitFence();
  }

  // the grid, entry i = the 8 values g of kIq1sGrid[i] as nibbles g + 1: value k < 4 in the low
  // nibble of byte k, value k + 4 in its high nibble; kGridCopies copies side by side
  for (int i = tid; i < (kTernary ? 0 : 2048); i += nthreads) {
    const uint64_t g = iqdev::kIq1sGrid[i];
    uint32_t e = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int v = static_cast<int8_t>(static_cast<uint8_t>(g >> (8 * k)));
      e |= (static_cast<uint32_t>(v + 1) & 0xfu) << (8 * (k & 3) + 4 * (k >> 2));
    }
    uint4* const dst = reinterpret_cast<uint4*>(tab + kGridCopies * i);
#pragma unroll
    for (int j = 0; j < kGridCopies / 4; ++j) dst[j] = make_uint4(e, e, e, e);
  }

  const int64_t n_mats = kGrouped ? static_cast<int64_t>(*a.n_passes) : a.n_mats;
  const int64_t n_tiles = kGrouped ? n_mats * a.tiles_per_mat : a.n_tiles;
  const int64_t t_lo = n_tiles * blockIdx.x / gridDim.x, t_hi = n_tiles * (blockIdx.x + 1) / gridDim.x;
  const int n_local = static_cast<int>(t_hi - t_lo);
  const int step = kGateUp ? kHalfRows : kTileRows;
  const TileCursor first{static_cast<int>(t_lo / a.tiles_per_mat), static_cast<int>(t_lo % a.tiles_per_mat) * step};
  TileCursor in = first, cur = first;  // the next tile to load, the tile to compute
  auto mat_id = [&](int mat) -> int64_t {
    return a.mat_ids != nullptr && mat < n_mats ? static_cast<int64_t>(a.mat_ids[mat]) : mat;
  };
  int64_t in_id = mat_id(in.mat);
  const uint32_t stage0 = ptx::SmemAddr(stages);
  int in_stage = 0;
  // Tile li (the next one) into its stage: cp.async, one commit group per tile (empty past the
  // end); kBulk: thread 0's bulk copies on the stage's barrier.
  auto issue = [&](int li) {
    if (li < n_local) {
      const int64_t at = in_id * a.mat_stride + static_cast<int64_t>(in.row0) * a.row_bytes;
      const uint8_t* const src = a.w + at;
      const int bytes = min(step, a.rows - in.row0) * a.row_bytes;
      const uint32_t dst = stage0 + in_stage * a.stage_bytes;
      const uint32_t dst_up = dst + kHalfRows * a.row_bytes;  // gate|up: the up rows in the stage's second half
      if constexpr (kBulk) {
        if (tid == 0) {
          const uint32_t bar = bar0 + 8 * in_stage;
          ptx::MbarArriveExpectTx(bar, static_cast<uint32_t>(kGateUp ? 2 * bytes : bytes));
          ptx::BulkCopy(dst, src, static_cast<uint32_t>(bytes), bar);
          if constexpr (kGateUp) ptx::BulkCopy(dst_up, a.w_up + at, static_cast<uint32_t>(bytes), bar);
        }
      } else {
        for (int k = 16 * tid; k < bytes; k += 16 * nthreads) ptx::CpAsync16(dst + k, src + k, min(16, bytes - k));
        if constexpr (kGateUp) {
          const uint8_t* const up = a.w_up + at;
          for (int k = 16 * tid; k < bytes; k += 16 * nthreads) ptx::CpAsync16(dst_up + k, up + k, min(16, bytes - k));
        }
      }
      in_stage = in_stage + 1 == kStages ? 0 : in_stage + 1;
      const int m = in.mat;
      in.Next(a.rows, step);
      if (in.mat != m) in_id = mat_id(in.mat);  // needed a tile from now
    }
    if constexpr (!kBulk) ptx::CpAsyncCommit();
  };
  if constexpr (kBulk) __syncthreads();  // the barriers are initialized
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);

  const uint32_t tab_lane = ptx::SmemAddr(tab) + 4u * (lane & (kGridCopies - 1));
  uint32_t* const xq = xs + 8 * warp * kXWords;
  const uint32_t off = static_cast<uint32_t>(lane * a.row_bytes + kBlk * warp);  // row `lane`'s block in a stage
  const uint32_t off1 = off + 32u * static_cast<uint32_t>(a.row_bytes);         // row lane + 32's
  float4 xa, xb;  // x of tile `cur`'s matrix, this lane's 8 columns, once the matrix changes
  if (!kGrouped && n_local > 0) LoadX8(a.x + cur.mat * a.x_mat_stride + 256 * warp, lane, xa, xb);
  int x_mat = -1;  // the matrix whose x xq holds
  int cur_y = 0, cur_n = 1;    // kGrouped: the first output row and the positions of x_mat's pass
  int prev_y = 0, prev_n = 1;  // the same for tile li - 1
  int stage = 0;
  TileCursor prev = first;
  // Tile t's sums (partials rb) into y: a job per (token, half of the tile) for warps 0, 1, ...
  auto store = [&](const float* rb, const TileCursor& t, int y0, int nt) {
    for (int job = warp; job < 2 * nt; job += nw) {
      const int64_t yrow = kGrouped ? y0 + (job >> 1) : t.mat;
      StoreTilePart<kGateUp>(a, rb + (job >> 1) * red_tok, a.y + yrow * a.y_mat_stride, t.row0, job & 1, lane);
    }
  };
  for (int li = 0; li < n_local; ++li) {
    if constexpr (!kBulk) ptx::CpAsyncWait<kStages - 2>();
    __syncthreads();  // tile li is in (kBulk: below); every warp is done with tile li - 1's stage and partials
    if (li > 0) store(red + ((li - 1) & 1) * (kTok * red_tok), prev, prev_y, prev_n);
    issue(li + kStages - 1);
    if (x_mat < 0 || (cur.mat != x_mat && a.x_mat_stride != 0)) {
      x_mat = cur.mat;
      if constexpr (kGrouped) {
        cur_y = a.pass_row0[cur.mat];
        cur_n = a.pass_rows[cur.mat];
        for (int t = 0; t < cur_n; ++t) {
          const int64_t xrow = a.x_rows != nullptr ? a.x_rows[cur_y + t] : cur_y + t;
          LoadX8(a.x + xrow * a.x_mat_stride + 256 * warp, lane, xa, xb);
          StoreXBlock(xa, xb, lane, xq + t * x_tok_words);
        }
      } else {
        StoreXBlock(xa, xb, lane, xq);
      }
    }
    TileCursor next = cur;
    next.Next(a.rows, step);
    if (!kGrouped && li + 1 < n_local && next.mat != cur.mat && a.x_mat_stride != 0) {
      LoadX8(a.x + next.mat * a.x_mat_stride + 256 * warp, lane, xa, xb);  // needed a tile from now
    }
    if constexpr (kBulk) ptx::MbarWait(bar0 + 8 * stage, static_cast<uint32_t>(li / kStages) & 1u);  // tile li is in
    const uint8_t* const st = stages + stage * a.stage_bytes;
    const uint32_t* const src0 = reinterpret_cast<const uint32_t*>(st + (off & ~3u));
    const uint32_t* const src1 = reinterpret_cast<const uint32_t*>(st + (off1 & ~3u));
    float* const rb = red + (li & 1) * (kTok * red_tok) + warp * kTileRows + lane;
    auto compute = [&](auto tok) {
      constexpr int kT = decltype(tok)::value;
      float acc[kT][2];
      if constexpr (kTernary) {
        RowPairTernary<kT>(src0, src1, xq, x_tok_words, acc);
      } else if (off & 2u) {
        RowPair<2, kT>(src0, src1, tab_lane, xq, x_tok_words, acc);
      } else {
        RowPair<0, kT>(src0, src1, tab_lane, xq, x_tok_words, acc);
      }
#pragma unroll
      for (int t = 0; t < kT; ++t) rb[t * red_tok] = acc[t][0], rb[t * red_tok + 32] = acc[t][1];
    };
    if (kTok > 1 && cur_n == kTok) {
      compute(std::integral_constant<int, kTok>{});
    } else {
      compute(std::integral_constant<int, 1>{});
    }
    prev = cur, prev_y = cur_y, prev_n = cur_n;
    cur = next;
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  if (n_local > 0) {
    __syncthreads();
    store(red + ((n_local - 1) & 1) * (kTok * red_tok), prev, prev_y, prev_n);
  }
}

// Whether every tile of the launch is whole 16-byte units (bulk copies): full tiles always are
// (32 or 64 rows of an even row_bytes), the last tile of a matrix when its rows times row_bytes is.
bool BulkTiles(const RowArgs& r, int step) { return (static_cast<int64_t>(r.rows % step) * r.row_bytes) % 16 == 0; }

template <bool kGateUp, bool kBulk, bool kGrouped, bool kTernary>
cudaError_t LaunchRowsAs(const RowArgs& r, cudaStream_t stream) {
  // the grid, the stages, x and two buffers of partials per token, 16 bytes for the last lane's
  // 13-word read past its stage's end, the stages' barriers: at 14 blocks per row 212 KB (one
  // token) or 220 KB (two, kGrouped) of a Hopper block's 227
  constexpr int kTok = kGrouped ? kPassRows : 1;
  const int smem = (kTernary ? 0 : kTabBytes) + kStages * r.stage_bytes + kTok * (8 * r.nw * kXWords * 4 + 2 * r.nw * kTileRows * 4) +
                   16 + 8 * kStages;
  const int threads = 32 * r.nw;
  const void* kernel = reinterpret_cast<const void*>(&Iq1sRowsKernel<kGateUp, kBulk, kGrouped, kTernary>);
  int per_sm = 0;
  K3_CUDA_CHECK(PrepareKernel(kernel, threads, smem, &per_sm));
  const int64_t cap = static_cast<int64_t>(per_sm) * detail::MultiprocessorCount();
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(r.n_tiles, cap)));
  return LaunchKernel(Iq1sRowsKernel<kGateUp, kBulk, kGrouped, kTernary>, grid, threads, smem, stream, r);
}

template <bool kGateUp, bool kGrouped = false>
cudaError_t LaunchRows(const RowArgs& r, bool ternary, cudaStream_t stream) {
  const bool bulk = BulkTiles(r, kGateUp ? kHalfRows : kTileRows);
  if (ternary) {
    return bulk ? LaunchRowsAs<kGateUp, true, kGrouped, true>(r, stream)
                : LaunchRowsAs<kGateUp, false, kGrouped, true>(r, stream);
  }
  return bulk ? LaunchRowsAs<kGateUp, true, kGrouped, false>(r, stream)
              : LaunchRowsAs<kGateUp, false, kGrouped, false>(r, stream);
}

// The launch's arguments from QuantGemv's; tiles of `step` rows per matrix.
RowArgs MakeRowArgs(const Args& a, int step) {
  RowArgs r{};
  r.w = a.w;
  r.mat_stride = a.mat_stride;
  r.mat_ids = a.mat_ids;
  r.rows = static_cast<int32_t>(a.rows);
  r.row_bytes = static_cast<int32_t>(a.row_bytes);
  r.tiles_per_mat = static_cast<int32_t>((a.rows + step - 1) / step);
  r.n_tiles = a.n_mats * r.tiles_per_mat;
  r.nw = a.bpr;
  r.stage_bytes = kTileRows * r.row_bytes;  // 3200·bpr, or 64 rows of 8k bytes: a multiple of 16
  r.x = a.x;
  r.x_mat_stride = a.x_mat_stride;
  r.y = a.y;
  r.y_mat_stride = a.y_mat_stride;
  r.n_mats = a.n_mats;
  return r;
}

}  // namespace

bool Iq1sRowsApplies(const Args& a) {
  const bool aligned = (reinterpret_cast<uintptr_t>(a.w) & 15u) == 0 && a.mat_stride % 16 == 0;
  const int64_t tiles = a.n_mats * ((a.rows + kHalfRows - 1) / kHalfRows);  // the gate|up tiling's count
  return a.bpr >= 1 && a.bpr <= kMaxWarps && aligned && tiles < (int64_t{1} << 31);
}

cudaError_t LaunchIq1sRows(const Args& a, cudaStream_t stream) {
  if (a.n_tokens != 1 || !Iq1sRowsApplies(a)) return cudaErrorInvalidValue;
  return LaunchRows<false>(MakeRowArgs(a, kTileRows), a.ternary, stream);
}

cudaError_t LaunchIq1sRowsGateUp(const Args& gate, const uint8_t* up, float situ_beta, float situ_lambda,
                                 cudaStream_t stream) {
  if (gate.n_tokens != 1 || !Iq1sRowsApplies(gate) || up == nullptr || (reinterpret_cast<uintptr_t>(up) & 15u) != 0) {
    return cudaErrorInvalidValue;
  }
  RowArgs r = MakeRowArgs(gate, kHalfRows);
  r.w_up = up;
  r.situ_beta = situ_beta;
  r.situ_lambda = situ_lambda;
  return LaunchRows<true>(r, gate.ternary, stream);
}

namespace {

// The grouped launch's arguments: `a` describes one position (x and y row strides in x_mat_stride
// and y_mat_stride, a.n_mats = the most passes: the grid's bound).
cudaError_t GroupedRowArgs(const Args& a, const RowPasses& g, int step, RowArgs* r) {
  if (a.n_tokens != 1 || a.mat_ids != nullptr || !Iq1sRowsApplies(a) || g.n_passes == nullptr || g.mat == nullptr ||
      g.row0 == nullptr || g.n_rows == nullptr || a.x_mat_stride <= 0 || a.y_mat_stride <= 0) {
    return cudaErrorInvalidValue;
  }
  *r = MakeRowArgs(a, step);
  r->mat_ids = g.mat;
  r->n_passes = g.n_passes;
  r->pass_row0 = g.row0;
  r->pass_rows = g.n_rows;
  r->x_rows = g.x_rows;
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchIq1sRowsGrouped(const Args& a, const RowPasses& g, cudaStream_t stream) {
  RowArgs r{};
  K3_CUDA_CHECK(GroupedRowArgs(a, g, kTileRows, &r));
  return LaunchRows<false, true>(r, a.ternary, stream);
}

cudaError_t LaunchIq1sRowsGateUpGrouped(const Args& gate, const uint8_t* up, float situ_beta, float situ_lambda,
                                        const RowPasses& g, cudaStream_t stream) {
  if (up == nullptr || (reinterpret_cast<uintptr_t>(up) & 15u) != 0) return cudaErrorInvalidValue;
  RowArgs r{};
  K3_CUDA_CHECK(GroupedRowArgs(gate, g, kHalfRows, &r));
  r.w_up = up;
  r.situ_beta = situ_beta;
  r.situ_lambda = situ_lambda;
  return LaunchRows<true, true>(r, gate.ternary, stream);
}

}  // namespace k3::cuda::qgemv
