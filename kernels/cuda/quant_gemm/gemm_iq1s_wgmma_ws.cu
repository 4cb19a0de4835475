// IQ1_S products on Hopper's wgmma with the work split by warpgroup (warp specialization): two
// producer warpgroups copy the raw weight chunks and the activations into shared memory and decode
// the weights into f16 A tiles there; one consumer warpgroup issues the wgmma, both operands read
// from shared memory. The same tiles, windows, K permutation and f16 values as the register-A kernel
// (gemm_iq1s_wgmma.cu), so the same products summed in the same order: the same bits.
//
// Why: in the register-A kernel the 8 warps that decode also hold the accumulators and issue the
// wgmma, one block per SM, 2 warps per scheduler: the decode of window w+1 (~340 instructions per
// warp, long dependency chains through shared-memory loads) overlaps only wgmma(w), and Nsight
// Compute saw the issue slots ~30% busy and the tensor pipe ~33% (H100, expert products at T=4096).
// Here the decode runs ahead of the wgmma by as many A stages as shared memory holds, in warps that
// hold no accumulators.
//
// Block: 384 threads. Warpgroup 0 (threads 0-127) consumes: per window 8 k16 steps × 2 wgmma
// (tile rows 0-63 and 64-127; the gate|up form: gate and up, so a thread holds gate and up of the
// same (row, token) and applies situ in registers). Warpgroups 1-2 (producer threads 0-255) copy
// (cp.async, D windows ahead) and decode: producer thread t decodes groups 2(t%2), 2(t%2)+1 of the
// window for stage row t/2 and writes them into the A stage in the layout the register-A kernel's
// fragments have: step s, k positions 2q + b + 8h (q: group, b: element of the pair) hold pair
// 4(s/2) + 2(s%2) + h of group q, i.e. the 16-byte chunk h of step s of a row holds the 4 groups'
// pairs (8 bytes per producer thread: conflict-free 64-bit stores; 128-byte swizzle as for X).
//
// Synchronization: named barriers (bar.sync / bar.arrive with thread counts), per A stage i a FULL
// barrier (producers arrive when A(v) and X(v) are in place, the consumer waits) and an EMPTY
// barrier (the consumer arrives once wgmma(v) is done, the producers wait before reusing the stage:
// the consumer arrives for exactly the windows whose stage is used again, plus once per stage up
// front, so every barrier ends a tile with no arrival pending), and a producers' LOADED barrier.
// Reuse conditions, window v of the producers (they have passed EMPTY of window v, so wgmma up to
// v - kAStages is done, and LOADED of window v, so every producer decoded window v - 1):
//   X stage of window v + D held window v + D - NSX: needs NSX >= D + kAStages;
//   raw stage of chunk (v + D) / 2 held chunk (v + D) / 2 - R, last decoded in window
//   v + D - 2R + 1 <= v - 1: needs 2R >= D + 2.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/activation/situ.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_gemm/gemm_impl.cuh"
#include "kernels/cuda/quant_gemm/iq1s_wgmma_common.cuh"
#include "kernels/cuda/wgmma_ptx.cuh"

