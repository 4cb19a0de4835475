// The small-batch product on tensor cores (QuantGemvMma, gemv_direct.h): the repacked Q8_0 weights
// streamed from HBM straight into registers as in the direct GEMV, turned into f16 mma.sync
// fragments there (no shared-memory staging of weights), one pass of up to 16 tokens reading each
// weight once.
//
// Why: the f32 direct GEMV costs one FMA per weight and token, so from ~8 tokens on it is bound by
// FMAs (two passes of 8 for 16 tokens: ~3x the HBM floor), and the tile GEMM (quant_gemm), built for
// prefill, stages 128 x 128 tiles through shared memory: at 2..16 tokens on the KDA projections it
// ran at ~200 GB/s (H200, 6 layers' q|k|v|g and output: 11 ms against 1.3 for the GEMV at 2 tokens).
//
// A warp owns 32 consecutive rows (four groups of 8: the mma's n) over a contiguous range of the
// 64-column steps. Per step, lane (g, t) (g = lane / 4, t = lane % 4) loads 16 bytes of each of its
// four rows r0 + 8i + g, columns [64s + 16t, 64s + 16t + 16) (one LDG.128 each: the 4 lanes of a row
// read 64 contiguous bytes, a warp 32 rows x 64 bytes), and their f16 scales (one per 32 columns).
// The step is four mma m16n8k16 per row group; the reduction index k of an mma is permuted so that
// every lane's operands are contiguous columns: in mma j (0..3), lane t's k = 2t, 2t+1 are columns
// 64s + 16t + 4j + {0, 1} and k = 2t + 8, 2t + 9 are + {2, 3}, for the weights (B, n = row) and for
// x (A, m = token) alike, so the sum over k is over the right pairs. Next step's loads are issued
// before this step's mma (two register stages). Two forms:
//
// MmaKernel (the default): a block owns 32 rows; its S warps ("slices") take contiguous step ranges
// and read their x from global memory (f32, rounded in registers); at the end the block adds the
// slices' partials in slice order through shared memory. At 16 tokens a step's x is 4 KB against
// 2 KB of weights and every block re-reads all of x: through L2 that outweighs the weights (H200,
// slice8, batch 16: the KDA q|k|v|g product 194 us against an HBM floor of 85, the LM head 566
// against 284; ~5.5 TB/s of L2 traffic).
//
// MmaSharedXKernel (QuantGemvDirectParams::mma_shared_x): a block is W = 4 warps of 32 rows over one
// of S step ranges ("splits"), the S blocks of a row range a thread-block cluster. 16 steps at a
// time the block rounds its split's x to f16 in A-fragment order into shared memory (2 KB a step:
// [quad][lane][4 words], one conflict-free LDS.128 per quad and lane) and its W warps all read it
// there: x read once per 128 rows instead of per 32, rounded once. At the end the cluster's blocks
// add the S splits' partials in split order (distributed shared memory), each block a share of the
// outputs. A pass is up to 64 tokens, as 1..4 tiles of 16 (MmaSharedXKernel<kTiles, kPre>): each step's
// weights become B fragments once and meet every tile's A fragments, so a weight is read and
// converted once per 64 tokens, not per 16 (the 33..64-row decode steps that otherwise take
// cuBLAS's f16 GEMM after a 5-byte-per-weight decode pass). A tile's mma are the one-tile form's,
// in the same order: a token's bits do not depend on its tile or pass. With a scratch
// (QuantGemvDirectParams::x_half) one small launch (XHalfKernel) first rounds the whole call's x into
// those fragments, and the blocks copy them by cp.async into two chunk buffers, the next chunk in
// flight while they work on one: no exposed L2 latency per chunk, half the bytes, no rounding per
// block (at 64 tokens a block's f32 x is 16 KB per step against 8 KB of weights). Not yet run on a
// GPU (session 37).
//
// Numerics: w = f16(d·q) (q exact in f16, one rounding of the product, like the tile GEMM's f16
// weights), x rounded to f16, products and sums in f32 inside the mma, slices (splits) added in
// order. Not the f32 GEMV's result (relative ~1e-3 per product, the tile GEMM's class); the two
// forms differ in summation order only. Deterministic and batch-invariant: the cut depends on the
// shape only, and a token's sums do not depend on the other tokens of its pass.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_gemv/gemv_direct.h"
#include "kernels/cuda/quant_gemv/gemv_direct_kernel.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_ptx.cuh"

