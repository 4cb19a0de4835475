#include "kernels/cuda/kda/kda.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kMaxDk = 128;
constexpr int kRowGroups = 4;                      // lanes sharing one value column
constexpr int kRowsPerLane = kMaxDk / kRowGroups;  // 32 key rows of the state per thread
constexpr int kColsPerWarp = 32 / kRowGroups;      // 8
constexpr int kWarps = 4;
constexpr int kTileJ = kWarps * kColsPerWarp;  // 32 value columns per block
constexpr int kChunk = 8;                      // tokens staged per shared buffer

// One chunk of tokens of one (sequence, head), as the block's value tile needs them. Rows i >= dk
// of k, q and decay are zero (so the state rows there stay zero with no test in the token loop).
struct __align__(16) KdaStage {
  float k[kChunk][kMaxDk];
  float q[kChunk][kMaxDk];
  float decay[kChunk][kMaxDk];  // g as loaded, then exp(g) in place
  float v[kChunk][kTileJ];
  float beta[kChunk];
};

__device__ __forceinline__ void CpAsync4(float* dst, const float* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Tokens of the chunk that starts at token t0.
__device__ __forceinline__ int ChunkTokens(int64_t n_tokens, int64_t t0) {
  return n_tokens - t0 < kChunk ? static_cast<int>(n_tokens - t0) : kChunk;
}

// Sum over the kRowGroups lanes of one column (lane bits 3..4: lanes c, c+8, c+16, c+24).
__device__ __forceinline__ float ColumnSum(float v) {
  v += __shfl_xor_sync(detail::kFullMask, v, 8);
  v += __shfl_xor_sync(detail::kFullMask, v, 16);
  return v;
}

// Block = (value tile of 32 columns, head, sequence), 4 warps. Column j of the state only ever
// mixes with itself (delta[j] depends on column j alone), so value tiles are independent. Warp w
// owns columns [8w, 8w+8) of the tile: lane = (row group r = lane >> 3, column c = lane & 7), and
// the thread keeps state rows [32r, 32r+32) of its column in registers for the whole run of tokens
// (a prompt chunk in prefill, one token in decode). The two sums over i per token are reduced over
// the column's 4 lanes by shuffles, so warps never wait on each other inside a chunk: the only
// block barrier is once per kChunk tokens, when the next chunk's k, q, g, v and beta (cp.async,
// issued a chunk ahead) become visible. Every state element is read once and written once per
// launch; a warp's accesses to a state row cover one full 32-byte sector.
__global__ void __launch_bounds__(kWarps * 32) KdaRunKernel(const KdaDecodeParams p) {
  PdlEnter();
  __shared__ KdaStage stage[2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = lane >> 3, jt = warp * kColsPerWarp + (lane & 7);
  const int64_t s = blockIdx.z, h = blockIdx.y;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kTileJ, j = j0 + jt;
  const int dk = static_cast<int>(p.dk);
  const int64_t slot = p.slots != nullptr ? static_cast<int64_t>(p.slots[s]) : s;
  float* S = p.state + slot * p.state_slot_stride + h * p.dk * p.dv;
  const bool col_ok = j < p.dv;
  const int64_t n_chunks = (p.n_tokens + kChunk - 1) / kChunk;

  // Each thread stages elements e = threadIdx.x + n * blockDim.x of the chunk, and later turns
  // the same elements' g into exp(g): its own cp.async copies are visible to it after the wait.
  auto issue = [&](int64_t c, int buf) {
    KdaStage& st = stage[buf];
    const int64_t t0 = c * kChunk;
    const int nt = ChunkTokens(p.n_tokens, t0);
    for (int e = threadIdx.x; e < kChunk * kMaxDk; e += kWarps * 32) {
      const int tt = e / kMaxDk, i = e % kMaxDk;
      if (tt >= nt) break;
      if (i < dk) {
        const int64_t o = (s * p.n_tokens + t0 + tt) * p.qk_stride + h * p.dk + i;
        CpAsync4(&st.k[tt][i], p.k + o);
        CpAsync4(&st.q[tt][i], p.q + o);
        CpAsync4(&st.decay[tt][i], p.g + o);
      } else {
        st.k[tt][i] = 0.0f;
        st.q[tt][i] = 0.0f;
        st.decay[tt][i] = 0.0f;
      }
    }
    for (int e = threadIdx.x; e < kChunk * kTileJ; e += kWarps * 32) {
      const int tt = e / kTileJ, jj = e % kTileJ;
      if (tt >= nt) break;
      const int64_t row = s * p.n_tokens + t0 + tt;
      if (j0 + jj < p.dv) {
        CpAsync4(&st.v[tt][jj], p.v + row * p.v_stride + h * p.dv + j0 + jj);
      } else {
        st.v[tt][jj] = 0.0f;
      }
    }
    if (threadIdx.x < nt)
      CpAsync4(&st.beta[threadIdx.x], p.beta + (s * p.n_tokens + t0 + threadIdx.x) * p.beta_stride + h);
    CpAsyncCommit();
  };
  auto exp_decay = [&](int64_t c, int buf) {
    KdaStage& st = stage[buf];
    const int nt = ChunkTokens(p.n_tokens, c * kChunk);
    for (int e = threadIdx.x; e < kChunk * kMaxDk; e += kWarps * 32) {
      const int tt = e / kMaxDk, i = e % kMaxDk;
      if (tt >= nt) break;
      if (i < dk) st.decay[tt][i] = expf(st.decay[tt][i]);
    }
  };

  issue(0, 0);
  float st[kRowsPerLane];
#pragma unroll
  for (int m = 0; m < kRowsPerLane; ++m) {
    const int i = r * kRowsPerLane + m;
    st[m] = (i < dk && col_ok) ? S[static_cast<int64_t>(i) * p.dv + j] : 0.0f;
  }
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int b = static_cast<int>(c & 1);
    CpAsyncWaitAll();
    exp_decay(c, b);
    // Chunk c is visible to all, and every thread is done with chunk c-1's buffer (b ^ 1).
    __syncthreads();
    if (c + 1 < n_chunks) issue(c + 1, b ^ 1);
    const KdaStage& sb = stage[b];
    const int nt = ChunkTokens(p.n_tokens, c * kChunk);
    for (int tt = 0; tt < nt; ++tt) {
      const float4* k4 = reinterpret_cast<const float4*>(&sb.k[tt][r * kRowsPerLane]);
      const float4* d4 = reinterpret_cast<const float4*>(&sb.decay[tt][r * kRowsPerLane]);
      const float4* q4 = reinterpret_cast<const float4*>(&sb.q[tt][r * kRowsPerLane]);
      float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int m4 = 0; m4 < kRowsPerLane / 4; ++m4) {
        const float4 kk = k4[m4], dd = d4[m4];
        st[4 * m4 + 0] *= dd.x;
        st[4 * m4 + 1] *= dd.y;
        st[4 * m4 + 2] *= dd.z;
        st[4 * m4 + 3] *= dd.w;
        part[0] = fmaf(st[4 * m4 + 0], kk.x, part[0]);
        part[1] = fmaf(st[4 * m4 + 1], kk.y, part[1]);
        part[2] = fmaf(st[4 * m4 + 2], kk.z, part[2]);
        part[3] = fmaf(st[4 * m4 + 3], kk.w, part[3]);
      }
      const float kv = ColumnSum((part[0] + part[1]) + (part[2] + part[3]));
      const float delta = sb.beta[tt] * (sb.v[tt][jt] - kv);  // 0 outside dv: v and the state are 0
      float part2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int m4 = 0; m4 < kRowsPerLane / 4; ++m4) {
        const float4 kk = k4[m4], qq = q4[m4];
        st[4 * m4 + 0] = fmaf(kk.x, delta, st[4 * m4 + 0]);
        st[4 * m4 + 1] = fmaf(kk.y, delta, st[4 * m4 + 1]);
        st[4 * m4 + 2] = fmaf(kk.z, delta, st[4 * m4 + 2]);
        st[4 * m4 + 3] = fmaf(kk.w, delta, st[4 * m4 + 3]);
        part2[0] = fmaf(st[4 * m4 + 0], qq.x, part2[0]);
        part2[1] = fmaf(st[4 * m4 + 1], qq.y, part2[1]);
        part2[2] = fmaf(st[4 * m4 + 2], qq.z, part2[2]);
        part2[3] = fmaf(st[4 * m4 + 3], qq.w, part2[3]);
      }
      const float o = ColumnSum((part2[0] + part2[1]) + (part2[2] + part2[3]));
      if (r == 0 && col_ok) p.out[(s * p.n_tokens + c * kChunk + tt) * p.out_stride + h * p.dv + j] = p.scale * o;
    }
  }
#pragma unroll
  for (int m = 0; m < kRowsPerLane; ++m) {
    const int i = r * kRowsPerLane + m;
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
  if (KdaChunkedTakes(p)) return KdaChunked(p, stream);
  const dim3 grid(static_cast<unsigned>(detail::CeilDiv(p.dv, kTileJ)), static_cast<unsigned>(p.n_heads),
                  static_cast<unsigned>(p.n_seqs));
  K3_CUDA_CHECK(LaunchKernel(KdaRunKernel, grid, kWarps * 32, 0, stream, p));
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
