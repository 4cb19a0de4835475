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
// Rows wider than 8192 weights take the older warp-per-rows kernel (Iq1sSubKernel below).
//
// H200 (k3_cuda_gemv_bench --only=expert, stream): 16 experts 3584 -> 3072, 1 token: 52 us (the
// warp-per-rows kernel: 87; HBM floor 7.9); down 3072 -> 3584: 52 (87); 4 tokens: 152 (234); 8
// tokens: 304 (707); 256 slots x 1 token: 684 (1331). Still instruction-bound, not memory-bound:
// ~720 warp instructions per 4-row group of a warp (ALU pipe 64%, issue 65%, DRAM 11%): the decode
// (~470: per weight an FFMA and ~1.5 ALU ops), the 16 loads' 64-bit address arithmetic (~160) and
// the lane butterfly / warp reduction (~90).
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_gemv/gemv_iq1s_sub.cuh"

namespace k3::cuda::qgemv {
namespace {

__device__ __forceinline__ int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- the warp-per-rows kernel (rows wider than 8192 weights) -----------------------------------
//
// A warp owns R consecutive rows of one matrix (an "item") and all their columns; lane j takes the
// sub-blocks j, j + 32, ... of each row, x loaded once per 8 columns for the R rows; the next
// step's weight loads are issued before this step is computed.

constexpr int kIq1sRows = 4;  // R: rows per warp item

struct SubLoads {  // one lane's sub-block of R rows: d, qh, qs (4 bytes)
  uint32_t d[kIq1sRows], qh[kIq1sRows], qs[kIq1sRows];
};

__device__ __forceinline__ uint32_t LdG16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}

// Issues the loads of sub-block c (block c / 8, sub-block c % 8) of rows r0 .. r0 + n_rows - 1.
__device__ __forceinline__ void LoadSub(const uint8_t* rows0, int64_t row_bytes, int n_rows, int c, bool live,
                                        SubLoads& s) {
  if (!live) return;
  const int ib = c & 7;
  const uint8_t* blk = rows0 + static_cast<int64_t>(c >> 3) * 50;
#pragma unroll
  for (int r = 0; r < kIq1sRows; ++r) {
    if (r < n_rows) {
      const uint8_t* b = blk + r * row_bytes;
      s.d[r] = LdG16(b);
      s.qh[r] = LdG16(b + 34 + 2 * ib);
      s.qs[r] = LdG16(b + 2 + 4 * ib) | (LdG16(b + 4 + 4 * ib) << 16);
    }
  }
}

// The 8 grid values g ∈ {-1, 0, 1} of grid group l (0..3) of a sub-block, as exact floats.
__device__ __forceinline__ void GridGroup8(const uint64_t* grid, uint32_t qs, uint32_t qh, int l, float (&v)[8]) {
  const uint32_t idx = ((qs >> (8 * l)) & 0xffu) | (((qh >> (3 * l)) & 7u) << 8);
  const uint64_t g = grid[idx];
  Bytes8(static_cast<uint32_t>(g) ^ 0x80808080u, static_cast<uint32_t>(g >> 32) ^ 0x80808080u, 128.0f, v);
}

template <int M>
struct Iq1sBounds {
  static constexpr int kMinBlocks = M == 1 ? 3 : M <= 4 ? 2 : 1;
};

template <int M>
__global__ void __launch_bounds__(kThreads, Iq1sBounds<M>::kMinBlocks) Iq1sSubKernel(const Args a) {
  extern __shared__ __align__(16) uint8_t smem[];
  const IqTables tab = StageTables<kTabIq1s>(smem);
  __syncthreads();
  const uint64_t* grid = tab.iq1s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_sub = a.bpr * 8;  // 32-weight sub-blocks per row
  const int n_steps = (n_sub + 31) >> 5;
  const int64_t items = a.n_mats * a.tiles_per_mat;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp; item < items;
       item += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t mat = item / a.tiles_per_mat;
    const int64_t r0 = (item - mat * a.tiles_per_mat) * kIq1sRows;
    const int n_rows = static_cast<int>(min(static_cast<int64_t>(kIq1sRows), a.rows - r0));
    const int64_t id = a.mat_ids != nullptr ? static_cast<int64_t>(a.mat_ids[mat]) : mat;
    const uint8_t* rows0 = a.w + id * a.mat_stride + r0 * a.row_bytes;
    const float* x = a.x + mat * a.x_mat_stride;

    float acc[kIq1sRows][M];
#pragma unroll
    for (int r = 0; r < kIq1sRows; ++r) {
#pragma unroll
      for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;
    }
    SubLoads cur{}, next{};
    LoadSub(rows0, a.row_bytes, n_rows, lane, lane < n_sub, cur);
    for (int k = 0; k < n_steps; ++k) {
      const int c = lane + 32 * k;
      if (k + 1 < n_steps) LoadSub(rows0, a.row_bytes, n_rows, c + 32, c + 32 < n_sub, next);
      if (c < n_sub) {
        float dl[kIq1sRows], delta[kIq1sRows], s[kIq1sRows][M], xsum[M];
#pragma unroll
        for (int r = 0; r < kIq1sRows; ++r) {
          dl[r] = HalfToFloat(cur.d[r]) * SmallIntF(static_cast<int>(2 * ((cur.qh[r] >> 12) & 7u) + 1));
          delta[r] = (cur.qh[r] & 0x8000u) ? -0.125f : 0.125f;
        }
#pragma unroll
        for (int l = 0; l < 4; ++l) {
          // x of the group's 8 columns for every token (shared by the R rows), then row by row the
          // 8 grid values and one FMA chain per token.
          float xv[M][8];
#pragma unroll
          for (int t = 0; t < M; ++t) {
            if (t < a.n_tokens) {  // (a pass's unused token slots read nothing and are not written)
              const float4* xp = reinterpret_cast<const float4*>(x + t * a.x_stride + 32 * c + 8 * l);
              const float4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
              xv[t][0] = x0.x, xv[t][1] = x0.y, xv[t][2] = x0.z, xv[t][3] = x0.w;
              xv[t][4] = x1.x, xv[t][5] = x1.y, xv[t][6] = x1.z, xv[t][7] = x1.w;
              const float part = ((xv[t][0] + xv[t][1]) + (xv[t][2] + xv[t][3])) +
                                 ((xv[t][4] + xv[t][5]) + (xv[t][6] + xv[t][7]));
              xsum[t] = l == 0 ? part : xsum[t] + part;
            }
          }
#pragma unroll
          for (int r = 0; r < kIq1sRows; ++r) {
            if (r < n_rows) {
              float v[8];
              GridGroup8(grid, cur.qs[r], cur.qh[r], l, v);
#pragma unroll
              for (int t = 0; t < M; ++t) {
                if (t < a.n_tokens) {
                  float sum = l == 0 ? v[0] * xv[t][0] : fmaf(v[0], xv[t][0], s[r][t]);
#pragma unroll
                  for (int k = 1; k < 8; ++k) sum = fmaf(v[k], xv[t][k], sum);
                  s[r][t] = sum;
                }
              }
            }
          }
        }
#pragma unroll
        for (int r = 0; r < kIq1sRows; ++r) {
#pragma unroll
          for (int t = 0; t < M; ++t) {
            if (r < n_rows && t < a.n_tokens) acc[r][t] = fmaf(dl[r], fmaf(delta[r], xsum[t], s[r][t]), acc[r][t]);
          }
        }
      }
      cur = next;
    }
    float* y = a.y + mat * a.y_mat_stride;
#pragma unroll
    for (int r = 0; r < kIq1sRows; ++r) {
#pragma unroll
      for (int t = 0; t < M; ++t) {
        const float v = detail::WarpSum(acc[r][t]);
        if (lane == ((r * M + t) & 31) && r < n_rows && t < a.n_tokens) y[t * a.y_stride + r0 + r] = v;
      }
    }
  }
}

