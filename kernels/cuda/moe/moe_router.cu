#include "kernels/cuda/moe/moe_router.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxExperts = 4096;
constexpr int kPerThread = kMaxExperts / kThreads;  // 8
constexpr int kMaxK = 64;

// (value, index) ordering of the selection: larger value first, then lower index.
__device__ __forceinline__ bool Better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

// A chosen expert's weight from its probability and the Σ of the chosen probabilities (in choice
// order): normalized (floored at 2^-14) and scaled as the CPU's RouteToken.
__device__ __forceinline__ float ChosenWeight(float prob, float sum, const MoeRouterParams& p) {
  float w = prob;
  if (p.normalize) w /= fmaxf(sum, 6.103515625e-5f);
  if (p.scale != 0.0f && p.scale != 1.0f) w *= p.scale;
  return w;
}

// One block per token. Probabilities and selection scores live in registers (8 per thread);
// top-k is k rounds of a block-wide arg-max (warp shuffles, then one shared-memory round), the
// winner being marked taken in its owner's registers.
__global__ void __launch_bounds__(kThreads) RouterKernel(const MoeRouterParams p) {
  PdlEnter();
  __shared__ float s_val[kThreads / 32];
  __shared__ int s_idx[kThreads / 32];
  __shared__ float s_scratch[32];
  __shared__ int s_ids[kMaxK];
  __shared__ float s_w[kMaxK];
  const int64_t t = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n = static_cast<int>(p.n_experts);
  const float* lg = p.logits + t * p.logits_stride;

  float prob[kPerThread], choice[kPerThread];
  float mx = -INFINITY;
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int e = tid + u * kThreads;
    prob[u] = e < n ? lg[e] : -INFINITY;
    mx = fmaxf(mx, prob[u]);
  }
  if (p.sigmoid) {
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) prob[u] = detail::SigmoidF(prob[u]);  // sigmoid(-inf) = 0, unused
  } else {
    // softmax: block max, then exp and block sum
    mx = detail::WarpMax(mx);
    if (lane == 0) s_scratch[warp] = mx;
    __syncthreads();
    mx = lane < kThreads / 32 ? s_scratch[lane] : -INFINITY;
    mx = detail::WarpMax(mx);
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      prob[u] = (tid + u * kThreads) < n ? expf(prob[u] - mx) : 0.0f;
      sum += prob[u];
    }
    sum = detail::BlockSum(sum, s_scratch);
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) prob[u] /= sum;
  }
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int e = tid + u * kThreads;
    choice[u] = e < n ? prob[u] + (p.selection_bias != nullptr ? p.selection_bias[e] : 0.0f) : -INFINITY;
  }

  for (int r = 0; r < p.k; ++r) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int e = tid + u * kThreads;
      if (e < n && Better(choice[u], e, bv, bi)) {
        bv = choice[u];
        bi = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(detail::kFullMask, bv, o);
      const int oi = __shfl_xor_sync(detail::kFullMask, bi, o);
      if (Better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      s_val[warp] = bv;
      s_idx[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
      bv = lane < kThreads / 32 ? s_val[lane] : -INFINITY;
      bi = lane < kThreads / 32 ? s_idx[lane] : 0x7fffffff;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(detail::kFullMask, bv, o);
        const int oi = __shfl_xor_sync(detail::kFullMask, bi, o);
        if (Better(ov, oi, bv, bi)) {
          bv = ov;
          bi = oi;
        }
      }
      if (lane == 0) s_ids[r] = bi;
    }
    __syncthreads();
    const int win = s_ids[r];
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      if (tid + u * kThreads == win) {
        choice[u] = -INFINITY;
        s_w[r] = prob[u];
      }
    }
    // s_val/s_idx are rewritten next round only after everyone passed the barrier above.
  }
  __syncthreads();
  if (tid == 0) {
    float sum = 0.0f;
    for (int r = 0; r < p.k; ++r) sum += s_w[r];
    for (int r = 0; r < p.k; ++r) {
      p.ids[t * p.k + r] = s_ids[r];
      p.weights[t * p.k + r] = ChosenWeight(s_w[r], sum, p);
    }
  }
}


// Up to kSortExperts experts: one block per token, one expert per thread (the block a power of two
// >= 32), a bitonic sort of (selection score, index) into the selection order (score descending,
// ties to the lower index: a strict total order, so the first k are exactly the k rounds of
// arg-max of RouterKernel), partners within a warp exchanged by shuffles, across warps through
// shared memory (15 of the 55 stages at 1024, one barrier each). K3's 896 experts, top-16: the
// one-warp-per-token kernel's 16 rounds of 28-value scans took 15 us per token (ncu, H200).
constexpr int kSortExperts = 1024;

