// The small-batch product on tensor cores (QuantGemvMma, gemv_direct.h): the repacked Q8_0 weights
// streamed from HBM straight into registers as in the direct GEMV, turned into f16 mma.sync
// fragments there (no shared-memory staging), one pass of up to 16 tokens reading each weight once.
//
// Why: the f32 direct GEMV costs one FMA per weight and token, so from ~8 tokens on it is bound by
// FMAs (two passes of 8 for 16 tokens: ~3x the HBM floor), and the tile GEMM (quant_gemm), built for
// prefill, stages 128 x 128 tiles through shared memory: at 2..16 tokens on the KDA projections it
// ran at ~200 GB/s (H200, 6 layers' q|k|v|g and output: 11 ms against 1.3 for the GEMV at 2 tokens).
//
// Work split. A block owns 32 consecutive rows (four groups of 8: the mma's n) and all columns;
// its S warps ("slices") take contiguous ranges of 64-column steps. Per step, lane (g, t) (g = lane
// / 4, t = lane % 4) loads 16 bytes of each of its four rows r0 + 8i + g, columns [64s + 16t,
// 64s + 16t + 16) (one LDG.128 each: the 4 lanes of a row read 64 contiguous bytes, a warp 32 rows
// x 64 bytes), and their f16 scales (one per 32 columns). The step is four mma m16n8k16 per row
// group; the reduction index k of an mma is permuted so that every lane's operands are contiguous
// columns: in mma j (0..3), lane t's k = 2t, 2t+1 are columns 64s + 16t + 4j + {0, 1} and k = 2t + 8,
// 2t + 9 are + {2, 3}, for the weights (B, n = row) and for x (A, m = token) alike, so the sum over
// k is over the right pairs. Next step's loads are issued before this step's mma (two register
// stages). At the end each warp's 16 x 32 partial sums go to shared memory and the block adds the
// slices in slice order.
//
// Numerics: w = f16(d·q) (q exact in f16, one rounding of the product, like the tile GEMM's f16
// weights), x rounded to f16, products and sums in f32 inside the mma, slices added in order. Not
// the f32 GEMV's result (relative ~1e-3 per product, the tile GEMM's class); deterministic and
// batch-invariant: a token's sums do not depend on the other tokens of its pass.
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_gemv/gemv_direct.h"
#include "kernels/cuda/quant_gemv/gemv_direct_kernel.cuh"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace direct_mma {
namespace {

constexpr int kRowsPerBlock = 32;  // 4 groups of the mma's n = 8
constexpr int kGroups = 4;
constexpr int kSpan = 64;          // columns per step: 4 lanes x 16 int8 per row
constexpr int kMaxSlices = 16;
constexpr int64_t kTargetWarps = 4096;  // as the direct GEMV's plan: ~31 per SM of an H200

struct Args {
  const int8_t* q;         // [rows][cols] int8 plane
  const __half* scales;    // [rows][cols / 32]
  int64_t rows;
  int32_t cols;            // multiple of 64
  int32_t steps;           // cols / 64
  int32_t slices;          // warps per block
  const float* x;          // this pass's token 0, [n_tokens][x_stride]
  int64_t x_stride;
  int32_t n_tokens;        // 1..16
  float* y;                // [n_tokens][y_stride]
  int64_t y_stride;
  const float* add;        // the epilogue's addend, this pass's token 0, or nullptr (gemv_direct.h)
  int64_t add_stride;
  bool accumulate;         // y += (sum + add)
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

__global__ void __launch_bounds__(32 * kMaxSlices) MmaKernel(const Args a) {
  PdlEnter();
  extern __shared__ float part[];  // [slices][16 tokens][32 rows]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const int s_lo = static_cast<int>(static_cast<int64_t>(a.steps) * warp / a.slices);
  const int s_hi = static_cast<int>(static_cast<int64_t>(a.steps) * (warp + 1) / a.slices);
  const int64_t spr = a.cols / 32;  // scales per row

  const int8_t* wp[kGroups];
  const __half* sp[kGroups];
  bool live[kGroups];
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const int64_t r = r0 + 8 * i + g;
    live[i] = r < a.rows;
    const int64_t rr = live[i] ? r : 0;
    wp[i] = a.q + rr * a.cols + 16 * t;
    sp[i] = a.scales + rr * spr + (t >> 1);
  }
  const bool x0_live = g < a.n_tokens, x1_live = g + 8 < a.n_tokens;
  const float* x0 = a.x + static_cast<int64_t>(x0_live ? g : 0) * a.x_stride + 16 * t;
  const float* x1 = a.x + static_cast<int64_t>(x1_live ? g + 8 : 0) * a.x_stride + 16 * t;

