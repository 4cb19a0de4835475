// The dequantizing GEMM kernel template (internal to k3_kernels_cuda; instantiated per format in
// gemm_*.cu). Design and measured rates: kernels/cuda/README.md, "Quant GEMM".
//
// A pre-pass (quant_gemm.cu) rounds the activations once to f16 into the caller's workspace
// (split_x: a second plane, lo = f16((x - hi)·2^11)). Then a block (8 warps) owns kBM = 128
// output rows × BN sequence rows ("tokens"; 128 for plain products and grouped experts with long
// groups, 64 for short groups) and walks K in steps of kBK = 64 elements:
//   raw:    the rows' quant blocks are streamed global -> shared with 16-byte cp.async in chunks
//           of whole blocks (64 elements, or one 256-element super-block);
//   x:      the step's f16 activation rows (gathered through x_rows) likewise, straight into the
//           step's X tile, kDist steps ahead;
//   decode: each thread decodes runs of 8 weights (Fmt::Decode8: w = a·v + b in f32, the CPU
//           decoder's exact value), rounds them to f16 and stores them to the step's W tile
//           (Q8_0 and IQ1_S compute the same f16 values with f16 arithmetic: DecodeRuns4F16);
//   mma:    warps (2×4 or 4×2) multiply the f16 tiles with ldmatrix + mma.sync m16n8k16,
//           accumulating in f32 registers for the whole K (a warp whose token columns are all
//           past the tile's rows skips them: a grouped tile is often mostly empty).
// One cp.async group per step and one __syncthreads per step: the W tile is double-buffered
// (decode step s+1 while multiplying step s), X tiles and raw chunks are rings deep enough for
// the prefetch distance. Rows past `rows` are zero in the W tile; tokens past the tile's end and
// the K tail of the last step are never read into results; nothing outside the tile is written.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mma_ptx.cuh"
#include "kernels/cuda/quant_gemv/decode.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_gemv/gemv_impl.cuh"  // StageTables, MakeLayout, CpAsync16, TableBytes