namespace k3::cuda::qgemm {
namespace {

using namespace iq1s_wgmma;  // the geometry, decode and chunk copies (iq1s_wgmma_common.cuh)

constexpr int kConsumers = 128;                  // warpgroup 0
constexpr int kProducers = 256;                  // warpgroups 1-2
constexpr int kWsThreads = kConsumers + kProducers;
constexpr int kAStages = 2;
constexpr int kAHalfBytes = kBM * 128;           // a 64-element K half of 128 rows
constexpr int kAStageBytes = 2 * kAHalfBytes;    // one window: 32 KiB
constexpr int kWsXRegionBytes = 120 * 1024;      // N = 128: 3 stages; 96: 5; 64: 7; 32: 15
// Named barrier ids (0 is __syncthreads').
constexpr int kBarLoaded = 1, kBarFull = 2, kBarEmpty = 2 + kAStages;

template <int N>
struct WsXGeo {
  static constexpr int kAtomBytes = N * 128;
  static constexpr int kStageBytes = 2 * kAtomBytes;
  static constexpr int kStages = kWsXRegionBytes / kStageBytes;
  static constexpr int kDist = std::min(kStages - kAStages, 2 * kRawStages - 2);
  static_assert(kAtomBytes % 1024 == 0, "swizzle atoms of 8 rows");
  static_assert(kDist >= 1 && kStages >= kDist + kAStages && 2 * kRawStages >= kDist + 2);
};

__device__ __forceinline__ void BarSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void BarArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// d[0 .. N/2) += A (64×16 at the descriptor a_lo) · B (16×N at b_lo), both K-major, 128-byte
// swizzle, f16 in, f32 accumulate (high words kDescHi).
template <int N>
__device__ __forceinline__ void WgmmaSs(float (&d)[64], uint32_t a_lo, uint32_t b_lo);

template <>
__device__ __forceinline__ void WgmmaSs<32>(float (&d)[64], uint32_t a_lo, uint32_t b_lo) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%16, %18};\nmov.b64 db, {%17, %18};\nsetp.ne.b32 p, %19, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15}, da, db, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a_lo), "r"(b_lo), "r"(kDescHi), "r"(1));
}

template <>
__device__ __forceinline__ void WgmmaSs<64>(float (&d)[64], uint32_t a_lo, uint32_t b_lo) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%32, %34};\nmov.b64 db, {%33, %34};\nsetp.ne.b32 p, %35, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, da, db, p, 1, 1, 0, "
      "0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a_lo), "r"(b_lo), "r"(kDescHi), "r"(1));
}

template <>
__device__ __forceinline__ void WgmmaSs<96>(float (&d)[64], uint32_t a_lo, uint32_t b_lo) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%48, %50};\nmov.b64 db, {%49, %50};\nsetp.ne.b32 p, %51, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
      "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, da, db, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "r"(a_lo), "r"(b_lo), "r"(kDescHi), "r"(1));
}

template <>
__device__ __forceinline__ void WgmmaSs<128>(float (&d)[64], uint32_t a_lo, uint32_t b_lo) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%64, %66};\nmov.b64 db, {%65, %66};\nsetp.ne.b32 p, %67, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
      "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
      "%57, %58, %59, %60, %61, %62, %63}, da, db, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a_lo), "r"(b_lo), "r"(kDescHi), "r"(1));
}

using wgmma::FenceAcc;
using wgmma::FenceProxyAsync;

