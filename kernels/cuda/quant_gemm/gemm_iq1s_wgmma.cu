// IQ1_S products on Hopper's warpgroup tensor cores (wgmma, sm_90a): the weights are decoded
// straight into the A-operand registers, the activations stream into shared memory in the layout
// wgmma reads (B, K-major, 128-byte swizzle). Grouped (MoE experts) and plain, like QuantGemmKernel
// (gemm_impl.cuh), whose tile order, group lookup and raw-chunk copies it shares.
//
// Block: 2 warpgroups (256 threads), 128 weight rows (64 per warpgroup) × 128 tokens, K walked in
// windows of 128 elements. Per window a thread decodes, for each of its two rows (g and g + 8 of
// its warp's 16), one IQ1_S group of 32 weights (group 4·(window % 2) + tq of the block: d, qh,
// K and δ read once; DecodeIq1sGroup: the f16 decode's values, one PRMT per pair): 16 f16 pairs,
// which are the A fragments of the window's 8 k16-steps, because K is PERMUTED inside each window:
// A-fragment slot (step s, position p) of thread tq holds weight 32·tq + 4·s + r with r = p%2 + 2·(p/8 % 2),
// and the pre-pass (quant_gemm.cu, XToHalfKernel) writes x permuted the same way, so every product
// pairs the same weight and activation as before, only summed in another order.
// Pipeline (D = XGeo<N>::kDist windows of loads in flight, 3 to 5 by the wgmma width N; one cp.async
// group and one barrier per window):
//   window w:  wait for the loads of window w+1 -> barrier -> issue the loads of window w+D ->
//              wgmma(w) on A[w%2] (asynchronous) -> wait for wgmma(w-1) -> decode window w+1 into
//              A[(w+1)%2] while wgmma(w) runs.
// The wgmma width follows the tile's token count (32, 64, 96 or 128): a grouped tile is often short.
// Gate|up form (kGateUp, the MoE experts' first two products): warpgroup 0 takes 64 rows of gate,
// warpgroup 1 the same 64 rows of up (the same tile tokens, so the same x tile and the same wgmma
// sequence as the separate launches: the same sums, bit for bit); the epilogue puts both through
// shared memory and all 8 warps write situ(gate, up): one launch, one output, no activation pass.
// The grid is persistent (a block per SM, looping over the tiles), so the selector table is staged
// once per block and empty tiles cost no block launch.
// Ternary form (kTernary; quant_gemv/iq1s_ternary.h, the decode GEMV's 2-bit fields g + 1, 72 bytes
// per block): the same three f16 values per group from the same d, K and δ, each weight's PRMT
// selector made from its field by one IMAD instead of a grid lookup (DecodeTernaryGroup), so the
// same A fragments and the same sums, bit for bit; no grid staged; a raw chunk (one 72-byte block,
// 8-byte aligned) takes five 16-byte pieces, copied at 8 lanes a row in four passes of a tile.
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

constexpr int kThreads = 256;                 // two warpgroups
constexpr int kXRegionBytes = 5 * 2 * kBN * 128;  // the X stages: 5 windows of 128 tokens, more of fewer
// The X stages of a tile whose wgmma width is N tokens: a window is two K halves of N rows × 128
// bytes (N·256 bytes), as many stages as the region holds, and D windows of loads in flight: as
// many as the reuse conditions at the main loop allow (X: stages >= D + 2; raw: 2·kRawStages >=
// D + 1). N = 128: 5 stages, D = 3; 96: 6, 4; 64 and 32: 10 and 20, 5. Short tiles, most of a
// grouped product's, get the most loads in flight, where one window's wgmma is the shortest.
template <int N>
struct XGeo {
  static constexpr int kAtomBytes = N * 128;  // a 64-element K half, 128 bytes per token
  static constexpr int kStageBytes = 2 * kAtomBytes;
  static constexpr int kStages = kXRegionBytes / kStageBytes;
  static constexpr int kDist = std::min(kStages - 2, 2 * kRawStages - 1);
  static_assert(kAtomBytes % 1024 == 0, "swizzle atoms of 8 rows");
  static_assert(kDist >= 2 && kStages >= kDist + 2 && 2 * kRawStages >= kDist + 1);
};
constexpr int kSituLd = 68;                   // floats per token row of the gate|up epilogue's tiles
static_assert(2 * kBN * kSituLd * 4 <= kXRegionBytes, "the epilogue's tiles reuse the X stages");

