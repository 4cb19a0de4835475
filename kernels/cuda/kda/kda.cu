#include "kernels/cuda/kda/kda.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxDk = 128;
constexpr int kRowsPerWarp = kMaxDk / kWarps;  // 16
constexpr int kTileJ = 32;                     // value columns per block (one per lane)

// Block = (value tile of 32 columns, head, sequence). Column j of the state only ever mixes with
// itself (delta[j] depends on column j alone), so value tiles are independent. Lane = column,
// warp w = key rows [16w, 16w+16): each thread keeps its 16 state values in registers for the
// whole run of tokens (a prompt chunk in prefill, one token in decode); the two sums over i per
// token are reduced across warps through shared memory. Every state element is read once and
// written once per launch (coalesced 128-byte rows). Token t+1's k, q and decay are staged while
// token t is computed (two buffers), so a token costs two block barriers.
__global__ void __launch_bounds__(kWarps * 32) KdaDecodeKernel(const KdaDecodeParams p) {
  PdlEnter();
  __shared__ float sk[2][kMaxDk], sq[2][kMaxDk], sdecay[2][kMaxDk];
  __shared__ float red[2][kWarps][kTileJ];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t s = blockIdx.z, h = blockIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kTileJ + lane;
  const int dk = static_cast<int>(p.dk);
  const int64_t slot = p.slots != nullptr ? static_cast<int64_t>(p.slots[s]) : s;
  float* S = p.state + slot * p.state_slot_stride + h * p.dk * p.dv;
  auto stage = [&](int64_t t, int buf) {
    if (threadIdx.x < dk) {
      const int64_t o = (s * p.n_tokens + t) * p.qk_stride + h * p.dk + threadIdx.x;
      sk[buf][threadIdx.x] = p.k[o];
      sq[buf][threadIdx.x] = p.q[o];
      sdecay[buf][threadIdx.x] = expf(p.g[o]);
    }
  };
  const bool col_ok = j < p.dv;
  float st[kRowsPerWarp];
#pragma unroll
  for (int m = 0; m < kRowsPerWarp; ++m) {
    const int i = warp * kRowsPerWarp + m;
    st[m] = (i < dk && col_ok) ? S[static_cast<int64_t>(i) * p.dv + j] : 0.0f;
  }
  stage(0, 0);
  __syncthreads();
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const int b = static_cast<int>(t & 1);
    const int64_t row = s * p.n_tokens + t;
    // Loads of this token's scalars go out before the reductions wait on them.
    const float beta = p.beta[row * p.beta_stride + h];
    const float vj = col_ok ? p.v[row * p.v_stride + h * p.dv + j] : 0.0f;
    float part = 0.0f;
#pragma unroll
    for (int m = 0; m < kRowsPerWarp; ++m) {
      const int i = warp * kRowsPerWarp + m;
      if (i < dk) {
        st[m] *= sdecay[b][i];
        part = fmaf(st[m], sk[b][i], part);
      }
    }
    red[0][warp][lane] = part;
    if (t + 1 < p.n_tokens) stage(t + 1, b ^ 1);  // the other buffer: nobody reads it this token
    __syncthreads();
    float kv = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) kv += red[0][w][lane];
    const float delta = col_ok ? beta * (vj - kv) : 0.0f;
    float part2 = 0.0f;
#pragma unroll
    for (int m = 0; m < kRowsPerWarp; ++m) {
      const int i = warp * kRowsPerWarp + m;
      if (i < dk) {
        st[m] = fmaf(sk[b][i], delta, st[m]);
        part2 = fmaf(st[m], sq[b][i], part2);
      }
    }
    red[1][warp][lane] = part2;
    __syncthreads();
    if (warp == 0 && col_ok) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) o += red[1][w][lane];
      p.out[row * p.out_stride + h * p.dv + j] = p.scale * o;
    }
    // No third barrier: the next token writes red[0] / red[1] / the other stage buffer only after
    // passing a barrier that every reader of their previous contents reached after reading.
  }
#pragma unroll
  for (int m = 0; m < kRowsPerWarp; ++m) {
    const int i = warp * kRowsPerWarp + m;
    if (i < dk && col_ok) S[static_cast<int64_t>(i) * p.dv + j] = st[m];
  }
}

__device__ __forceinline__ float SoftplusF(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void KdaGateKernel(const KdaGateParams p) {
  PdlEnter();
  const int64_t t = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t d = p.n_heads * p.head_dim;
  if (c >= d) return;
  const float x = p.pre[t * p.pre_stride + c] + p.dt_bias[c];
  const float a = p.a[c / p.head_dim];
  p.g[t * p.g_stride + c] = p.has_lower_bound ? p.lower_bound * detail::SigmoidF(-(a * x)) : a * SoftplusF(x);
}

}  // namespace

cudaError_t KdaDecode(const KdaDecodeParams& p, cudaStream_t stream) {
  if (p.n_seqs < 0 || p.n_heads < 0 || p.n_tokens < 0 || p.dk < 1 || p.dk > kMaxDk || p.dv < 1) {
    return cudaErrorInvalidValue;
  }
  if (p.n_seqs == 0 || p.n_heads == 0 || p.n_tokens == 0) return cudaSuccess;
  if (p.state == nullptr || p.q == nullptr || p.k == nullptr || p.g == nullptr || p.v == nullptr ||
      p.beta == nullptr || p.out == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (p.n_seqs > 65535 || p.n_heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(detail::CeilDiv(p.dv, kTileJ)), static_cast<unsigned>(p.n_heads),
                  static_cast<unsigned>(p.n_seqs));
  K3_CUDA_CHECK(LaunchKernel(KdaDecodeKernel, grid, kWarps * 32, 0, stream, p));
  return cudaSuccess;
}

cudaError_t KdaGate(const KdaGateParams& p, cudaStream_t stream) {
  if (p.n_tokens < 0 || p.n_heads < 0 || p.head_dim < 1) return cudaErrorInvalidValue;
  const int64_t d = p.n_heads * p.head_dim;
  if (p.n_tokens == 0 || d == 0) return cudaSuccess;
  if (p.pre == nullptr || p.dt_bias == nullptr || p.a == nullptr || p.g == nullptr || p.n_tokens > 65535) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(detail::CeilDiv(d, 256)), static_cast<unsigned>(p.n_tokens));
  K3_CUDA_CHECK(LaunchKernel(KdaGateKernel, grid, 256, 0, stream, p));
  return cudaSuccess;
}

}  // namespace k3::cuda
