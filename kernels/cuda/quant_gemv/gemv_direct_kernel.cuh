// The direct-load GEMV kernel template (internal to k3_kernels_cuda; instantiated per format in
// gemv_direct_*.cu). Public interface, layout and numerics: gemv_direct.h; design and the expected
// gains of each choice: kernels/cuda/README.md, "Direct GEMV".
//
// A thread block owns groups_per_block groups of R consecutive rows and ALL of their columns. Each
// warp takes (group, slice) items: R rows × one contiguous range of steps, a step being 32 chunks of
// 16 bytes per row (512 contiguous bytes: lane j loads chunk 32 k + j of each row with one LDG.128
// straight to registers, L1 bypassed, the next step's loads in flight while this one is computed).
// x comes through L1 (__ldg, 16-byte loads, shared by the R rows); every weight becomes an exact
// f32 (formats.cuh) and gets one FMA per token; Q8_0's scale is applied once per chunk per token.
// At the end of an item the 32 lanes are summed (xor butterfly, halving the carried values); with
// one slice the warp writes y, else the slice sums go to shared memory and, after one
// __syncthreads, the block adds them slice by slice, in order, and writes y.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/quant_gemv/gemv_direct_formats.cuh"
#include "kernels/cuda/quant_gemv/warp_butterfly.cuh"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda::direct {

inline constexpr int kMaxWarps = 16;  // per block (R = 1); fewer for R = 4 (Shape::kThreads)
inline constexpr int kStepChunks = 32;  // chunks per row per step (one per lane)

// Everything the kernel needs, by value.
struct Args {
  const uint8_t* w;         // chunk plane: row r at w + r * row_bytes
  const uint16_t* scales;   // Q8_0: f16 bits [rows][scale_stride]; nullptr otherwise
  int64_t rows;
  int64_t row_bytes;        // n_chunks * 16
  int64_t scale_stride;     // scales per row (cols / 32)
  int32_t n_chunks;         // 16-byte chunks per row
  int32_t steps;            // ceil(n_chunks / 32)
  int32_t slices;           // step ranges per row (1..16), the plan's
  int32_t groups_per_block; // row groups of R rows per block
  int32_t items;            // groups_per_block * slices
  const float* x;           // this pass's token 0
  int64_t x_stride;
  float* y;                 // this pass's token 0
  int64_t y_stride;
  const float* add;         // this pass's token 0 of the epilogue's addend, or nullptr
  int64_t add_stride;
  bool accumulate;          // y += (sum + add)
};

// y[t][row] from the row's sum through the epilogue (gemv_direct.h): sum + add, then + y as it was.
__device__ __forceinline__ void StoreY(const Args& a, int t, int64_t row, float sum) {
  float* const p = a.y + t * a.y_stride + row;
  if (a.add != nullptr) sum = __fadd_rn(sum, a.add[t * a.add_stride + row]);
  *p = a.accumulate ? __fadd_rn(*p, sum) : sum;
}

// ---- loads ---------------------------------------------------------------------------------------

// Weights and scales are read once: 16-byte (2-byte) loads through the read-only path that do not
// allocate in L1 (x keeps it), with the 256-byte L2 prefetch hint. volatile: never speculated out
// of the guarding branch (the last step of a row may be partial).
__device__ __forceinline__ uint4 LdStream128(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t LdStreamU16(const void* p) {
  unsigned short v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

// ---- the warp reduction: qgemv::Butterfly (warp_butterfly.cuh) ---------------------------------

using qgemv::Butterfly;

// ---- the kernel ----------------------------------------------------------------------------------

// Register budget. ptxas takes every register __launch_bounds__ allows (it hoists loads), so the
// bounds set the occupancy, and per M the code is shaped to fit them without spilling. Per lane: x
// of M tokens for a chunk is M·E floats, the R rows' decoded chunks R·E, a register stage of loads
// 5R. A chunk may be consumed in Q pieces of E/Q columns (the same FMAs in the same order: the
// numerics do not change), with x of every token held while the rows are walked ("tokens inner") or
// the rows' decoded piece held while the tokens are walked; two register stages (the next step's
// loads in flight during the whole step) or one (row r's next load issued as soon as its last piece
// is decoded). The table was found with ptxas -v (sm_90a, CUDA 13): no spills, and
//   Q8_0, R = 4: M = 1: <= 80 registers, 3 blocks of 8 warps per SM (24 warps: the most loads in
//     flight); M = 2..4: <= 128, 16 warps; M = 5, 6: <= 168, 12 warps (blocks of 4); M = 7, 8: <= 255,
//     8 warps (compute-bound there anyway);
//   F32, R = 4: <= 128 for M >= 2;  F16/BF16, R = 4: as Q8_0 up to M = 4, <= 168 above;
//   R = 1 (narrow outputs): <= 128, blocks of up to 16 warps (Q8_0 in 2 pieces above M = 4).
template <class F, int M, int R>
struct Shape {
  static constexpr int E = F::kElems;
  static constexpr bool kBig = R > 1;  // R = 1 (narrow outputs) is small at any M
  static constexpr int Q = !F::kScaled ? 1 : !kBig ? (M <= 4 ? 1 : 2) : M == 3 ? 2 : M == 6 ? 4 : 1;  // pieces per chunk
  static constexpr int PE = E / Q;                                                  // columns per piece
  static constexpr int WPP = 4 / Q;                                                 // words per piece
  static constexpr bool kTokensInner = kBig ? M <= 2 : M == 1;
  static constexpr bool kTwoStages = kBig ? M <= 2 : M <= 4;
  static constexpr bool kPlainF32 = F::kElems == 4;
  static constexpr int kThreads = !kBig ? 512 : M <= 4 || kPlainF32 ? 256 : 128;  // most threads per block
  static constexpr int kMinBlocks = !kBig ? 1
                                    : M == 1 ? 3
                                    : M <= 4 || kPlainF32 ? 2
                                    : M <= 6 || !F::kScaled ? 3
                                    : 2;
};

template <int PE>
__device__ __forceinline__ void LoadX(const float* p, float (&xv)[PE]) {
  static_assert(PE % 4 == 0, "x is read 16 bytes at a time");
#pragma unroll
  for (int i = 0; i < PE / 4; ++i) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(p) + i);
    xv[4 * i] = f.x;
    xv[4 * i + 1] = f.y;
    xv[4 * i + 2] = f.z;
    xv[4 * i + 3] = f.w;
  }
}