namespace k3::cuda::qgemm {

using qgemv::IqTables;

inline constexpr int kBM = 128;         // weight rows per block
inline constexpr int kBK = 64;          // K elements per step
inline constexpr int kLd = kBK + 8;     // halfs per tile row: 144 bytes, ldmatrix/STS conflict-free
inline constexpr int kTokensPlain = 128;    // BN of plain products, and of grouped ones with long groups
inline constexpr int kTokensGrouped = 64;   // BN of grouped (expert) products with short groups
inline constexpr int kBandPlain = 32;   // row tiles per band of the plain tile order (L2 reuse)
inline constexpr float kLoScale = 2048.0f;  // split_x: the residual x - f16(x) is stored times 2^11

// Everything the kernel needs, by value.
struct Args {
  const uint8_t* w;            // matrix 0
  int64_t mat_stride;          // bytes between matrices
  const int32_t* mat_ids;      // [n_groups] or nullptr
  int64_t rows;
  int64_t row_bytes;
  int32_t cols;
  int32_t n_steps;             // ceil(cols / kBK)
  int32_t bpr;                 // quant blocks per row
  int32_t n_chunks;            // ceil(bpr / blocks per chunk)
  int32_t table_bytes;         // shared bytes of the lookup tables (multiple of 16)
  int32_t row_tiles;           // ceil(rows / kBM)
  int32_t band;                // row tiles per band of the tile order
  int64_t token_tiles;         // token tiles of the grid
  const __half* xh;            // [n_src][cols] f16 activations (the pre-pass's copy)
  const __half* xl;            // [n_src][cols] split_x: (x - hi)·2^11 in f16, else nullptr
  int64_t n_src;               // rows of xh
  const int32_t* x_rows;       // or nullptr
  float* y;
  int64_t y_stride;
  int64_t n_tokens;            // rows of the sequence (upper bound when grouped)
  int32_t n_groups;
  const int32_t* group_offsets;  // or nullptr: one group [0, n_tokens)
  // The fused gate|up product (the wgmma kernel's kGateUp form): w holds gate, w_up up (the same
  // shape and strides), and y receives situ(gate, up) with these constants.
  const uint8_t* w_up;         // up's matrix 0, or nullptr
  float situ_beta;
  float situ_lambda;
  __half* y_half;              // or: y as f16 in the pre-pass's permuted layout, [n_tokens][rows]
};

// ---- per-format geometry -----------------------------------------------------------------------

template <class F>
struct Geo {
  static constexpr int kChunkElems = F::kBlockElems >= kBK ? F::kBlockElems : kBK;  // 64 or 256
  static constexpr int kStepsPerChunk = kChunkElems / kBK;                          // 1 or 4
  static constexpr int kChunkBlocks = kChunkElems / F::kBlockElems;                 // 64, 2 or 1
  static constexpr int kChunkBytes = kChunkBlocks * F::kBlockBytes;
  // A row's chunk starts 2-byte aligned: up to 14 bytes of misalignment before it.
  static constexpr int kPieces = (kChunkBytes + 14 + 15) / 16;  // 16-byte copies per row and chunk
  // Shared bytes per row and stage: an odd number of 16-byte units, so the 16 rows one warp
  // decodes at a time start in 8 different bank quads (2-way conflicts at most, not 4-way).
  static constexpr int kRegion = 16 * (kPieces | 1);
  static constexpr int kLanesPerRow = kPieces <= 4 ? 4 : kPieces <= 8 ? 8 : kPieces <= 16 ? 16 : 32;
  static_assert(kPieces <= 32, "a row's chunk must fit one warp's copies");
  static_assert(kChunkElems % kBK == 0 && kChunkElems % F::kBlockElems == 0);
};

// Warp layout of one instantiation: 8 warps, 2×4 of 64×32 (BN 128) or 4×2 of 32×32 (BN 64).
// (2×2 warps of 64×64 need ~220 registers, so only 8 warps fit an SM: measured no faster on
// the large shapes and slower on the small ones; wgmma is the way to bigger warp tiles.)
template <int BN, bool kSplit>
struct Tile {
  static constexpr int kWarpsN = BN / 32;
  static constexpr int kWarpsM = 8 / kWarpsN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kMinBlocks = kSplit ? 1 : 2;
};

// Pipeline depth of one instantiation: loads are issued kDist steps ahead of their use (the
// schedule and its buffer-reuse conditions are spelled out in the kernel).
template <class F, int BN>
struct Pipe {
  static constexpr int kDist = BN >= 128 ? 1 : 2;  // BN 128: two blocks per SM hide the rest
  static constexpr int kXStages = kDist + 1;  // X(t) reuses the stage of X(t - kXStages)
  // Raw chunk c reuses the stage of chunk c - kRawStages: needs (kRawStages - 1)·steps >= kDist.
  static constexpr int kRawStages = 1 + (kDist + Geo<F>::kStepsPerChunk - 1) / Geo<F>::kStepsPerChunk;
};

// Dynamic shared memory of one launch.
template <class F, int BN>
constexpr int SmemBytes(int table_bytes, bool split) {
  return table_bytes + Pipe<F, BN>::kRawStages * kBM * Geo<F>::kRegion + 2 * kBM * kLd * 2 +
         Pipe<F, BN>::kXStages * (split ? 2 : 1) * BN * kLd * 2;
}

// ---- PTX helpers (the shared ones: kernels/cuda/mma_ptx.cuh) -----------------------------------

using ptx::CpAsyncCommit;
using ptx::CpAsyncWait;
using ptx::Mma16816;
using ptx::PackHalf2;
using ptx::SmemAddr;

// ldmatrix x4 from a generic pointer into shared memory (no memory clobber: the tile loops order
// their shared-memory traffic with barriers and cp.async waits).
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

// ---- decoding one run of 8 weights to f16 ------------------------------------------------------

// IQ1_S / IQ1_M: v in {-1, 0, 1}, so a·v is exact and fma(a, v, b) equals the CPU's a·v + b.
template <class F>
inline constexpr bool kExactProduct = F::kType == quant::GgmlType::kIQ1_S || F::kType == quant::GgmlType::kIQ1_M;

// The 8 weights at `p` (a run of block `blk`, index `sub`) as 4 packed f16 pairs. For the plain
// types `p` is the run's first element and 16-byte aligned in shared memory.
template <class F>
__device__ __forceinline__ uint4 DecodeRunF16(const uint8_t* p, int sub, const IqTables& tab) {
  uint4 out;
  if constexpr (F::kType == quant::GgmlType::kF16) {
    out = *reinterpret_cast<const uint4*>(p);  // already f16: exact
  } else if constexpr (F::kType == quant::GgmlType::kF32) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    out.x = PackHalf2(a.x, a.y);
    out.y = PackHalf2(a.z, a.w);
    out.z = PackHalf2(b.x, b.y);
    out.w = PackHalf2(b.z, b.w);
  } else if constexpr (F::kType == quant::GgmlType::kBF16) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    auto two = [](uint32_t w) { return PackHalf2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u)); };
    out.x = two(u.x);
    out.y = two(u.y);
    out.z = two(u.z);
    out.w = two(u.w);
  } else if constexpr (F::kType == quant::GgmlType::kQ8_0) {
    // d·q is exact in f32 (11 × 8 significant bits), so rounding it once to f16 is what HMUL2
    // does with the exact f16 operands d and q: bit-identical to f16(f32 decode), at half the
    // instructions. q + 128 goes into the mantissa of 1024 (0x6400 | byte), minus 1152.
    const uint32_t d = qgemv::Ld16(p);
    const __half2 d2 = __halves2half2(__ushort_as_half(static_cast<unsigned short>(d)),
                                      __ushort_as_half(static_cast<unsigned short>(d)));
    const uint8_t* q = p + 2 + 8 * sub;
    const uint32_t lo = qgemv::Ld32(q) ^ 0x80808080u, hi = qgemv::Ld32(q + 4) ^ 0x80808080u;
    const __half2 bias = __float2half2_rn(1152.0f);
    auto pair = [&](uint32_t w, uint32_t sel) {
      const uint32_t u = __byte_perm(w, 0x64646464u, sel);
      const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&u), bias);
      const __half2 r = __hmul2(v, d2);
      return *reinterpret_cast<const uint32_t*>(&r);
    };
    out.x = pair(lo, 0x5140);
    out.y = pair(lo, 0x5342);
    out.z = pair(hi, 0x5140);
    out.w = pair(hi, 0x5342);
  } else {
    float a, b, v[8];
    F::Decode8(p, sub, tab, a, b, v);
    float w[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if constexpr (F::kUnitScale) {
        w[k] = v[k];
      } else if constexpr (!F::kHasOffset) {
        w[k] = __fmul_rn(a, v[k]);
      } else if constexpr (kExactProduct<F>) {
        w[k] = fmaf(a, v[k], b);
      } else {
        w[k] = __fadd_rn(__fmul_rn(a, v[k]), b);  // the CPU decoders' order: a·v rounded, then + b
      }
    }
    out.x = PackHalf2(w[0], w[1]);
    out.y = PackHalf2(w[2], w[3]);
    out.z = PackHalf2(w[4], w[5]);
    out.w = PackHalf2(w[6], w[7]);
  }
  return out;
}