template <int M>
cudaError_t LaunchIq1sM(Args a, cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(&Iq1sSubKernel<M>);
  const int smem = TableBytes<FmtIQ1_S>();
  int per_sm = 0;
  K3_CUDA_CHECK(PrepareKernel(kernel, smem, &per_sm));
  a.tiles_per_mat = (a.rows + kIq1sRows - 1) / kIq1sRows;
  const int64_t want = (a.n_mats * a.tiles_per_mat + kWarps - 1) / kWarps;
  const int64_t cap = static_cast<int64_t>(per_sm) * detail::MultiprocessorCount();
  const int grid = static_cast<int>(want < cap ? want : cap);
  Iq1sSubKernel<M><<<grid, kThreads, smem, stream>>>(a);
  return cudaGetLastError();
}


// ---- the column-slice kernel (rows of up to kColMaxSub sub-blocks) --------------------------------

constexpr int kColMaxWarps = 8;                  // sub-block columns per team: up to 32 * 8
constexpr int kColMaxSub = 32 * kColMaxWarps;    // i.e. rows of up to 8192 weights
constexpr int kColSuper = 32;                    // rows per cross-warp reduction (8 groups)
constexpr int kColMaxTeams = 8;                  // named barriers 1..8
constexpr int kColMaxTokens = 4;                 // tokens per pass
constexpr int kColG = 4;                         // rows per group (loaded together, the next group in flight)

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