// The one-expert-per-thread kernels' start: thread tid's probability (0 at padding slots tid >=
// n_experts) by sigmoid, or by softmax over the block (block max, then exp and block sum: a fixed
// order, the same for every batch). Every thread of the block must call it.
__device__ __forceinline__ float ThreadExpertProb(const MoeRouterParams& p, int64_t t, float* s_scratch) {
  const int tid = threadIdx.x, lane = tid & 31, N = blockDim.x;
  const bool real = tid < p.n_experts;
  const float x = real ? p.logits[t * p.logits_stride + tid] : -INFINITY;
  if (p.sigmoid) return real ? detail::SigmoidF(x) : 0.0f;
  float mx = detail::WarpMax(x);
  if (lane == 0) s_scratch[tid >> 5] = mx;
  __syncthreads();
  mx = lane < (N >> 5) ? s_scratch[lane] : -INFINITY;
  mx = detail::WarpMax(mx);
  const float e = real ? expf(x - mx) : 0.0f;
  return e / detail::BlockSum(e, s_scratch);
}

__global__ void __launch_bounds__(kSortExperts) RouterSortKernel(const MoeRouterParams p) {
  PdlEnter();
  __shared__ float s_prob[kSortExperts];
  __shared__ float s_v[2][kSortExperts];
  __shared__ int s_i[2][kSortExperts];
  __shared__ float s_scratch[32];
  __shared__ int s_sel[kMaxK];
  const int64_t t = blockIdx.x;
  const int tid = threadIdx.x, N = blockDim.x;
  const bool real = tid < p.n_experts;
  const float prob = ThreadExpertProb(p, t, s_scratch);
  if (real) s_prob[tid] = prob;
  float v = real ? prob + (p.selection_bias != nullptr ? p.selection_bias[tid] : 0.0f) : -INFINITY;
  int i = tid;  // padding slots: -inf at indices >= n, after every real expert
  int buf = 0;
  for (int k = 2; k <= N; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      float ov;
      int oi;
      if (j >= 32) {
        // two buffers: a slot is rewritten two smem stages later, after a barrier every reader passed
        s_v[buf][tid] = v;
        s_i[buf][tid] = i;
        __syncthreads();
        ov = s_v[buf][tid ^ j];
        oi = s_i[buf][tid ^ j];
        buf ^= 1;
      } else {
        ov = __shfl_xor_sync(detail::kFullMask, v, j);
        oi = __shfl_xor_sync(detail::kFullMask, i, j);
      }
      // within each run of k the lower slot keeps the better entry when the run is sorted
      // better-first ((tid & k) == 0; always so for the last run), the worse one otherwise
      const bool keep_better = ((tid & j) == 0) == ((tid & k) == 0);
      if (Better(ov, oi, v, i) == keep_better) {
        v = ov;
        i = oi;
      }
    }
  }
  if (tid < p.k) s_sel[tid] = i;
  __syncthreads();
  if (tid == 0) {
    float sum = 0.0f;  // Σ of the chosen probabilities in choice order, as RouterKernel
    for (int r = 0; r < p.k; ++r) sum += s_prob[s_sel[r]];
    for (int r = 0; r < p.k; ++r) {
      p.ids[t * p.k + r] = s_sel[r];
      p.weights[t * p.k + r] = ChosenWeight(s_prob[s_sel[r]], sum, p);
    }
  }
}

// Up to kSortExperts experts and k <= 32 (K3: 896, top-16): one block per token, one expert per
// thread as RouterSortKernel, but only the top 32 are ever ordered: each warp sorts its 32
// (selection score, index) pairs by shuffles (15 stages, no barrier), then a merge tree keeps the
// best 32 of two sorted lists per warp (the larger of a_i and b_(31-i) is a bitonic sequence of
// them, sorted by 5 more stages), halving the lists per level through shared memory: 1 + log2(warps)
// barriers instead of the full sort's 15, and the later levels on few warps. The same strict order
// as RouterKernel (score descending, ties to the lower index), so the same k experts in the same
// order; the weights summed in choice order as there. RouterSortKernel took 11 us per token (ncu,
// H200, K3's shape).
constexpr int kTopKMax = 32;