namespace k3::cuda {
namespace direct_mma {
namespace {

namespace cg = cooperative_groups;

constexpr int kRowsPerWarp = 32;  // 4 groups of the mma's n = 8
constexpr int kGroups = 4;
constexpr int kSpan = 64;         // columns per step: 4 lanes x 16 int8 per row
constexpr int kMaxSlices = 16;    // MmaKernel: warps per block
constexpr int kSharedWarps = 4;   // MmaSharedXKernel: warps (row blocks of 32) per block, x read once for all
constexpr int kMaxSplits = 8;     // MmaSharedXKernel: blocks per cluster (the portable cluster size)
constexpr int kChunkSteps = 16;   // MmaSharedXKernel: steps of x staged at a time, 16 x 2 KB
constexpr int kStepWords = 4 * 32 * 4;  // one step's x fragments: [quad 4][lane 32][4 words]
constexpr int64_t kTargetWarps = 4096;  // as the direct GEMV's plan: ~31 per SM of an H200

struct Args {
  const int8_t* q;         // [rows][cols] int8 plane
  const __half* scales;    // [rows][cols / 32]
  int64_t rows;
  int32_t cols;            // multiple of 64
  int32_t steps;           // cols / 64
  int32_t slices;          // MmaKernel: warps per block, each a step range
  int32_t warps;           // MmaSharedXKernel: W, row blocks of 32 per block
  int32_t splits;          // MmaSharedXKernel: S, step ranges = blocks per cluster (1: no cluster)
  int32_t chunk;           // MmaSharedXKernel: steps of x staged at a time (<= kChunkSteps)
  const float* x;          // this pass's token 0, [n_tokens][x_stride]
  int64_t x_stride;
  int32_t n_tokens;        // 1..16 (MmaKernel), 1..16·kTiles (MmaSharedXKernel<kTiles, kPre>)
  float* y;                // [n_tokens][y_stride]
  int64_t y_stride;
  const float* add;        // the epilogue's addend, this pass's token 0, or nullptr (gemv_direct.h)
  int64_t add_stride;
  bool accumulate;         // y += (sum + add)
  // MmaSharedXKernel with QuantGemvDirectParams::x_half: this pass's x already as f16 A fragments
  // (XHalfKernel's layout: [tile of 16 tokens][step][kStepWords]), from its first tile; copied per
  // chunk by cp.async into a second buffer while the block works on the first. nullptr: each block
  // rounds its x itself (StageX).
  const uint32_t* xh;
  int64_t xh_tile_words;   // words between xh's tiles: steps * kStepWords
};

struct Stage {
  uint4 q[kGroups];
  uint32_t d[kGroups];
};

__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Four int8 of `w` times the f16 scale d as two f16 pairs: (q0, q1) and (q2, q3). A byte b becomes
// the f16 1024 + (b ^ 0x80) by PRMT (exponent byte 0x64), minus 1152 exactly b; one rounding in
// the product by d.
__device__ __forceinline__ void ScaledPairs(uint32_t w, __half2 d2, uint32_t& lo, uint32_t& hi) {
  const uint32_t u = w ^ 0x80808080u;
  const uint32_t l = __byte_perm(u, 0x64646464u, 0x5140u), h = __byte_perm(u, 0x64646464u, 0x7362u);
  const __half2 bias = __half2half2(__ushort_as_half(static_cast<unsigned short>(0x6480u)));  // 1152
  const __half2 fl = __hmul2(__hsub2(*reinterpret_cast<const __half2*>(&l), bias), d2);
  const __half2 fh = __hmul2(__hsub2(*reinterpret_cast<const __half2*>(&h), bias), d2);
  lo = *reinterpret_cast<const uint32_t*>(&fl);
  hi = *reinterpret_cast<const uint32_t*>(&fh);
}

__device__ __forceinline__ void Mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A warp's four row groups r0 + 8i + g (lane (g, t)): where their 16-byte pieces and scales are, and
// whether they exist (rows past the end load zeros).
struct WarpRows {
  const int8_t* wp[kGroups];
  const __half* sp[kGroups];
  bool live[kGroups];
  __device__ __forceinline__ WarpRows(const Args& a, int64_t r0, int g, int t) {
    const int64_t spr = a.cols / 32;  // scales per row
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      const int64_t r = r0 + 8 * i + g;
      live[i] = r < a.rows;
      const int64_t rr = live[i] ? r : 0;
      wp[i] = a.q + rr * a.cols + 16 * t;
      sp[i] = a.scales + rr * spr + (t >> 1);
    }
  }
  __device__ __forceinline__ void Load(Stage& st, int s) const {
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      if (live[i]) {
        st.q[i] = direct::LdStream128(wp[i] + static_cast<int64_t>(s) * kSpan);
        st.d[i] = direct::LdStreamU16(sp[i] + 2 * static_cast<int64_t>(s));
      } else {
        st.q[i] = make_uint4(0, 0, 0, 0);
        st.d[i] = 0;
      }
    }
  }
};

// One step: the weights of `cur` against x's A fragments (tokens g and g + 8, the lane's 16 columns).
__device__ __forceinline__ void MmaStep(float (&acc)[kGroups][4], const Stage& cur, const uint32_t (&a0)[4],
                                        const uint32_t (&a1)[4], const uint32_t (&a2)[4], const uint32_t (&a3)[4]) {
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const __half2 d2 = __half2half2(__ushort_as_half(static_cast<unsigned short>(cur.d[i])));
    const uint32_t words[4] = {cur.q[i].x, cur.q[i].y, cur.q[i].z, cur.q[i].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t b0, b1;
      ScaledPairs(words[j], d2, b0, b1);
      Mma(acc[i], a0[j], a1[j], a2[j], a3[j], b0, b1);
    }
  }
}

