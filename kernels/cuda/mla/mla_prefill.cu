#include "kernels/cuda/mla/mla_prefill.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mla/mla_prefill_args.cuh"
#include "kernels/cuda/mma_ptx.cuh"

namespace k3::cuda {
namespace {

// (row, head) pairs per block, the GEMM's M (the kernel's BM): 64, or 48 where that pads a
// sequence's pairs less (PairTile: a decode step's 96 or 48 heads, of which 64-pair blocks leave
// a quarter empty, and the kernel is bound by its mma and ldmatrix work, not by HBM).
constexpr int kBN = 64;        // cache rows per tile
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxRow = 576;   // Q + 2 key tiles of 64 × 576 f16 = 216 KiB of shared memory
constexpr int kMaxValue = 512;
constexpr int kColsPerWarp = kMaxValue / kWarps;  // P·V: warp w owns value columns [64w, 64w + 64)
constexpr int kConvRows = 32;                     // f32 -> f16 pass: cache rows per block
constexpr int kCombineThreads = 128;
constexpr int kMaxSplits = 1024;                  // MlaPrefill's bound on n_splits
constexpr int kMinSplitRows = 512;                // MlaPrefillSplits: cache rows per split at least
constexpr float kLog2e = 1.4426950408889634f;

// ---- shared-memory tiles ------------------------------------------------------------------------
// Q, K and P tiles are f16, row-major, rows of `cpr` 16-byte chunks (cpr % 8 == 0), swizzled by
// ptx::Swz (chunk c of row r at chunk c ^ (r & 7)): the rows themselves are 1152 or 128 bytes
// apart, i.e. in the same banks, so the XOR makes every ldmatrix and every tile store
// conflict-free.
size_t SmemBytes(int rw, int bm) {
  return sizeof(__half) * (static_cast<size_t>(bm + 2 * kBN) * rw + bm * kBN) +  // Q, 2 key tiles, P
         sizeof(float) * 6 * bm + sizeof(int) * (bm + 2);                        // statistics, lens
}

// The pair tile for runs of n_pairs pairs: the one that pads them least (64 on a tie).
int PairTile(int64_t n_pairs) {
  const int64_t pad64 = detail::CeilDiv(n_pairs, 64) * 64, pad48 = detail::CeilDiv(n_pairs, 48) * 48;
  return pad48 < pad64 ? 48 : 64;
}

using ptx::CpAsync16;
using ptx::CpAsyncCommit;
using ptx::LdMatrixX4;
using ptx::LdMatrixX4Trans;
using ptx::LoadHalf8;
using ptx::Mma16816;
using ptx::PackHalf2;
using ptx::SmemAddr;
using ptx::Swz;

// ---- f32 cache -> dense f16 rows --------------------------------------------------------------

// Block = 32 cache rows: rows below the run's largest len (read from seq_lens, clamped to max_len)
// are copied from their pages, rounded to f16, to dst[t][rw]. Rows beyond it may have no page.
__global__ void __launch_bounds__(kThreads) MlaToHalfKernel(const float* cache, const int32_t* table,
                                                            int64_t page_stride, int64_t row_stride, int page_size,
                                                            const int32_t* seq_lens, int n_rows, int max_len, int rw,
                                                            __half* dst) {
  PdlEnter();
  __shared__ int s_red[kWarps];
  const int tid = threadIdx.x;
  int mx = 0;
  for (int i = tid; i < n_rows; i += kThreads) mx = max(mx, seq_lens[i]);
  mx = __reduce_max_sync(detail::kFullMask, mx);
  if ((tid & 31) == 0) s_red[tid >> 5] = mx;
  __syncthreads();
  int need = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) need = max(need, s_red[w]);
  need = min(need, max_len);
  const int cpr = rw / 8, t0 = blockIdx.x * kConvRows;
  for (int i = tid; i < kConvRows * cpr; i += kThreads) {
    const int r = i / cpr, c = i - r * cpr, t = t0 + r;
    if (t >= need) break;  // i only grows
    const float* src = cache + table[t / page_size] * page_stride + (t % page_size) * row_stride + c * 8;
    *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(t) * rw + c * 8) = LoadHalf8(src, 1.0f);
  }
}

// ---- the attention kernel -------------------------------------------------------------------------

using Args = MlaPrefillArgs;

