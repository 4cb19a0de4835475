// MLA attention on Hopper's warpgroup tensor cores (wgmma, sm_90a): MlaPrefill with
// MlaPrefillParams::wgmma. The same function as the mma.sync kernel of mla_prefill.cu (same f16
// roundings of q, the cache rows and the softmax weights; f32 accumulation and statistics; the same
// split partials, combined by the same kernel), another summation order inside each product.
//
// Why: at batch 1 and long context (128k) the mma.sync kernel ran at ~3x the cache's HBM floor,
// bound by its ldmatrix traffic (each warp re-reads its Q and key fragments through registers:
// ~1 MB of shared-memory reads per 64 cache rows for 96 heads) and by 8 warps in three barrier
// phases. wgmma reads both operands from shared memory itself, 64 rows × N columns per instruction.
//
// Block = (sequence, 64 (row, head) pairs, one context split), 2 warpgroups (256 threads), one
// block per SM (~226 KB of shared memory). Per key tile of 64 cache rows (cp.async into one of two
// buffers, the next tile loading while this one is used; rows past the split's range zero-filled):
//   warpgroup 0: S = Q·Kᵀ (64 pairs × 64 keys, K = row width: 36 wgmma m64n64k16, both operands
//     K-major), masked (key >= len of the pair's row), online softmax in f32 (each pair's 64 keys
//     sit in one quad of lanes: no shared-memory exchange), P -> shared memory as f16, α per pair;
//   both warpgroups: O = α·O + P·V, warpgroup w over value columns [256w, 256w + 256): 4 wgmma
//     m64n256k16, A = P (K-major), B = V = the first 512 columns of the same key tile read
//     N-major (imm-trans-b), 128 accumulators per thread.
// Two barriers per tile: (1) the tile is in and the previous tile's P·V done, (2) P and α written.
//
// Shared memory (1024-byte aligned, the 128-byte swizzle's atoms): Q, then two key tiles, each as
// row_width / 64 column blocks of [64 rows][64 halves] (128-byte rows, 16-byte chunk c of row r at
// chunk c ^ (r & 7)), then P as one such block, then the statistics.
#include "kernels/cuda/mla/mla_prefill_args.cuh"

#include <cuda_fp16.h>

#include "kernels/cuda/mla/mla_prefill.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_ptx.cuh"
#include "kernels/cuda/wgmma_ptx.cuh"