// acc[i] = (token g, rows 8i + 2t, 8i + 2t + 1), (token g + 8, the same rows) into mine[token][row].
__device__ __forceinline__ void StorePartials(const float (&acc)[kGroups][4], float* mine, int g, int t) {
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const int rl = 8 * i + 2 * t;
    mine[g * kRowsPerWarp + rl] = acc[i][0];
    mine[g * kRowsPerWarp + rl + 1] = acc[i][1];
    mine[(g + 8) * kRowsPerWarp + rl] = acc[i][2];
    mine[(g + 8) * kRowsPerWarp + rl + 1] = acc[i][3];
  }
}

// The epilogue of one output: y = v (+ add), or y += that.
__device__ __forceinline__ void WriteOutput(const Args& a, int tok, int64_t row, float v) {
  if (a.add != nullptr) v = __fadd_rn(v, a.add[tok * a.add_stride + row]);
  float* const y = a.y + tok * a.y_stride + row;
  *y = a.accumulate ? __fadd_rn(*y, v) : v;
}

__global__ void __launch_bounds__(32 * kMaxSlices) MmaKernel(const Args a) {
  PdlEnter();
  extern __shared__ float part[];  // [slices][16 tokens][32 rows]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsPerWarp;
  const int s_lo = static_cast<int>(static_cast<int64_t>(a.steps) * warp / a.slices);
  const int s_hi = static_cast<int>(static_cast<int64_t>(a.steps) * (warp + 1) / a.slices);
  const WarpRows rows(a, r0, g, t);
  const bool x0_live = g < a.n_tokens, x1_live = g + 8 < a.n_tokens;
  const float* x0 = a.x + static_cast<int64_t>(x0_live ? g : 0) * a.x_stride + 16 * t;
  const float* x1 = a.x + static_cast<int64_t>(x1_live ? g + 8 : 0) * a.x_stride + 16 * t;

  float acc[kGroups][4] = {};
  Stage cur, nxt;
  if (s_lo < s_hi) rows.Load(cur, s_lo);
  for (int s = s_lo; s < s_hi; ++s) {
    if (s + 1 < s_hi) rows.Load(nxt, s + 1);
    // x of tokens g and g + 8, this lane's 16 columns, as the A fragments of the 4 mma
    uint32_t a0[4], a1[4], a2[4], a3[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 u = x0_live ? __ldg(reinterpret_cast<const float4*>(x0 + s * kSpan) + j) : make_float4(0, 0, 0, 0);
      const float4 v = x1_live ? __ldg(reinterpret_cast<const float4*>(x1 + s * kSpan) + j) : make_float4(0, 0, 0, 0);
      a0[j] = PackHalf2(u.x, u.y);
      a2[j] = PackHalf2(u.z, u.w);
      a1[j] = PackHalf2(v.x, v.y);
      a3[j] = PackHalf2(v.z, v.w);
    }
    MmaStep(acc, cur, a0, a1, a2, a3);
    cur = nxt;
  }
  StorePartials(acc, part + warp * (16 * kRowsPerWarp), g, t);
  __syncthreads();
  for (int e = threadIdx.x; e < a.n_tokens * kRowsPerWarp; e += blockDim.x) {
    const int tok = e / kRowsPerWarp, rl = e - tok * kRowsPerWarp;
    if (r0 + rl >= a.rows) continue;
    float v = part[e];
    for (int w = 1; w < a.slices; ++w) v += part[w * (16 * kRowsPerWarp) + e];
    WriteOutput(a, tok, r0 + rl, v);
  }
}