// Block = (sequence, BM (64 or 48) of its pairs, one context split), 8 warps. Per key tile of 64 cache rows (cp.async into
// one of two buffers, the next tile loading while this one is used; rows beyond the tile's largest
// len are zero-filled):
//   S = Q·Kᵀ (BM × 64): warp (wm = w % (BM/16), wn = w / (BM/16)) computes rows 16·wm.., keys
//     32·wn.., over the whole row width (ldmatrix + mma.sync m16n8k16); with BM = 48 warps 6 and
//     7 skip S and the softmax;
//   masked (key >= len of the pair's row), row max across the two key halves through shared
//     memory, online softmax in f32 (m, l per pair; l sums the f16-rounded weights that P·V uses,
//     so the result is a convex combination of the f16 V rows), P -> shared memory as f16;
//   O = α·O + P·V: warp w owns O[BM pairs][value columns 64w..64w+63] in registers (2·BM floats
//     per thread), V = the first value_width columns of the same key tile (ldmatrix.trans).
// Three barriers per tile: (1) tile ready / previous tile's P·V done, (2) partial maxima written,
// (3) P and α written. Each buffer is overwritten only after the barrier that follows its last read.
template <int BM>
__global__ void __launch_bounds__(kThreads, 1) MlaPrefillKernel(const Args a) {
  PdlEnter();
  static_assert(BM == 48 || BM == 64);
  constexpr int kBM = BM, kMt = BM / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  const int rw = a.rw, vw = a.vw, cpr = rw / 8;
  __half* sq = reinterpret_cast<__half*>(smem);                // [kBM][rw]
  __half* sk = sq + kBM * rw;                                  // [2][kBN][rw]
  __half* sp = sk + 2 * kBN * rw;                              // [kBM][kBN]
  float* s_max = reinterpret_cast<float*>(sp + kBM * kBN);     // [2][kBM]: row max per key half
  float* s_alpha = s_max + 2 * kBM;                            // [kBM]
  float* s_l = s_alpha + kBM;                                  // [2][kBM]: row sums per key half
  float* s_m = s_l + 2 * kBM;                                  // [kBM]
  int* s_len = reinterpret_cast<int*>(s_m + kBM);              // [kBM]
  int* s_red = s_len + kBM;                                    // [2]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int item = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // latest rows (longest) first
  const int per_seq = a.n_tiles * a.n_splits, seq = item / per_seq;
  const int tile = (item - seq * per_seq) / a.n_splits, split = item - seq * per_seq - tile * a.n_splits;
  const int p0 = tile * kBM;
  const float* const q = a.q + seq * a.q_seq_stride;
  const int32_t* const lens = a.seq_lens + seq * a.n_rows;
  const int32_t* const table = a.table != nullptr ? a.table + seq * a.table_stride : nullptr;

  if (tid < 64) {  // whole warps 0 and 1 (the reduction)
    const int pr = p0 + tid;
    const int len = tid < kBM && pr < a.n_pairs ? min(max(lens[pr / a.n_heads], 0), a.max_len) : 0;
    if (tid < kBM) s_len[tid] = len;
    const int m = __reduce_max_sync(detail::kFullMask, len);
    if (lane == 0) s_red[warp] = m;
  }
  for (int i = tid; i < kBM * cpr; i += kThreads) {
    const int r = i / cpr, c = i - r * cpr, pr = p0 + r;
    uint4 h = make_uint4(0u, 0u, 0u, 0u);
    if (pr < a.n_pairs) {
      const int row = pr / a.n_heads, head = pr - row * a.n_heads;
      h = LoadHalf8(q + row * a.q_row_stride + static_cast<int64_t>(head) * rw + c * 8, a.q_mul);
    }
    *reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(sq) + Swz(r, c, cpr)) = h;
  }
  __syncthreads();
  const int lmax = max(s_red[0], s_red[1]);
  int per = (lmax + a.n_splits - 1) / a.n_splits;
  per = (per + kBN - 1) / kBN * kBN;
  const int r_lo = split * per, r_hi = min(lmax, r_lo + per);
  const int n_kt = r_hi > r_lo ? (r_hi - r_lo + kBN - 1) / kBN : 0;

  // Tile loader: thread = (row tid/4, chunks tid%4 + 4j). row_src(kt) is looked up one tile ahead
  // (its page-table load then overlaps a tile's work); null: the row is past the range (zeros).
  auto row_src = [&](int kt) -> const __half* {
    const int t = r_lo + kt * kBN + (tid >> 2);
    if (t >= r_hi) return nullptr;
    return table != nullptr ? a.keys + table[t / a.page_size] * a.page_stride + (t % a.page_size) * a.row_stride
                            : a.keys + t * a.row_stride;
  };
  auto issue_tile = [&](int kt, const __half* src) {
    const int r = tid >> 2;
    const uint32_t dst = SmemAddr(sk + (kt & 1) * kBN * rw);
    for (int c = tid & 3; c < cpr; c += 4) {
      if (src != nullptr) {
        CpAsync16(dst + Swz(r, c, cpr), src + c * 8, 16);
      } else {
        CpAsync16(dst + Swz(r, c, cpr), a.keys, 0);
      }
    }
    CpAsyncCommit();
  };

  const int wm = warp % kMt, wn = warp / kMt;
  const bool s_warp = warp < 2 * kMt;  // computes S and the softmax of its rows and keys
  const int g = lane >> 2, qd = lane & 3;  // mma fragment: row g (and g + 8), columns 2·qd, 2·qd + 1
  const int r0 = wm * 16 + g, r1 = r0 + 8;
  const int len0 = s_len[r0], len1 = s_len[r1];
  // ldmatrix lane addressing (row & 7 == lane & 7 for every operand below):
  //   A (Q, P: rows m, k contiguous), matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15);
  //   B of S (K rows = keys n, k contiguous): (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15);
  //   B of P·V (V rows = keys k, columns n contiguous, .trans): (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15)
  //   (k8-15,n8-15). Regs 0,1 = b0,b1 of the first n-tile, regs 2,3 of the second.
  const int a_row = (lane & 7) + 8 * ((lane >> 3) & 1), a_hi = lane >> 4;
  const int kb_row = (lane & 7) + 8 * (lane >> 4), kb_hi = (lane >> 3) & 1;
  const int sw = lane & 7;
  const uint32_t row_bytes = static_cast<uint32_t>(cpr * 16);
  const uint32_t q_addr = SmemAddr(sq) + (wm * 16 + a_row) * row_bytes;
  const uint32_t p_addr = SmemAddr(sp) + a_row * (kBN * 2);
  const int c0 = warp * kColsPerWarp;  // this warp's value columns

  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // l: this thread's columns only
  float o[kMt][8][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][nt][e] = 0.0f;
    }
  }

  const __half* src_next = nullptr;  // row_src(kt + 1) during tile kt
  if (n_kt > 0) {
    issue_tile(0, row_src(0));
    src_next = row_src(1);
  }
  for (int kt = 0; kt < n_kt; ++kt) {
    ptx::CpAsyncWait<0>();
    __syncthreads();  // (1)
    if (kt + 1 < n_kt) {
      issue_tile(kt + 1, src_next);
      src_next = row_src(kt + 2);
    }
    const uint32_t k_tile = SmemAddr(sk + (kt & 1) * kBN * rw);

    // S = Q·Kᵀ: 16 rows × 32 keys per warp.
    float s[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
    }
    if (s_warp) {
      const uint32_t k_addr = k_tile + (wn * 32 + kb_row) * row_bytes;
      for (int cg = 0; cg < cpr / 8; ++cg) {  // 64 columns = 8 chunks = 4 k-steps
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          uint32_t af[4], b0[4], b1[4];
          LdMatrixX4(af, q_addr + cg * 128 + (((2 * u + a_hi) ^ sw) << 4));
          const uint32_t kofs = cg * 128 + (((2 * u + kb_hi) ^ sw) << 4);
          LdMatrixX4(b0, k_addr + kofs);
          LdMatrixX4(b1, k_addr + 16 * row_bytes + kofs);
          Mma16816(s[0], af, b0[0], b0[1]);
          Mma16816(s[1], af, b0[2], b0[3]);
          Mma16816(s[2], af, b1[0], b1[1]);
          Mma16816(s[3], af, b1[2], b1[3]);
        }
      }

      // Mask, row maxima (quad, then the two key halves through shared memory).
      const int key0 = r_lo + kt * kBN + wn * 32 + 2 * qd;
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key0 + 8 * j + e;
          if (key >= len0) s[j][e] = -INFINITY;
          if (key >= len1) s[j][2 + e] = -INFINITY;
          mx0 = fmaxf(mx0, s[j][e]);
          mx1 = fmaxf(mx1, s[j][2 + e]);
        }
      }
