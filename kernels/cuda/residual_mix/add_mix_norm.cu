#include "kernels/cuda/residual_mix/add_mix_norm.h"

#include <cooperative_groups.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kCluster = 8;  // blocks per token: a thread-block cluster (portable size)
constexpr int kPer = 4;      // values of the block's columns per thread, in registers throughout
constexpr int kMaxThreads = 256;
constexpr int kMaxWarps = kMaxThreads / 32;
constexpr int kVecs = kResidualMixMaxCheckpoints + 1;  // checkpoint slots 0..7, x' in slot 8
constexpr int kX = kVecs - 1;

namespace cg = cooperative_groups;

// Each warp's 2·kVecs sums (Σc², Σc·w per vector) reduced over its lanes (one butterfly, all
// values per round), lane 0's written to red[warp].
__device__ __forceinline__ void WarpSumsToShared(float (&sums)[2 * kVecs], float (*red)[2 * kVecs], int warp,
                                                 int lane) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int j = 0; j < 2 * kVecs; ++j) sums[j] += __shfl_xor_sync(detail::kFullMask, sums[j], o);
  }
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < 2 * kVecs; ++j) red[warp][j] = sums[j];
  }
}

// The mix's weights from the token's sums fin = (Σc², Σc·w) per vector: softmax over the scores
// s = Σc·w · rsqrt(Σc²/n + eps) of the checkpoints and x', max-shifted, summed in ResidualMix's
// order (checkpoints, then x'; the unused slots add exact zeros).
__device__ __forceinline__ void MixProbs(const float* fin, int nc, float inv_n, float eps, float (&prob)[kVecs]) {
  float mx = -INFINITY;
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const bool used = v < nc || v == kX;
    prob[v] = used ? fin[2 * v + 1] * rsqrtf(fin[2 * v] * inv_n + eps) : -INFINITY;
    mx = fmaxf(mx, prob[v]);
  }
  float sum = 0.0f;
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const bool used = v < nc || v == kX;
    prob[v] = used ? expf(prob[v] - mx) : 0.0f;
    sum += prob[v];
  }
#pragma unroll
  for (int v = 0; v < kVecs; ++v) prob[v] /= sum;
}

// Cluster of kCluster blocks = one token; block r of it owns columns [r·cw, (r+1)·cw), thread j of
// the block columns r·cw + j + k·T (k < kPer, T = blockDim.x). One pass over the inputs: x' and
// every checkpoint's values stay in registers. Each block reduces its (Σc², Σc·w) per vector, the
// blocks' partials are summed through distributed shared memory in rank order (the same sums, so
// the same softmax, in every block), the blend is formed from the registers, and Σm² is reduced the
// same way. The block is a few warps, so its time is its longest dependent chain: the 18 sums are
// reduced together (one butterfly, all values per round), unused slots holding zeros, and every
// loop over warps or ranks is unrolled so its loads are in flight together. Still ~9 us per call
// under ncu (H200, 7168 wide, batch 1: 8 SMs active ~7 us, ~10 cycles per issued instruction); a
// first version, one block per token, was slower than the unfused launches in the graph.
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kMaxThreads) AddMixNormKernel(const AddMixNormParams p) {
  PdlEnter();
  __shared__ float red[kMaxWarps][2 * kVecs];
  __shared__ float part[2 * kVecs];  // this block's sums, read by the whole cluster
  __shared__ float fin[2 * kVecs];
  __shared__ float part2;
  __shared__ float fin2;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t t = blockIdx.y;
  const int tid = threadIdx.x, T = blockDim.x, lane = tid & 31, warp = tid >> 5, nwarps = T >> 5;
  const int nc = p.n_ckpt;
  const int64_t cw = (p.n + kCluster - 1) / kCluster, lo = rank * cw, hi = min(p.n, lo + cw);
  float* x = p.x + t * p.x_stride;
  const float* d0 = p.d0 != nullptr ? p.d0 + t * p.d_stride : nullptr;
  const float* d1 = p.d1 != nullptr ? p.d1 + t * p.d_stride : nullptr;
  auto col = [&](int k) { return lo + tid + static_cast<int64_t>(k) * T; };
  float xv[kPer], wv[kPer], bv[kVecs - 1][kPer];
#pragma unroll
  for (int v = 0; v < kVecs - 1; ++v) {
    const float* b = v < nc ? p.bank[v] + t * p.bank_stride : nullptr;
#pragma unroll
    for (int k = 0; k < kPer; ++k) bv[v][k] = v < nc && col(k) < hi ? b[col(k)] : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int64_t i = col(k);
    float v = 0.0f, w = 0.0f;
    if (i < hi) {
      w = p.score_w[i];
      if (d0 != nullptr) {
        float d = d0[i];
        if (d1 != nullptr) d += d1[i];
        v = p.restart ? d : x[i] + d;
      } else {
        v = x[i];
      }
    }
    xv[k] = v;
    wv[k] = w;
  }
  if (d0 != nullptr || p.bank_out != nullptr) {
    float* bo = p.bank_out != nullptr ? p.bank_out + t * p.bank_stride : nullptr;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t i = col(k);
      if (i < hi) {
        if (d0 != nullptr) x[i] = xv[k];
        if (bo != nullptr) bo[i] = xv[k];
      }
    }
  }
  // sums[2v] = Σc², sums[2v+1] = Σc·w of vector v over the thread's columns, then over the warp
  float sums[2 * kVecs];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    float ss = 0.0f, dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const float c = v == kX ? xv[k] : bv[v][k];
      ss = fmaf(c, c, ss);
      dot = fmaf(c, wv[k], dot);
    }
    sums[2 * v] = ss;
    sums[2 * v + 1] = dot;
  }
  WarpSumsToShared(sums, red, warp, lane);
  __syncthreads();
  if (tid < 2 * kVecs) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kMaxWarps; ++w) {
      if (w < nwarps) s += red[w][tid];
    }
    part[tid] = s;
  }
  cluster.sync();  // every block's part is written
  if (tid < 2 * kVecs) {
    float r8[kCluster];
#pragma unroll
    for (int r = 0; r < kCluster; ++r) r8[r] = cluster.map_shared_rank(part, r)[tid];
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < kCluster; ++r) s += r8[r];
    fin[tid] = s;
  }
  __syncthreads();
  const float inv_n = 1.0f / static_cast<float>(p.n);
  float prob[kVecs];
  MixProbs(fin, nc, inv_n, p.eps, prob);
  // blend: p_x·x' first, then the checkpoints in order (ResidualMix's order)
  float m[kPer];
  float s2 = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    m[k] = prob[kX] * xv[k];
