// The dequantizing GEMV kernel template (internal to k3_kernels_cuda; instantiated per format in
// gemv_*.cu). Design, and the bytes and floors per K3 shape: kernels/cuda/README.md.
//
// One warp owns kRows consecutive output rows of one matrix (a "tile") and walks the input width
// in chunks of whole quant blocks. Per chunk it copies each row's chunk from global to its own
// shared-memory region with 16-byte cp.async (fully coalesced: the warp reads contiguous 512-byte
// runs), double-buffered (the next chunk, of this tile or the warp's next one, is in flight while
// this one is computed), then every lane takes runs of 8 weights (task = lane, lane + 32, ...): it decodes
// the run of each of the kRows rows (a, b, v[8]), loads the 8 matching x values of each token
// once (two 16-byte loads, shared by the kRows rows) and accumulates a·Σv·x + b·Σx. Accumulators
// (kRows × M) stay in registers across chunks; at the end of the tile a butterfly reduction sums
// the 32 lanes and one lane per (row, token) writes y. Lookup tables (IQ grids) are copied once per
// block into shared memory. Warps loop over tiles (grid-stride), so the grid is sized to the
// resident capacity.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_gemv/decode.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_gemv/iq_tables_device.cuh"  // generated: k3::cuda::iqdev tables

namespace k3::cuda::qgemv {

inline constexpr int kWarps = 8;
inline constexpr int kThreads = 32 * kWarps;
inline constexpr int kRows = 4;               // output rows per warp tile
inline constexpr int kChunkTargetBytes = 1024;  // bytes of one row per chunk (about); two chunks in flight

// Everything the kernel needs, by value.
struct Args {
  const uint8_t* w;        // matrix 0
  int64_t mat_stride;      // bytes
  const int32_t* mat_ids;  // or nullptr
  int64_t n_mats;
  int64_t rows;
  int64_t row_bytes;
  int64_t mat_bytes;       // rows * row_bytes: nothing at or past it is read
  int64_t tiles_per_mat;   // ceil(rows / kRows)
  int32_t bpr;             // blocks per row
  int32_t cb;              // blocks per chunk
  int32_t n_chunks;
  int32_t region_bytes;    // shared bytes per row region (multiple of 16)
  int32_t table_bytes;     // shared bytes of the tables (multiple of 16)
  int32_t n_tokens;        // <= M of the instantiation
  bool ternary;            // IQ1_S rows in their ternary form (iq1s_ternary.h): the lane-per-row kernel only
  const float* x;
  int64_t x_stride, x_mat_stride;
  float* y;
  int64_t y_stride, y_mat_stride;
};

// ---- shared-memory tables --------------------------------------------------------------------

struct TableLayout {
  int iq1s = -1, iq2xxs = -1, iq2xs = -1, iq2s = -1, iq3xxs = -1, iq3s = -1, ksigns = -1, kvalues = -1;
  int bytes = 0;
};

constexpr TableLayout MakeLayout(uint32_t mask) {
  TableLayout l;
  int off = 0;
  auto take = [&](uint32_t bit, int size) {
    if (!(mask & bit)) return -1;
    const int at = off;
    off += (size + 15) & ~15;
    return at;
  };
  l.iq1s = take(kTabIq1s, 2048 * 8);
  l.iq2s = take(kTabIq2s, 1024 * 8);
  l.iq2xs = take(kTabIq2xs, 512 * 8);
  l.iq2xxs = take(kTabIq2xxs, 256 * 8);
  l.iq3s = take(kTabIq3s, 512 * 4);
  l.iq3xxs = take(kTabIq3xxs, 256 * 4);
  l.ksigns = take(kTabKsigns, 128);
  l.kvalues = take(kTabKvalues, 16);
  l.bytes = off;
  return l;
}

template <class T>
__device__ __forceinline__ void CopyTable(T* dst, const T* src, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

template <uint32_t kMask>
__device__ __forceinline__ IqTables StageTables(uint8_t* smem) {
  constexpr TableLayout L = MakeLayout(kMask);
  IqTables t;
  if constexpr ((kMask & kTabIq1s) != 0) {
    CopyTable(reinterpret_cast<uint64_t*>(smem + L.iq1s), iqdev::kIq1sGrid, 2048);
    t.iq1s = reinterpret_cast<const uint64_t*>(smem + L.iq1s);
  }
  if constexpr ((kMask & kTabIq2s) != 0) {
    CopyTable(reinterpret_cast<uint64_t*>(smem + L.iq2s), iqdev::kIq2sGrid, 1024);
    t.iq2s = reinterpret_cast<const uint64_t*>(smem + L.iq2s);
  }
  if constexpr ((kMask & kTabIq2xs) != 0) {
    CopyTable(reinterpret_cast<uint64_t*>(smem + L.iq2xs), iqdev::kIq2xsGrid, 512);
    t.iq2xs = reinterpret_cast<const uint64_t*>(smem + L.iq2xs);
  }
  if constexpr ((kMask & kTabIq2xxs) != 0) {
    CopyTable(reinterpret_cast<uint64_t*>(smem + L.iq2xxs), iqdev::kIq2xxsGrid, 256);
    t.iq2xxs = reinterpret_cast<const uint64_t*>(smem + L.iq2xxs);
  }
  if constexpr ((kMask & kTabIq3s) != 0) {
    CopyTable(reinterpret_cast<uint32_t*>(smem + L.iq3s), iqdev::kIq3sGrid, 512);
    t.iq3s = reinterpret_cast<const uint32_t*>(smem + L.iq3s);
  }
  if constexpr ((kMask & kTabIq3xxs) != 0) {
    CopyTable(reinterpret_cast<uint32_t*>(smem + L.iq3xxs), iqdev::kIq3xxsGrid, 256);
    t.iq3xxs = reinterpret_cast<const uint32_t*>(smem + L.iq3xxs);
  }
  if constexpr ((kMask & kTabKsigns) != 0) {
    CopyTable(smem + L.ksigns, iqdev::kKsignsIq2xs, 128);
    t.ksigns = smem + L.ksigns;
  }
  if constexpr ((kMask & kTabKvalues) != 0) {
    CopyTable(reinterpret_cast<int8_t*>(smem + L.kvalues), iqdev::kKvaluesIq4nl, 16);
    t.kvalues = reinterpret_cast<const int8_t*>(smem + L.kvalues);
  }
  return t;
}

// ---- global -> shared span copy ----------------------------------------------------------------

__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Copies bytes [g_lo, g_hi) of the matrix at `base` (16-byte aligned) into `dst` (16-byte
// aligned), which receives the 16-byte-aligned superset starting at g_lo & ~15: the data of g_lo
// lands at dst + (g_lo & 15). Never reads at or past `limit`. Whole warp.
__device__ __forceinline__ void LoadSpan(const uint8_t* base, int64_t g_lo, int64_t g_hi, int64_t limit,
                                         uint8_t* dst, int lane) {
  const int64_t a_lo = g_lo & ~int64_t{15};
  const int64_t a_hi = min((g_hi + 15) & ~int64_t{15}, limit & ~int64_t{15});
  const int n_full = a_hi > a_lo ? static_cast<int>((a_hi - a_lo) >> 4) : 0;
  for (int i = lane; i < n_full; i += 32) CpAsync16(dst + 16 * i, base + a_lo + 16 * i);
  const int64_t tail_lo = a_lo + 16 * static_cast<int64_t>(n_full);
  const int n_tail = g_hi > tail_lo ? static_cast<int>(g_hi - tail_lo) : 0;  // < 16
  if (lane < n_tail) dst[16 * n_full + lane] = base[tail_lo + lane];
}

// ---- the kernel --------------------------------------------------------------------------------

template <class F, int M>
__global__ void __launch_bounds__(kThreads) QuantGemvKernel(const Args a) {
  PdlEnter();
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int BE = F::kBlockElems, BB = F::kBlockBytes;
  IqTables tab;
  if constexpr (F::kTables != 0) {
    tab = StageTables<F::kTables>(smem);
    __syncthreads();
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Two stages of kRows regions per warp: chunk i+1 streams in while chunk i is computed.
  uint8_t* const stages = smem + a.table_bytes + warp * (2 * kRows) * a.region_bytes;
  const int64_t n_tiles = a.n_mats * a.tiles_per_mat;
  const int64_t tile_step = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t first_tile = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (first_tile >= n_tiles) return;
  // The warp's work: items (tile, chunk), tiles first_tile, first_tile + tile_step, ...
  const int64_t my_tiles = (n_tiles - first_tile + tile_step - 1) / tile_step;
  const int64_t n_items = my_tiles * a.n_chunks;

  // Issues the copies of item `it` into stage `st`; records each row's misalignment.
  auto issue = [&](int64_t it, int st, int (&mis)[kRows]) {
    const int64_t tile = first_tile + (it / a.n_chunks) * tile_step;
    const int c = static_cast<int>(it % a.n_chunks);
    const int64_t mat = tile / a.tiles_per_mat;
    const int64_t r0 = (tile - mat * a.tiles_per_mat) * kRows;
    const int64_t id = a.mat_ids != nullptr ? static_cast<int64_t>(a.mat_ids[mat]) : mat;
    const uint8_t* const base = a.w + id * a.mat_stride;
    const int blk0 = c * a.cb;
    const int nblk = min(a.cb, a.bpr - blk0);
    const int n_valid = static_cast<int>(min(static_cast<int64_t>(kRows), a.rows - r0));
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      mis[r] = 0;
      if (r < n_valid) {
        const int64_t g_lo = (r0 + r) * a.row_bytes + static_cast<int64_t>(blk0) * BB;
        mis[r] = static_cast<int>(g_lo & 15);
        LoadSpan(base, g_lo, g_lo + static_cast<int64_t>(nblk) * BB, a.mat_bytes,
                 stages + (st * kRows + r) * a.region_bytes, lane);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };

  float acc[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;
  }
  int mis_cur[kRows], mis_next[kRows];
  issue(0, 0, mis_cur);

  for (int64_t it = 0; it < n_items; ++it) {
    const int st = static_cast<int>(it & 1);
    if (it + 1 < n_items) {
      issue(it + 1, st ^ 1, mis_next);
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");  // item `it` has landed
    } else {
      CpAsyncWaitAll();
    }
    __syncwarp();

    const int64_t tile = first_tile + (it / a.n_chunks) * tile_step;
    const int c = static_cast<int>(it % a.n_chunks);
    const int64_t mat = tile / a.tiles_per_mat;
    const int64_t r0 = (tile - mat * a.tiles_per_mat) * kRows;
    const float* const x = a.x + mat * a.x_mat_stride;
    const int n_valid = static_cast<int>(min(static_cast<int64_t>(kRows), a.rows - r0));
    const int blk0 = c * a.cb;
    const int nblk = min(a.cb, a.bpr - blk0);
    const uint8_t* const regions = stages + st * kRows * a.region_bytes;

    const int n_tasks = nblk * BE / 8;
    for (int task = lane; task < n_tasks; task += 32) {
      const int e0 = task * 8;
      const int j = e0 / BE, sub = (e0 % BE) / 8;
      float va[kRows], vb[kRows], v[kRows][8];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r < n_valid) {
          F::Decode8(regions + r * a.region_bytes + mis_cur[r] + j * BB, sub, tab, va[r], vb[r], v[r]);
        } else {
          va[r] = 0.0f;
          vb[r] = 0.0f;
#pragma unroll
          for (int k = 0; k < 8; ++k) v[r][k] = 0.0f;
        }
      }
      const int64_t col = static_cast<int64_t>(blk0) * BE + e0;
#pragma unroll
      for (int t = 0; t < M; ++t) {
        if (t < a.n_tokens) {
          const float4* xp = reinterpret_cast<const float4*>(x + t * a.x_stride + col);
          const float4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
          const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
          float xs = 0.0f;
          if constexpr (F::kHasOffset) {
            xs = ((xv[0] + xv[1]) + (xv[2] + xv[3])) + ((xv[4] + xv[5]) + (xv[6] + xv[7]));
          }
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            float s = v[r][0] * xv[0];
#pragma unroll
            for (int k = 1; k < 8; ++k) s = fmaf(v[r][k], xv[k], s);
            if constexpr (F::kUnitScale) {
              acc[r][t] += s;
            } else {
              acc[r][t] = fmaf(va[r], s, acc[r][t]);
            }
            if constexpr (F::kHasOffset) acc[r][t] = fmaf(vb[r], xs, acc[r][t]);
          }
        }
      }
    }
    __syncwarp();  // every lane is done with this stage before the next issue overwrites it

    if (c == a.n_chunks - 1) {  // the tile is complete: reduce over lanes and write
      float* const y = a.y + mat * a.y_mat_stride;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int t = 0; t < M; ++t) {
          const float sum = detail::WarpSum(acc[r][t]);
          if (lane == ((r * M + t) & 31) && r < n_valid && t < a.n_tokens) y[t * a.y_stride + r0 + r] = sum;
          acc[r][t] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) mis_cur[r] = mis_next[r];
  }
}

// Shared memory of one launch for format F with `region_bytes` per row region.
template <class F>
constexpr int TableBytes() {
  return MakeLayout(F::kTables).bytes;
}

// Sets the kernel's dynamic shared memory limit once per (kernel, device) to what the device allows
// beside its static shared memory, and returns how many blocks of `threads` threads and
// `smem_bytes` dynamic shared memory are resident per multiprocessor. Defined in quant_gemv.cu.
cudaError_t PrepareKernel(const void* kernel, int threads, int smem_bytes, int* blocks_per_sm);
inline cudaError_t PrepareKernel(const void* kernel, int smem_bytes, int* blocks_per_sm) {
  return PrepareKernel(kernel, kThreads, smem_bytes, blocks_per_sm);
}

template <class F, int M>
cudaError_t LaunchM(const Args& a, int smem_bytes, cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(&QuantGemvKernel<F, M>);
  int per_sm = 0;
  if (const cudaError_t e = PrepareKernel(kernel, smem_bytes, &per_sm); e != cudaSuccess) return e;
  const int64_t n_tiles = a.n_mats * a.tiles_per_mat;
  const int64_t want = (n_tiles + kWarps - 1) / kWarps;
  const int64_t cap = static_cast<int64_t>(per_sm) * detail::MultiprocessorCount();
  const int grid = static_cast<int>(want < cap ? want : cap);
  K3_CUDA_CHECK(LaunchKernel(QuantGemvKernel<F, M>, grid, kThreads, smem_bytes, stream, a));
  return cudaSuccess;
}

template <class F>
cudaError_t LaunchFormat(const Args& a, int smem_bytes, cudaStream_t stream) {
  if (a.n_tokens <= 1) return LaunchM<F, 1>(a, smem_bytes, stream);
  if (a.n_tokens <= 2) return LaunchM<F, 2>(a, smem_bytes, stream);
  if (a.n_tokens <= 4) return LaunchM<F, 4>(a, smem_bytes, stream);
  if (a.n_tokens <= 8) return LaunchM<F, 8>(a, smem_bytes, stream);
  return LaunchM<F, 16>(a, smem_bytes, stream);
}

// One per format, each in its own translation unit (gemv_*.cu) so they compile in parallel.
#define K3_GEMV_DECLARE(NAME) cudaError_t Launch##NAME(const Args& a, int smem_bytes, cudaStream_t stream);
K3_GEMV_DECLARE(F32)
K3_GEMV_DECLARE(F16)
K3_GEMV_DECLARE(BF16)
K3_GEMV_DECLARE(Q8_0)
K3_GEMV_DECLARE(Q4_0)
K3_GEMV_DECLARE(Q5_0)
K3_GEMV_DECLARE(IQ4_NL)
K3_GEMV_DECLARE(Q2_K)
K3_GEMV_DECLARE(Q3_K)
K3_GEMV_DECLARE(Q4_K)
K3_GEMV_DECLARE(Q5_K)
K3_GEMV_DECLARE(Q6_K)
K3_GEMV_DECLARE(IQ2_XXS)
K3_GEMV_DECLARE(IQ2_XS)
K3_GEMV_DECLARE(IQ2_S)
K3_GEMV_DECLARE(IQ3_XXS)
K3_GEMV_DECLARE(IQ3_S)
K3_GEMV_DECLARE(IQ1_S)
K3_GEMV_DECLARE(IQ1_M)
K3_GEMV_DECLARE(IQ4_XS)
#undef K3_GEMV_DECLARE

#define K3_GEMV_DEFINE(NAME)                                                           \
  cudaError_t Launch##NAME(const Args& a, int smem_bytes, cudaStream_t stream) {       \
    return LaunchFormat<Fmt##NAME>(a, smem_bytes, stream);                              \
  }

}  // namespace k3::cuda::qgemv