// One item of x's fragments: token g + 8h's 16 columns of a step (v, as four float4) into quad h
// (the (0, 1) pairs: a0 / a1 of mma j = 0..3) and quad 2 + h (the (2, 3) pairs: a2 / a3) of the
// step's kStepWords at `step`, lane's word.
__device__ __forceinline__ void StoreFragments(uint4* step, int h, int lane, const float4 (&v)[4]) {
  step[h * 32 + lane] = make_uint4(PackHalf2(v[0].x, v[0].y), PackHalf2(v[1].x, v[1].y), PackHalf2(v[2].x, v[2].y),
                                   PackHalf2(v[3].x, v[3].y));
  step[(2 + h) * 32 + lane] = make_uint4(PackHalf2(v[0].z, v[0].w), PackHalf2(v[1].z, v[1].w),
                                         PackHalf2(v[2].z, v[2].w), PackHalf2(v[3].z, v[3].w));
}

// x of steps [s0, s0 + n) into xs as f16 A fragments, kTiles tiles of 16 tokens a step: item
// (step, tile, half h, lane (g, t)) reads token 16·tile + g + 8h's 16 columns 64·step + 16t .. + 15
// (zeros past n_tokens) and writes quad h of the step's tile (the (0, 1) pairs of its four float4:
// a0 / a1 of mma j = 0..3) and quad 2 + h (the (2, 3) pairs: a2 / a3), the values MmaKernel forms in
// registers. Two items per thread at a time, their eight loads together.
template <int kTiles>
__device__ __forceinline__ void StageX(const Args& a, uint32_t* xs, int s0, int n) {
  constexpr int kItems = 2;
  constexpr int kStepItems = 64 * kTiles;
  for (int base = threadIdx.x; base < n * kStepItems; base += kItems * blockDim.x) {
    float4 u[kItems][4];
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int item = base + k * blockDim.x, lane = item & 31, h = (item >> 5) & 1;
      const int tile = (item >> 6) % kTiles, sl = (item >> 6) / kTiles;
      const int tok = 16 * tile + (lane >> 2) + 8 * h;
      if (item < n * kStepItems && tok < a.n_tokens) {
        const float4* src = reinterpret_cast<const float4*>(a.x + tok * a.x_stride +
                                                            static_cast<int64_t>(s0 + sl) * kSpan + 16 * (lane & 3));
#pragma unroll
        for (int j = 0; j < 4; ++j) u[k][j] = __ldg(src + j);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) u[k][j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int item = base + k * blockDim.x, lane = item & 31, h = (item >> 5) & 1;
      if (item >= n * kStepItems) break;
      // (item >> 6) = sl·kTiles + tile: the fragments of step sl, tile `tile`
      StoreFragments(reinterpret_cast<uint4*>(xs + (item >> 6) * kStepWords), h, lane, u[k]);
    }
  }
}