// Sums v[0..N) over the 32 lanes along the xor butterfly (16, 8, 4, 2, 1), halving what is carried
// while N is even (as gemv_direct_kernel.cuh's Butterfly): every total is the plain butterfly's bit
// for bit, whatever N. Afterwards lane holds totals base .. base + kFinal - 1; lanes with
// (lane & free_mask) != 0 hold copies.
template <int N, int O>
struct ColButterfly {
  static constexpr bool kHalve = N % 2 == 0 && N > 1;
  static constexpr int kNext = kHalve ? N / 2 : N;
  static constexpr int kFinal = ColButterfly<kNext, O / 2>::kFinal;
  __device__ __forceinline__ static void Run(float* v, int lane, int& base, int& free_mask) {
    if constexpr (kHalve) {
      const bool upper = (lane & O) != 0;
#pragma unroll
      for (int j = 0; j < N / 2; ++j) {
        const float keep = upper ? v[j + N / 2] : v[j];
        const float send = upper ? v[j] : v[j + N / 2];
        v[j] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, O));
      }
      if (upper) base += N / 2;
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j) v[j] = __fadd_rn(v[j], __shfl_xor_sync(0xffffffffu, v[j], O));
      free_mask |= O;
    }
    ColButterfly<kNext, O / 2>::Run(v, lane, base, free_mask);
  }
};