// ---- IQ1_S in f16 arithmetic -------------------------------------------------------------------

// Formats with an f16 decode beside the generic one, selectable per launch (kFast) so tests and
// benchmarks can compare the two. (Q8_0's f16 path in DecodeRunF16 is unconditional.)
template <class F>
inline constexpr bool kHasFastDecode = F::kType == quant::GgmlType::kIQ1_S;

// IQ1_S weight = d·K·(g + δ): d the block's f16 scale, K = 2·ls + 1 in 1..15, δ = ±1/8,
// g in {-1, 0, 1}. k = K·(g + δ) = (8·K·g ± K)/8 has at most 8 significant bits, so
// HFMA2(g, K, K·δ) is exact; d·k has at most 11 + 8 bits and lies within f32's normal range, so
// the generic decode (f32 d·K·(g + δ), exact, then one rounding to f16) and HMUL2(d, k) (one
// round-to-nearest-even of the same exact product, f16 subnormals and overflow to inf included)
// give the same f16 for every finite d. Only d = ±0 may differ, in the sign of a zero weight,
// which no output sees (w·x = ±0 for finite x, and the sums start from +0).
// The grid is staged with each byte -1 / 0 / +1 replaced by the high byte of f16 -1 / 0 / +1
// (0xBC / 0x00 / 0x3C), so one PRMT with zero low bytes makes a pair of f16 g's: per pair PRMT +
// HFMA2 + HMUL2, against ~5 f32 instructions per weight in the generic decode.
__device__ __forceinline__ IqTables StageIq1sF16Grid(uint8_t* smem) {
  constexpr qgemv::TableLayout L = qgemv::MakeLayout(qgemv::kTabIq1s);
  const uint2* const src = reinterpret_cast<const uint2*>(iqdev::kIq1sGrid);
  uint2* const dst = reinterpret_cast<uint2*>(smem + L.iq1s);
  auto f16_high = [](uint32_t w) { return (w & 0x01010101u) * 0x3Cu | (w & 0x80808080u); };  // no carries
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) {
    const uint2 g = src[i];
    dst[i] = make_uint2(f16_high(g.x), f16_high(g.y));
  }
  IqTables t;
  t.iq1s = reinterpret_cast<const uint64_t*>(smem + L.iq1s);
  return t;
}

__device__ __forceinline__ __half2 AsHalf2(uint32_t u) { return *reinterpret_cast<const __half2*>(&u); }
__device__ __forceinline__ uint32_t AsU32(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }

// The kernel's shared tables: the format's (decode.cuh), or the f16 IQ1_S grid.
template <class F, bool kFast>
__device__ __forceinline__ IqTables StageGemmTables(uint8_t* smem) {
  if constexpr (kFast && F::kType == quant::GgmlType::kIQ1_S) {
    return StageIq1sF16Grid(smem);
  } else {
    return qgemv::StageTables<F::kTables>(smem);
  }
}

// Group ib (32 weights) of the IQ1_S block at `blk` in f16 arithmetic: the weight of grid value g
// is HMUL2(HFMA2(g, K, K·δ), d) (exact, then one rounding: see StageIq1sF16Grid). !valid: d = 0, so
// every weight is 0 whatever `blk` holds. Shared by DecodeRuns4F16 and gemm_iq1s_wgmma.cu, whose
// exactness rests on computing these the same way.
struct Iq1sGroupF16 {
  uint32_t qh, qs;      // the group's high index bits (with K and δ's sign) and its 4 low index bytes
  __half2 d2, k2, kd2;  // d, K and K·δ in both halves
  __device__ __forceinline__ Iq1sGroupF16(const uint8_t* blk, int ib, bool valid = true)
      : Iq1sGroupF16(qgemv::Ld16(blk + 34 + 2 * ib), qgemv::Ld32(blk + 2 + 4 * ib), qgemv::Ld16(blk), valid) {}
  // From the fields themselves (qh_bits: the group's 16 qh bits, d_bits: the block's f16 d), as the
  // ternary form stores them (its qh nibble is qh_bits >> 12; qs then unused).
  __device__ __forceinline__ Iq1sGroupF16(uint32_t qh_bits, uint32_t qs_bits, uint32_t d_bits, bool valid)
      : qh(qh_bits), qs(qs_bits) {
    d2 = AsHalf2(valid ? d_bits * 0x10001u : 0u);
    k2 = __float2half2_rn(static_cast<float>(2 * ((qh >> 12) & 7u) + 1));  // K, exact
    kd2 = __hmul2(k2, AsHalf2((0x3000u | (qh & 0x8000u)) * 0x10001u));     // K·(±1/8), exact
  }
  // The grid row of run l (weights 8l .. 8l + 7).
  __device__ __forceinline__ uint32_t GridRow(int l) const {
    return ((qs >> (8 * l)) & 0xffu) | (((qh >> (3 * l)) & 7u) << 8);
  }
};

