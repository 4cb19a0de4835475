// The Q8_0 GEMV of stacks of short rows (the MLA heads' k_b and v_b): a block of 128 threads per
// (slot, rows tile), a thread per 4 blocks (128 weights) of a row, so S = 1, 2 or 4 threads a row
// (128, 256 or 512 weights) and 128 / S rows a block.
//   - x of the slot's tokens (up to 16 x 512 floats) in shared memory, each thread part's 128
//     columns padded to 132 floats (the S parts' float4 reads of one warp fall in distinct banks;
//     with S = 1 every lane reads the same address: a broadcast);
//   - a thread loads its 136 bytes (4 blocks of d + 32 int8) as 17 aligned 8-byte words (rows are
//     34·4·S bytes, a multiple of 8), decodes each weight once and uses it for every token:
//     per block s_t = Σ_j q_j·x_t[j] (fmaf in column order), acc_t += d·s_t;
//   - the S partial sums of a row meet in a butterfly of log2(S) shuffles per token.
// Against the block GEMV (gemv_impl.cuh), whose 4-row warp tiles give a 128-wide row's 16 runs of
// 8 weights to 32 lanes and then reduce 4 x tokens sums across the warp: H200, slice8 at batch 16
// k_b and v_b took 107.5 us a launch there, 29.7 here (ncu; 4 launches a step, 6.7 MB of weights
// each, 201 MFLOP: neither HBM nor the FMA pipe is near its limit yet at this size).
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_gemv/gemv_q8_0_short.cuh"
#include "kernels/cuda/quant_gemv/quant_gemv.h"

namespace k3::cuda::qgemv {
namespace {

constexpr int kShortThreads = 128;
constexpr int kPartCols = 128;                // weights per thread: 4 Q8_0 blocks
constexpr int kPartBytes = 4 * 34;            // their bytes: 17 aligned 8-byte words
constexpr int kPartStride = kPartCols + 4;    // floats per (token, part) row of x in shared memory

__device__ __forceinline__ int8_t ByteOf(const uint32_t (&w)[kPartBytes / 4], int k) {
  return static_cast<int8_t>((w[k >> 2] >> (8 * (k & 3))) & 0xffu);
}

template <int NT>  // tokens the registers hold (a.n_tokens <= NT)
__global__ void __launch_bounds__(kShortThreads) Q8_0ShortKernel(const Args a, int parts) {
  PdlEnter();
  extern __shared__ __align__(16) float xs[];  // [n_tokens][parts][kPartStride]
  const int slot = static_cast<int>(blockIdx.y), n_tok = a.n_tokens;
  const int cols = kPartCols * parts;
  const float* x = a.x + slot * a.x_mat_stride;
  for (int i = threadIdx.x; i < n_tok * cols / 4; i += kShortThreads) {
    const int t = i / (cols / 4), c = (i - t * (cols / 4)) * 4;
    const float4 v = *reinterpret_cast<const float4*>(x + t * a.x_stride + c);
    *reinterpret_cast<float4*>(xs + (t * parts + c / kPartCols) * kPartStride + c % kPartCols) = v;
  }

  const int rows_per_block = kShortThreads / parts;
  const int p = static_cast<int>(threadIdx.x) % parts;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / parts;
  const int64_t mat = a.mat_ids != nullptr ? a.mat_ids[slot] : slot;
  uint32_t w[kPartBytes / 4];
  if (r < a.rows) {
    const uint2* src = reinterpret_cast<const uint2*>(a.w + mat * a.mat_stride + r * a.row_bytes + p * kPartBytes);
#pragma unroll
    for (int i = 0; i < kPartBytes / 8; ++i) {
      const uint2 v = __ldg(src + i);
      w[2 * i] = v.x;
      w[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPartBytes / 4; ++i) w[i] = 0u;
  }
  __syncthreads();

  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  const float* xp = xs + p * kPartStride;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int base = 34 * b;  // even: d is one half-word of one 4-byte word
    const float d = HalfToFloat(w[base >> 2] >> (8 * (base & 3)));
    float s[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) s[t] = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; j += 4) {
      const float w0 = ByteOf(w, base + 2 + j), w1 = ByteOf(w, base + 3 + j);
      const float w2 = ByteOf(w, base + 4 + j), w3 = ByteOf(w, base + 5 + j);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < n_tok) {
          const float4 xv = *reinterpret_cast<const float4*>(xp + t * parts * kPartStride + 32 * b + j);
          s[t] = fmaf(w0, xv.x, s[t]);
          s[t] = fmaf(w1, xv.y, s[t]);
          s[t] = fmaf(w2, xv.z, s[t]);
          s[t] = fmaf(w3, xv.w, s[t]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = fmaf(d, s[t], acc[t]);
  }
  for (int off = 1; off < parts; off <<= 1) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] += __shfl_xor_sync(detail::kFullMask, acc[t], off);
  }
  if (p == 0 && r < a.rows) {
    float* y = a.y + slot * a.y_mat_stride + r;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < n_tok) y[t * a.y_stride] = acc[t];
    }
  }
}

}  // namespace

bool Q8_0ShortApplies(quant::GgmlType type, const Args& a) {
  const bool stack = a.n_mats > 1 || a.mat_ids != nullptr;
  return type == quant::GgmlType::kQ8_0 && stack && a.n_mats <= 65535 &&
         (a.bpr == 4 || a.bpr == 8 || a.bpr == 16) && a.row_bytes == 34 * a.bpr && a.mat_stride % 16 == 0;
}

cudaError_t LaunchQ8_0Short(const Args& a, cudaStream_t stream) {
  if (a.n_tokens < 1 || a.n_tokens > kQuantGemvMaxTokens || a.bpr % 4 != 0) return cudaErrorInvalidValue;
  const int parts = a.bpr / 4, rows_per_block = kShortThreads / parts;
  const dim3 grid(static_cast<unsigned>((a.rows + rows_per_block - 1) / rows_per_block), static_cast<unsigned>(a.n_mats));
  const size_t smem = sizeof(float) * a.n_tokens * parts * kPartStride;
  if (a.n_tokens == 1) return LaunchKernel(Q8_0ShortKernel<1>, grid, kShortThreads, smem, stream, a, parts);
  if (a.n_tokens <= 4) return LaunchKernel(Q8_0ShortKernel<4>, grid, kShortThreads, smem, stream, a, parts);
  return LaunchKernel(Q8_0ShortKernel<16>, grid, kShortThreads, smem, stream, a, parts);
}

}  // namespace k3::cuda::qgemv