template <int N>
struct ColButterfly<N, 0> {
  static constexpr int kFinal = N;
  __device__ __forceinline__ static void Run(float*, int, int&, int&) {}
};

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
// tree, s_c = Σ_j 2g_j·x_j / 2 in column order: it depends on the shape only.
template <int M>
__global__ void __launch_bounds__(ColThreads<M>(), 1) Iq1sSubColKernel(const ColArgs a) {
  constexpr bool kXRegs = M == 1;
  __shared__ uint32_t tab[2048];
  extern __shared__ __align__(16) uint8_t dsm[];
  const int n_sub = a.n_sub, nw = a.n_warps;
  const int team_threads = 32 * nw;
  const int team = threadIdx.x / team_threads;
  const int tid = threadIdx.x - team * team_threads;
  const int warp = tid >> 5, lane = tid & 31;
  // shared: reduction buffers [team][2][warp][kColSuper * M], then x (float4 [M][8][n_sub]) and Σx ([M][n_sub])
  float* const red = reinterpret_cast<float*>(dsm) + team * (2 * nw * kColSuper * M);
  float4* const xs4 = reinterpret_cast<float4*>(dsm + a.n_teams * (2 * nw * kColSuper * M) * 4);
  float* const xsum_s = reinterpret_cast<float*>(xs4 + M * 8 * n_sub);

  for (int i = threadIdx.x; i < 2048; i += blockDim.x) tab[i] = Iq1sNibbleEntry(iqdev::kIq1sGrid[i]);
  __syncthreads();

  const int c = tid;
  const bool live = c < n_sub;
  const int od = (c >> 3) * 50, ib = c & 7;
  const int oqh = od + 34 + 2 * ib, oqs = od + 2 + 4 * ib;

  const int64_t total = a.n_mats * a.rows;
  const int64_t g_lo = total * blockIdx.x / gridDim.x, g_hi = total * (blockIdx.x + 1) / gridDim.x;
  const float* x_cur = nullptr;
  float xr[kXRegs ? 32 : 1];
  float xsr = 0.0f;
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
          LoadX32(xm + 32 * c, xr);
          xsr = XSum32(xr);
        }
      } else {
        __syncthreads();  // the previous matrix's x is no longer read
        const int n8 = n_sub * 8;
        for (int i = threadIdx.x; i < a.n_tokens * n8; i += blockDim.x) {
          const int t = i / n8, rem = i - t * n8;
          const int cc = rem >> 3, q = rem & 7;
          xs4[(t * 8 + q) * n_sub + cc] = __ldg(reinterpret_cast<const float4*>(xm + t * a.x_stride + 32 * cc + 4 * q));
        }
        for (int i = threadIdx.x; i < a.n_tokens * n_sub; i += blockDim.x) {
          const int t = i / n_sub, cc = i - t * n_sub;
          float f[32];
          LoadX32(xm + t * a.x_stride + 32 * cc, f);
          xsum_s[t * n_sub + cc] = XSum32(f);
        }
        __syncthreads();
      }
    }
    const int64_t n = r_hi - r_lo;
    const int64_t t_lo = r_lo + n * team / a.n_teams, t_hi = r_lo + n * (team + 1) / a.n_teams;
    const int64_t id = a.mat_ids != nullptr ? static_cast<int64_t>(a.mat_ids[mat]) : mat;
    const uint8_t* const wm = a.w + id * a.mat_stride;
    float* const ym = a.y + mat * a.y_mat_stride;
    float xsum[M];
