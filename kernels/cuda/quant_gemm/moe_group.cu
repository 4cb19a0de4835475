// MoE token grouping (router choices -> expert-grouped sequence for the grouped QuantGemm) and the
// weighted combination of the grouped expert outputs back into token rows.
//
// MoeGroupTokens, deterministic and O(n) in three launches over chunks of kChunk flat (t, j)
// entries:
//   1. count:  per chunk, per expert counts (shared-memory atomics: only the totals matter)
//              -> workspace[chunk][expert];
//   2. scan:   one block: per expert, the exclusive prefix over chunks (in place), then the
//              exclusive prefix over experts -> group_offsets;
//   3. place:  one warp per chunk walks its entries in order, 32 at a time; lanes choosing the
//              same expert find each other with __match_any_sync and take consecutive positions
//              in lane order after the chunk's running base for that expert (shared memory).
// Position of entry i = group_offsets[e] + (entries of e in earlier chunks) + (entries of e
// earlier in this chunk): exactly the stable order by flat index, whatever the scheduling.
// With pass_rows, the scan also cuts each expert's positions into passes (a second block scan, of
// the per-expert pass counts) for the expert-grouped GEMV.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_gemm/quant_gemm.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kChunk = 1024;        // flat entries per chunk (one warp places them: 32 rounds)
constexpr int kMaxExperts = 4096;   // shared-memory counters per block (16 KB)
constexpr int kMaxK = 64;
constexpr int kCountThreads = 256;
constexpr int kScanThreads = 1024;

struct GroupArgs {
  const int32_t* ids;
  int64_t n_flat;  // n_tokens * k
  int32_t k;
  int32_t n_experts;
  int32_t expert_begin;
  int32_t n_chunks;
  int32_t* counts;  // [n_chunks][n_experts]
  int32_t* group_offsets;
  int32_t* x_rows;
  int32_t* slot_of;
  int32_t pass_rows;  // > 0: also the passes (MoeGroupParams)
  int32_t* n_passes;
  int32_t* pass_mat;
  int32_t* pass_row0;
  int32_t* pass_n;
};

__device__ __forceinline__ int LocalExpert(const GroupArgs& a, int64_t i) {
  const int32_t id = a.ids[i];
  // Computed in 64 bits: id - expert_begin may overflow 32.
  const int64_t e = static_cast<int64_t>(id) - a.expert_begin;
  return e >= 0 && e < a.n_experts ? static_cast<int>(e) : -1;
}

__global__ void __launch_bounds__(kCountThreads) CountKernel(const GroupArgs a) {
  PdlEnter();
  __shared__ int32_t cnt[kMaxExperts];
  for (int e = threadIdx.x; e < a.n_experts; e += kCountThreads) cnt[e] = 0;
  __syncthreads();
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kChunk;
  for (int u = threadIdx.x; u < kChunk; u += kCountThreads) {
    const int64_t i = base + u;
    if (i < a.n_flat) {
      const int e = LocalExpert(a, i);
      if (e >= 0) atomicAdd(&cnt[e], 1);
    }
  }
  __syncthreads();
  int32_t* const out = a.counts + static_cast<int64_t>(blockIdx.x) * a.n_experts;
  for (int e = threadIdx.x; e < a.n_experts; e += kCountThreads) out[e] = cnt[e];
}

// The exclusive prefix of `local` over the block's threads in thread order (warp_sums: kScanThreads
// / 32 ints of shared memory, free on entry).
__device__ __forceinline__ int32_t BlockExclusiveScan(int32_t local, int32_t* warp_sums) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int32_t incl = local;  // inclusive warp scan
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t v = __shfl_up_sync(detail::kFullMask, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int32_t w = warp_sums[lane];
    int32_t wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t v = __shfl_up_sync(detail::kFullMask, wi, o);
      if (lane >= o) wi += v;
    }
    warp_sums[lane] = wi - w;  // exclusive prefix of the warps
  }
  __syncthreads();
  return warp_sums[warp] + incl - local;
}