// ---- wgmma -------------------------------------------------------------------------------------

// d[0 .. N/2) += A (64×16, this thread's fragment a) · B (16×N at the descriptor whose low word is
// desc_lo and high word kDescHi), f16 in, f32 accumulate. The descriptor is put together inside the
// asm from two 32-bit words, so a k16 step's descriptor is one 32-bit add of a constant (as a
// 64-bit value the compiler spent ~5 uniform instructions per wgmma on it).
template <int N>
__device__ __forceinline__ void WgmmaRs(float (&d)[64], const uint32_t (&a)[4], uint32_t desc_lo);

template <>
__device__ __forceinline__ void WgmmaRs<32>(float (&d)[64], const uint32_t (&a)[4], uint32_t desc_lo) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 d;\nmov.b64 d, {%20, %21};\nsetp.ne.b32 p, %22, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15}, {%16, %17, %18, %19}, d, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_lo), "r"(kDescHi), "r"(1));
}

template <>
__device__ __forceinline__ void WgmmaRs<64>(float (&d)[64], const uint32_t (&a)[4], uint32_t desc_lo) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 d;\nmov.b64 d, {%36, %37};\nsetp.ne.b32 p, %38, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, "
      "%35}, d, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_lo), "r"(kDescHi), "r"(1));
}

template <>
__device__ __forceinline__ void WgmmaRs<96>(float (&d)[64], const uint32_t (&a)[4], uint32_t desc_lo) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 d;\nmov.b64 d, {%52, %53};\nsetp.ne.b32 p, %54, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
      "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, {%48, %49, %50, %51}, d, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_lo), "r"(kDescHi), "r"(1));
}

template <>
__device__ __forceinline__ void WgmmaRs<128>(float (&d)[64], const uint32_t (&a)[4], uint32_t desc_lo) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 d;\nmov.b64 d, {%68, %69};\nsetp.ne.b32 p, %70, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
      "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
      "%57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, d, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_lo), "r"(kDescHi), "r"(1));
}

// Fences, commit and wait: kernels/cuda/wgmma_ptx.cuh (shared with the MLA attention kernel).
using wgmma::FenceAcc;
using wgmma::FenceProxyAsync;

// ---- the kernel ----------------------------------------------------------------------------------

