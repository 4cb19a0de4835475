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
#include "kernels/cuda/quant_gemv/iq1s_ternary.h"
#include "kernels/cuda/wgmma_ptx.cuh"

namespace k3::cuda::qgemm {
namespace {

using F = qgemv::FmtIQ1_S;
using G = Geo<F>;  // raw chunk = one 256-element block per row (50 bytes in a region of 80)

constexpr int kThreads = 256;                 // two warpgroups
constexpr int kBN = kWgmmaTokens;             // tokens per tile
constexpr int kWK = 128;                      // K elements per window
constexpr int kXRegionBytes = 5 * 2 * kBN * 128;  // the X stages: 5 windows of 128 tokens, more of fewer
constexpr int kRawStages = 3;                      // chunk c reuses c - 3's stage: needs 2·3 >= D + 1
constexpr int kRawBytes = kRawStages * kBM * G::kRegion;
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
constexpr int kCodeGridBytes = 2048 * 4;  // StageIq1sCodeGrid
constexpr int kSituLd = 68;                   // floats per token row of the gate|up epilogue's tiles
static_assert(2 * kBN * kSituLd * 4 <= kXRegionBytes, "the epilogue's tiles reuse the X stages");
static_assert(G::kChunkElems == 2 * kWK && G::kChunkBlocks == 1);

// ---- wgmma -------------------------------------------------------------------------------------

// The B descriptor's high word: bits 32-45 the stride between 8-row groups (1024 bytes >> 4), bit
// 62 (bit 30 of this word) the 128-byte swizzle. The low word is DescSw128Lo's.
constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);

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
