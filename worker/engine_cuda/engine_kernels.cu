#include "worker/engine_cuda/engine_kernels.h"

#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_gemv/decode.cuh"
#include "kernels/cuda/launch.cuh"

namespace k3::engine_cuda {
namespace {

using namespace k3::cuda::qgemv;

template <class Fmt>
__global__ void EmbedKernel(const uint8_t* table, size_t row_bytes, int64_t vocab_begin, int64_t vocab_width,
                            const int32_t* tokens, int64_t hidden, float* x) {
  k3::cuda::PdlEnter();
  const int64_t t = blockIdx.y;
  const int64_t local = static_cast<int64_t>(tokens[t]) - vocab_begin;
  float* out = x + t * hidden;
  const bool in_band = local >= 0 && local < vocab_width;
  const uint8_t* row = table + (in_band ? local : 0) * row_bytes;
  const IqTables tabs{};
  for (int64_t run = blockIdx.x * blockDim.x + threadIdx.x; run < hidden / 8; run += gridDim.x * blockDim.x) {
    const int64_t e = run * 8;
    if (!in_band) {
#pragma unroll
      for (int k = 0; k < 8; ++k) out[e + k] = 0.0f;
      continue;
    }
    float a, b, v[8];
    Fmt::Decode8(row + (e / Fmt::kBlockElems) * Fmt::kBlockBytes, static_cast<int>((e % Fmt::kBlockElems) / 8), tabs,
                 a, b, v);
#pragma unroll
    for (int k = 0; k < 8; ++k) out[e + k] = __fadd_rn(__fmul_rn(a, v[k]), b);
  }
}

__global__ void AddKernel(float* y, const float* x, int64_t n, bool add) {
  k3::cuda::PdlEnter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = add ? y[i] + x[i] : x[i];
  }
}

__global__ void MlaAppendKernel(MlaAppendParams p) {
  k3::cuda::PdlEnter();
  const int64_t s = blockIdx.x;
  const float* kv = p.kv + s * p.kv_stride;
  __shared__ float red[32];
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < p.lora; i += blockDim.x) ss += kv[i] * kv[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) red[0] = v;
  }
  __syncthreads();
  const float inv = 1.0f / sqrtf(red[0] / static_cast<float>(p.lora) + p.eps);
  const int64_t pos = p.seq_lens[s] - 1;
  const int64_t page = p.block_table[s * p.block_table_stride + pos / p.page_size];
  const int64_t off = page * p.page_stride + (pos % p.page_size) * p.row_stride;
  for (int64_t i = threadIdx.x; i < p.row_width; i += blockDim.x) {
    const float v = i < p.lora ? kv[i] * inv * p.norm[i] : kv[i];
    if (p.f16) {
      static_cast<__half*>(p.cache)[off + i] = __float2half_rn(v);
    } else {
      static_cast<float*>(p.cache)[off + i] = v;
    }
  }
}

__global__ void ExpandKernel(const float* r, int64_t k, int64_t width, float* xe) {
  k3::cuda::PdlEnter();
  const int64_t slot = blockIdx.y, t = slot / k;
  for (int64_t d = blockIdx.x * blockDim.x + threadIdx.x; d < width; d += gridDim.x * blockDim.x) {
    xe[slot * width + d] = r[t * width + d];
  }
}

__global__ void LocalExpertsKernel(const int32_t* ids, const float* w, int64_t n, int64_t begin, int64_t n_local,
                                   int32_t* ids_local, float* w_local) {
  k3::cuda::PdlEnter();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t l = ids[i] - begin;
  const bool mine = l >= 0 && l < n_local;
  ids_local[i] = mine ? static_cast<int32_t>(l) : 0;
  w_local[i] = mine ? w[i] : 0.0f;
}