// The one decode dispatch of the kernel: the 32 weights [e0, e0 + 32) of a row's chunk (`row`
// points at the chunk's first block; e0 a multiple of 32) as 4 runs of packed f16 pairs.
template <class F, bool kFast>
__device__ __forceinline__ void DecodeRuns4F16(const uint8_t* row, int e0, const IqTables& tab, uint4 (&h)[4]) {
  constexpr int BE = F::kBlockElems, BB = F::kBlockBytes;
  if constexpr (kFast && F::kType == quant::GgmlType::kIQ1_S) {
    // The 32 weights are group ib of one block: one d, qh, K and δ for the four runs.
    const Iq1sGroupF16 q(row + (e0 / BE) * BB, (e0 % BE) / 32);
    const uint2* const grid = reinterpret_cast<const uint2*>(tab.iq1s);
    auto pair = [&](uint32_t w, uint32_t sel) {  // bytes 4 of `sel` read the zero word
      return AsU32(__hmul2(__hfma2(AsHalf2(__byte_perm(w, 0u, sel)), q.k2, q.kd2), q.d2));
    };
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint2 g = grid[q.GridRow(l)];
      h[l] = make_uint4(pair(g.x, 0x1404u), pair(g.x, 0x3424u), pair(g.y, 0x1404u), pair(g.y, 0x3424u));
    }
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int e = e0 + 8 * k;
      h[k] = DecodeRunF16<F>(row + (e / BE) * BB, (e % BE) / 8, tab);
    }
  }
}

// ---- pieces both GEMM kernels share (this one and gemm_iq1s_wgmma.cu's) ---------------------------

// The tile of this block: weight rows [r0, r0 + kBM) of matrix `mat`, sequence rows [p0, p_end).
struct TileSpan {
  int64_t r0, p0, p_end, mat;
};

// Band order (row tile fastest inside a band of a.band row tiles); grouped: group g owns token
// tiles [off[g]/BN + g, off[g+1]/BN + g + 1), enough for its rows (see kernels/cuda/README.md),
// and the grid has ceil(n_tokens/BN) + n_groups of them. `lin`: the tile's index in that order,
// < row_tiles · token_tiles. Every thread of the block calls it (it synchronizes the block).
// p_end <= p0: nothing to do (uniform over the block).
// BM: weight rows per row tile (kBM; the fused gate|up tile takes kBM / 2 rows of each).
template <int BN, int kThreads, int BM = kBM>
__device__ __forceinline__ TileSpan FindTile(const Args& a, int64_t lin, int32_t* s_group) {
  const int tid = threadIdx.x;
  const int64_t band_tiles = static_cast<int64_t>(a.band) * a.token_tiles;
  const int64_t band = lin / band_tiles;
  const int64_t inside = lin - band * band_tiles;
  const int64_t band_w = min(static_cast<int64_t>(a.band), static_cast<int64_t>(a.row_tiles) - band * a.band);
  const int64_t row_tile = band * a.band + inside % band_w;
  const int64_t token_tile = inside / band_w;
  TileSpan t{row_tile * BM, 0, 0, 0};
  int group = 0;
  if (a.group_offsets == nullptr) {
    t.p0 = token_tile * BN;
    t.p_end = min(t.p0 + BN, a.n_tokens);
  } else {
    if (tid == 0) *s_group = -1;
    __syncthreads();
    for (int g = tid; g < a.n_groups; g += kThreads) {
      const int64_t lo = a.group_offsets[g], hi = a.group_offsets[g + 1];
      const int64_t s0 = lo / BN + g, s1 = hi / BN + g + 1;
      if (s0 <= token_tile && token_tile < s1) *s_group = g;
    }
    __syncthreads();
    group = *s_group;
    if (group < 0) return t;  // past every group's tiles
    const int64_t lo = a.group_offsets[group];
    const int64_t hi = min(static_cast<int64_t>(a.group_offsets[group + 1]), a.n_tokens);
    t.p0 = lo + (token_tile - (lo / BN + group)) * BN;
    t.p_end = min(t.p0 + BN, hi);
  }
  if (t.p0 < 0) t.p_end = t.p0;
  t.mat = a.mat_ids != nullptr ? static_cast<int64_t>(a.mat_ids[group]) : group;
  return t;
}

// Source row of token slot `slot` of a tile: -1 past the tile (never read into results), -2 for
// a row outside [0, n_src) (reads zeros).
__device__ __forceinline__ int32_t SourceRow(const Args& a, int64_t p0, int n_tok, int slot) {
  if (slot >= n_tok) return -1;
  const int64_t r = a.x_rows != nullptr ? static_cast<int64_t>(a.x_rows[p0 + slot]) : p0 + slot;
  return r >= 0 && r < a.n_src ? static_cast<int32_t>(r) : -2;
}

// cp.async of 16 bytes into shared memory of which the first `src_bytes` (0..16) are read from
// `src` (16-byte aligned) and the rest are zeros.
__device__ __forceinline__ void CpAsync16Zfill(void* dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}

