// The IQ1_S GEMV for decode (1..8 tokens per matrix): the routed experts' product, which is half
// of a batch-1 decode step. Same function as the generic kernel (gemv_impl.cuh) for IQ1_S, same
// Args, chosen by QuantGemv for IQ1_S when n_tokens <= kIq1sSubMaxTokens.
//
// Why a kernel of its own: IQ1_S has ~5 weights per byte, so at 4.4 TB/s the whole issue budget is
// ~1.5 instructions per weight; the generic kernel decodes 8 weights at a time (re-reading the
// block's d and the sub-block's qh per 8, through shared memory: ~7 instructions per weight, 10% of
// HBM). Here a lane owns whole 32-weight sub-blocks: d, qh (scale, delta sign, grid high bits) and
// the 4 qs bytes are read once per sub-block straight from global memory, the scale and delta are
// formed once per 32 weights.
//
// Main kernel (Iq1sSubColKernel, rows of up to 8192 weights): column slices. A team of
// ceil(n_sub / 32) warps covers a whole row, lane j of warp w owning sub-block column 32w + j of
// every row, so x of its 32 columns is loaded once per matrix (registers for one token, shared
// memory, laid out conflict-free, for 2..4 tokens; more tokens run in passes of 4). The grid is
// a 4-byte table in shared memory (8 nibbles per entry, one LDS.32 per 8 weights, fewer bank
// conflicts than the 8-byte one); a nibble masked into the top byte of a zero word is the float 2g
// exactly, so a weight costs one PRMT and one FMA. Rows are walked in groups of 4 (the next group's
// loads in flight) and reduced every 32 rows: lanes by the xor butterfly, warps through shared
// memory in warp order.
//
// Numerics: per (row, sub-block) s = Σ_j g_j·x_j over its 32 columns in column order (computed as
// Σ 2g·x, an exact rescaling), then dl·(s + δ·Σ_j x_j) with dl = d·(2·ls + 1) and δ = ±1/8 (ggml's
// w = dl·(g + δ), rearranged); sub-blocks summed by the fixed lane butterfly then warp order. The
// order depends on the shape only: a token's output is the same whatever else is in the batch.
//
// int8 activations (QuantGemvParams::int8_x, CudaEngineOptions::int8_expert_x): each lane rounds x of its
// sub-block column to int8 once per matrix (q = rn(x·127/amax), sx = amax/127, ggml's q8 rule) and
// a sub-block is s = sx·Σ_j g_j·q_j, the integer sum in two DP4As per 8 weights against the grid
// read as packed int8 (an 8-byte table); δ·Σx keeps the exact f32 Σx. ~4x fewer instructions per
// weight than the f32 path; the cost is x's rounding (relative ~1/254 per element). One token:
// rows in groups of 8 (ColRows). H200, 16 experts 3584 -> 3072, 1 token: 36.6 us (f32 path 52.7).
// Tried, not kept: the grid as 4-byte entries of biased nibbles g + 1 (one LDS.32 per 8 weights,
// half the bank conflicts, DP4As started from -Σq): 36.3 us. ncu of this kernel (int8, 16 experts):
// issue slots 59% busy, DRAM 17%, 3.6 active warps per scheduler (128 registers: 2 blocks of 256
// threads per SM), ~127 instructions per (row, lane) sub-block: latency with too few warps, and
// per-row overhead (loads' address arithmetic, butterfly) as large as the decode itself.
// Tried, not kept (session 9): the same lanes and reduction fed from shared memory, whole 8-row
// tiles copied by 16-byte cp.async 4 tiles ahead (63 registers, 5.6 warps per scheduler, bit for bit
// the same outputs): 37.0 us, unchanged. ncu: L1/shared pipe 73% busy (the grid lookups, 4 random
// LDS.64 per sub-block, and the 2-byte sub-block loads), issue 58%, DRAM 15%: global latency was
// not the limit; fewer shared-memory wavefronts per weight would be.
//
// Rows wider than kIq1sSubMaxCols stay on the block GEMV (QuantGemv decides).
//
// H200 (k3_cuda_gemv_bench --only=expert, stream): 16 experts 3584 -> 3072, 1 token: 52 us (a
// first warp-per-rows version: 87, no better than the block GEMV's 81; HBM floor 7.9); down
// 3072 -> 3584: 52 (87); 4 tokens: 152 (234); 8 tokens: 304 (707); 256 slots x 1 token: 684 (1331). Still instruction-bound, not memory-bound:
// ~720 warp instructions per 4-row group of a warp (ALU pipe 64%, issue 65%, DRAM 11%): the decode
// (~470: per weight an FFMA and ~1.5 ALU ops), the 16 loads' 64-bit address arithmetic (~160) and
// the lane butterfly / warp reduction (~90).
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_gemv/gemv_iq1s_sub.cuh"
#include "kernels/cuda/quant_gemv/warp_butterfly.cuh"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda::qgemv {
namespace {

__device__ __forceinline__ int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

__device__ __forceinline__ uint32_t LdG16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}