#pragma unroll
    for (int v = 0; v < kVecs - 1; ++v) {
      if (v < nc) m[k] = fmaf(prob[v], bv[v][k], m[k]);
    }
    s2 = fmaf(m[k], m[k], s2);  // padding columns: every term 0
  }
  s2 = detail::WarpSum(s2);
  if (lane == 0) red[warp][0] = s2;  // red's sums were all read before the cluster barrier
  __syncthreads();
  if (tid == 0) {
    float tot = 0.0f;
#pragma unroll
    for (int w = 0; w < kMaxWarps; ++w) {
      if (w < nwarps) tot += red[w][0];
    }
    part2 = tot;
  }
  cluster.sync();  // every block's part2 is written (and every read of part is done)
  if (tid == 0) {
    float r8[kCluster];
#pragma unroll
    for (int r = 0; r < kCluster; ++r) r8[r] = *cluster.map_shared_rank(&part2, r);
    float tot = 0.0f;
#pragma unroll
    for (int r = 0; r < kCluster; ++r) tot += r8[r];
    fin2 = tot;
  }
  __syncthreads();
  const float scale = rsqrtf(fin2 * inv_n + p.eps);
  float* y = p.y + t * p.y_stride;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int64_t i = col(k);
    if (i < hi) y[i] = m[k] * scale * p.norm_w[i];
  }
  cluster.sync();  // no block leaves while another may still read its part2
}

// Prefill chunks (many tokens): one block of 256 threads per token, no cluster. The cluster
// kernel above spreads a token over 8 SMs for a decode step's few tokens; at thousands of tokens
// its chain of cluster barriers made it ~3.7x slower than its bytes (H100, 4096 tokens: 740 us a
// call). Here thread j keeps x' at columns j + 256·k in registers; each checkpoint row is read
// for its sums and again for the blend (the second read mostly from L2); the same order of
// operations per value as above (blend: p_x·x' first, then the checkpoints in order).
constexpr int kRowThreads = 256;
constexpr int kRowPer = static_cast<int>(kAddMixNormMaxWidth / kRowThreads);  // 32