__global__ void __launch_bounds__(kSortExperts) RouterTopKKernel(const MoeRouterParams p) {
  PdlEnter();
  __shared__ float s_prob[kSortExperts];
  __shared__ float s_v[2][kSortExperts];
  __shared__ int s_i[2][kSortExperts];
  __shared__ float s_scratch[32];
  const int64_t t = blockIdx.x;
  const int tid = threadIdx.x, N = blockDim.x, lane = tid & 31, warp = tid >> 5;
  const bool real = tid < p.n_experts;
  const float prob = ThreadExpertProb(p, t, s_scratch);
  if (real) s_prob[tid] = prob;
  float v = real ? prob + (p.selection_bias != nullptr ? p.selection_bias[tid] : 0.0f) : -INFINITY;
  int i = tid;  // padding slots: -inf at indices >= n, after every real expert
  // the warp's 32 pairs sorted better-first (runs of k alternate direction until the last)
  for (int k = 2; k <= 32; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      const float ov = __shfl_xor_sync(detail::kFullMask, v, j);
      const int oi = __shfl_xor_sync(detail::kFullMask, i, j);
      const bool keep_better = ((lane & j) == 0) == ((lane & k) == 0);  // k = 32: always better-first
      if (Better(ov, oi, v, i) == keep_better) {
        v = ov;
        i = oi;
      }
    }
  }
  int buf = 0;
  s_v[buf][tid] = v;
  s_i[buf][tid] = i;
  __syncthreads();
  for (int lists = N >> 5; lists > 1; lists >>= 1) {
    // warp w < lists/2: the best 32 of lists 2w and 2w+1 (both sorted better-first), sorted
    if (warp < (lists >> 1)) {
      const int a = (2 * warp) * 32 + lane, b = (2 * warp + 1) * 32 + (31 - lane);
      const float av = s_v[buf][a], bv = s_v[buf][b];
      const int ai = s_i[buf][a], bi = s_i[buf][b];
      const bool take_a = Better(av, ai, bv, bi);
      v = take_a ? av : bv;
      i = take_a ? ai : bi;
      for (int j = 16; j > 0; j >>= 1) {
        const float ov = __shfl_xor_sync(detail::kFullMask, v, j);
        const int oi = __shfl_xor_sync(detail::kFullMask, i, j);
        if (Better(ov, oi, v, i) == ((lane & j) == 0)) {
          v = ov;
          i = oi;
        }
      }
      if (lists > 2) {
        s_v[buf ^ 1][warp * 32 + lane] = v;
        s_i[buf ^ 1][warp * 32 + lane] = i;
      }
    }
    buf ^= 1;
    if (lists > 2) __syncthreads();  // the last level's result stays in warp 0's registers
  }
  if (warp != 0) return;
  // lane r holds choice r; Σ of the chosen probabilities in choice order, as RouterKernel
  const float w_r = lane < p.k ? s_prob[i] : 0.0f;
  float sum = 0.0f;
  for (int r = 0; r < p.k; ++r) sum += __shfl_sync(detail::kFullMask, w_r, r);
  if (lane < p.k) {
    p.ids[t * p.k + lane] = i;
    p.weights[t * p.k + lane] = ChosenWeight(w_r, sum, p);
  }
}

}  // namespace

cudaError_t MoeRoute(const MoeRouterParams& p, cudaStream_t stream) {
  if (p.n_tokens < 0 || p.n_experts < 1 || p.n_experts > kMaxExperts || p.k < 1 || p.k > kMaxK || p.k > p.n_experts) {
    return cudaErrorInvalidValue;
  }
  if (p.n_tokens == 0) return cudaSuccess;
  if (p.logits == nullptr || p.ids == nullptr || p.weights == nullptr || p.logits_stride < p.n_experts ||
      p.n_tokens > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  if (p.n_experts <= kSortExperts) {
    int threads = 32;
    while (threads < p.n_experts) threads *= 2;
    if (p.k <= kTopKMax) {
      K3_CUDA_CHECK(LaunchKernel(RouterTopKKernel, static_cast<unsigned>(p.n_tokens), threads, 0, stream, p));
    } else {
      K3_CUDA_CHECK(LaunchKernel(RouterSortKernel, static_cast<unsigned>(p.n_tokens), threads, 0, stream, p));
    }
  } else {
    K3_CUDA_CHECK(LaunchKernel(RouterKernel, static_cast<unsigned>(p.n_tokens), kThreads, 0, stream, p));
  }
  K3_CUDA_CHECK(cudaGetLastError());
  return cudaSuccess;
}

}  // namespace k3::cuda