#pragma unroll
      for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(detail::kFullMask, mx0, o2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(detail::kFullMask, mx1, o2));
      }
      if (qd == 0) {
        s_max[wn * kBM + r0] = mx0;
        s_max[wn * kBM + r1] = mx1;
      }
    }  // s_warp
    __syncthreads();  // (2)
    if (s_warp) {
      const float mn0 = fmaxf(m0, fmaxf(s_max[r0], s_max[kBM + r0]));
      const float mn1 = fmaxf(m1, fmaxf(s_max[r1], s_max[kBM + r1]));
      const float al0 = mn0 == -INFINITY ? 1.0f : exp2f(m0 - mn0);
      const float al1 = mn1 == -INFINITY ? 1.0f : exp2f(m1 - mn1);
      m0 = mn0;
      m1 = mn1;
      float sum0 = 0.0f, sum1 = 0.0f;
      unsigned char* const p_row0 = reinterpret_cast<unsigned char*>(sp) + r0 * (kBN * 2) + 4 * qd;
      unsigned char* const p_row1 = p_row0 + 8 * (kBN * 2);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float e0 = s[j][0] == -INFINITY ? 0.0f : exp2f(s[j][0] - mn0);
        const float e1 = s[j][1] == -INFINITY ? 0.0f : exp2f(s[j][1] - mn0);
        const float e2 = s[j][2] == -INFINITY ? 0.0f : exp2f(s[j][2] - mn1);
        const float e3 = s[j][3] == -INFINITY ? 0.0f : exp2f(s[j][3] - mn1);
        const __half2 h01 = __floats2half2_rn(e0, e1), h23 = __floats2half2_rn(e2, e3);
        const float2 f01 = __half22float2(h01), f23 = __half22float2(h23);
        sum0 += f01.x + f01.y;
        sum1 += f23.x + f23.y;
        const int chunk = ((wn * 4 + j) ^ g) << 4;  // r0 & 7 == r1 & 7 == g
        *reinterpret_cast<__half2*>(p_row0 + chunk) = h01;
        *reinterpret_cast<__half2*>(p_row1 + chunk) = h23;
      }
      l0 = l0 * al0 + sum0;
      l1 = l1 * al1 + sum1;
      if (wn == 0 && qd == 0) {
        s_alpha[r0] = al0;
        s_alpha[r1] = al1;
      }
    }  // s_warp
    __syncthreads();  // (3)

    // O = α·O + P·V over this warp's 64 value columns.
    if (c0 < vw) {
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        const float a0 = s_alpha[mt * 16 + g], a1 = s_alpha[mt * 16 + g + 8];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          o[mt][nt][0] *= a0;
          o[mt][nt][1] *= a0;
          o[mt][nt][2] *= a1;
          o[mt][nt][3] *= a1;
        }
      }
      const uint32_t v_addr = k_tile + a_row * row_bytes;  // key row (lane & 7) + 8·((lane >> 3) & 1)
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        uint32_t vf[4][4];
#pragma unroll
        for (int q4 = 0; q4 < 4; ++q4) {
          if (c0 + 16 * q4 < vw) {
            const int chunk = (c0 + 16 * q4) / 8 + a_hi;
            LdMatrixX4Trans(vf[q4], v_addr + kk * 16 * row_bytes + ((chunk ^ sw) << 4));
          }
        }
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          uint32_t pf[4];
          LdMatrixX4(pf, p_addr + mt * 16 * (kBN * 2) + (((2 * kk + a_hi) ^ sw) << 4));