template <bool kGateUp, bool kTernary>
__global__ void __launch_bounds__(kThreads, 1) Iq1sWgmmaKernel(const Args a) {
  PdlEnter();
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int32_t s_xrow[kBN];
  __shared__ int32_t s_group;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // ---- shared memory: [code grid][raw stages][X stages, 1024-byte aligned] ----
  const uint32_t* const code_grid = kTernary ? nullptr : StageIq1sCodeGrid(smem);  // once per block (persistent)
  uint8_t* const raw = smem + kCodeGridBytes;
  const uint32_t x_lo = SmemAddr(raw + kRawBytes);
  uint8_t* const xs = raw + kRawBytes + (((x_lo + 1023u) & ~1023u) - x_lo);
  const uint32_t xs_addr = SmemAddr(xs);

  // Persistent: the block takes tiles blockIdx.x, + gridDim.x, ... of the tile order.
  const int64_t n_tiles = static_cast<int64_t>(a.row_tiles) * a.token_tiles;
#pragma unroll 1
  for (int64_t lin = blockIdx.x; lin < n_tiles; lin += gridDim.x) {
    constexpr int kTileRows = kGateUp ? kBM / 2 : kBM;  // output rows per tile
    const TileSpan t = FindTile<kBN, kThreads, kTileRows>(a, lin, &s_group);
    if (t.p_end <= t.p0) continue;  // an empty tile (uniform over the block)
    const int64_t r0 = t.r0, p0 = t.p0;
    const int n_tok = static_cast<int>(t.p_end - t.p0);
    const uint8_t* const wbase = a.w + t.mat * a.mat_stride;
    const uint8_t* const wbase_up = kGateUp ? a.w_up + t.mat * a.mat_stride : nullptr;
    const int n_rows = static_cast<int>(min(static_cast<int64_t>(kTileRows), a.rows - r0));
    if (tid < kBN) s_xrow[tid] = SourceRow(a, p0, n_tok, tid);
    __syncthreads();  // s_xrow (and, for the first tile, the code grid)

    // ---- loads: raw chunk c (windows 2c, 2c+1) and X window v ----
    const Iq1sChunkCopy<kGateUp, kTernary> raw_copy(a, wbase, wbase_up, r0, n_rows, tid);
    // X: thread = 16-byte piece tid % 16 of token rows tid / 16 + 16·i (i < N / 16); piece qq lands
    // in K half qq / 8 at 16-byte column (qq % 8) ^ (row % 8) (the 128-byte swizzle). Rows outside x
    // and past the tile are zero-filled (no read).
    constexpr int kXItems = kBN * 16 / kThreads;
    const int xqq = tid & 15;
    const __half* xsrc[kXItems];
    uint32_t xbytes[kXItems];
#pragma unroll
    for (int i = 0; i < kXItems; ++i) {
      const int32_t src = s_xrow[(tid >> 4) + 16 * i];
      xsrc[i] = a.xh + (src >= 0 ? static_cast<int64_t>(src) * a.cols + 8 * xqq : 0);
      xbytes[i] = src >= 0 ? 16u : 0u;
    }
    const uint32_t x_dst_row = (tid >> 4) * 128 + (((xqq & 7) ^ ((tid >> 4) & 7)) << 4);

    // ---- decode of window v into A fragments: stage rows mrow and mrow + 8, group 4·(v%2) + tq;
    // trow: the matrix row's offset in the tile (kGateUp: each warpgroup's rows start at r0) ----
    const int tq = lane & 3;
    const int mrow = 64 * (warp >> 2) + 16 * (warp & 3) + (lane >> 2);
    const int trow = kGateUp ? mrow & 63 : mrow;
    int row_mis[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) row_mis[rr] = static_cast<int>(((r0 + trow + 8 * rr) * a.row_bytes) & 15);
    auto decode = [&](int v, uint32_t(&A)[8][4]) {
      const int c = v >> 1;
      const uint8_t* const stage = raw + (c % kRawStages) * (kBM * G::kRegion);
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int row = mrow + 8 * rr;
        uint32_t p[16];
        const int mis = (row_mis[rr] + c * raw_copy.kBlockBytes) & 15;
        if constexpr (kTernary) {
          DecodeTernaryGroup(stage + row * G::kRegion + mis, 4 * (v & 1) + tq, trow + 8 * rr < n_rows, p);
        } else {
          DecodeIq1sGroup(stage + row * G::kRegion + mis, 4 * (v & 1) + tq, trow + 8 * rr < n_rows, code_grid, p);
        }
#pragma unroll
        for (int l = 0; l < 4; ++l) {  // run l = steps 2l (weights 0-3) and 2l + 1 (weights 4-7)
          A[2 * l][rr] = p[4 * l];
          A[2 * l][2 + rr] = p[4 * l + 1];
          A[2 * l + 1][rr] = p[4 * l + 2];
          A[2 * l + 1][2 + rr] = p[4 * l + 3];
        }
      }
    };

    // ---- accumulators; the wgmma width N is the tile's tokens rounded up to 32 ----
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    const int width = (n_tok + 31) / 32;  // 1..4

    // ---- pipeline ----
    // Group G_v holds X(v) (and chunk v/2 for even v); G_0 .. G_{D-1} in the prologue, G_{w+D} in
    // iteration w (empty past the end). Iteration w waits for G_{w+1} (wait_group D-2), so X(w) and
    // the chunk of window w+1 have landed. Reuse is safe because every overwrite is issued after the
    // barrier that follows the previous occupant's last use:
    //   X stage (w+D) % NSX (NSX = XGeo<N>::kStages): windows w-1 (its wgmma may still run: waited
    //     for only at the end of iteration w) .. w+D-1 are live, so NSX >= D+2;
    //   raw stage of chunk c = (w+D)/2 (R = kRawStages): chunk c-R was last decoded (window
    //     2c-2R+1) in iteration 2c-2R = w+D-2R <= w-1 since 2R >= D+1;
    //   A[(w+1)%2]: last read by wgmma(w-1), waited for (wait_group 1) just before the decode.
    // The whole loop is instantiated per wgmma width N (one branch per tile, not per window), so
    // each window's fence, 8 wgmma and commit are straight-line code: the compiler puts the commit
    // on the last wgmma (with the width chosen per window it added an empty wgmma after the merge).
    const int nw = a.cols / kWK;  // even: cols is whole 256-element blocks
    auto pipeline = [&]<int N>() {
      using X = XGeo<N>;
      constexpr int kDist = X::kDist;
      const uint32_t x_dst0 = (xqq >> 3) * X::kAtomBytes + x_dst_row;
      auto issue_group = [&](int v) {  // one cp.async group: X(v), and chunk v/2 when v is even
        uint8_t* const stage = xs + (v % X::kStages) * X::kStageBytes + x_dst0;
        const int col = v * kWK;
#pragma unroll
        for (int i = 0; i < N / 16; ++i) CpAsync16Zfill(stage + 16 * 128 * i, xsrc[i] + col, xbytes[i]);
        if (v % 2 == 0) raw_copy.Issue(v / 2, raw + (v / 2 % kRawStages) * (kBM * G::kRegion));
      };
      auto mma = [&](int v, const uint32_t(&A)[8][4]) {
        const uint32_t desc_lo = DescSw128Lo(xs_addr + (v % X::kStages) * X::kStageBytes);
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          WgmmaRs<N>(acc, A[s], desc_lo + (((s >> 2) * X::kAtomBytes + (s & 3) * 32) >> 4));
        }
      };
#pragma unroll
      for (int v = 0; v < kDist; ++v) {
        if (v < nw) issue_group(v);
        CpAsyncCommit();
      }
      uint32_t A0[8][4], A1[8][4];
      CpAsyncWait<kDist - 1>();
      FenceProxyAsync();
      __syncthreads();  // G_0 (chunk 0, X(0))
      decode(0, A0);
      auto window = [&](int w, const uint32_t(&cur)[8][4], uint32_t(&next)[8][4]) {
        CpAsyncWait<kDist - 2>();
        FenceProxyAsync();
        __syncthreads();
        if (w + kDist < nw) issue_group(w + kDist);
        CpAsyncCommit();
        FenceAcc(acc);
        wgmma::Fence();
        mma(w, cur);
        wgmma::Commit();
        wgmma::Wait<1>();
        FenceAcc(acc);
        if (w + 1 < nw) decode(w + 1, next);
      };
#pragma unroll 1
      for (int w = 0; w < nw; w += 2) {
        window(w, A0, A1);
        window(w + 1, A1, A0);
      }
      wgmma::Wait<0>();
      FenceAcc(acc);
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

    // ---- epilogue: acc[4j + q] = tile row trow + 8(q/2), token 8j + 2tq + q%2 ----
    if constexpr (kGateUp) {
      // Both warpgroups' accumulators to shared memory (the X stages; [token][row], rows padded to
      // kSituLd floats: the fragment stores hit 32 banks), then every thread takes (row, token)
      // elements row-fastest: situ spread over all 8 warps, stores of whole 256-byte token rows.
      float* const tile_g = reinterpret_cast<float*>(xs);
      float* const tile = tile_g + (warp >= 4 ? kBN * kSituLd : 0);  // gate, then up
      __syncthreads();  // both warpgroups' wgmma (waited for above) are done reading the X stages
#pragma unroll
      for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          if (j < 4 * width) tile[(8 * j + 2 * tq + (q & 1)) * kSituLd + trow + 8 * (q >> 1)] = acc[4 * j + q];
        }
      }
      __syncthreads();
      const float* const tile_u = tile_g + kBN * kSituLd;
      if (a.y_half != nullptr) {
        // Pairs of rows (2i, 2i + 1) as one __half2 at the x pre-pass's slots (WgmmaXColumn: an
        // even element's odd neighbour is the next slot); rows % 128 == 0, so n_rows is even and
        // windows whole.
        const int m = 2 * (tid & 31);
        const int64_t col = WgmmaXColumn(r0 + m);
#pragma unroll 4
        for (int n = tid >> 5; n < n_tok; n += kThreads / 32) {
          if (m < n_rows) {
            const float2 g = *reinterpret_cast<const float2*>(tile_g + n * kSituLd + m);
            const float2 u = *reinterpret_cast<const float2*>(tile_u + n * kSituLd + m);
            const float v0 = detail::SituValue(g.x, u.x, a.situ_beta, a.situ_lambda);
            const float v1 = detail::SituValue(g.y, u.y, a.situ_beta, a.situ_lambda);
            *reinterpret_cast<__half2*>(a.y_half + (p0 + n) * a.rows + col) = __floats2half2_rn(v0, v1);
          }
        }
      } else {
        const int m = tid & 63;
#pragma unroll 4
        for (int n = tid >> 6; n < n_tok; n += kThreads / 64) {
          if (m < n_rows) {
            const float g = tile_g[n * kSituLd + m], u = tile_u[n * kSituLd + m];
            a.y[(p0 + n) * a.y_stride + r0 + m] = detail::SituValue(g, u, a.situ_beta, a.situ_lambda);
          }
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int m = trow + 8 * (q >> 1), n = 8 * j + 2 * tq + (q & 1);
          if (m < n_rows && n < n_tok) a.y[(p0 + n) * a.y_stride + r0 + m] = acc[4 * j + q];
        }
      }
    }
    __syncthreads();  // every thread is done with the stages and s_xrow before the next tile's loads
  }