namespace k3::cuda {
namespace {

constexpr int kBM = kMlaWgmmaPairs;  // pairs per block: wgmma's M
constexpr int kBN = 64;              // cache rows per key tile
constexpr int kThreads = 256;        // two warpgroups
constexpr int kBlockBytes = 64 * 128;  // one column block: 64 rows × 64 halves
constexpr int kMaxBlocks = 9;          // row width 576, the only one taken
constexpr int kValue = 512;            // value columns: two warpgroups × 256
constexpr int kStatsBytes = 4 * kBM * 4 + 16;
// The 128-byte swizzle's descriptors: 8-row groups (K-major) and 8-key groups (V, N-major) are
// 1024 bytes apart; V's 64-column blocks are a column block apart.
constexpr uint32_t kHi = wgmma::DescHi(1024);

size_t SmemBytes(int n_blocks) { return 1024 + static_cast<size_t>(3 * n_blocks + 1) * kBlockBytes + kStatsBytes; }

// Byte offset of 16-byte chunk c (of row_width / 8) of row r in a tile of column blocks.
__device__ __forceinline__ uint32_t TileOffset(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * kBlockBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// kBlocks = row_width / 64 column blocks (9 for K3's 576: the only instantiation).
template <int kBlocks>
__global__ void __launch_bounds__(kThreads, 1) MlaPrefillWgmmaKernel(const MlaPrefillArgs a) {
  PdlEnter();
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* const smem = smem_raw + ((1024u - (ptx::SmemAddr(smem_raw) & 1023u)) & 1023u);
  constexpr int nb = kBlocks, rw = 64 * kBlocks, cpr = rw / 8;
  const int vw = a.vw;
  unsigned char* const sq = smem;                              // [nb][64][128 B]
  unsigned char* const sk = sq + nb * kBlockBytes;             // [2][nb][64][128 B]
  unsigned char* const sp = sk + 2 * nb * kBlockBytes;         // [64][128 B]: P, f16
  float* const s_alpha = reinterpret_cast<float*>(sp + kBlockBytes);  // [kBM]
  float* const s_l = s_alpha + kBM;                            // [kBM]
  float* const s_m = s_l + kBM;                                // [kBM]
  int* const s_len = reinterpret_cast<int*>(s_m + kBM);        // [kBM]
  int* const s_red = s_len + kBM;                              // [2]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int item = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // latest rows (longest) first
  const int per_seq = a.n_tiles * a.n_splits, seq = item / per_seq;
  const int tile = (item - seq * per_seq) / a.n_splits, split = item - seq * per_seq - tile * a.n_splits;
  const int p0 = tile * kBM;
  const float* const q = a.q + seq * a.q_seq_stride;
  const int32_t* const lens = a.seq_lens + seq * a.n_rows;
  const int32_t* const table = a.table != nullptr ? a.table + seq * a.table_stride : nullptr;

  if (tid < 64) {  // whole warps 0 and 1
    const int pr = p0 + tid;
    const int len = pr < a.n_pairs ? min(max(lens[pr / a.n_heads], 0), a.max_len) : 0;
    s_len[tid] = len;
    const int m = __reduce_max_sync(detail::kFullMask, len);
    if (lane == 0) s_red[warp] = m;
  }
  for (int i = tid; i < kBM * cpr; i += kThreads) {
    const int r = i / cpr, c = i - r * cpr, pr = p0 + r;
    uint4 h = make_uint4(0u, 0u, 0u, 0u);
    if (pr < a.n_pairs) {
      const int row = pr / a.n_heads, head = pr - row * a.n_heads;
      h = ptx::LoadHalf8(q + row * a.q_row_stride + static_cast<int64_t>(head) * rw + c * 8, a.q_mul);
    }
    *reinterpret_cast<uint4*>(sq + TileOffset(r, c)) = h;
  }
  wgmma::FenceProxyAsync();
  __syncthreads();
  const int lmax = max(s_red[0], s_red[1]);
  int per = (lmax + a.n_splits - 1) / a.n_splits;
  per = (per + kBN - 1) / kBN * kBN;
  const int r_lo = split * per, r_hi = min(lmax, r_lo + per);
  const int n_kt = r_hi > r_lo ? (r_hi - r_lo + kBN - 1) / kBN : 0;

  // Tile loader: thread = (row tid / 4, chunks tid % 4 + 4j); row_src(kt) looked up a tile ahead.
  auto row_src = [&](int kt) -> const __half* {
    const int t = r_lo + kt * kBN + (tid >> 2);
    if (t >= r_hi) return nullptr;
    return table != nullptr ? a.keys + table[t / a.page_size] * a.page_stride + (t % a.page_size) * a.row_stride
                            : a.keys + t * a.row_stride;
  };
  auto issue_tile = [&](int kt, const __half* src) {
    const int r = tid >> 2;
    const uint32_t dst = ptx::SmemAddr(sk + (kt & 1) * nb * kBlockBytes);
    for (int c = tid & 3; c < cpr; c += 4) {
      if (src != nullptr) {
        ptx::CpAsync16(dst + TileOffset(r, c), src + c * 8, 16);
      } else {
        ptx::CpAsync16(dst + TileOffset(r, c), a.keys, 0);
      }
    }
    ptx::CpAsyncCommit();
  };

  // Accumulator fragments (both products): warp w % 4 of a warpgroup holds pairs 16·(w % 4) + g
  // and + 8, columns 8j + 2·qd and + 1 (regs 4j, 4j + 1; 4j + 2, 4j + 3 for the second pair).
  const int g = lane >> 2, qd = lane & 3;
  const int r0 = 16 * (warp & 3) + g, r1 = r0 + 8;
  const int len0 = s_len[r0], len1 = s_len[r1];
  const uint32_t q_addr = ptx::SmemAddr(sq), p_addr = ptx::SmemAddr(sp);

  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // warpgroup 0; l: this thread's keys only
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;

  const __half* src_next = nullptr;  // row_src(kt + 1) during tile kt
  if (n_kt > 0) {
    issue_tile(0, row_src(0));
    src_next = row_src(1);
  }
  for (int kt = 0; kt < n_kt; ++kt) {
    ptx::CpAsyncWait<0>();
    wgmma::FenceProxyAsync();
    __syncthreads();  // (1)
    if (kt + 1 < n_kt) {
      issue_tile(kt + 1, src_next);
      src_next = row_src(kt + 2);
    }
    const uint32_t k_addr = ptx::SmemAddr(sk + (kt & 1) * nb * kBlockBytes);

    if (wg == 0) {
      float s[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) s[i] = 0.0f;
      wgmma::Fence();
#pragma unroll
      for (int step = 0; step < rw / 16; ++step) {  // 16 columns of the row a step
        const uint32_t ofs = (step >> 2) * kBlockBytes + (step & 3) * 32;
        wgmma::MmaSs64(s, wgmma::DescLo(q_addr + ofs), kHi, wgmma::DescLo(k_addr + ofs), kHi);
      }
      wgmma::Commit();
      wgmma::Wait<0>();
      wgmma::FenceAcc(s);

      // Mask, row maxima over the quad, online softmax; P rounded to f16 (l sums the rounded values).
      const int key0 = r_lo + kt * kBN + 2 * qd;
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key0 + 8 * j + e;
          if (key >= len0) s[4 * j + e] = -INFINITY;
          if (key >= len1) s[4 * j + 2 + e] = -INFINITY;
          mx0 = fmaxf(mx0, s[4 * j + e]);
          mx1 = fmaxf(mx1, s[4 * j + 2 + e]);
        }
      }
#pragma unroll
      for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(detail::kFullMask, mx0, o2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(detail::kFullMask, mx1, o2));
      }
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      const float al0 = mn0 == -INFINITY ? 1.0f : exp2f(m0 - mn0);
      const float al1 = mn1 == -INFINITY ? 1.0f : exp2f(m1 - mn1);
      m0 = mn0;
      m1 = mn1;
      float sum0 = 0.0f, sum1 = 0.0f;
      unsigned char* const p_row0 = sp + r0 * 128 + 4 * qd;
      unsigned char* const p_row1 = sp + r1 * 128 + 4 * qd;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float e0 = s[4 * j] == -INFINITY ? 0.0f : exp2f(s[4 * j] - mn0);
        const float e1 = s[4 * j + 1] == -INFINITY ? 0.0f : exp2f(s[4 * j + 1] - mn0);
        const float e2 = s[4 * j + 2] == -INFINITY ? 0.0f : exp2f(s[4 * j + 2] - mn1);
        const float e3 = s[4 * j + 3] == -INFINITY ? 0.0f : exp2f(s[4 * j + 3] - mn1);
        const __half2 h01 = __floats2half2_rn(e0, e1), h23 = __floats2half2_rn(e2, e3);
        const float2 f01 = __half22float2(h01), f23 = __half22float2(h23);
        sum0 += f01.x + f01.y;
        sum1 += f23.x + f23.y;
        *reinterpret_cast<__half2*>(p_row0 + ((j ^ g) << 4)) = h01;  // r0 & 7 == r1 & 7 == g
        *reinterpret_cast<__half2*>(p_row1 + ((j ^ g) << 4)) = h23;
      }
      l0 = l0 * al0 + sum0;
      l1 = l1 * al1 + sum1;
      if (qd == 0) {
        s_alpha[r0] = al0;
        s_alpha[r1] = al1;
      }
      wgmma::FenceProxyAsync();
    }
    __syncthreads();  // (2)