#pragma unroll
          for (int q4 = 0; q4 < 4; ++q4) {
            if (c0 + 16 * q4 < vw) {
              Mma16816(o[mt][2 * q4], pf, vf[q4][0], vf[q4][1]);
              Mma16816(o[mt][2 * q4 + 1], pf, vf[q4][2], vf[q4][3]);
            }
          }
        }
      }
    }
  }

  // Row sums: the quad's columns, then the two key halves.
#pragma unroll
  for (int o2 = 1; o2 <= 2; o2 <<= 1) {
    l0 += __shfl_xor_sync(detail::kFullMask, l0, o2);
    l1 += __shfl_xor_sync(detail::kFullMask, l1, o2);
  }
  if (s_warp && qd == 0) {
    s_l[wn * kBM + r0] = l0;
    s_l[wn * kBM + r1] = l1;
    if (wn == 0) {
      s_m[r0] = m0;
      s_m[r1] = m1;
    }
  }
  __syncthreads();
  const bool direct = a.n_splits == 1;
  const int64_t part_stride = vw + 4;
  const int64_t all_pairs = static_cast<int64_t>(a.n_seqs) * a.n_pairs;
  const int64_t pair_base = static_cast<int64_t>(seq) * a.n_pairs;  // this sequence's first pair in part
  if (c0 < vw) {
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = mt * 16 + g + 8 * half, pr = p0 + r;
        if (pr >= a.n_pairs) continue;
        float* dst;
        float mul = 1.0f;
        if (direct) {
          const float l = s_l[r] + s_l[kBM + r];
          mul = l > 0.0f ? 1.0f / l : 0.0f;
          const int row = pr / a.n_heads, head = pr - row * a.n_heads;
          dst = a.out + seq * a.out_seq_stride + row * a.out_row_stride + static_cast<int64_t>(head) * vw;
        } else {
          dst = a.part + (split * all_pairs + pair_base + pr) * part_stride;
        }
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int col = c0 + 8 * nt + 2 * qd;
          if (c0 + 8 * nt < vw) {
            *reinterpret_cast<float2*>(dst + col) = make_float2(o[mt][nt][2 * half] * mul, o[mt][nt][2 * half + 1] * mul);
          }
        }
      }
    }
  }
  if (!direct && tid < kBM && p0 + tid < a.n_pairs) {
    float* dst = a.part + (split * all_pairs + pair_base + p0 + tid) * part_stride;
    dst[vw] = s_m[tid];
    dst[vw + 1] = s_l[tid] + s_l[kBM + tid];
  }
}