// ---- the column-slice kernel (rows of up to kColMaxSub sub-blocks) --------------------------------

constexpr int kColMaxWarps = 8;                  // sub-block columns per team: up to 32 * 8
constexpr int kColMaxSub = 32 * kColMaxWarps;    // i.e. rows of up to 8192 weights
static_assert(kColMaxSub * 32 == kIq1sSubMaxCols);
constexpr int kColSuper = 32;                    // rows per cross-warp reduction (8 groups)
constexpr int kColMaxTeams = 8;                  // named barriers 1..8
constexpr int kColMaxTokens = 4;                 // tokens per pass
constexpr int kColG = 4;                         // rows per group (loaded together, the next group in flight)

// Rows per group of an instantiation: 8 for the int8 path of one token (x in 8 registers instead of
// 32 leaves room for twice the loads in flight; held to 128 registers, two blocks per SM), else
// kColG. The result does not depend on it.
template <int M, bool kI8>
constexpr int ColRows() {
  return kI8 && M == 1 ? 2 * kColG : kColG;
}

struct ColArgs {
  const uint8_t* w;
  int64_t mat_stride;
  const int32_t* mat_ids;
  int64_t n_mats, rows, row_bytes;
  int32_t n_sub;     // sub-blocks (32 weights) per row
  int32_t n_warps;   // warps per team: ceil(n_sub / 32)
  int32_t n_teams;   // teams per block
  int32_t n_tokens;  // <= M
  const float* x;
  int64_t x_stride, x_mat_stride;
  float* y;
  int64_t y_stride, y_mat_stride;
};

// The 4-byte grid: entry i holds the 8 values g of kIq1sGrid[i] as nibbles c(g) (c(1) = 0x4,
// c(-1) = 0xC, c(0) = 0): value k < 4 in the high nibble of byte k, value k + 4 in the low nibble.
// A nibble moved to the top of an otherwise zero word is the float 2·g (0x40000000 = 2.0).
__device__ __forceinline__ uint32_t Iq1sNibbleEntry(uint64_t g) {
  uint32_t e = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int v = static_cast<int8_t>(static_cast<uint8_t>(g >> (8 * k)));
    const uint32_t c = v > 0 ? 0x4u : v < 0 ? 0xCu : 0u;
    e |= k < 4 ? c << (8 * k + 4) : c << (8 * (k - 4));
  }
  return e;
}

// Byte k of `w` alone at the top of a word, as a float (PRMT with zero bytes below).
__device__ __forceinline__ float TopByteF(uint32_t w, int k) {
  return __uint_as_float(__byte_perm(w, 0u, 0x0444u | (static_cast<uint32_t>(k) << 12)));
}

// Σ of a sub-block's 32 x values, in one fixed order (every path computes it this way).
__device__ __forceinline__ float XSum32(const float (&f)[32]) {
  float g[4];
#pragma unroll
  for (int l = 0; l < 4; ++l) {
    const float* p = f + 8 * l;
    g[l] = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
  }
  return (g[0] + g[1]) + (g[2] + g[3]);
}