template <class F, int PE, int WPP>
__device__ __forceinline__ void ConvertPiece(const uint4& q, int piece, float (&w)[PE]) {
#pragma unroll
  for (int i = 0; i < WPP; ++i) F::ConvertWord(Word(q, piece * WPP + i), w + i * F::kPerWord);
}

// sum += Σ_i w[i]·x[i] in element order; with `start`, the first product starts the sum (Q8_0's
// per-chunk sum). The order is fixed: it is part of the numerics.
template <int PE>
__device__ __forceinline__ float Chain(float sum, const float (&w)[PE], const float (&x)[PE], bool start) {
#pragma unroll
  for (int i = 0; i < PE; ++i) sum = (start && i == 0) ? __fmul_rn(w[0], x[0]) : __fmaf_rn(w[i], x[i], sum);
  return sum;
}

template <int R>
struct Stage {
  uint4 q[R];
  uint32_t d[R];
};

// Loads of one item: row r (< R) of its group, the current step, this lane's chunk. Pointers run
// with the step; row offsets are 32-bit (a group spans less than 4 GB).
template <class F, int R>
struct Loader {
  const uint8_t* wp;       // row r0, this lane's chunk of the current step
  const uint16_t* sp;      // its scale
  uint32_t row_bytes, scale_stride;
  int n_rows;              // rows of the group that exist (rows past the end are not loaded)
  __device__ __forceinline__ void Row(Stage<R>& st, int r, bool live) const {
    if (r < n_rows && live) {
      st.q[r] = LdStream128(wp + static_cast<uint32_t>(r) * row_bytes);
      if constexpr (F::kScaled) st.d[r] = LdStreamU16(sp + static_cast<uint32_t>(r) * scale_stride);
    }
  }
  __device__ __forceinline__ void All(Stage<R>& st, bool live) const {
#pragma unroll
    for (int r = 0; r < R; ++r) Row(st, r, live);
  }
  __device__ __forceinline__ void Advance() {
    wp += 16 * kStepChunks;
    if constexpr (F::kScaled) sp += kStepChunks / 2;
  }
};