#else
  __trap();  // built without sm_90a: QuantGemm does not choose this kernel then (WgmmaSms, K3_HAVE_SM90A)
#endif
}

}  // namespace

cudaError_t GemmLaunchIq1sWgmma(const Args& a, int sms, bool gate_up, bool ternary, cudaStream_t stream) {
  // Iq1sChunkCopy's weight offsets are 32-bit: matrices under 2 GiB (WgmmaSmsFor sends larger
  // ones to the mma.sync kernel; this guards the launcher itself)
  if (a.rows * static_cast<int64_t>(a.row_bytes) >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  const auto fn = ternary ? (gate_up ? Iq1sWgmmaKernel<true, true> : Iq1sWgmmaKernel<false, true>)
                          : (gate_up ? Iq1sWgmmaKernel<true, false> : Iq1sWgmmaKernel<false, false>);
  const void* kernel = reinterpret_cast<const void*>(fn);
  constexpr int smem = kCodeGridBytes + kRawBytes + 1024 + kXRegionBytes;
  if (const cudaError_t e = PrepareGemmKernel(kernel, smem); e != cudaSuccess) return e;
  const int64_t tiles = static_cast<int64_t>(a.row_tiles) * a.token_tiles;
  const int64_t blocks = std::min<int64_t>(tiles, sms);  // one block per SM fits (shared memory)
  K3_CUDA_CHECK(LaunchKernel(fn, static_cast<unsigned>(blocks), kThreads, smem, stream, a));
  return cudaSuccess;
}

}  // namespace k3::cuda::qgemm