// Block = kCombineThreads value columns (blockIdx.y) of one pair of one sequence (blockIdx.x =
// seq·n_pairs + pair): out = Σ_s 2^{m_s - M} acc_s / Σ_s 2^{m_s - M} l_s. The split weights
// 2^{m_s - M} are formed per block into shared memory (0 for a split that saw no row: m_s = -inf,
// acc_s = 0), so the value loop is loads and FMAs with no branch and the loads of 16 splits in
// flight. The sums run in split order, as before this form. A column a thread: at batch 1 a block
// per pair was 96 blocks of 4 warps for 64 splits x 512 columns (30 us at 128k, DRAM 9% busy).
__global__ void __launch_bounds__(kCombineThreads) MlaPrefillCombineKernel(const float* part, int n_splits, int n_pairs,
                                                                           int n_heads, int vw, float* out,
                                                                           int64_t out_row_stride,
                                                                           int64_t out_seq_stride) {
  PdlEnter();
  __shared__ float s_w[kMaxSplits], s_l[kMaxSplits];  // per split: m, then its weight; l
  __shared__ float s_red[kCombineThreads / 32];
  __shared__ float s_inv;
  const int seq = static_cast<int>(blockIdx.x) / n_pairs, pr = static_cast<int>(blockIdx.x) - seq * n_pairs;
  const int64_t stride = vw + 4, split_stride = static_cast<int64_t>(gridDim.x) * stride;
  const float* base = part + static_cast<int64_t>(blockIdx.x) * stride;
  const int tid = threadIdx.x;
  float mx = -INFINITY;
  for (int s = tid; s < n_splits; s += kCombineThreads) {
    s_w[s] = base[s * split_stride + vw];
    s_l[s] = base[s * split_stride + vw + 1];
    mx = fmaxf(mx, s_w[s]);
  }
#pragma unroll
  for (int o2 = 16; o2 > 0; o2 >>= 1) mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, o2));
  if ((tid & 31) == 0) s_red[tid >> 5] = mx;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kCombineThreads / 32; ++w) mx = fmaxf(mx, s_red[w]);
  for (int s = tid; s < n_splits; s += kCombineThreads) s_w[s] = s_w[s] == -INFINITY ? 0.0f : exp2f(s_w[s] - mx);
  __syncthreads();
  if (tid == 0) {
    float den = 0.0f;
    for (int s = 0; s < n_splits; ++s) {
      if (s_w[s] != 0.0f) den += s_l[s] * s_w[s];
    }
    s_inv = den > 0.0f ? 1.0f / den : 0.0f;
  }
  __syncthreads();
  const float inv = s_inv;
  const int row = pr / n_heads, head = pr - row * n_heads;
  float* o = out + seq * out_seq_stride + row * out_row_stride + static_cast<int64_t>(head) * vw;
  const int d = static_cast<int>(blockIdx.y) * kCombineThreads + tid;
  if (d < vw) {
    float num = 0.0f;
#pragma unroll 16
    for (int s = 0; s < n_splits; ++s) num = fmaf(s_w[s], base[s * split_stride + d], num);
    o[d] = num * inv;
  }
}