__device__ __forceinline__ void LoadX32(const float* p, float (&f)[32]) {
  const float4* q = reinterpret_cast<const float4*>(p);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 v = __ldg(q + i);
    f[4 * i] = v.x, f[4 * i + 1] = v.y, f[4 * i + 2] = v.z, f[4 * i + 3] = v.w;
  }
}

// x of one sub-block column rounded to int8 (packed 4 per word, column order) with its scale:
// x_j ≈ sx·q_j. amax = 0 gives q = 0, sx = 0.
__device__ __forceinline__ void QuantizeX32(const float (&f)[32], int (&q)[8], float& sx) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(f[i]));
  sx = amax / 127.0f;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    uint32_t v = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) v |= (static_cast<uint32_t>(__float2int_rn(f[4 * w + k] * inv)) & 0xffu) << (8 * k);
    q[w] = static_cast<int>(v);
  }
}

template <int G>
struct ColLoads {  // one lane's sub-block of G rows
  uint32_t d[G], qh[G], qs0[G], qs1[G];
};

template <int G>
__device__ __forceinline__ void ColLoad(const uint8_t* row0, int64_t row_bytes, int n_rows, bool live, int od,
                                        int oqh, int oqs, ColLoads<G>& s) {
#pragma unroll
  for (int r = 0; r < G; ++r) {
    if (live && r < n_rows) {
      const uint8_t* p = row0 + r * row_bytes;
      s.d[r] = LdG16(p + od);
      s.qh[r] = LdG16(p + oqh);
      s.qs0[r] = LdG16(p + oqs);
      s.qs1[r] = LdG16(p + oqs + 2);
    } else {
      s.d[r] = 0, s.qh[r] = 0, s.qs0[r] = 0, s.qs1[r] = 0;
    }
  }
}

// kI8: p[r·M + t] = dl·(sx_t·Σ_j g_j·q_tj + δ·Σx_t) for the rows r < nr of a group: per row the 4 grid
// entries (8 int8 each) and 8 DP4As per token.
template <int M, int G>
__device__ __forceinline__ void Iq1sI8Group(const ColLoads<G>& cur, const uint2* tab2, const int (&xq)[M][8],
                                            const float (&sx)[M], const float (&xsum)[M], int nr, float* p) {
#pragma unroll
  for (int r = 0; r < G; ++r) {
    const uint32_t qh = cur.qh[r], q0 = cur.qs0[r], q1 = cur.qs1[r];
    const uint32_t qhs = (qh & 7u) | ((qh & 0x38u) << 5) | ((qh & 0x1c0u) << 10) | ((qh & 0xe00u) << 15);
    uint2 e[4];
    e[0] = tab2[__byte_perm(q0, qhs, 0x3240u)];
    e[1] = tab2[__byte_perm(q0, qhs, 0x3251u)];
    e[2] = tab2[__byte_perm(q1, qhs, 0x3260u)];
    e[3] = tab2[__byte_perm(q1, qhs, 0x3271u)];
    const float dl = HalfToFloat(cur.d[r]) * SmallIntF(static_cast<int>(2 * ((qh >> 12) & 7u) + 1));
    const float del = __uint_as_float(0x3e000000u | ((qh & 0x8000u) << 16));  // ±1/8
#pragma unroll
    for (int t = 0; t < M; ++t) {
      int si = 0;
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        si = __dp4a(static_cast<int>(e[l].x), xq[t][2 * l], si);
        si = __dp4a(static_cast<int>(e[l].y), xq[t][2 * l + 1], si);
      }
      if (r < nr) p[r * M + t] = dl * fmaf(sx[t], static_cast<float>(si), del * xsum[t]);
    }
  }
}

template <int M>
constexpr int ColThreads() {
  return M == 1 ? 256 : M == 2 ? 512 : 384;
}