template <bool kGateUp, bool kTernary>
__global__ void __launch_bounds__(kWsThreads, 1) Iq1sWgmmaWsKernel(const Args a) {
  PdlEnter();
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int32_t s_xrow[kBN];
  __shared__ int32_t s_group;

  const int tid = threadIdx.x;
  const bool consumer = tid < kConsumers;
  const int ptid = tid - kConsumers;  // producer thread 0..255 (negative in the consumer)

  // ---- shared memory: [code grid][raw stages][A stages, 1024-byte aligned][X stages] ----
  const uint32_t* const code_grid = kTernary ? nullptr : StageIq1sCodeGrid(smem);  // once per block
  uint8_t* const raw = smem + kCodeGridBytes;
  const uint32_t a_lo = SmemAddr(raw + kRawBytes);
  uint8_t* const as = raw + kRawBytes + (((a_lo + 1023u) & ~1023u) - a_lo);
  uint8_t* const xs = as + kAStages * kAStageBytes;
  const uint32_t as_addr = SmemAddr(as), xs_addr = SmemAddr(xs);

  const int64_t n_tiles = static_cast<int64_t>(a.row_tiles) * a.token_tiles;
#pragma unroll 1
  for (int64_t lin = blockIdx.x; lin < n_tiles; lin += gridDim.x) {
    constexpr int kTileRows = kGateUp ? kBM / 2 : kBM;
    const TileSpan t = FindTile<kBN, kWsThreads, kTileRows>(a, lin, &s_group);
    if (t.p_end <= t.p0) continue;  // uniform over the block
    const int64_t r0 = t.r0, p0 = t.p0;
    const int n_tok = static_cast<int>(t.p_end - t.p0);
    const int n_rows = static_cast<int>(min(static_cast<int64_t>(kTileRows), a.rows - r0));
    if (tid < kBN) s_xrow[tid] = SourceRow(a, p0, n_tok, tid);
    __syncthreads();  // s_xrow (and, for the first tile, the code grid)
    const int width = (n_tok + 31) / 32;  // 1..4
    const int nw = a.cols / kWK;           // even: cols is whole 256-element blocks

    if (consumer) {
      // ---- consumer: wgmma per window, then the epilogue from registers ----
      const int warp = tid >> 5, lane = tid & 31, tq = lane & 3;
      const int trow = 16 * warp + (lane >> 2);  // tile row of acc[4j + q] (q < 2), + 8 for q >= 2
      float acc0[64], acc1[64];
#pragma unroll
      for (int i = 0; i < 64; ++i) acc0[i] = acc1[i] = 0.0f;
      auto pipeline = [&]<int N>() {
        using X = WsXGeo<N>;
#pragma unroll
        for (int s = 0; s < kAStages; ++s) {
          if (s < nw) BarArrive(kBarEmpty + s, kWsThreads);  // the stages start empty
        }
#pragma unroll 1
        for (int v = 0; v < nw; ++v) {
          const int sa = v % kAStages;
          BarSync(kBarFull + sa, kWsThreads);
          const uint32_t ad = DescSw128Lo(as_addr + sa * kAStageBytes);
          const uint32_t bd = DescSw128Lo(xs_addr + (v % X::kStages) * X::kStageBytes);
          FenceAcc(acc0);
          FenceAcc(acc1);
          wgmma::Fence();
#pragma unroll
          for (int s = 0; s < 8; ++s) {
            const uint32_t ka = ((s >> 2) * kAHalfBytes + (s & 3) * 32) >> 4;
            const uint32_t kb = ((s >> 2) * X::kAtomBytes + (s & 3) * 32) >> 4;
            WgmmaSs<N>(acc0, ad + ka, bd + kb);
            WgmmaSs<N>(acc1, ad + ka + ((64 * 128) >> 4), bd + kb);
          }
          wgmma::Commit();
          wgmma::Wait<1>();
          FenceAcc(acc0);
          FenceAcc(acc1);
          // wgmma(v - 1) is done: its A and X stages are free, when a later window reuses them
          if (v >= 1 && v - 1 + kAStages < nw) BarArrive(kBarEmpty + (v - 1) % kAStages, kWsThreads);
        }
        wgmma::Wait<0>();
        FenceAcc(acc0);
        FenceAcc(acc1);
      };
      if (width == 1) {
        pipeline.template operator()<32>();
      } else if (width == 2) {
        pipeline.template operator()<64>();
      } else if (width == 3) {
        pipeline.template operator()<96>();
      } else {
        pipeline.template operator()<128>();
      }
      // ---- epilogue: acc[4j + q] = tile row trow + 8(q/2) (+ 64 for acc1), token 8j + 2tq + q%2 ----
      if constexpr (kGateUp) {
        // acc0 gate, acc1 up of the same (row, token)
        if (a.y_half != nullptr) {
          // f16 pairs of rows (2i, 2i + 1) at the x pre-pass's slots (WgmmaXColumn: an even
          // element's odd neighbour is the next slot). Rows g and g + 1 (g = lane / 4 even) sit in
          // lanes 4 apart: the even row's lane writes token 2tq, the odd row's token 2tq + 1.
          const bool odd = (lane >> 2) & 1;
#pragma unroll
          for (int j = 0; j < 16; ++j) {
#pragma unroll
            for (int hq = 0; hq < 2; ++hq) {
              if (j < 4 * width) {
                const int q0 = 2 * hq;
                const float v0 = detail::SituValue(acc0[4 * j + q0], acc1[4 * j + q0], a.situ_beta, a.situ_lambda);
                const float v1 =
                    detail::SituValue(acc0[4 * j + q0 + 1], acc1[4 * j + q0 + 1], a.situ_beta, a.situ_lambda);
                // even lane keeps its token-2tq value and takes the odd row's; the odd lane the reverse
                const float give = odd ? v0 : v1;
                const float got = __shfl_xor_sync(0xffffffffu, give, 4);
                const float lo = odd ? got : v0, hi = odd ? v1 : got;  // rows m, m + 1 (m = trow & ~1)
                const int m = (trow & ~1) + 8 * hq, n = 8 * j + 2 * tq + (odd ? 1 : 0);
                if (m < n_rows && n < n_tok) {
                  *reinterpret_cast<__half2*>(a.y_half + (p0 + n) * a.rows + WgmmaXColumn(r0 + m)) =
                      __floats2half2_rn(lo, hi);
                }
              }
            }
          }
        } else {
#pragma unroll
          for (int j = 0; j < 16; ++j) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              const int m = trow + 8 * (q >> 1), n = 8 * j + 2 * tq + (q & 1);
              if (j < 4 * width && m < n_rows && n < n_tok) {
                a.y[(p0 + n) * a.y_stride + r0 + m] =
                    detail::SituValue(acc0[4 * j + q], acc1[4 * j + q], a.situ_beta, a.situ_lambda);
              }
            }
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int m = trow + 8 * (q >> 1), n = 8 * j + 2 * tq + (q & 1);
            if (j < 4 * width && n < n_tok) {
              if (m < n_rows) a.y[(p0 + n) * a.y_stride + r0 + m] = acc0[4 * j + q];
              if (m + 64 < n_rows) a.y[(p0 + n) * a.y_stride + r0 + m + 64] = acc1[4 * j + q];
            }
          }
        }
      }
    } else {
      // ---- producers: loads D windows ahead, decode into the A stages ----
      const uint8_t* const wbase = a.w + t.mat * a.mat_stride;
      const uint8_t* const wbase_up = kGateUp ? a.w_up + t.mat * a.mat_stride : nullptr;
      const Iq1sChunkCopy<kGateUp, kTernary> raw_copy(a, wbase, wbase_up, r0, n_rows, ptid);
      // X: thread = 16-byte piece ptid % 16 of token rows ptid / 16 + 16·i (i < N / 16), as in the
      // register-A kernel (rows outside x and past the tile zero-filled, no read).
      constexpr int kXItems = kBN * 16 / kProducers;
      const int xqq = ptid & 15;
      const __half* xsrc[kXItems];
      uint32_t xbytes[kXItems];
#pragma unroll
      for (int i = 0; i < kXItems; ++i) {
        const int32_t src = s_xrow[(ptid >> 4) + 16 * i];
        xsrc[i] = a.xh + (src >= 0 ? static_cast<int64_t>(src) * a.cols + 8 * xqq : 0);
        xbytes[i] = src >= 0 ? 16u : 0u;
      }
      const uint32_t x_dst_row = (ptid >> 4) * 128 + (((xqq & 7) ^ ((ptid >> 4) & 7)) << 4);
      // decode: stage row prow, groups 2gh and 2gh + 1 of each window
      const int prow = ptid >> 1, gh = ptid & 1;
      const int trow = kGateUp ? prow & 63 : prow;
      const bool valid = trow < n_rows;
      const int row_mis = static_cast<int>(((r0 + trow) * a.row_bytes) & 15);
      uint8_t* const a_row = as + prow * 128 + 8 * gh;
      const int swz = prow & 7;
      auto decode = [&](int v) {
        const int c = v >> 1;
        const uint8_t* const blk =
            raw + (c % kRawStages) * (kBM * G::kRegion) + prow * G::kRegion + ((row_mis + c * raw_copy.kBlockBytes) & 15);
        uint32_t p0[16], p1[16];
        const int ib = 4 * (v & 1) + 2 * gh;
        if constexpr (kTernary) {
          DecodeTernaryGroup(blk, ib, valid, p0);
          DecodeTernaryGroup(blk, ib + 1, valid, p1);
        } else {
          DecodeIq1sGroup(blk, ib, valid, code_grid, p0);
          DecodeIq1sGroup(blk, ib + 1, valid, code_grid, p1);
        }
        uint8_t* const dst = a_row + (v % kAStages) * kAStageBytes;
#pragma unroll
        for (int s = 0; s < 8; ++s) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int idx = 4 * (s >> 1) + 2 * (s & 1) + h;
            const int chunk = 2 * (s & 3) + h;
            *reinterpret_cast<uint2*>(dst + (s >> 2) * kAHalfBytes + ((chunk ^ swz) << 4)) =
                make_uint2(p0[idx], p1[idx]);
          }
        }
      };
      auto pipeline = [&]<int N>() {
        using X = WsXGeo<N>;
        constexpr int kDist = X::kDist;
        const uint32_t x_dst0 = (xqq >> 3) * X::kAtomBytes + x_dst_row;
        auto issue_group = [&](int v) {  // one cp.async group: X(v), and chunk v/2 when v is even
          uint8_t* const stage = xs + (v % X::kStages) * X::kStageBytes + x_dst0;
          const int col = v * kWK;
#pragma unroll
          for (int i = 0; i < N / 16; ++i) CpAsync16Zfill(stage + 16 * 128 * i, xsrc[i] + col, xbytes[i]);
          if (v % 2 == 0) raw_copy.Issue(v / 2, raw + (v / 2 % kRawStages) * (kBM * G::kRegion));
        };
#pragma unroll
        for (int v = 0; v < kDist; ++v) {
          if (v < nw) issue_group(v);
          CpAsyncCommit();
        }
#pragma unroll 1
        for (int v = 0; v < nw; ++v) {
          CpAsyncWait<kDist - 1>();             // this thread's group v has landed
          BarSync(kBarLoaded, kProducers);      // every producer's; every producer decoded v - 1
          BarSync(kBarEmpty + v % kAStages, kWsThreads);  // wgmma(v - kAStages) is done
          if (v + kDist < nw) issue_group(v + kDist);
          CpAsyncCommit();
          decode(v);
          FenceProxyAsync();  // the A stores and the landed X copies, for the tensor cores' reads
          BarArrive(kBarFull + v % kAStages, kWsThreads);
        }
      };
      if (width == 1) {
        pipeline.template operator()<32>();
      } else if (width == 2) {
        pipeline.template operator()<64>();
      } else if (width == 3) {
        pipeline.template operator()<96>();
      } else {
        pipeline.template operator()<128>();
      }
      CpAsyncWait<0>();  // nothing may be left in flight into shared memory at exit
    }
    __syncthreads();  // the stages and s_xrow are free before the next tile's loads
  }