bool Aligned(const void* p, uintptr_t n) { return (reinterpret_cast<uintptr_t>(p) & (n - 1)) == 0; }

int64_t ConvBytes(MlaCacheType type, int64_t max_len, int64_t row_width) {
  if (type != MlaCacheType::kF32) return 0;
  return (max_len * row_width * 2 + 255) / 256 * 256;
}

}  // namespace

int64_t MlaPrefillWorkspaceBytes(MlaCacheType cache_type, int64_t max_len, int64_t n_rows, int64_t n_heads,
                                 int64_t row_width, int64_t value_width, int n_splits) {
  const int64_t part = n_splits > 1 ? static_cast<int64_t>(n_splits) * n_rows * n_heads * (value_width + 4) * 4 : 0;
  return ConvBytes(cache_type, max_len, row_width) + part;
}

int MlaPrefillSplits(int64_t n_rows, int64_t n_heads, int64_t max_len, int64_t n_seqs) {
  const int64_t tiles = n_seqs * detail::CeilDiv(n_rows * n_heads, PairTile(n_rows * n_heads));
  if (tiles <= 0 || max_len <= 0) return 1;
  const int64_t sms = detail::MultiprocessorCount();
  const int64_t cap = std::min<int64_t>(64, std::max<int64_t>(1, detail::CeilDiv(max_len, kMinSplitRows)));
  // Time ∝ waves · (rows per split + ~96 rows' worth of Q load and output per block).
  int best = 1;
  double best_cost = 0.0;
  for (int64_t s = 1; s <= cap; ++s) {
    const double cost = static_cast<double>(detail::CeilDiv(tiles * s, sms)) *
                        (static_cast<double>(max_len) / static_cast<double>(s) + 96.0);
    if (s == 1 || cost < best_cost) {
      best = static_cast<int>(s);
      best_cost = cost;
    }
  }
  return best;
}