// Work split: a team (n_warps warps) covers a whole row: lane j of warp w owns sub-block column
// c = 32w + j of every row (its d, qh, 4 qs bytes; x of its 32 columns, held in registers for one
// token, else in shared memory, loaded once per matrix). A block (n_teams teams) takes one
// contiguous range of the launch's (matrix, row) space; within each matrix the range is split
// evenly over the teams; a team walks its rows in groups of kColG (the next group's loads in flight)
// and reduces every kColSuper rows: lanes by the xor butterfly, then warps through shared memory in
// warp order. Per (row, token) the sum is Σ_c dl_c·(s_c + δ_c·Σx_c) over the columns c in that fixed
// tree, s_c = Σ_j 2g_j·x_j / 2 in column order (kI8: s_c = sx_c·Σ_j g_j·q_j, exact integers): it
// depends on the shape only.
template <int M, bool kI8>
__global__ void __launch_bounds__(ColThreads<M>(), ColRows<M, kI8>() / kColG) Iq1sSubColKernel(const ColArgs a) {
  PdlEnter();
  constexpr bool kXRegs = M == 1;
  constexpr int kG = ColRows<M, kI8>();
  // the grid: 4-byte nibble entries, or (kI8) the 8 int8 values of each entry as two words
  __shared__ __align__(8) uint32_t tab[kI8 ? 4096 : 2048];
  extern __shared__ __align__(16) uint8_t dsm[];
  const int n_sub = a.n_sub, nw = a.n_warps;
  const int team_threads = 32 * nw;
  const int team = threadIdx.x / team_threads;
  const int tid = threadIdx.x - team * team_threads;
  const int warp = tid >> 5, lane = tid & 31;
  // shared: reduction buffers [team][2][warp][kColSuper * M], then x (float4 [M][8][n_sub]; kI8:
  // int4 [M][2][n_sub] and the scales [M][n_sub]) and Σx ([M][n_sub])
  float* const red = reinterpret_cast<float*>(dsm) + team * (2 * nw * kColSuper * M);
  float4* const xs4 = reinterpret_cast<float4*>(dsm + a.n_teams * (2 * nw * kColSuper * M) * 4);
  int4* const xq4 = reinterpret_cast<int4*>(xs4);
  float* const sx_s = reinterpret_cast<float*>(xq4 + M * 2 * n_sub);
  float* const xsum_s = kI8 ? sx_s + M * n_sub : reinterpret_cast<float*>(xs4 + M * 8 * n_sub);

  for (int i = threadIdx.x; i < 2048; i += blockDim.x) {
    if constexpr (kI8) {
      const uint64_t g = iqdev::kIq1sGrid[i];
      tab[2 * i] = static_cast<uint32_t>(g), tab[2 * i + 1] = static_cast<uint32_t>(g >> 32);
    } else {
      tab[i] = Iq1sNibbleEntry(iqdev::kIq1sGrid[i]);
    }
  }
  __syncthreads();

  const int c = tid;
  const bool live = c < n_sub;
  const int od = (c >> 3) * 50, ib = c & 7;
  const int oqh = od + 34 + 2 * ib, oqs = od + 2 + 4 * ib;

  const int64_t total = a.n_mats * a.rows;
  const int64_t g_lo = total * blockIdx.x / gridDim.x, g_hi = total * (blockIdx.x + 1) / gridDim.x;
  const float* x_cur = nullptr;
  float xr[kXRegs && !kI8 ? 32 : 1];
  int xqr[kXRegs && kI8 ? 8 : 1];
  float xsr = 0.0f, sxr = 0.0f;
  int buf = 0;
  for (int64_t g = g_lo; g < g_hi;) {
    const int64_t mat = g / a.rows;
    const int64_t r_lo = g - mat * a.rows;
    const int64_t r_hi = Min64(a.rows, r_lo + (g_hi - g));
    g += r_hi - r_lo;
    const float* const xm = a.x + mat * a.x_mat_stride;
    if (xm != x_cur) {
      x_cur = xm;
      if constexpr (kXRegs) {
        if (live) {
          if constexpr (kI8) {
            float f[32];
            LoadX32(xm + 32 * c, f);
            xsr = XSum32(f);
            QuantizeX32(f, xqr, sxr);
          } else {
            LoadX32(xm + 32 * c, xr);
            xsr = XSum32(xr);
          }
        }
      } else {
        __syncthreads();  // the previous matrix's x is no longer read
        if constexpr (!kI8) {
          const int n8 = n_sub * 8;
          for (int i = threadIdx.x; i < a.n_tokens * n8; i += blockDim.x) {
            const int t = i / n8, rem = i - t * n8;
            const int cc = rem >> 3, q = rem & 7;
            xs4[(t * 8 + q) * n_sub + cc] =
                __ldg(reinterpret_cast<const float4*>(xm + t * a.x_stride + 32 * cc + 4 * q));
          }
        }
        for (int i = threadIdx.x; i < a.n_tokens * n_sub; i += blockDim.x) {
          const int t = i / n_sub, cc = i - t * n_sub;
          float f[32];
          LoadX32(xm + t * a.x_stride + 32 * cc, f);
          xsum_s[t * n_sub + cc] = XSum32(f);
          if constexpr (kI8) {
            int q[8];
            QuantizeX32(f, q, sx_s[t * n_sub + cc]);
            xq4[(t * 2) * n_sub + cc] = make_int4(q[0], q[1], q[2], q[3]);
            xq4[(t * 2 + 1) * n_sub + cc] = make_int4(q[4], q[5], q[6], q[7]);
          }
        }
        __syncthreads();
      }
    }
    const int64_t n = r_hi - r_lo;
    const int64_t t_lo = r_lo + n * team / a.n_teams, t_hi = r_lo + n * (team + 1) / a.n_teams;
    const int64_t id = a.mat_ids != nullptr ? static_cast<int64_t>(a.mat_ids[mat]) : mat;
    const uint8_t* const wm = a.w + id * a.mat_stride;
    float* const ym = a.y + mat * a.y_mat_stride;
    float xsum[M], sx[M];
#pragma unroll
    for (int t = 0; t < M; ++t) {
      if constexpr (kXRegs) {
        xsum[t] = xsr, sx[t] = sxr;
      } else {
        xsum[t] = live && t < a.n_tokens ? xsum_s[t * n_sub + c] : 0.0f;
        sx[t] = kI8 && live && t < a.n_tokens ? sx_s[t * n_sub + c] : 0.0f;
      }
    }
    const int n_groups = static_cast<int>((t_hi - t_lo + kG - 1) / kG);
    ColLoads<kG> cur, nxt;
    if (n_groups > 0) {
      ColLoad(wm + t_lo * a.row_bytes, a.row_bytes, static_cast<int>(Min64(kG, t_hi - t_lo)), live, od, oqh,
              oqs, cur);
    }
    for (int gi = 0; gi < n_groups; ++gi) {
      const int64_t r0 = t_lo + static_cast<int64_t>(gi) * kG;
      const int nr = static_cast<int>(Min64(kG, t_hi - r0));
      if (gi + 1 < n_groups) {
        ColLoad(wm + (r0 + kG) * a.row_bytes, a.row_bytes, static_cast<int>(Min64(kG, t_hi - r0 - kG)),
                live, od, oqh, oqs, nxt);
      }
      float p[kG * M];
#pragma unroll
      for (int i = 0; i < kG * M; ++i) p[i] = 0.0f;
      if constexpr (kI8) {
        if (live) {  // lanes past the row's end add zeros
          int xq[M][8];
#pragma unroll
          for (int t = 0; t < M; ++t) {
            if constexpr (kXRegs) {
#pragma unroll
              for (int w = 0; w < 8; ++w) xq[t][w] = xqr[w];
            } else {
              const int4 lo = t < a.n_tokens ? xq4[(t * 2) * n_sub + c] : make_int4(0, 0, 0, 0);
              const int4 hi = t < a.n_tokens ? xq4[(t * 2 + 1) * n_sub + c] : make_int4(0, 0, 0, 0);
              xq[t][0] = lo.x, xq[t][1] = lo.y, xq[t][2] = lo.z, xq[t][3] = lo.w;
              xq[t][4] = hi.x, xq[t][5] = hi.y, xq[t][6] = hi.z, xq[t][7] = hi.w;
            }
          }
          Iq1sI8Group<M>(cur, reinterpret_cast<const uint2*>(tab), xq, sx, xsum, nr, p);
        }
      } else if (live) {
        uint32_t e[kG][4];
        float dlh[kG], del2[kG];
#pragma unroll
        for (int r = 0; r < kG; ++r) {
          const uint32_t qh = cur.qh[r], q0 = cur.qs0[r], q1 = cur.qs1[r];
          // grid index of group l = qs byte l | 3 high bits << 8: the high bits spread one per byte,
          // then one PRMT per group (q0, q1 are zero-extended u16: their bytes 2, 3 are 0)
          const uint32_t qhs = (qh & 7u) | ((qh & 0x38u) << 5) | ((qh & 0x1c0u) << 10) | ((qh & 0xe00u) << 15);
          e[r][0] = tab[__byte_perm(q0, qhs, 0x3240u)];
          e[r][1] = tab[__byte_perm(q0, qhs, 0x3251u)];
          e[r][2] = tab[__byte_perm(q1, qhs, 0x3260u)];
          e[r][3] = tab[__byte_perm(q1, qhs, 0x3271u)];
          // dl / 2 = d·(2·ls + 1) / 2 and 2δ = ±1/4 (exact rescalings of ggml's dl and δ)
          dlh[r] = HalfToFloat(cur.d[r]) * (SmallIntF(static_cast<int>(2 * ((qh >> 12) & 7u) + 1)) * 0.5f);
          del2[r] = __uint_as_float(0x3e800000u | ((qh & 0x8000u) << 16));
        }
        float s[kG][M];
#pragma unroll
        for (int r = 0; r < kG; ++r) {
#pragma unroll
          for (int t = 0; t < M; ++t) s[r][t] = 0.0f;
        }
#pragma unroll
        for (int q = 0; q < 8; ++q) {  // columns 4q .. 4q + 3 of the sub-block
          float xv[M][4];
#pragma unroll
          for (int t = 0; t < M; ++t) {
            if constexpr (kXRegs) {
              xv[t][0] = xr[4 * q], xv[t][1] = xr[4 * q + 1], xv[t][2] = xr[4 * q + 2], xv[t][3] = xr[4 * q + 3];
            } else {
              if (t < a.n_tokens) {
                const float4 v = xs4[(t * 8 + q) * n_sub + c];
                xv[t][0] = v.x, xv[t][1] = v.y, xv[t][2] = v.z, xv[t][3] = v.w;
              } else {
                xv[t][0] = xv[t][1] = xv[t][2] = xv[t][3] = 0.0f;
              }
            }
          }
#pragma unroll
          for (int r = 0; r < kG; ++r) {
            const uint32_t ent = e[r][q >> 1];
            // the 4 codes of this half as bytes c << 4; byte 0 reaches the top by a shift, the
            // others by PRMT
            const uint32_t h = (q & 1) ? (ent * 16u) & 0xf0f0f0f0u : ent & 0xf0f0f0f0u;
            float v[4];
            v[0] = __uint_as_float(h * 16777216u);
#pragma unroll
            for (int k = 1; k < 4; ++k) v[k] = TopByteF(h, k);
#pragma unroll
            for (int t = 0; t < M; ++t) {
#pragma unroll
              for (int k = 0; k < 4; ++k) s[r][t] = fmaf(v[k], xv[t][k], s[r][t]);
            }
          }
        }
#pragma unroll
        for (int r = 0; r < kG; ++r) {
#pragma unroll
          for (int t = 0; t < M; ++t) {
            if (r < nr) p[r * M + t] = dlh[r] * fmaf(del2[r], xsum[t], s[r][t]);
          }
        }
      }
      int base = 0, free_mask = 0;
      Butterfly<kG * M, 16>::Run(p, lane, base, free_mask);
      constexpr int kFinal = Butterfly<kG * M, 16>::kFinal;
      const int slot = (gi % (kColSuper / kG)) * kG * M;
      float* const rb = red + (buf * nw + warp) * (kColSuper * M);
      if ((lane & free_mask) == 0) {
#pragma unroll
        for (int j = 0; j < kFinal; ++j) rb[slot + base + j] = p[j];
      }
      if (gi % (kColSuper / kG) == kColSuper / kG - 1 || gi + 1 == n_groups) {
        asm volatile("bar.sync %0, %1;" ::"r"(team + 1), "r"(team_threads) : "memory");
        const int64_t s0 = t_lo + static_cast<int64_t>(gi / (kColSuper / kG)) * kColSuper;
        const int n_rows = static_cast<int>(Min64(kColSuper, t_hi - s0));
        for (int i = tid; i < n_rows * M; i += team_threads) {
          const int r = i / M, t = i - r * M;
          if (t < a.n_tokens) {
            const float* src = red + buf * nw * (kColSuper * M) + i;
            float v = src[0];
            for (int w = 1; w < nw; ++w) v += src[w * (kColSuper * M)];
            ym[t * a.y_stride + s0 + r] = v;
          }
        }
        buf ^= 1;
      }
      cur = nxt;
    }
  }
}