// Raw chunk c of a tile's kBM weight rows, global -> shared with 16-byte cp.async: lanes
// [LPR·k, LPR·k + LPR) of a warp copy one row's chunk, 16 bytes each, from the 16-byte boundary at
// or before it (a row's chunk lands at offset `mis` = its global address mod 16 of the row's
// kRegion bytes); the last piece reads only up to the chunk's end (the rest zero-filled), so
// nothing past the matrix is read. The rows of a thread are fixed for the block: their offsets
// are computed once. kHalves (the fused gate|up tile): stage rows [kBM/2, kBM) are rows [0, kBM/2)
// of a second matrix (Issue's `upper`), both halves from tile row r0; `rows` counts a half's rows.
template <class F, int kThreads, bool kHalves = false>
struct RawChunkCopy {
  using G = Geo<F>;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int LPR = G::kLanesPerRow, kRowsPerPass = 32 / LPR, kPasses = kBM / (kWarps * kRowsPerPass);
  static_assert(kBM % (kWarps * kRowsPerPass) == 0);
  static_assert(!kHalves || kPasses == 2, "kHalves: pass 1 must be exactly the upper half");
  int piece, row_first, n_rows;
  int64_t row_off_first, row_off_step;

  __device__ __forceinline__ RawChunkCopy(const Args& a, int64_t r0, int rows, int tid) {
    const int lane = tid & 31, warp = tid >> 5;
    piece = lane % LPR;
    row_first = warp * kRowsPerPass + lane / LPR;  // + kWarps·kRowsPerPass per pass
    n_rows = rows;
    row_off_first = (r0 + row_first) * a.row_bytes;
    row_off_step = kHalves ? 0 : static_cast<int64_t>(kWarps * kRowsPerPass) * a.row_bytes;
  }

  // Copies chunk c of the rows into `stage` ([kBM][kRegion] bytes).
  __device__ __forceinline__ void Issue(const Args& a, const uint8_t* wbase, int c, uint8_t* stage,
                                        const uint8_t* upper = nullptr) const {
    const int64_t chunk_off = static_cast<int64_t>(c) * G::kChunkBytes;
    const int nbytes = min(G::kChunkBlocks, a.bpr - c * G::kChunkBlocks) * F::kBlockBytes;
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const int r = row_first + ps * kWarps * kRowsPerPass;
      const int64_t g_lo = row_off_first + ps * row_off_step + chunk_off;
      const int64_t src = (g_lo & ~int64_t{15}) + 16 * piece;
      const int64_t left = g_lo + nbytes - src;  // bytes of the chunk from src on
      const uint8_t* const base = kHalves && ps == 1 ? upper : wbase;
      if ((kHalves ? r % (kBM / 2) : r) < n_rows && left > 0) {
        CpAsync16Zfill(stage + r * G::kRegion + 16 * piece, base + src, static_cast<uint32_t>(min(left, int64_t{16})));
      }
    }
  }
};

// ---- the kernel ----------------------------------------------------------------------------------