    // O = α·O + P·V over this warpgroup's 256 value columns.
    const float a0 = s_alpha[r0], a1 = s_alpha[r1];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j] *= a0;
      o[4 * j + 1] *= a0;
      o[4 * j + 2] *= a1;
      o[4 * j + 3] *= a1;
    }
    wgmma::Fence();
    const uint32_t v_addr = k_addr + wg * 4 * kBlockBytes;
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {  // 16 keys a step: two 8-key groups of 1024 bytes
      wgmma::MmaSs256TransB(o, wgmma::DescLo(p_addr + kk * 32), kHi,
                            wgmma::DescLo(v_addr + kk * 2048, kBlockBytes), kHi);
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceAcc(o);
  }

  // Row sums over the quad (warpgroup 0), then every thread its pairs' outputs.
  if (wg == 0) {
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
      l0 += __shfl_xor_sync(detail::kFullMask, l0, o2);
      l1 += __shfl_xor_sync(detail::kFullMask, l1, o2);
    }
    if (qd == 0) {
      s_l[r0] = l0;
      s_l[r1] = l1;
      s_m[r0] = m0;
      s_m[r1] = m1;
    }
  }
  __syncthreads();
  const bool direct = a.n_splits == 1;
  const int64_t part_stride = vw + 4;
  const int64_t all_pairs = static_cast<int64_t>(a.n_seqs) * a.n_pairs;
  const int64_t pair_base = static_cast<int64_t>(seq) * a.n_pairs;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = half == 0 ? r0 : r1, pr = p0 + r;
    if (pr >= a.n_pairs) continue;
    float* dst;
    float mul = 1.0f;
    if (direct) {
      const float l = s_l[r];
      mul = l > 0.0f ? 1.0f / l : 0.0f;
      const int row = pr / a.n_heads, head = pr - row * a.n_heads;
      dst = a.out + seq * a.out_seq_stride + row * a.out_row_stride + static_cast<int64_t>(head) * vw;
    } else {
      dst = a.part + (split * all_pairs + pair_base + pr) * part_stride;
    }
    dst += wg * 256 + 2 * qd;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[4 * j + 2 * half] * mul, o[4 * j + 2 * half + 1] * mul);
    }
  }
  if (!direct && tid < kBM && p0 + tid < a.n_pairs) {
    float* dst = a.part + (split * all_pairs + pair_base + p0 + tid) * part_stride;
    dst[vw] = s_m[tid];
    dst[vw + 1] = s_l[tid];
  }
#else
  __trap();  // built without sm_90a: MlaPrefill refuses params.wgmma then (MlaPrefillWgmmaSupports)
#endif
}

}  // namespace

bool MlaPrefillWgmmaSupports(int64_t row_width, int64_t value_width) {
#ifdef K3_HAVE_SM90A
  return row_width == 64 * kMaxBlocks && value_width == kValue;
#else
  (void)row_width;
  (void)value_width;
  return false;
#endif
}

cudaError_t LaunchMlaPrefillWgmma(const MlaPrefillArgs& a, unsigned blocks, cudaStream_t stream) {
  const size_t smem = SmemBytes(kMaxBlocks);
  auto* const kernel = MlaPrefillWgmmaKernel<kMaxBlocks>;
  K3_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  K3_CUDA_CHECK(LaunchKernel(kernel, blocks, kThreads, smem, stream, a));
  return cudaSuccess;
}

}  // namespace k3::cuda