__global__ void __launch_bounds__(kScanThreads) ScanKernel(const GroupArgs a) {
  PdlEnter();
  __shared__ int32_t tot[kMaxExperts];
  __shared__ int32_t warp_sums[kScanThreads / 32];
  const int tid = threadIdx.x;
  // Per expert: exclusive prefix over chunks, in place.
  for (int e = tid; e < a.n_experts; e += kScanThreads) {
    int32_t run = 0;
    int32_t* p = a.counts + e;
#pragma unroll 8
    for (int c = 0; c < a.n_chunks; ++c) {
      const int32_t v = p[static_cast<int64_t>(c) * a.n_experts];
      p[static_cast<int64_t>(c) * a.n_experts] = run;
      run += v;
    }
    tot[e] = run;
  }
  __syncthreads();
  // Exclusive prefix over experts: thread t sums a contiguous segment, then a block scan.
  const int seg = (a.n_experts + kScanThreads - 1) / kScanThreads;
  const int e0 = tid * seg, e1 = min(e0 + seg, a.n_experts);
  int32_t local = 0;
  for (int e = e0; e < e1; ++e) local += tot[e];
  int32_t run = BlockExclusiveScan(local, warp_sums);  // this thread's segment's first position
  int32_t pass = 0;
  if (a.pass_rows > 0) {
    int32_t n_local = 0;
    for (int e = e0; e < e1; ++e) n_local += (tot[e] + a.pass_rows - 1) / a.pass_rows;
    __syncthreads();  // warp_sums again
    pass = BlockExclusiveScan(n_local, warp_sums);
    if (e1 == a.n_experts && e0 < e1) *a.n_passes = pass + n_local;
  }
  for (int e = e0; e < e1; ++e) {
    a.group_offsets[e] = run;
    if (a.pass_rows > 0) {
      for (int32_t r = 0; r < tot[e]; r += a.pass_rows, ++pass) {
        a.pass_mat[pass] = e;
        a.pass_row0[pass] = run + r;
        a.pass_n[pass] = min(a.pass_rows, tot[e] - r);
      }
    }
    run += tot[e];
  }
  if (e1 == a.n_experts && e0 < e1) a.group_offsets[a.n_experts] = run;
}

__global__ void __launch_bounds__(32) PlaceKernel(const GroupArgs a) {
  PdlEnter();
  __shared__ int32_t next[kMaxExperts];  // next free position of each expert for this chunk
  __shared__ int32_t local[kChunk];      // the chunk's local expert indices (-1: not here)
  const int lane = threadIdx.x;
  const int32_t* const pre = a.counts + static_cast<int64_t>(blockIdx.x) * a.n_experts;
  for (int e = lane; e < a.n_experts; e += 32) next[e] = a.group_offsets[e] + pre[e];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kChunk;
#pragma unroll 8
  for (int u = lane; u < kChunk; u += 32) local[u] = base + u < a.n_flat ? LocalExpert(a, base + u) : -1;
  __syncwarp();
  const unsigned lt_mask = (1u << lane) - 1u;
  for (int r = 0; r < kChunk / 32; ++r) {
    if (base + 32 * r >= a.n_flat) break;  // uniform
    const int64_t i = base + 32 * r + lane;
    const int e = local[32 * r + lane];
    const unsigned peers = __match_any_sync(detail::kFullMask, e);
    int32_t pos = -1;
    if (e >= 0) {
      pos = next[e] + __popc(peers & lt_mask);
      a.x_rows[pos] = static_cast<int32_t>(i / a.k);
    }
    if (i < a.n_flat) a.slot_of[i] = pos;
    __syncwarp();  // every lane has read next[e] before the lowest lane of its peers moves it
    if (e >= 0 && (peers & lt_mask) == 0) next[e] += __popc(peers);
    __syncwarp();
  }
}

// out[t][c] = (accumulate ? out : 0) + Σ w·y over the token's slots in increasing order (each
// term rounded, then added), or with choice_order in the token's choice order, fused (fmaf).
constexpr int kCombineThreads = 256;

__device__ __forceinline__ float CombineTerm(bool fused, float w, float y, float acc) {
  return fused ? fmaf(w, y, acc) : __fadd_rn(acc, __fmul_rn(w, y));
}

__global__ void __launch_bounds__(kCombineThreads) CombineKernel(const MoeCombineParams p, bool vec4) {
  PdlEnter();
  __shared__ int32_t s_slot[kMaxK];
  __shared__ float s_w[kMaxK];
  __shared__ int s_n;
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    // The token's valid slots, sorted by position (k <= 64: insertion sort by one thread) unless
    // choice_order.
    int n = 0;
    for (int j = 0; j < p.k; ++j) {
      const int32_t s = p.slot_of[t * p.k + j];
      if (s < 0) continue;
      const float w = p.weights[t * p.k + j];
      int at = n++;
      while (!p.choice_order && at > 0 && s_slot[at - 1] > s) {
        s_slot[at] = s_slot[at - 1];
        s_w[at] = s_w[at - 1];
        --at;
      }
      s_slot[at] = s;
      s_w[at] = w;
    }
    s_n = n;
  }
  __syncthreads();
  const int n = s_n;
  float* const out = p.out + t * p.out_stride;
  if (vec4) {
    const int64_t c = (static_cast<int64_t>(blockIdx.y) * kCombineThreads + threadIdx.x) * 4;
    if (c >= p.cols) return;
    float4 acc = p.accumulate ? *reinterpret_cast<const float4*>(out + c) : make_float4(0.f, 0.f, 0.f, 0.f);
    for (int u = 0; u < n; ++u) {
      const float w = s_w[u];
      const float4 v = __ldg(reinterpret_cast<const float4*>(p.y + static_cast<int64_t>(s_slot[u]) * p.y_stride + c));
      acc.x = CombineTerm(p.choice_order, w, v.x, acc.x);
      acc.y = CombineTerm(p.choice_order, w, v.y, acc.y);
      acc.z = CombineTerm(p.choice_order, w, v.z, acc.z);
      acc.w = CombineTerm(p.choice_order, w, v.w, acc.w);
    }
    *reinterpret_cast<float4*>(out + c) = acc;
  } else {
    const int64_t c = static_cast<int64_t>(blockIdx.y) * kCombineThreads + threadIdx.x;
    if (c >= p.cols) return;
    float acc = p.accumulate ? out[c] : 0.0f;
    for (int u = 0; u < n; ++u) {
      acc = CombineTerm(p.choice_order, s_w[u], p.y[static_cast<int64_t>(s_slot[u]) * p.y_stride + c], acc);
    }
    out[c] = acc;
  }
}