template <class F, int BN, bool kSplit, bool kFast>
__global__ void __launch_bounds__(Tile<BN, kSplit>::kThreads, Tile<BN, kSplit>::kMinBlocks)
    QuantGemmKernel(const Args a) {
  PdlEnter();
  using G = Geo<F>;
  constexpr int kWarpsN = Tile<BN, kSplit>::kWarpsN, kWarpsM = Tile<BN, kSplit>::kWarpsM;
  constexpr int kThreads = Tile<BN, kSplit>::kThreads;
  constexpr int WM = kBM / kWarpsM;         // rows per warp: 64 or 32
  constexpr int WN = BN / kWarpsN;          // tokens per warp: 64 or 32
  constexpr int MT = WM / 16, NT = WN / 8;  // mma tiles per warp
  constexpr int kXHalves = kSplit ? 2 : 1;
  constexpr int D = Pipe<F, BN>::kDist, NSX = Pipe<F, BN>::kXStages, NSR = Pipe<F, BN>::kRawStages;
  constexpr int SPC = G::kStepsPerChunk;
  static_assert(WN % 16 == 0 && WM % 16 == 0 && BN <= kThreads);

  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int32_t s_xrow[BN];
  __shared__ int32_t s_group;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  const TileSpan t = FindTile<BN, kThreads>(a, blockIdx.x, &s_group);
  if (t.p_end <= t.p0) return;  // an empty tile (uniform over the block)
  const int64_t r0 = t.r0, p0 = t.p0;
  const int n_tok = static_cast<int>(t.p_end - t.p0);
  const uint8_t* const wbase = a.w + t.mat * a.mat_stride;
  const int n_rows = static_cast<int>(min(static_cast<int64_t>(kBM), a.rows - r0));
  if (tid < BN) s_xrow[tid] = SourceRow(a, p0, n_tok, tid);  // BN <= kThreads
  __syncthreads();  // s_xrow is read by the prologue's copies

  // ---- shared memory ----
  IqTables tab;
  if constexpr (F::kTables != 0) tab = StageGemmTables<F, kFast>(smem);
  uint8_t* const raw = smem + a.table_bytes;                                // [NSR][kBM][kRegion]
  __half* const ws = reinterpret_cast<__half*>(raw + NSR * kBM * G::kRegion);  // [2][kBM][kLd]
  __half* const xs = ws + 2 * kBM * kLd;                                   // [NSX][halves][BN][kLd]

  // ---- raw chunk copy ----
  const RawChunkCopy<F, kThreads> raw_copy(a, r0, n_rows, tid);
  auto issue_chunk = [&](int c) { raw_copy.Issue(a, wbase, c, raw + (c % NSR) * (kBM * G::kRegion)); };

  // ---- decode of step s into W buffer `buf`: item = 4 consecutive runs (32 elements) of one
  // row, so a block's or a group's scale is read once for the 4; item = tid + kThreads·u is
  // (row item/2, half item%2) ----
  constexpr int kDecodeItems = kBM * 2 / kThreads;  // 1 or 2 per thread
  static_assert(kBM * 2 % kThreads == 0);
  int drow_mis[kDecodeItems];
#pragma unroll
  for (int u = 0; u < kDecodeItems; ++u) {
    drow_mis[u] = static_cast<int>(((r0 + ((tid + kThreads * u) >> 1)) * a.row_bytes) & 15);
  }
  auto decode_step = [&](int s, int buf) {
    const int c = s / SPC;
    const uint8_t* const stage = raw + (c % NSR) * (kBM * G::kRegion);
#pragma unroll
    for (int u = 0; u < kDecodeItems; ++u) {
      const int item = tid + kThreads * u, drow = item >> 1, dhalf = item & 1;
      const int e0 = (s % SPC) * kBK + 32 * dhalf;  // first element of the 4 runs inside the chunk
      uint4 h[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) h[k] = make_uint4(0, 0, 0, 0);
      if (drow < n_rows && s * kBK + 32 * dhalf < a.cols) {
        const int mis = (drow_mis[u] + c * G::kChunkBytes) & 15;
        DecodeRuns4F16<F, kFast>(stage + drow * G::kRegion + mis, e0, tab, h);
      }
      uint4* const dst = reinterpret_cast<uint4*>(ws + (buf * kBM + drow) * kLd + 32 * dhalf);
#pragma unroll
      for (int k = 0; k < 4; ++k) dst[k] = h[k];
    }
  };

  // ---- activations of step t into X stage t % NSX: item = (token n, 16-byte piece q of 8) ----
  constexpr int kXItems = BN * 8 / kThreads;  // 4 (BN 128) or 2 (BN 64)
  const int xq = tid & 7;
  const __half* xsrc[kXItems][kXHalves];  // the item's token row in each plane (col 8q), or nullptr
  int xflag[kXItems];                     // 1: copy, 0: past the tile (skip), -1: zeros
#pragma unroll
  for (int i = 0; i < kXItems; ++i) {
    const int n = (tid >> 3) + (kThreads / 8) * i;
    const int32_t src = s_xrow[n];
    xflag[i] = src >= 0 ? 1 : src == -1 ? 0 : -1;
#pragma unroll
    for (int h = 0; h < kXHalves; ++h) {
      const __half* const plane = h == 0 ? a.xh : a.xl;
      xsrc[i][h] = src >= 0 ? plane + static_cast<int64_t>(src) * a.cols + 8 * xq : nullptr;
    }
  }
  auto issue_x = [&](int t) {
    __half* const stage = xs + (t % NSX) * kXHalves * BN * kLd;
    const int col0 = t * kBK;
    if (col0 + 8 * xq >= a.cols) return;
#pragma unroll
    for (int i = 0; i < kXItems; ++i) {
      const int n = (tid >> 3) + (kThreads / 8) * i;
#pragma unroll
      for (int h = 0; h < kXHalves; ++h) {
        __half* const dst = stage + (h * BN + n) * kLd + 8 * xq;
        if (xflag[i] > 0) {
          qgemv::CpAsync16(dst, xsrc[i][h] + col0);
        } else if (xflag[i] < 0) {
          *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);  // a row outside x: zeros
        }
      }
    }
  };

  // ---- tensor-core step ----
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  float acc[kXHalves][MT][NT][4];  // [1]: the x residual's products, scaled by 2^11
#pragma unroll
  for (int h = 0; h < kXHalves; ++h) {
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[h][i][j][q] = 0.0f;
      }
    }
  }
  // ldmatrix lane addressing: A (rows m, k contiguous): matrices (m0-7,k0-7) (m8-15,k0-7)
  // (m0-7,k8-15) (m8-15,k8-15); B (tokens n, k contiguous): (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7)
  // (n8-15,k8-15): regs 0,1 = b0,b1 of n-tile 0, regs 2,3 of n-tile 1.
  const int a_row = wm * WM + (lane & 7) + 8 * ((lane >> 3) & 1), a_col = 8 * (lane >> 4);
  const int b_row = wn * WN + (lane & 7) + 8 * (lane >> 4), b_col = 8 * ((lane >> 3) & 1);
  // A warp whose 32 token columns are all past the tile's rows skips the multiplications (a
  // grouped tile is often mostly empty: 73 rows fill 3 of a 128-token tile's 4 warp columns).
  // (Skipping per 16 tokens inside a warp as well made ptxas spill in the IQ2 kernels of 128
  // tokens, at the 128-register bound of two blocks per SM.)
  const bool warp_has_tokens = wn * WN < n_tok;
  auto mma_step = [&](int s, int k_valid) {
    const __half* const wt = ws + (s & 1) * kBM * kLd;
    const __half* const xt = xs + (s % NSX) * kXHalves * BN * kLd;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      if (kk * 16 < k_valid) {
        uint32_t af[MT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i) LdMatrixX4(af[i], wt + (a_row + 16 * i) * kLd + kk * 16 + a_col);
#pragma unroll
        for (int h = 0; h < kXHalves; ++h) {
#pragma unroll
          for (int j2 = 0; j2 < NT / 2; ++j2) {
            uint32_t bf[4];
            LdMatrixX4(bf, xt + (h * BN + b_row + 16 * j2) * kLd + kk * 16 + b_col);
#pragma unroll
            for (int i = 0; i < MT; ++i) {
              Mma16816(acc[h][i][2 * j2], af[i], bf[0], bf[1]);
              Mma16816(acc[h][i][2 * j2 + 1], af[i], bf[2], bf[3]);
            }
          }
        }
      }
    }
  };

  // ---- pipeline ----
  // Commit group G_i (i = -D..-1 in the prologue, i = s in iteration s) holds X(i + D) and the
  // raw chunk whose first step is i + D + 1 (G_-D also chunk 0). Iteration s: wait for G_{s-D}
  // (wait_group<D-1>: X(s) and the chunk decoded next), one barrier, issue G_s, multiply step s,
  // decode step s+1. Reuse is safe because every overwrite is issued after the barrier that
  // follows the previous occupant's last use:
  //   W tile (s+1)&1: last multiplied in iteration s-1;
  //   X stage t % NSX (issued in iteration t-D): last multiplied in t-NSX <= t-D-1;
  //   raw stage c % NSR (issued in iteration first(c)-D-1): chunk c-NSR last decoded in
  //   iteration first(c-NSR+1)-2 <= first(c)-D-2, as (NSR-1)·SPC >= D.
  auto issue_group = [&](int i) {
    if (i + D < a.n_steps) issue_x(i + D);
    const int first = i + D + 1;
    if (first % SPC == 0 && first / SPC < a.n_chunks) issue_chunk(first / SPC);
    if (i == -D) issue_chunk(0);
    CpAsyncCommit();
  };
