#include "kernels/cuda/moe/moe_router.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"

namespace k3::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxExperts = 4096;
constexpr int kPerThread = kMaxExperts / kThreads;  // 8
constexpr int kMaxK = 64;

// (value, index) ordering of the selection: larger value first, then lower index.
__device__ __forceinline__ bool Better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

// One block per token. Probabilities and selection scores live in registers (8 per thread);
// top-k is k rounds of a block-wide arg-max (warp shuffles, then one shared-memory round), the
// winner being marked taken in its owner's registers.
__global__ void __launch_bounds__(kThreads) RouterKernel(const MoeRouterParams p) {
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
    const float denom = p.normalize ? fmaxf(sum, 6.103515625e-5f) : 1.0f;
    const bool scaled = p.scale != 0.0f && p.scale != 1.0f;
    for (int r = 0; r < p.k; ++r) {
      float w = s_w[r];
      if (p.normalize) w /= denom;
      if (scaled) w *= p.scale;
      p.ids[t * p.k + r] = s_ids[r];
      p.weights[t * p.k + r] = w;
    }
  }
}


// Up to kWarpExperts experts: one warp per token (8 tokens per block), 32 values per lane in
// registers, k rounds of a warp arg-max with no block barrier. The block kernel's k rounds of two
// __syncthreads each took ~17 us per token for K3's 896 experts, top-16.
constexpr int kWarpExperts = 1024;
constexpr int kWarpPer = kWarpExperts / 32;
constexpr int kWarpTokens = 8;  // warps (tokens) per block

__global__ void __launch_bounds__(32 * kWarpTokens) RouterWarpKernel(const MoeRouterParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpTokens + (threadIdx.x >> 5);
  if (t >= p.n_tokens) return;
  const int n = static_cast<int>(p.n_experts);
  const float* lg = p.logits + t * p.logits_stride;
  float prob[kWarpPer], choice[kWarpPer];
  float mx = -INFINITY;
#pragma unroll
  for (int u = 0; u < kWarpPer; ++u) {
    const int e = lane + 32 * u;
    prob[u] = e < n ? lg[e] : -INFINITY;
    mx = fmaxf(mx, prob[u]);
  }
  if (p.sigmoid) {
#pragma unroll
    for (int u = 0; u < kWarpPer; ++u) prob[u] = detail::SigmoidF(prob[u]);
  } else {
    mx = detail::WarpMax(mx);
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < kWarpPer; ++u) {
      prob[u] = (lane + 32 * u) < n ? expf(prob[u] - mx) : 0.0f;
      sum += prob[u];
    }
    sum = detail::WarpSum(sum);
#pragma unroll
    for (int u = 0; u < kWarpPer; ++u) prob[u] /= sum;
  }
#pragma unroll
  for (int u = 0; u < kWarpPer; ++u) {
    const int e = lane + 32 * u;
    choice[u] = e < n ? prob[u] + (p.selection_bias != nullptr ? p.selection_bias[e] : 0.0f) : -INFINITY;
  }
  float wsum = 0.0f;  // lane 0: Σ of the chosen probabilities, in choice order (as the block kernel)
  int32_t* ids = p.ids + t * p.k;
  float* weights = p.weights + t * p.k;
  for (int r = 0; r < p.k; ++r) {
    float bv = -INFINITY, bp = 0.0f;
    int bi = 0x7fffffff;
#pragma unroll
    for (int u = 0; u < kWarpPer; ++u) {
      const int e = lane + 32 * u;
      if (e < n && Better(choice[u], e, bv, bi)) {
        bv = choice[u];
        bi = e;
        bp = prob[u];
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(detail::kFullMask, bv, o);
      const int oi = __shfl_xor_sync(detail::kFullMask, bi, o);
      const float op = __shfl_xor_sync(detail::kFullMask, bp, o);
      if (Better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
        bp = op;
      }
    }
#pragma unroll
    for (int u = 0; u < kWarpPer; ++u) {
      if (lane + 32 * u == bi) choice[u] = -INFINITY;
    }
    if (lane == 0) {  // raw probability now, normalized below (lane 0 re-reads its own writes)
      ids[r] = bi;
      weights[r] = bp;
      wsum += bp;
    }
  }
  if (lane == 0) {
    const float denom = p.normalize ? fmaxf(wsum, 6.103515625e-5f) : 1.0f;
    const bool scaled = p.scale != 0.0f && p.scale != 1.0f;
    for (int r = 0; r < p.k; ++r) {
      float w = weights[r];
      if (p.normalize) w /= denom;
      if (scaled) w *= p.scale;
      weights[r] = w;
    }
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
  if (p.n_experts <= kWarpExperts) {
    RouterWarpKernel<<<static_cast<unsigned>(detail::CeilDiv(p.n_tokens, kWarpTokens)), 32 * kWarpTokens, 0, stream>>>(p);
  } else {
    RouterKernel<<<static_cast<unsigned>(p.n_tokens), kThreads, 0, stream>>>(p);
  }
  K3_CUDA_CHECK(cudaGetLastError());
  return cudaSuccess;
}

}  // namespace k3::cuda