bool Aligned16(const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15u) == 0; }

int64_t Chunks(int64_t n_tokens, int64_t k) { return (n_tokens * k + kChunk - 1) / kChunk; }

}  // namespace

size_t MoeGroupWorkspaceBytes(int64_t n_tokens, int64_t k, int64_t n_experts) {
  if (n_tokens < 0 || k < 1 || n_experts < 1) return 0;
  const int64_t bytes = Chunks(n_tokens, k) * n_experts * 4;
  return static_cast<size_t>((bytes + 255) / 256 * 256);
}

cudaError_t MoeGroupTokens(const MoeGroupParams& p, cudaStream_t stream) {
  if (p.n_tokens < 0 || p.k < 1 || p.k > kMaxK || p.n_experts < 1 || p.n_experts > kMaxExperts) {
    return cudaErrorInvalidValue;
  }
  if (p.group_offsets == nullptr) return cudaErrorInvalidValue;
  if (p.pass_rows < 0 || (p.pass_rows > 0 && (p.n_passes == nullptr || p.pass_mat == nullptr ||
                                               p.pass_row0 == nullptr || p.pass_n == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (p.n_tokens * p.k > (int64_t{1} << 30)) return cudaErrorInvalidValue;
  if (p.n_tokens > 0 && (p.ids == nullptr || p.x_rows == nullptr || p.slot_of == nullptr || p.workspace == nullptr)) {
    return cudaErrorInvalidValue;
  }
  GroupArgs a{};
  a.ids = p.ids;
  a.n_flat = p.n_tokens * p.k;
  a.k = static_cast<int32_t>(p.k);
  a.n_experts = static_cast<int32_t>(p.n_experts);
  a.expert_begin = p.expert_begin;
  a.n_chunks = static_cast<int32_t>(Chunks(p.n_tokens, p.k));
  a.counts = static_cast<int32_t*>(p.workspace);
  a.group_offsets = p.group_offsets;
  a.x_rows = p.x_rows;
  a.slot_of = p.slot_of;
  a.pass_rows = p.pass_rows;
  a.n_passes = p.n_passes;
  a.pass_mat = p.pass_mat;
  a.pass_row0 = p.pass_row0;
  a.pass_n = p.pass_n;
  if (a.n_chunks > 0) {
    K3_CUDA_CHECK(LaunchKernel(CountKernel, a.n_chunks, kCountThreads, 0, stream, a));
  }
  // also writes the offsets (all 0) of an empty batch
  K3_CUDA_CHECK(LaunchKernel(ScanKernel, 1, kScanThreads, 0, stream, a));
  if (a.n_chunks > 0) {
    K3_CUDA_CHECK(LaunchKernel(PlaceKernel, a.n_chunks, 32, 0, stream, a));
  }
  return cudaSuccess;
}

cudaError_t MoeCombineGrouped(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.n_tokens < 0 || p.k < 1 || p.k > kMaxK || p.cols < 1 || p.out_stride < p.cols || p.y_stride < p.cols) {
    return cudaErrorInvalidValue;
  }
  if (p.n_tokens == 0) return cudaSuccess;
  if (p.y == nullptr || p.slot_of == nullptr || p.weights == nullptr || p.out == nullptr ||
      p.n_tokens > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  const bool vec4 = p.cols % 4 == 0 && p.y_stride % 4 == 0 && p.out_stride % 4 == 0 && Aligned16(p.y) && Aligned16(p.out);
  const int64_t per_block = vec4 ? 4 * kCombineThreads : kCombineThreads;
  const int64_t col_blocks = (p.cols + per_block - 1) / per_block;
  if (col_blocks > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>(col_blocks));
  K3_CUDA_CHECK(LaunchKernel(CombineKernel, grid, kCombineThreads, 0, stream, p, vec4));
  return cudaSuccess;
}

}  // namespace k3::cuda
