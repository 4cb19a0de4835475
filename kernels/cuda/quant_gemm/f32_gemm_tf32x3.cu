#include "kernels/cuda/quant_gemm/f32_gemm_tf32x3.h"

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_ptx.cuh"

namespace k3::cuda {
namespace {

constexpr int kBM = 128;       // weight rows per block
constexpr int kBN = 128;       // tokens per block
constexpr int kBK = 32;        // K per stage
constexpr int kStages = 3;     // cp.async stages in flight
constexpr int kThreads = 256;  // 8 warps: 2 (rows) x 4 (tokens) of 64 x 32
constexpr int kPad = kBK + 8;  // floats per staged row: the 16 lanes of an LDS.64 phase hit 32 banks

struct F32GemmSmem {
  float w[kStages][kBM][kPad];  // [stage][weight row][k]
  float x[kStages][kBN][kPad];  // [stage][token][k]
};

// Inside each 8-wide k step the fragments read physical columns (2·tig, 2·tig + 1) as logical k
// (tig, tig + 4) in both operands (one LDS.64 each instead of two LDS.32): the same pairs meet, so
// only the order of the sum changes.
__global__ void __launch_bounds__(kThreads, 1) F32GemmTf32x3Kernel(const F32GemmParams p) {
  extern __shared__ float4 f32_gemm_smem[];
  PdlEnter();
  F32GemmSmem& sm = *reinterpret_cast<F32GemmSmem*>(f32_gemm_smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int wm = warp >> 2, wn = warp & 3;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN, m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  const int64_t nk = (p.cols + kBK - 1) / kBK;

  // Stage k-tile kt: 128 rows x 8 pieces of 16 bytes per operand, 4 pieces per thread each;
  // rows past the matrix and columns past cols are zero-filled (cols % 4 == 0: whole pieces).
  auto stage_rows = [&](float (*dst)[kPad], const float* src, int64_t stride, int64_t row0, int64_t rows,
                        int64_t k0) {
#pragma unroll
    for (int i = 0; i < kBM * (kBK / 4) / kThreads; ++i) {
      const int e = tid + i * kThreads, r = e >> 3, q = e & 7;
      const int64_t c = k0 + q * 4, row = row0 + r;
      const bool ok = row < rows && c < p.cols;
      ptx::CpAsync16(ptx::SmemAddr(&dst[r][q * 4]), ok ? src + row * stride + c : src, ok ? 16 : 0);
    }
  };
  static_assert(kBM == kBN, "stage_rows stages both operands' tiles");
  auto load = [&](int stage, int64_t kt) {
    stage_rows(sm.w[stage], p.w, p.cols, m0, p.rows, kt * kBK);
    stage_rows(sm.x[stage], p.x, p.x_stride, n0, p.n_tokens, kt * kBK);
  };

  // The tensor cores add each k-step's products into the accumulator with truncation, which biases
  // long sums (~2^-23 of the running sum per mma: ~2e-4 at K = 7168); so each k-tile's 12 mma start
  // from zero and the tile's sum is added into `sum` in f32 (rounded to nearest).
  float sum[4][4][4] = {};  // [m16 tile][n8 tile][C fragment]
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) load(s, s);
    ptx::CpAsyncCommit();
  }
  for (int64_t kt = 0; kt < nk; ++kt) {
    ptx::CpAsyncWait<kStages - 2>();  // k-tile kt has landed (one group per k-tile, empty ones too)
    __syncthreads();                  // ... for every thread; and k-tile kt - 1's stage is free
    if (kt + kStages - 1 < nk) load(static_cast<int>((kt + kStages - 1) % kStages), kt + kStages - 1);
    ptx::CpAsyncCommit();
    const int st = static_cast<int>(kt % kStages);
    float acc[4][4][4] = {};
#pragma unroll
    for (int kk = 0; kk < kBK / 8; ++kk) {
      const int c = kk * 8 + 2 * tig;
      uint32_t bh[4][2], bl[4][2];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 b = *reinterpret_cast<const float2*>(&sm.x[st][wn * 32 + j * 8 + gid][c]);
        ptx::SplitTf32(b.x, bh[j][0], bl[j][0]);
        ptx::SplitTf32(b.y, bh[j][1], bl[j][1]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = wm * 64 + i * 16 + gid;
        const float2 a0 = *reinterpret_cast<const float2*>(&sm.w[st][r][c]);
        const float2 a1 = *reinterpret_cast<const float2*>(&sm.w[st][r + 8][c]);
        uint32_t ah[4], al[4];
        ptx::SplitTf32(a0.x, ah[0], al[0]);  // (row gid,     k tig)
        ptx::SplitTf32(a1.x, ah[1], al[1]);  // (row gid + 8, k tig)
        ptx::SplitTf32(a0.y, ah[2], al[2]);  // (row gid,     k tig + 4)
        ptx::SplitTf32(a1.y, ah[3], al[3]);  // (row gid + 8, k tig + 4)
#pragma unroll
        for (int j = 0; j < 4; ++j) {  // the small terms first, then hi·hi
          ptx::Mma1688Tf32(acc[i][j], al, bh[j][0], bh[j][1]);
          ptx::Mma1688Tf32(acc[i][j], ah, bl[j][0], bl[j][1]);
          ptx::Mma1688Tf32(acc[i][j], ah, bh[j][0], bh[j][1]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[i][j][e] += acc[i][j][e];
      }
    }
  }
  ptx::CpAsyncWait<0>();  // no copy outlives the block (the trailing groups are empty)

#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t r = m0 + wm * 64 + i * 16 + gid + (e >> 1) * 8;
        const int64_t t = n0 + wn * 32 + j * 8 + 2 * tig + (e & 1);
        if (r < p.rows && t < p.n_tokens) p.y[t * p.y_stride + r] = sum[i][j][e];
      }
    }
  }
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

}  // namespace

bool F32GemmTf32x3Supports(const F32GemmParams& p) {
  constexpr int64_t kMax = 0x7fffffff;
  if (p.w == nullptr || p.x == nullptr || p.y == nullptr) return false;
  if (p.rows < 0 || p.cols <= 0 || p.n_tokens < 0 || p.rows > kMax || p.cols > kMax || p.n_tokens > kMax) return false;
  if (p.x_stride < p.cols || p.y_stride < p.rows || p.cols % 4 != 0 || p.x_stride % 4 != 0) return false;
  if ((p.rows + kBM - 1) / kBM > 65535) return false;
  return Aligned16(p.w) && Aligned16(p.x);
}

cudaError_t F32GemmTf32x3(const F32GemmParams& p, cudaStream_t stream) {
  if (!F32GemmTf32x3Supports(p)) return cudaErrorInvalidValue;
  if (p.rows == 0 || p.n_tokens == 0) return cudaSuccess;
  const size_t smem = sizeof(F32GemmSmem);
  K3_CUDA_CHECK(cudaFuncSetAttribute(F32GemmTf32x3Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((p.n_tokens + kBN - 1) / kBN), static_cast<unsigned>((p.rows + kBM - 1) / kBM));
  K3_CUDA_CHECK(LaunchKernel(F32GemmTf32x3Kernel, grid, kThreads, smem, stream, p));
  return cudaSuccess;
}

}  // namespace k3::cuda