// One step of kTiles > 1 token tiles: the weights of `cur` turned into B fragments once (4 groups x
// 4 mma), then each tile's A fragments from shared memory (xf: the step's first tile, this lane's
// word) against them. Every accumulator sees the same mma in the same order as MmaStep's.
template <int kTiles>
__device__ __forceinline__ void MmaStepTiles(float (&acc)[kTiles][kGroups][4], const Stage& cur, const uint4* xf) {
  uint32_t b[kGroups][4][2];
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const __half2 d2 = __half2half2(__ushort_as_half(static_cast<unsigned short>(cur.d[i])));
    const uint32_t words[4] = {cur.q[i].x, cur.q[i].y, cur.q[i].z, cur.q[i].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) ScaledPairs(words[j], d2, b[i][j][0], b[i][j][1]);
  }
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
    const uint4* const f = xf + tile * (kStepWords / 4);
    const uint4 f0 = f[0], f1 = f[32], f2 = f[64], f3 = f[96];
    const uint32_t a0[4] = {f0.x, f0.y, f0.z, f0.w}, a1[4] = {f1.x, f1.y, f1.z, f1.w};
    const uint32_t a2[4] = {f2.x, f2.y, f2.z, f2.w}, a3[4] = {f3.x, f3.y, f3.z, f3.w};
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) Mma(acc[tile][i], a0[j], a1[j], a2[j], a3[j], b[i][j][0], b[i][j][1]);
    }
  }
}

// x of a whole call as f16 A fragments, once (QuantGemvDirectParams::x_half): item (tile, step,
// half h, lane) writes what StageX writes for that step and tile into out + (tile·steps + step)·
// kStepWords, so the blocks that read it get StageX's very values. x: a.x, a.n_tokens tokens.
__global__ void __launch_bounds__(256) XHalfKernel(const Args a, uint32_t* out, int64_t items) {
  PdlEnter();
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= items) return;
  const int hl = static_cast<int>(item % 64), lane = hl & 31, h = hl >> 5;
  const int64_t ts = item / 64;  // tile·steps + step
  const int64_t tile = ts / a.steps, step = ts - tile * a.steps;
  const int64_t tok = 16 * tile + (lane >> 2) + 8 * h;
  float4 v[4];
  if (tok < a.n_tokens) {
    const float4* src = reinterpret_cast<const float4*>(a.x + tok * a.x_stride + step * kSpan + 16 * (lane & 3));
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = __ldg(src + j);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  StoreFragments(reinterpret_cast<uint4*>(out + ts * kStepWords), h, lane, v);
}

// Steps [s0, s0 + n) of a.xh's kTiles tiles into xs ([step][tile][kStepWords], StageX's layout) by
// 16-byte cp.async from every thread, committed as one group.
template <int kTiles>
__device__ __forceinline__ void CopyXHalf(const Args& a, uint32_t* xs, int s0, int n) {
  constexpr int kUnits = kStepWords / 4;  // 16-byte units of one step and tile
  for (int u = threadIdx.x; u < n * kTiles * kUnits; u += blockDim.x) {
    const int st = u / kUnits, w = u - st * kUnits;  // st = sl·kTiles + tile
    const int sl = st / kTiles, tile = st - sl * kTiles;
    const uint32_t* src = a.xh + tile * a.xh_tile_words + static_cast<int64_t>(s0 + sl) * kStepWords + 4 * w;
    ptx::CpAsync16(ptx::SmemAddr(xs + st * kStepWords + 4 * w), src, 16);
  }
  ptx::CpAsyncCommit();
}