cudaError_t MlaPrefill(const MlaPrefillParams& p, cudaStream_t stream) {
  if (p.n_rows < 0 || p.n_heads < 0 || p.n_seqs < 0 || p.n_splits < 1 || p.n_splits > kMaxSplits) {
    return cudaErrorInvalidValue;
  }
  if (p.n_rows == 0 || p.n_heads == 0 || p.n_seqs == 0) return cudaSuccess;
  if (p.row_width < 64 || p.row_width > kMaxRow || p.row_width % 64 != 0) return cudaErrorInvalidValue;
  if (p.value_width < 16 || p.value_width > kMaxValue || p.value_width % 16 != 0 || p.value_width > p.row_width) {
    return cudaErrorInvalidValue;
  }
  if (p.cache_type != MlaCacheType::kF32 && p.cache_type != MlaCacheType::kF16) return cudaErrorInvalidValue;
  if (p.q == nullptr || p.cache == nullptr || p.block_table == nullptr || p.seq_lens == nullptr || p.out == nullptr ||
      p.page_size < 1 || p.page_size > INT_MAX || p.max_len < 1 || p.max_len > (int64_t{1} << 30)) {
    return cudaErrorInvalidValue;
  }
  if (p.q_row_stride < p.n_heads * p.row_width || p.out_row_stride < p.n_heads * p.value_width) {
    return cudaErrorInvalidValue;
  }
  // Several sequences: each its own table, lens, q and out rows; the f32 cache's dense f16 copy is
  // of one sequence's rows, so they need the f16 cache.
  if (p.n_seqs > 1 && (p.cache_type != MlaCacheType::kF16 || p.block_table_stride < 1 ||
                       p.q_seq_stride < p.n_rows * p.q_row_stride || p.out_seq_stride < p.n_rows * p.out_row_stride)) {
    return cudaErrorInvalidValue;
  }
  if (p.wgmma && !MlaPrefillWgmmaSupports(p.row_width, p.value_width)) return cudaErrorInvalidValue;
  const int64_t n_pairs = p.n_rows * p.n_heads;
  const int bm = p.wgmma ? kMlaWgmmaPairs : PairTile(n_pairs);
  const int64_t tiles = detail::CeilDiv(n_pairs, bm);
  if (p.n_seqs * n_pairs > INT_MAX || p.n_seqs * tiles * p.n_splits > INT_MAX) return cudaErrorInvalidValue;
  const int64_t ws_bytes = MlaPrefillWorkspaceBytes(p.cache_type, p.max_len, p.n_seqs * p.n_rows, p.n_heads,
                                                    p.row_width, p.value_width, p.n_splits);
  if (ws_bytes > 0 && p.workspace == nullptr) return cudaErrorInvalidValue;
  const int64_t vec = p.cache_type == MlaCacheType::kF16 ? 8 : 4;
  if (!Aligned(p.cache, 16) || !Aligned(p.q, 16) || !Aligned(p.out, 8) || !Aligned(p.workspace, 16) ||
      p.page_stride % vec != 0 || p.row_stride % vec != 0 || p.q_row_stride % 4 != 0 || p.out_row_stride % 2 != 0 ||
      (p.n_seqs > 1 && (p.q_seq_stride % 4 != 0 || p.out_seq_stride % 2 != 0))) {
    return cudaErrorMisalignedAddress;
  }

  const int rw = static_cast<int>(p.row_width), vw = static_cast<int>(p.value_width);
  unsigned char* ws = static_cast<unsigned char*>(p.workspace);
  Args a{};
  a.q = p.q;
  a.q_row_stride = p.q_row_stride;
  a.q_seq_stride = p.q_seq_stride;
  a.seq_lens = p.seq_lens;
  a.n_seqs = static_cast<int>(p.n_seqs);
  a.n_heads = static_cast<int>(p.n_heads);
  a.n_rows = static_cast<int>(p.n_rows);
  a.n_pairs = static_cast<int>(n_pairs);
  a.n_tiles = static_cast<int>(tiles);
  a.n_splits = p.n_splits;
  a.rw = rw;
  a.vw = vw;
  a.max_len = static_cast<int>(p.max_len);
  a.q_mul = p.scale * kLog2e;
  a.out = p.out;
  a.out_row_stride = p.out_row_stride;
  a.out_seq_stride = p.out_seq_stride;
  if (p.cache_type == MlaCacheType::kF32) {
    __half* dense = reinterpret_cast<__half*>(ws);
    const auto blocks = static_cast<unsigned>(detail::CeilDiv(p.max_len, kConvRows));
    K3_CUDA_CHECK(LaunchKernel(MlaToHalfKernel, blocks, kThreads, 0, stream, static_cast<const float*>(p.cache),
                               p.block_table, p.page_stride, p.row_stride, static_cast<int>(p.page_size), p.seq_lens,
                               static_cast<int>(p.n_rows), a.max_len, rw, dense));
    a.keys = dense;
    a.table = nullptr;
    a.page_stride = 0;
    a.row_stride = rw;
    a.page_size = 1;
  } else {
    a.keys = static_cast<const __half*>(p.cache);
    a.table = p.block_table;
    a.table_stride = p.block_table_stride;
    a.page_stride = p.page_stride;
    a.row_stride = p.row_stride;
    a.page_size = static_cast<int>(p.page_size);
  }
  a.part = p.n_splits > 1 ? reinterpret_cast<float*>(ws + ConvBytes(p.cache_type, p.max_len, p.row_width)) : nullptr;

  const auto blocks = static_cast<unsigned>(p.n_seqs * tiles * p.n_splits);
  if (p.wgmma) {
    K3_CUDA_CHECK(LaunchMlaPrefillWgmma(a, blocks, stream));
  } else {
    const size_t smem = SmemBytes(rw, bm);
    auto* const kernel = bm == 48 ? MlaPrefillKernel<48> : MlaPrefillKernel<64>;
    K3_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    K3_CUDA_CHECK(LaunchKernel(kernel, blocks, kThreads, smem, stream, a));
  }
  if (p.n_splits > 1) {
    const dim3 grid(static_cast<unsigned>(p.n_seqs * n_pairs),
                    static_cast<unsigned>(detail::CeilDiv(vw, kCombineThreads)));
    K3_CUDA_CHECK(LaunchKernel(MlaPrefillCombineKernel, grid, kCombineThreads, 0, stream, a.part, p.n_splits,
                               a.n_pairs, a.n_heads, vw, p.out, p.out_row_stride, p.out_seq_stride));
  }
  return cudaSuccess;
}

}  // namespace k3::cuda