__global__ void CombineKernel(const float* ye, const float* w, int64_t k, int64_t width, float* m) {
  k3::cuda::PdlEnter();
  const int64_t t = blockIdx.y;
  for (int64_t d = blockIdx.x * blockDim.x + threadIdx.x; d < width; d += gridDim.x * blockDim.x) {
    float acc = 0.0f;
    // fused multiply-add in choice order, spelled out: the expert-grouped decode's combine
    // (MoeCombineParams::choice_order) gives the same bits
    for (int64_t j = 0; j < k; ++j) acc = fmaf(w[t * k + j], ye[(t * k + j) * width + d], acc);
    m[t * width + d] = acc;
  }
}

unsigned Blocks(int64_t n, int threads, int64_t cap = 4096) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < cap ? b : cap);
}

}  // namespace

bool EmbedSupports(quant::GgmlType type) {
  bool ok = false;
  VisitFormat(type, [&](auto fmt) { ok = decltype(fmt)::kTables == kTabNone; });
  return ok;
}

cudaError_t EmbedRows(quant::GgmlType type, const void* table, size_t row_bytes, int64_t vocab_begin,
                      int64_t vocab_width, const int32_t* tokens, int64_t n_tokens, int64_t hidden, float* x,
                      cudaStream_t stream) {
  if (n_tokens <= 0) return cudaSuccess;
  if (hidden % 8 != 0 || !EmbedSupports(type)) return cudaErrorInvalidValue;
  cudaError_t err = cudaSuccess;
  const dim3 grid(Blocks(hidden / 8, 128, 64), static_cast<unsigned>(n_tokens));
  VisitFormat(type, [&](auto fmt) {
    using Fmt = decltype(fmt);
    if constexpr (Fmt::kTables == kTabNone) {
      err = k3::cuda::LaunchKernel(EmbedKernel<Fmt>, grid, 128, 0, stream, static_cast<const uint8_t*>(table), row_bytes,
                                   vocab_begin, vocab_width, tokens, hidden, x);
    }
  });
  return err;
}

cudaError_t AddInto(float* y, const float* x, int64_t n, bool add, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  K3_CUDA_CHECK(k3::cuda::LaunchKernel(AddKernel, Blocks(n, 256, 1024), 256, 0, stream, y, x, n, add));
  return cudaSuccess;
}

cudaError_t MlaAppend(const MlaAppendParams& p, cudaStream_t stream) {
  if (p.n_seqs <= 0) return cudaSuccess;
  K3_CUDA_CHECK(k3::cuda::LaunchKernel(MlaAppendKernel, static_cast<unsigned>(p.n_seqs), 256, 0, stream, p));
  return cudaSuccess;
}

cudaError_t ExpandRows(const float* r, int64_t n_tokens, int64_t k, int64_t width, float* xe, cudaStream_t stream) {
  if (n_tokens <= 0) return cudaSuccess;
  K3_CUDA_CHECK(k3::cuda::LaunchKernel(ExpandKernel, dim3(Blocks(width, 256, 64), static_cast<unsigned>(n_tokens * k)),
                                       256, 0, stream, r, k, width, xe));
  return cudaSuccess;
}

cudaError_t LocalExperts(const int32_t* ids, const float* weights, int64_t n, int64_t expert_begin, int64_t n_local,
                         int32_t* ids_local, float* weights_local, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  K3_CUDA_CHECK(k3::cuda::LaunchKernel(LocalExpertsKernel, Blocks(n, 128), 128, 0, stream, ids, weights, n,
                                       expert_begin, n_local, ids_local, weights_local));
  return cudaSuccess;
}

cudaError_t CombineExperts(const float* ye, const float* w, int64_t n_tokens, int64_t k, int64_t width, float* m,
                           cudaStream_t stream) {
  if (n_tokens <= 0) return cudaSuccess;
  K3_CUDA_CHECK(k3::cuda::LaunchKernel(CombineKernel, dim3(Blocks(width, 256, 64), static_cast<unsigned>(n_tokens)),
                                       256, 0, stream, ye, w, k, width, m));
  return cudaSuccess;
}

}  // namespace k3::engine_cuda