__global__ void __launch_bounds__(kRowThreads, 2) AddMixNormRowsKernel(const AddMixNormParams p) {
  PdlEnter();
  __shared__ float red[kRowThreads / 32][2 * kVecs];
  __shared__ float fin[2 * kVecs];
  __shared__ float tot_scratch[32];  // detail::BlockSum's
  const int64_t t = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nc = p.n_ckpt;
  float* x = p.x + t * p.x_stride;
  const float* d0 = p.d0 != nullptr ? p.d0 + t * p.d_stride : nullptr;
  const float* d1 = p.d1 != nullptr ? p.d1 + t * p.d_stride : nullptr;
  float* bo = p.bank_out != nullptr ? p.bank_out + t * p.bank_stride : nullptr;
  float xv[kRowPer];
  float sums[2 * kVecs];
#pragma unroll
  for (int j = 0; j < 2 * kVecs; ++j) sums[j] = 0.0f;
#pragma unroll
  for (int k = 0; k < kRowPer; ++k) {
    const int64_t i = tid + static_cast<int64_t>(k) * kRowThreads;
    float v = 0.0f;
    if (i < p.n) {
      if (d0 != nullptr) {
        float d = d0[i];
        if (d1 != nullptr) d += d1[i];
        v = p.restart ? d : x[i] + d;
        x[i] = v;
      } else {
        v = x[i];
      }
      if (bo != nullptr) bo[i] = v;
      const float w = p.score_w[i];
      sums[2 * kX] = fmaf(v, v, sums[2 * kX]);
      sums[2 * kX + 1] = fmaf(v, w, sums[2 * kX + 1]);
    }
    xv[k] = v;
  }
#pragma unroll
  for (int c = 0; c < kVecs - 1; ++c) {
    if (c >= nc) break;
    const float* b = p.bank[c] + t * p.bank_stride;
    float ss = 0.0f, dot = 0.0f;
#pragma unroll 8
    for (int k = 0; k < kRowPer; ++k) {
      const int64_t i = tid + static_cast<int64_t>(k) * kRowThreads;
      if (i < p.n) {
        const float v = b[i];
        ss = fmaf(v, v, ss);
        dot = fmaf(v, p.score_w[i], dot);
      }
    }
    sums[2 * c] = ss;
    sums[2 * c + 1] = dot;
  }
  WarpSumsToShared(sums, red, warp, lane);
  __syncthreads();
  if (tid < 2 * kVecs) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kRowThreads / 32; ++w) s += red[w][tid];
    fin[tid] = s;
  }
  __syncthreads();
  const float inv_n = 1.0f / static_cast<float>(p.n);
  float prob[kVecs];
  MixProbs(fin, nc, inv_n, p.eps, prob);
  // blend into xv (p_x·x' first, then the checkpoints in order), and Σm²
#pragma unroll
  for (int k = 0; k < kRowPer; ++k) xv[k] *= prob[kX];
#pragma unroll
  for (int c = 0; c < kVecs - 1; ++c) {
    if (c >= nc) break;
    const float* b = p.bank[c] + t * p.bank_stride;
#pragma unroll
    for (int k = 0; k < kRowPer; ++k) {
      const int64_t i = tid + static_cast<int64_t>(k) * kRowThreads;
      if (i < p.n) xv[k] = fmaf(prob[c], b[i], xv[k]);
    }
  }
  float s2 = 0.0f;
#pragma unroll
  for (int k = 0; k < kRowPer; ++k) s2 = fmaf(xv[k], xv[k], s2);  // padding columns hold 0
  const float scale = rsqrtf(detail::BlockSum(s2, tot_scratch) * inv_n + p.eps);
  float* y = p.y + t * p.y_stride;
#pragma unroll
  for (int k = 0; k < kRowPer; ++k) {
    const int64_t i = tid + static_cast<int64_t>(k) * kRowThreads;
    if (i < p.n) y[i] = xv[k] * scale * p.norm_w[i];
  }
}

}  // namespace

cudaError_t AddMixNorm(const AddMixNormParams& p, cudaStream_t stream) {
  if (p.n_tokens < 0 || p.n < 1 || p.n > kAddMixNormMaxWidth || p.n_ckpt < 0 ||
      p.n_ckpt > kResidualMixMaxCheckpoints) {
    return cudaErrorInvalidValue;
  }
  if (p.n_tokens == 0) return cudaSuccess;
  if (p.n_tokens > 0x7fffffff || p.x == nullptr || p.y == nullptr || p.score_w == nullptr || p.norm_w == nullptr ||
      p.x_stride < p.n || p.y_stride < p.n) {
    return cudaErrorInvalidValue;
  }
  if ((p.d0 == nullptr && (p.d1 != nullptr || p.restart)) || (p.d0 != nullptr && p.d_stride < p.n)) {
    return cudaErrorInvalidValue;
  }
  if ((p.n_ckpt > 0 || p.bank_out != nullptr) && p.bank_stride < p.n) return cudaErrorInvalidValue;
  for (int i = 0; i < p.n_ckpt; ++i) {
    if (p.bank[i] == nullptr) return cudaErrorInvalidValue;
  }
  if (p.n_tokens >= kAddMixNormRowKernelMinTokens) {
    K3_CUDA_CHECK(LaunchKernel(AddMixNormRowsKernel, dim3(static_cast<unsigned>(p.n_tokens)), kRowThreads, 0, stream, p));
    return cudaSuccess;
  }
  const int64_t per_thread = detail::CeilDiv(detail::CeilDiv(p.n, kCluster), kPer);
  const int threads = static_cast<int>(detail::CeilDiv(per_thread, 32) * 32);
  K3_CUDA_CHECK(LaunchKernel(AddMixNormKernel, dim3(kCluster, static_cast<unsigned>(p.n_tokens)), threads, 0, stream, p));
  return cudaSuccess;
}

}  // namespace k3::cuda