#else
  __trap();  // built without sm_90a: QuantGemm does not choose this kernel then
#endif
}

}  // namespace

cudaError_t GemmLaunchIq1sWgmmaWs(const Args& a, int sms, bool gate_up, bool ternary, cudaStream_t stream) {
  // Iq1sChunkCopy's weight offsets are 32-bit: matrices under 2 GiB
  if (a.rows * static_cast<int64_t>(a.row_bytes) >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  const auto fn = ternary ? (gate_up ? Iq1sWgmmaWsKernel<true, true> : Iq1sWgmmaWsKernel<false, true>)
                          : (gate_up ? Iq1sWgmmaWsKernel<true, false> : Iq1sWgmmaWsKernel<false, false>);
  const void* kernel = reinterpret_cast<const void*>(fn);
  constexpr int smem = kCodeGridBytes + kRawBytes + 1024 + kAStages * kAStageBytes + kWsXRegionBytes;
  if (const cudaError_t e = PrepareGemmKernel(kernel, smem); e != cudaSuccess) return e;
  const int64_t tiles = static_cast<int64_t>(a.row_tiles) * a.token_tiles;
  const int64_t blocks = std::min<int64_t>(tiles, sms);  // one block per SM (shared memory)
  K3_CUDA_CHECK(LaunchKernel(fn, static_cast<unsigned>(blocks), kWsThreads, smem, stream, a));
  return cudaSuccess;
}

}  // namespace k3::cuda::qgemm