// Registers bound the resident blocks: 4 for one tile (124 registers), fewer for the wider forms
// (their accumulators and the step's B fragments).
constexpr int MinSharedXBlocks(int tiles) { return tiles == 1 ? 4 : tiles == 2 ? 3 : 2; }

// kPre: x comes pre-rounded (a.xh, cp.async into two buffers); otherwise each block rounds it (StageX).
template <int kTiles, bool kPre>
__global__ void __launch_bounds__(32 * kSharedWarps, MinSharedXBlocks(kTiles)) MmaSharedXKernel(const Args a) {
  PdlEnter();
  // x fragments [chunk][kTiles][kStepWords] (two such buffers with a.xh); then partials
  // [warp][16·kTiles tokens][32 rows]
  extern __shared__ __align__(16) uint32_t smem[];
  constexpr int kTileTokens = 16 * kTiles;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int split = static_cast<int>(blockIdx.x % a.splits);
  const int64_t rblock = blockIdx.x / a.splits;
  const int s_lo = static_cast<int>(static_cast<int64_t>(a.steps) * split / a.splits);
  const int s_hi = static_cast<int>(static_cast<int64_t>(a.steps) * (split + 1) / a.splits);
  const WarpRows rows(a, (rblock * a.warps + warp) * kRowsPerWarp, g, t);

  float acc[kTiles][kGroups][4] = {};
  Stage cur, nxt;
  rows.Load(cur, s_lo);  // the weight stream first, then x (every split has a step: splits <= steps)
  // Pre-rounded x (a.xh): two chunk buffers, the next chunk's copy in flight during this one's steps.
  const int chunk_words = a.chunk * kTiles * kStepWords;
  if constexpr (kPre) CopyXHalf<kTiles>(a, smem, s_lo, min(a.chunk, s_hi - s_lo));
  int buf = 0;
  for (int c0 = s_lo; c0 < s_hi; c0 += a.chunk, buf ^= 1) {
    const int n = min(a.chunk, s_hi - c0);
    uint32_t* const xs = smem + (kPre ? buf * chunk_words : 0);
    if constexpr (kPre) {
      if (c0 + a.chunk < s_hi) {
        CopyXHalf<kTiles>(a, smem + (buf ^ 1) * chunk_words, c0 + a.chunk, min(a.chunk, s_hi - c0 - a.chunk));
        ptx::CpAsyncWait<1>();  // this chunk's group is in (the next one may still fly)
      } else {
        ptx::CpAsyncWait<0>();
      }
      __syncthreads();  // every thread's copies of this chunk are visible
    } else {
      if (c0 != s_lo) __syncthreads();  // every warp is done with the previous chunk's x
      StageX<kTiles>(a, xs, c0, n);
      __syncthreads();
    }
    for (int sl = 0; sl < n; ++sl) {
      if (c0 + sl + 1 < s_hi) rows.Load(nxt, c0 + sl + 1);
      const uint4* const xf = reinterpret_cast<const uint4*>(xs + sl * kTiles * kStepWords) + lane;
      if constexpr (kTiles == 1) {
        const uint4 f0 = xf[0], f1 = xf[32], f2 = xf[64], f3 = xf[96];
        const uint32_t a0[4] = {f0.x, f0.y, f0.z, f0.w}, a1[4] = {f1.x, f1.y, f1.z, f1.w};
        const uint32_t a2[4] = {f2.x, f2.y, f2.z, f2.w}, a3[4] = {f3.x, f3.y, f3.z, f3.w};
        MmaStep(acc[0], cur, a0, a1, a2, a3);
      } else {
        MmaStepTiles<kTiles>(acc, cur, xf);
      }
      cur = nxt;
    }
    if constexpr (kPre) __syncthreads();  // every warp is done with xs before the copy of two chunks on refills it
  }
  __syncthreads();  // every warp is done with x: the buffer takes the partials
  float* const part = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
    StorePartials(acc[tile], part + (warp * kTileTokens + 16 * tile) * kRowsPerWarp, g, t);
  }
  // The block's outputs (token, row of its 32·W), this block's share of them: the S splits'
  // partials added in split order, then the epilogue.
  auto finish = [&](auto partial_of_split) {
    const int block_rows = kRowsPerWarp * a.warps;
    for (int e = split * blockDim.x + threadIdx.x; e < a.n_tokens * block_rows; e += a.splits * blockDim.x) {
      const int tok = e / block_rows, rl = e - tok * block_rows;
      const int64_t row = rblock * block_rows + rl;
      if (row >= a.rows) continue;
      const int idx = ((rl / kRowsPerWarp) * kTileTokens + tok) * kRowsPerWarp + rl % kRowsPerWarp;
      float v = partial_of_split(0)[idx];
      for (int k = 1; k < a.splits; ++k) v += partial_of_split(k)[idx];
      WriteOutput(a, tok, row, v);
    }
  };
  if (a.splits == 1) {
    __syncthreads();
    finish([&](int) { return part; });
  } else {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's partials are written
    finish([&](int k) { return cluster.map_shared_rank(part, k); });
    cluster.sync();  // no block leaves while another may still read its partials
  }
}

}  // namespace
}  // namespace direct_mma