// One step of an item: the lane's chunk of the R rows (in `st`) against x at `xc`. With `refill`,
// row r of step k + 1 is loaded into `st` as soon as row r of this step is decoded.
template <class F, int M, int R>
__device__ __forceinline__ void ComputeStep(Stage<R>& st, const float* xc, uint32_t x_stride, float (&acc)[R * M],
                                            const Loader<F, R>& ld, bool refill) {
  using S = Shape<F, M, R>;
  constexpr int PE = S::PE;
  float dv[R];
#pragma unroll
  for (int r = 0; r < R; ++r) dv[r] = F::kScaled ? qgemv::HalfToFloat(st.d[r]) : 1.0f;
  // Q8_0: per-chunk sums, then acc += d·sum; plain formats chain straight into acc.
  float sum[R * M];
#pragma unroll
  for (int i = 0; i < R * M; ++i) sum[i] = F::kScaled ? 0.0f : acc[i];
#pragma unroll
  for (int p = 0; p < S::Q; ++p) {
    const bool start = F::kScaled && p == 0;
    if constexpr (S::kTokensInner) {
      float xv[M][PE];
#pragma unroll
      for (int t = 0; t < M; ++t) LoadX<PE>(xc + static_cast<uint32_t>(t) * x_stride + p * PE, xv[t]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float wv[PE];
        ConvertPiece<F, PE, S::WPP>(st.q[r], p, wv);
        if (p == S::Q - 1) ld.Row(st, r, refill);
#pragma unroll
        for (int t = 0; t < M; ++t) sum[r * M + t] = Chain<PE>(sum[r * M + t], wv, xv[t], start);
      }
    } else {
      float wv[R][PE];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        ConvertPiece<F, PE, S::WPP>(st.q[r], p, wv[r]);
        if (p == S::Q - 1) ld.Row(st, r, refill);
      }
#pragma unroll
      for (int t = 0; t < M; ++t) {
        float xv[PE];
        LoadX<PE>(xc + static_cast<uint32_t>(t) * x_stride + p * PE, xv);
#pragma unroll
        for (int r = 0; r < R; ++r) sum[r * M + t] = Chain<PE>(sum[r * M + t], wv[r], xv, start);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < R * M; ++i) acc[i] = F::kScaled ? __fmaf_rn(dv[i / M], sum[i], acc[i]) : sum[i];
}

template <class F, int M, int R>
__global__ void __launch_bounds__(Shape<F, M, R>::kThreads, Shape<F, M, R>::kMinBlocks) GemvDirectKernel(const Args a) {
  PdlEnter();
  extern __shared__ float part[];  // [items][M][R] slice sums (slices > 1 only)
  using S = Shape<F, M, R>;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int n_warps = static_cast<int>(blockDim.x) >> 5;
  const int64_t block_row0 = static_cast<int64_t>(blockIdx.x) * a.groups_per_block * R;

  for (int item = warp; item < a.items; item += n_warps) {
    const int g = item / a.slices;
    const int s = item - g * a.slices;
    const int64_t r0 = block_row0 + static_cast<int64_t>(g) * R;
    if (r0 >= a.rows) continue;  // past the last row (the fold skips these rows too)
    const int k0 = static_cast<int>(static_cast<int64_t>(s) * a.steps / a.slices);
    const int k1 = static_cast<int>(static_cast<int64_t>(s + 1) * a.steps / a.slices);
    Loader<F, R> ld;
    ld.wp = a.w + r0 * a.row_bytes + static_cast<int64_t>(k0) * (16 * kStepChunks) + 16 * lane;
    ld.sp = F::kScaled ? a.scales + r0 * a.scale_stride + k0 * (kStepChunks / 2) + (lane >> 1) : nullptr;
    ld.row_bytes = static_cast<uint32_t>(a.row_bytes);
    ld.scale_stride = static_cast<uint32_t>(a.scale_stride);
    ld.n_rows = a.rows - r0 < R ? static_cast<int>(a.rows - r0) : R;
    const uint32_t x_stride = static_cast<uint32_t>(a.x_stride);
    constexpr int kStepCols = kStepChunks * F::kElems;
    const float* xp = a.x + (static_cast<int64_t>(k0) * kStepChunks + lane) * F::kElems;  // this lane's x, step k0
    // A lane whose chunk is past the row's end (only in a row's last step) skips that step.
    const int last_live = (a.n_chunks - 1 - lane) >> 5;  // last step with a chunk for this lane (>= -1)

    float acc[R * M];
#pragma unroll
    for (int i = 0; i < R * M; ++i) acc[i] = 0.0f;

    if constexpr (S::kTwoStages) {  // ping-pong: step k + 1 in flight while step k is computed
      Stage<R> sa{}, sb{};  // zeros: a row past the end is never loaded
      int k = k0;
      ld.All(sa, k <= last_live);
      while (true) {
        ld.Advance();
        if (k + 1 < k1) ld.All(sb, k + 1 <= last_live);
        if (k <= last_live) ComputeStep<F, M, R>(sa, xp, x_stride, acc, ld, false);
        xp += kStepCols;
        if (++k >= k1) break;
        ld.Advance();
        if (k + 1 < k1) ld.All(sa, k + 1 <= last_live);
        if (k <= last_live) ComputeStep<F, M, R>(sb, xp, x_stride, acc, ld, false);
        xp += kStepCols;
        if (++k >= k1) break;
      }
    } else {  // one stage: row r of step k + 1 is requested as soon as row r of step k is decoded
      Stage<R> st{};
      ld.All(st, k0 <= last_live);
      for (int k = k0; k < k1; ++k) {
        ld.Advance();
        if (k <= last_live) ComputeStep<F, M, R>(st, xp, x_stride, acc, ld, k + 1 < k1 && k + 1 <= last_live);
        xp += kStepCols;
      }
    }

    int base = 0, free_mask = 0;
    Butterfly<R * M, 16>::Run(acc, lane, base, free_mask);
    constexpr int kFinal = Butterfly<R * M, 16>::kFinal;
    if ((lane & free_mask) == 0) {
#pragma unroll
      for (int j = 0; j < kFinal; ++j) {
        const int idx = base + j;
        const int r = idx / M, t = idx - (idx / M) * M;
        if (a.slices == 1) {
          if (r < ld.n_rows) StoreY(a, t, r0 + r, acc[j]);
        } else {
          part[(item * M + t) * R + r] = acc[j];
        }
      }
    }
  }

  if (a.slices > 1) {  // the block adds each row's slices in order
    __syncthreads();
    const int n_out = a.groups_per_block * R * M;
    for (int o = static_cast<int>(threadIdx.x); o < n_out; o += static_cast<int>(blockDim.x)) {
      const int r = o % R, t = (o / R) % M, g = o / (R * M);
      const int64_t row = block_row0 + static_cast<int64_t>(g) * R + r;
      if (row >= a.rows) continue;
      const float* p = part + (g * a.slices * M + t) * R + r;
      float y = p[0];
      for (int s = 1; s < a.slices; ++s) y = __fadd_rn(y, p[s * M * R]);
      StoreY(a, t, row, y);
    }
  }
}

// One launcher per format (gemv_direct_*.cu, each its own translation unit): dispatches M (1..8,
// the tokens of this pass) and R (1 or 4) to the instantiation.
#define K3_DIRECT_DECLARE(NAME) \
  cudaError_t LaunchDirect##NAME(const Args& a, int m, int r, int64_t blocks, int threads, int smem, cudaStream_t stream);
K3_DIRECT_DECLARE(Q8_0)
K3_DIRECT_DECLARE(F32)
K3_DIRECT_DECLARE(F16)
K3_DIRECT_DECLARE(BF16)
#undef K3_DIRECT_DECLARE

template <class F, int R>
int MaxThreadsR(int m) {
  switch (m) {
    case 1: return Shape<F, 1, R>::kThreads;
    case 2: return Shape<F, 2, R>::kThreads;
    case 3: return Shape<F, 3, R>::kThreads;
    case 4: return Shape<F, 4, R>::kThreads;
    case 5: return Shape<F, 5, R>::kThreads;
    case 6: return Shape<F, 6, R>::kThreads;
    case 7: return Shape<F, 7, R>::kThreads;
    default: return Shape<F, 8, R>::kThreads;
  }
}

// Most threads per block of the instantiation for (m tokens, r rows per warp).
template <class F>
int MaxThreads(int m, int r) {
  return r == 4 ? MaxThreadsR<F, 4>(m) : MaxThreadsR<F, 1>(m);
}

template <class F, int M, int R>
cudaError_t LaunchMR(const Args& a, int64_t blocks, int threads, int smem, cudaStream_t stream) {
  K3_CUDA_CHECK(LaunchKernel(GemvDirectKernel<F, M, R>, static_cast<unsigned>(blocks), threads, smem, stream, a));
  return cudaSuccess;
}

template <class F, int R>
cudaError_t LaunchR(const Args& a, int m, int64_t blocks, int threads, int smem, cudaStream_t stream) {
  switch (m) {
    case 1: return LaunchMR<F, 1, R>(a, blocks, threads, smem, stream);
    case 2: return LaunchMR<F, 2, R>(a, blocks, threads, smem, stream);
    case 3: return LaunchMR<F, 3, R>(a, blocks, threads, smem, stream);
    case 4: return LaunchMR<F, 4, R>(a, blocks, threads, smem, stream);
    case 5: return LaunchMR<F, 5, R>(a, blocks, threads, smem, stream);
    case 6: return LaunchMR<F, 6, R>(a, blocks, threads, smem, stream);
    case 7: return LaunchMR<F, 7, R>(a, blocks, threads, smem, stream);
    case 8: return LaunchMR<F, 8, R>(a, blocks, threads, smem, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <class F>
cudaError_t LaunchFormat(const Args& a, int m, int r, int64_t blocks, int threads, int smem, cudaStream_t stream) {
  if (r == 4) return LaunchR<F, 4>(a, m, blocks, threads, smem, stream);
  if (r == 1) return LaunchR<F, 1>(a, m, blocks, threads, smem, stream);
  return cudaErrorInvalidValue;
}

#define K3_DIRECT_DEFINE(NAME)                                                                          \
  cudaError_t LaunchDirect##NAME(const Args& a, int m, int r, int64_t blocks, int threads, int smem,    \
                                 cudaStream_t stream) {                                                 \
    return LaunchFormat<Direct##NAME>(a, m, r, blocks, threads, smem, stream);                          \
  }

}  // namespace k3::cuda::direct