  auto load = [&](Stage& st, int s) {
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
  };

  float acc[kGroups][4];
#pragma unroll
  for (int i = 0; i < kGroups; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  Stage cur, nxt;
  if (s_lo < s_hi) load(cur, s_lo);
  for (int s = s_lo; s < s_hi; ++s) {
    if (s + 1 < s_hi) load(nxt, s + 1);
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
    cur = nxt;
  }
  // acc[i]: (token g, rows 8i + 2t, 8i + 2t + 1), (token g + 8, the same rows)
  float* mine = part + warp * (16 * kRowsPerBlock);
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const int rl = 8 * i + 2 * t;
    mine[g * kRowsPerBlock + rl] = acc[i][0];
    mine[g * kRowsPerBlock + rl + 1] = acc[i][1];
    mine[(g + 8) * kRowsPerBlock + rl] = acc[i][2];
    mine[(g + 8) * kRowsPerBlock + rl + 1] = acc[i][3];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < a.n_tokens * kRowsPerBlock; e += blockDim.x) {
    const int tok = e / kRowsPerBlock, rl = e - tok * kRowsPerBlock;
    if (r0 + rl >= a.rows) continue;
    float v = part[e];
    for (int w = 1; w < a.slices; ++w) v += part[w * (16 * kRowsPerBlock) + e];
    if (a.add != nullptr) v = __fadd_rn(v, a.add[tok * a.add_stride + r0 + rl]);
    float* const y = a.y + tok * a.y_stride + r0 + rl;
    *y = a.accumulate ? __fadd_rn(*y, v) : v;
  }
}

}  // namespace
}  // namespace direct_mma

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
  if (p.rows == 0 || p.n_tokens == 0) return cudaSuccess;
  const int64_t blocks = (p.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  Args a{};
  a.q = static_cast<const int8_t*>(p.weight);
  a.scales = reinterpret_cast<const __half*>(static_cast<const uint8_t*>(p.weight) +
                                             RepackedQ8_0ScaleOffset(p.rows, p.cols));
  a.rows = p.rows;
  a.cols = static_cast<int32_t>(p.cols);
  a.steps = static_cast<int32_t>(p.cols / kSpan);
  // Slices: the fewest that give ~kTargetWarps warps (a function of the shape only).
  const int64_t want = (kTargetWarps + blocks - 1) / blocks;
  a.slices = static_cast<int32_t>(std::min<int64_t>({want, kMaxSlices, a.steps}));
  a.x_stride = p.x_stride;
  a.y_stride = p.y_stride;
  a.add_stride = p.add_stride;
  a.accumulate = p.accumulate;
  const size_t smem = static_cast<size_t>(a.slices) * 16 * kRowsPerBlock * sizeof(float);
  for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kQuantGemvMmaTokens) {
    a.n_tokens = static_cast<int32_t>(std::min<int64_t>(kQuantGemvMmaTokens, p.n_tokens - t0));
    a.x = p.x + t0 * p.x_stride;
    a.y = p.y + t0 * p.y_stride;
    a.add = p.add != nullptr ? p.add + t0 * p.add_stride : nullptr;
    K3_CUDA_CHECK(LaunchKernel(MmaKernel, static_cast<unsigned>(blocks), 32 * a.slices, smem, stream, a));
  }
  return cudaSuccess;
}

}  // namespace k3::cuda