size_t QuantGemvMmaXHalfBytes(int64_t n_tokens, int64_t cols) {
  return n_tokens <= 0 || cols <= 0 ? 0 : static_cast<size_t>((n_tokens + 15) / 16 * 16) * static_cast<size_t>(cols) * 2;
}

bool QuantGemvMmaSupports(quant::GgmlType type, int64_t cols) {
  return type == quant::GgmlType::kQ8_0 && cols > 0 && cols % direct_mma::kSpan == 0 && cols <= (int64_t{1} << 28);
}

cudaError_t QuantGemvMma(const QuantGemvDirectParams& p, cudaStream_t stream) {
  using namespace direct_mma;
  if (!QuantGemvMmaSupports(p.type, p.cols) || p.rows < 0 || p.n_tokens < 0) return cudaErrorInvalidValue;
  if (p.weight == nullptr || p.x == nullptr || p.y == nullptr) return cudaErrorInvalidValue;
  if (p.add != nullptr && p.add_stride < p.rows) return cudaErrorInvalidValue;
  if (p.x_stride % 4 != 0 || p.x_stride < p.cols || p.x_stride > (int64_t{1} << 28) || p.y_stride < p.rows) {
    return cudaErrorInvalidValue;
  }
  if ((reinterpret_cast<uintptr_t>(p.weight) & 15u) != 0 || (reinterpret_cast<uintptr_t>(p.x) & 15u) != 0) {
    return cudaErrorMisalignedAddress;
  }
  if (p.mma_shared_x && p.x_half != nullptr &&
      (p.x_half_bytes < QuantGemvMmaXHalfBytes(p.n_tokens, p.cols) || (reinterpret_cast<uintptr_t>(p.x_half) & 15u) != 0)) {
    return cudaErrorInvalidValue;
  }
  if (p.rows == 0 || p.n_tokens == 0) return cudaSuccess;
  const int64_t row_blocks = (p.rows + kRowsPerWarp - 1) / kRowsPerWarp;
  if (row_blocks * kMaxSplits > 0x7fffffff) return cudaErrorInvalidValue;
  Args a{};
  a.q = static_cast<const int8_t*>(p.weight);
  a.scales = reinterpret_cast<const __half*>(static_cast<const uint8_t*>(p.weight) +
                                             RepackedQ8_0ScaleOffset(p.rows, p.cols));
  a.rows = p.rows;
  a.cols = static_cast<int32_t>(p.cols);
  a.steps = static_cast<int32_t>(p.cols / kSpan);
  a.x_stride = p.x_stride;
  a.y_stride = p.y_stride;
  a.add_stride = p.add_stride;
  a.accumulate = p.accumulate;
  // The cut, a function of the shape only: ~kTargetWarps warps in all, each 32 rows x a step range
  // (MmaKernel: S slices per block of 32 rows; MmaSharedXKernel: W = 4 warps per block, S splits
  // per cluster, S the least power of two reaching the target, at most 8).
  const int64_t want = (kTargetWarps + row_blocks - 1) / row_blocks;
  unsigned blocks, threads, cluster = 0;
  size_t smem = 0;
  if (p.mma_shared_x) {
    a.warps = static_cast<int32_t>(std::min<int64_t>(kSharedWarps, row_blocks));
    // a power of two (cluster sizes 1, 2, 4, 8), at most one per step
    int32_t splits = 1;
    while (splits < kMaxSplits && splits < want && 2 * splits <= a.steps) splits *= 2;
    a.splits = splits;
    blocks = static_cast<unsigned>((row_blocks + a.warps - 1) / a.warps * a.splits);
    threads = 32 * a.warps;
    cluster = a.splits > 1 ? static_cast<unsigned>(a.splits) : 0u;
  } else {
    a.slices = static_cast<int32_t>(std::min<int64_t>({want, kMaxSlices, a.steps}));
    blocks = static_cast<unsigned>(row_blocks);
    threads = 32 * a.slices;
    smem = static_cast<size_t>(a.slices) * 16 * kRowsPerWarp * sizeof(float);
  }
  const int64_t pass_tokens = p.mma_shared_x ? kQuantGemvMmaSharedXTokens : kQuantGemvMmaTokens;
  // x rounded to f16 fragments once for the whole call (x_half), one launch before the passes
  const bool pre = p.mma_shared_x && p.x_half != nullptr;
  if (pre) {
    a.x = p.x;
    a.n_tokens = static_cast<int32_t>(std::min<int64_t>(p.n_tokens, 0x7fffffff));
    const int64_t items = (p.n_tokens + 15) / 16 * a.steps * 64;
    K3_CUDA_CHECK(LaunchKernel(XHalfKernel, static_cast<unsigned>((items + 255) / 256), 256u, 0, stream, a,
                               static_cast<uint32_t*>(p.x_half), items));
  }
  a.xh_tile_words = static_cast<int64_t>(a.steps) * kStepWords;
  for (int64_t t0 = 0; t0 < p.n_tokens; t0 += pass_tokens) {
    a.n_tokens = static_cast<int32_t>(std::min<int64_t>(pass_tokens, p.n_tokens - t0));
    a.x = p.x + t0 * p.x_stride;
    a.y = p.y + t0 * p.y_stride;
    a.add = p.add != nullptr ? p.add + t0 * p.add_stride : nullptr;
    if (p.mma_shared_x) {
      // tiles of 16 tokens; a chunk of x is kChunkSteps / tiles steps (at most 32 KB of fragments)
      const int tiles = (a.n_tokens + 15) / 16;
      a.xh = pre ? static_cast<const uint32_t*>(p.x_half) + t0 / 16 * a.xh_tile_words : nullptr;
      // pre-rounded x: two buffers of half the chunk (32 KB in all)
      a.chunk = std::min((pre ? kChunkSteps / 2 : kChunkSteps) / tiles, (a.steps + a.splits - 1) / a.splits);
      // x fragments of a chunk (two with pre), or the warps' partials after the loop (2 KB a warp and tile)
      smem = static_cast<size_t>(std::max((pre ? 2 : 1) * a.chunk, a.warps)) * tiles * kStepWords * sizeof(uint32_t);
      auto* const kernel = pre ? (tiles == 1   ? MmaSharedXKernel<1, true>
                                  : tiles == 2 ? MmaSharedXKernel<2, true>
                                  : tiles == 3 ? MmaSharedXKernel<3, true>
                                               : MmaSharedXKernel<4, true>)
                               : (tiles == 1   ? MmaSharedXKernel<1, false>
                                  : tiles == 2 ? MmaSharedXKernel<2, false>
                                  : tiles == 3 ? MmaSharedXKernel<3, false>
                                               : MmaSharedXKernel<4, false>);
      K3_CUDA_CHECK(LaunchKernelInClusters(kernel, blocks, threads, smem, stream, cluster, a));
    } else {
      K3_CUDA_CHECK(LaunchKernel(MmaKernel, blocks, threads, smem, stream, a));
    }
  }
  return cudaSuccess;
}

}  // namespace k3::cuda