#pragma unroll
  for (int i = -D; i < 0; ++i) issue_group(i);
  CpAsyncWait<D - 1>();
  __syncthreads();  // G_-D (chunk 0, X(0)), tables and s_xrow visible
  decode_step(0, 0);

  for (int s = 0; s < a.n_steps; ++s) {
    CpAsyncWait<D - 1>();
    __syncthreads();
    issue_group(s);
    if (warp_has_tokens) mma_step(s, a.cols - s * kBK);
    if (s + 1 < a.n_steps) decode_step(s + 1, (s + 1) & 1);
  }
  CpAsyncWait<0>();  // nothing may be left in flight into shared memory at exit (empty groups)

  // ---- epilogue: acc[i][j] = rows wm*WM + 16i + g (+8), tokens wn*WN + 8j + 2tq (+1) ----
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int m = wm * WM + 16 * i + g + 8 * (q >> 1);
        const int n = wn * WN + 8 * j + 2 * tq + (q & 1);
        float v = acc[0][i][j][q];
        if constexpr (kSplit) v += acc[1][i][j][q] * (1.0f / kLoScale);
        if (m < n_rows && n < n_tok) a.y[(p0 + n) * a.y_stride + r0 + m] = v;
      }
    }
  }
}

// The IQ1_S wgmma kernel (gemm_iq1s_wgmma.cu, sm_90a): 128 weight rows × kWgmmaTokens tokens per
// tile, x permuted inside windows of 128 by the pre-pass (XToHalfKernel's `permute`); a persistent
// grid of min(tiles, sms) blocks.
inline constexpr int kWgmmaTokens = 128;

// The wgmma kernel's x layout: inside each window of 128 columns, element u = 32t + 8l + 4h + r
// sits at slot 32l + 16h + 2t + r%2 + 8(r/2) (the A-fragment order of gemm_iq1s_wgmma.cu). The
// column of element c: written by XToHalfKernel's `permute` and the gate|up epilogue's y_half.
__host__ __device__ __forceinline__ int64_t WgmmaXColumn(int64_t c) {
  const int u = static_cast<int>(c & 127), t = u >> 5, l = (u >> 3) & 3, h = (u >> 2) & 1, r = u & 3;
  return (c & ~int64_t{127}) + 32 * l + 16 * h + 2 * t + (r & 1) + 8 * (r >> 1);
}
// gate_up: the fused gate|up form (a.w_up set): 64 rows of gate and the same 64 of up per tile,
// a.row_tiles = ceil(rows / 64), y = situ(gate, up).
// ternary: a.w (and a.w_up) hold the ternary form (quant_gemv/iq1s_ternary.h), a.row_bytes its rows'.
cudaError_t GemmLaunchIq1sWgmma(const Args& a, int sms, bool gate_up, bool ternary, cudaStream_t stream);

// Raises the kernel's dynamic shared-memory limit to `smem_bytes` once per (kernel, device);
// cudaErrorInvalidConfiguration when it cannot fit (static shared memory counted). No stream
// work: safe before or during graph capture. Defined in quant_gemm.cu.
cudaError_t PrepareGemmKernel(const void* kernel, int smem_bytes);

template <class F, int BN, bool kSplit, bool kFast>
cudaError_t LaunchGemm(const Args& a, cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(&QuantGemmKernel<F, BN, kSplit, kFast>);
  const int smem = SmemBytes<F, BN>(a.table_bytes, kSplit);
  if (const cudaError_t e = PrepareGemmKernel(kernel, smem); e != cudaSuccess) return e;
  const int64_t blocks = static_cast<int64_t>(a.row_tiles) * a.token_tiles;
  K3_CUDA_CHECK(LaunchKernel(QuantGemmKernel<F, BN, kSplit, kFast>, static_cast<unsigned>(blocks),
                             Tile<BN, kSplit>::kThreads, smem, stream, a));
  return cudaSuccess;
}

// ---- decoding whole rows to f16 (the weight side of QuantGemmBlas) ------------------------------

inline constexpr int kDequantThreads = 256;