template <int M, bool kI8>
cudaError_t LaunchIq1sCol(ColArgs a, cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(&Iq1sSubColKernel<M, kI8>);
  const int team_threads = 32 * a.n_warps;
  a.n_teams = std::max(1, std::min(kColMaxTeams, ColThreads<M>() / team_threads));
  const int threads = a.n_teams * team_threads;
  const int x_bytes = kI8 ? 2 * 16 + 4 + 4 : 8 * 16 + 4;  // per token and sub-block column
  const int smem = a.n_teams * 2 * a.n_warps * kColSuper * M * 4 + (M == 1 ? 0 : M * a.n_sub * x_bytes);
  int per_sm = 0;
  K3_CUDA_CHECK(PrepareKernel(kernel, threads, smem, &per_sm));
  const int64_t total = a.n_mats * a.rows;
  const int64_t want = (total + a.n_teams * ColRows<M, kI8>() - 1) / (a.n_teams * ColRows<M, kI8>());
  const int64_t cap = static_cast<int64_t>(per_sm) * detail::MultiprocessorCount();
  const int grid = static_cast<int>(std::max<int64_t>(1, want < cap ? want : cap));
  K3_CUDA_CHECK(LaunchKernel(Iq1sSubColKernel<M, kI8>, grid, threads, smem, stream, a));
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchIq1sSub(const Args& a, bool int8_x, cudaStream_t stream) {
  const int n_sub = a.bpr * 8;
  if (n_sub > kColMaxSub || a.n_tokens > kIq1sSubMaxTokens) return cudaErrorInvalidValue;
  ColArgs c{};
  c.w = a.w;
  c.mat_stride = a.mat_stride;
  c.mat_ids = a.mat_ids;
  c.n_mats = a.n_mats;
  c.rows = a.rows;
  c.row_bytes = a.row_bytes;
  c.n_sub = n_sub;
  c.n_warps = (n_sub + 31) / 32;
  c.x_stride = a.x_stride;
  c.x_mat_stride = a.x_mat_stride;
  c.y_stride = a.y_stride;
  c.y_mat_stride = a.y_mat_stride;
  for (int t0 = 0; t0 < a.n_tokens; t0 += kColMaxTokens) {
    const int nt = std::min(kColMaxTokens, a.n_tokens - t0);
    c.n_tokens = nt;
    c.x = a.x + t0 * a.x_stride;
    c.y = a.y + t0 * a.y_stride;
    const cudaError_t e = int8_x ? (nt == 1   ? LaunchIq1sCol<1, true>(c, stream)
                                      : nt == 2 ? LaunchIq1sCol<2, true>(c, stream)
                                                : LaunchIq1sCol<4, true>(c, stream))
                                   : (nt == 1   ? LaunchIq1sCol<1, false>(c, stream)
                                      : nt == 2 ? LaunchIq1sCol<2, false>(c, stream)
                                                : LaunchIq1sCol<4, false>(c, stream));
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace k3::cuda::qgemv