#pragma unroll
    for (int t = 0; t < M; ++t) {
      if constexpr (kXRegs) {
        xsum[t] = xsr;
      } else {
        xsum[t] = live && t < a.n_tokens ? xsum_s[t * n_sub + c] : 0.0f;
      }
    }
    const int n_groups = static_cast<int>((t_hi - t_lo + kColG - 1) / kColG);
    ColLoads<kColG> cur, nxt;
    if (n_groups > 0) {
      ColLoad(wm + t_lo * a.row_bytes, a.row_bytes, static_cast<int>(Min64(kColG, t_hi - t_lo)), live, od, oqh,
              oqs, cur);
    }
    for (int gi = 0; gi < n_groups; ++gi) {
      const int64_t r0 = t_lo + static_cast<int64_t>(gi) * kColG;
      const int nr = static_cast<int>(Min64(kColG, t_hi - r0));
      if (gi + 1 < n_groups) {
        ColLoad(wm + (r0 + kColG) * a.row_bytes, a.row_bytes, static_cast<int>(Min64(kColG, t_hi - r0 - kColG)),
                live, od, oqh, oqs, nxt);
      }
      float p[kColG * M];
#pragma unroll
      for (int i = 0; i < kColG * M; ++i) p[i] = 0.0f;
      if (live) {
        uint32_t e[kColG][4];
        float dlh[kColG], del2[kColG];
#pragma unroll
        for (int r = 0; r < kColG; ++r) {
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
        float s[kColG][M];
#pragma unroll
        for (int r = 0; r < kColG; ++r) {
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
          for (int r = 0; r < kColG; ++r) {
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
        for (int r = 0; r < kColG; ++r) {
#pragma unroll
          for (int t = 0; t < M; ++t) {
            if (r < nr) p[r * M + t] = dlh[r] * fmaf(del2[r], xsum[t], s[r][t]);
          }
        }
      }
      int base = 0, free_mask = 0;
      ColButterfly<kColG * M, 16>::Run(p, lane, base, free_mask);
      constexpr int kFinal = ColButterfly<kColG * M, 16>::kFinal;
      const int slot = (gi % (kColSuper / kColG)) * kColG * M;
      float* const rb = red + (buf * nw + warp) * (kColSuper * M);
      if ((lane & free_mask) == 0) {
#pragma unroll
        for (int j = 0; j < kFinal; ++j) rb[slot + base + j] = p[j];
      }
      if (gi % (kColSuper / kColG) == kColSuper / kColG - 1 || gi + 1 == n_groups) {
        asm volatile("bar.sync %0, %1;" ::"r"(team + 1), "r"(team_threads) : "memory");
        const int64_t s0 = t_lo + static_cast<int64_t>(gi / (kColSuper / kColG)) * kColSuper;
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

cudaError_t ColPrepare(const void* kernel, int threads, int smem, int* per_sm) {
  struct Entry {
    const void* kernel;
    int device, threads, smem, per_sm;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  int dev = 0;
  K3_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  bool attr_set = false;
  for (const Entry& e : cache) {
    if (e.kernel == kernel && e.device == dev) {
      attr_set = true;
      if (e.threads == threads && e.smem == smem) {
        *per_sm = e.per_sm;
        return cudaSuccess;
      }
    }
  }
  if (!attr_set) {
    int optin = 0;
    K3_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    K3_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - 8192));
  }
  int n = 0;
  K3_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
  if (n < 1) return cudaErrorInvalidConfiguration;
  cache.push_back({kernel, dev, threads, smem, n});
  *per_sm = n;
  return cudaSuccess;
}

template <int M>
cudaError_t LaunchIq1sCol(ColArgs a, cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(&Iq1sSubColKernel<M>);
  const int team_threads = 32 * a.n_warps;
  a.n_teams = std::max(1, std::min(kColMaxTeams, ColThreads<M>() / team_threads));
  const int threads = a.n_teams * team_threads;
  const int smem = a.n_teams * 2 * a.n_warps * kColSuper * M * 4 + (M == 1 ? 0 : M * a.n_sub * (8 * 16 + 4));
  int per_sm = 0;
  K3_CUDA_CHECK(ColPrepare(kernel, threads, smem, &per_sm));
  const int64_t total = a.n_mats * a.rows;
  const int64_t want = (total + a.n_teams * kColG - 1) / (a.n_teams * kColG);
  const int64_t cap = static_cast<int64_t>(per_sm) * detail::MultiprocessorCount();
  const int grid = static_cast<int>(std::max<int64_t>(1, want < cap ? want : cap));
  Iq1sSubColKernel<M><<<grid, threads, smem, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchIq1sSub(const Args& a, cudaStream_t stream) {
  const int n_sub = a.bpr * 8;
  if (n_sub > kColMaxSub) {
    if (a.n_tokens <= 1) return LaunchIq1sM<1>(a, stream);
    if (a.n_tokens <= 2) return LaunchIq1sM<2>(a, stream);
    if (a.n_tokens <= 4) return LaunchIq1sM<4>(a, stream);
    return LaunchIq1sM<8>(a, stream);
  }
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
    const cudaError_t e = nt == 1 ? LaunchIq1sCol<1>(c, stream) : nt == 2 ? LaunchIq1sCol<2>(c, stream)
                                                                          : LaunchIq1sCol<4>(c, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace k3::cuda::qgemv