// Rows [0, n_rows) of a matrix at `w` to f16 [n_rows][cols]: thread = one run of 32 weights
// (DecodeRuns4F16: the same f16 values the GEMM's W tiles hold), 64-byte stores. Grid-stride.
template <class F>
__global__ void __launch_bounds__(kDequantThreads)
    DequantF16Kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int32_t cols, int64_t n_rows,
                     uint4* __restrict__ out) {
  PdlEnter();
  extern __shared__ __align__(16) uint8_t tables[];
  constexpr bool kFast = kHasFastDecode<F>;
  const IqTables tab = StageGemmTables<F, kFast>(tables);
  __syncthreads();
  const int64_t runs = cols / 32, total = n_rows * runs;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kDequantThreads + threadIdx.x; g < total;
       g += static_cast<int64_t>(gridDim.x) * kDequantThreads) {
    const int64_t r = g / runs;
    const int e0 = static_cast<int>(g - r * runs) * 32;
    uint4 h[4];
    DecodeRuns4F16<F, kFast>(w + r * row_bytes, e0, tab, h);
    uint4* dst = out + g * 4;  // (r * cols + e0) halfs = g * 32 halfs
#pragma unroll
    for (int k = 0; k < 4; ++k) dst[k] = h[k];
  }
}

template <class F>
cudaError_t LaunchDequantF16(const uint8_t* w, int64_t row_bytes, int32_t cols, int64_t n_rows, void* out, int blocks,
                             cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(&DequantF16Kernel<F>);
  const int smem = qgemv::TableBytes<F>();
  if (const cudaError_t e = PrepareGemmKernel(kernel, smem); e != cudaSuccess) return e;
  K3_CUDA_CHECK(LaunchKernel(DequantF16Kernel<F>, static_cast<unsigned>(blocks), kDequantThreads, smem, stream, w,
                             row_bytes, cols, n_rows, static_cast<uint4*>(out)));
  return cudaSuccess;
}

using DequantLaunchFn = cudaError_t (*)(const uint8_t*, int64_t, int32_t, int64_t, void*, int, cudaStream_t);

// Dispatch over the token tile (kTokensPlain | kTokensGrouped; a.token_tiles must match) × split_x.
template <class F, bool kFast>
cudaError_t LaunchGemmTiles(const Args& a, bool small_tiles, bool split, cudaStream_t stream) {
  if (small_tiles) {
    return split ? LaunchGemm<F, kTokensGrouped, true, kFast>(a, stream)
                 : LaunchGemm<F, kTokensGrouped, false, kFast>(a, stream);
  }
  return split ? LaunchGemm<F, kTokensPlain, true, kFast>(a, stream) : LaunchGemm<F, kTokensPlain, false, kFast>(a, stream);
}

// ... × the decode: the format's f16 one unless `generic_decode` (formats without one: generic).
template <class F>
cudaError_t LaunchGemmFormat(const Args& a, bool small_tiles, bool split, bool generic_decode, cudaStream_t stream) {
  if constexpr (kHasFastDecode<F>) {
    if (!generic_decode) return LaunchGemmTiles<F, true>(a, small_tiles, split, stream);
  }
  return LaunchGemmTiles<F, false>(a, small_tiles, split, stream);
}

using GemmLaunchFn = cudaError_t (*)(const Args&, bool, bool, bool, cudaStream_t);

#define K3_GEMM_DECLARE(NAME)                                                                                          \
  cudaError_t GemmLaunch##NAME(const Args& a, bool small_tiles, bool split, bool generic_decode, cudaStream_t stream); \
  cudaError_t DequantLaunch##NAME(const uint8_t* w, int64_t row_bytes, int32_t cols, int64_t n_rows, void* out,        \
                                  int blocks, cudaStream_t stream);
K3_GEMM_DECLARE(F32)
K3_GEMM_DECLARE(F16)
K3_GEMM_DECLARE(BF16)
K3_GEMM_DECLARE(Q8_0)
K3_GEMM_DECLARE(Q4_0)
K3_GEMM_DECLARE(Q5_0)
K3_GEMM_DECLARE(IQ4_NL)
K3_GEMM_DECLARE(Q2_K)
K3_GEMM_DECLARE(Q3_K)
K3_GEMM_DECLARE(Q4_K)
K3_GEMM_DECLARE(Q5_K)
K3_GEMM_DECLARE(Q6_K)
K3_GEMM_DECLARE(IQ2_XXS)
K3_GEMM_DECLARE(IQ2_XS)
K3_GEMM_DECLARE(IQ2_S)
K3_GEMM_DECLARE(IQ3_XXS)
K3_GEMM_DECLARE(IQ3_S)
K3_GEMM_DECLARE(IQ1_S)
K3_GEMM_DECLARE(IQ1_M)
K3_GEMM_DECLARE(IQ4_XS)
#undef K3_GEMM_DECLARE

#define K3_GEMM_DEFINE(NAME)                                                                                    \
  cudaError_t GemmLaunch##NAME(const Args& a, bool small_tiles, bool split, bool generic_decode,                \
                               cudaStream_t stream) {                                                           \
    return LaunchGemmFormat<qgemv::Fmt##NAME>(a, small_tiles, split, generic_decode, stream);                   \
  }                                                                                                             \
  cudaError_t DequantLaunch##NAME(const uint8_t* w, int64_t row_bytes, int32_t cols, int64_t n_rows, void* out, \
                                  int blocks, cudaStream_t stream) {                                            \
    return LaunchDequantF16<qgemv::Fmt##NAME>(w, row_bytes, cols, n_rows, out, blocks, stream);                 \
  }

}  // namespace k3::cuda::qgemm
