#include "kernels/cuda/mla/mla_decode.h"

#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kHeadsPerBlock = 16;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kHeadsPerWarp = kHeadsPerBlock / kWarps;  // score phase: warp w owns 4 heads
constexpr int kTileRows = 32;                           // rows per tile: one per lane
constexpr int kMaxValue = 4 * kThreads;                 // value phase: 4 columns per thread
constexpr int kMaxRow = 1024;

struct SplitArgs {
  const float* q;
  int64_t q_seq_stride;
  const void* cache;
  int64_t page_stride, row_stride, page_size;
  const int32_t* block_table;
  int64_t block_table_stride;
  const int32_t* seq_lens;
  int64_t n_heads;
  int rw, vw, n_splits;
  float scale;
  float* ws;  // [n_seqs][n_splits][n_heads][vw + 4]: Σ p·V (unnormalized), then m, l, 2 pad
};

__device__ __forceinline__ void LoadChunk(const float* src, float* dst) {  // 4 values
  *reinterpret_cast<float4*>(dst) = __ldg(reinterpret_cast<const float4*>(src));
}

__device__ __forceinline__ void LoadChunk(const __half* src, float* dst) {  // 8 values
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(src));
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
  float2 f[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = __half22float2(h[i]);
  *reinterpret_cast<float4*>(dst) = make_float4(f[0].x, f[0].y, f[1].x, f[1].y);
  *reinterpret_cast<float4*>(dst + 4) = make_float4(f[2].x, f[2].y, f[3].x, f[3].y);
}

// Block = (split, group of 16 heads, sequence). Per tile of 32 rows: rows -> shared memory as
// f32 (padded stride: conflict-free 16-byte reads by 32 different rows); scores with lane = row
// and warp = 4 heads (queries broadcast from shared memory); an online softmax per head inside
// the warp; then Σ p·V with thread = 4 value columns × 16 heads in registers.
template <class T>
__global__ void __launch_bounds__(kThreads) MlaSplitKernel(const SplitArgs a) {
  PdlEnter();
  extern __shared__ __align__(16) float sm[];
  constexpr int kVec = 16 / sizeof(T);
  const int rw = a.rw, rs = a.rw + 4, vw = a.vw;
  float* sq = sm;                                // [16][rw]
  float* srows = sq + kHeadsPerBlock * rw;       // [32][rs]
  float* sp = srows + kTileRows * rs;            // [32][16]
  float* salpha = sp + kTileRows * kHeadsPerBlock;  // [16]
  __shared__ const T* srow_ptr[kTileRows];        // the tile's rows in the paged cache

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * kHeadsPerBlock;
  const int64_t seq = blockIdx.z;
  const int64_t len = a.seq_lens[seq];
  int64_t per = (len + a.n_splits - 1) / a.n_splits;
  per = (per + kTileRows - 1) / kTileRows * kTileRows;
  const int64_t r_lo = split * per;
  const int64_t r_hi = min(len, r_lo + per);

  for (int i = tid; i < kHeadsPerBlock * rw / 4; i += kThreads) {
    const int hh = (4 * i) / rw, k = (4 * i) % rw;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (h0 + hh < a.n_heads) v = __ldg(reinterpret_cast<const float4*>(a.q + seq * a.q_seq_stride + (h0 + hh) * rw + k));
    *reinterpret_cast<float4*>(sq + hh * rw + k) = v;
  }

  float m[kHeadsPerWarp], l[kHeadsPerWarp];
#pragma unroll
  for (int i = 0; i < kHeadsPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  float acc[kHeadsPerBlock][4];
#pragma unroll
  for (int hh = 0; hh < kHeadsPerBlock; ++hh) {
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[hh][c] = 0.0f;
  }
  const int d4 = 4 * tid;
  const T* cache = static_cast<const T*>(a.cache);
  const int32_t* table = a.block_table + seq * a.block_table_stride;
  __syncthreads();

  for (int64_t t0 = r_lo; t0 < r_hi; t0 += kTileRows) {
    const int n_valid = static_cast<int>(min(static_cast<int64_t>(kTileRows), r_hi - t0));
    // The tile's row addresses once (a 64-bit division each), then the chunks walked with (r, cc)
    // stepped, not divided: per-chunk 64-bit index math cost more issue slots than the FMAs.
    if (tid < n_valid) {
      const int64_t t = t0 + tid;
      srow_ptr[tid] = cache + static_cast<int64_t>(table[t / a.page_size]) * a.page_stride +
                      (t % a.page_size) * a.row_stride;
    }
    __syncthreads();
    const int cpr = rw / kVec;
    int r = tid / cpr, cc = tid - (tid / cpr) * cpr;
    for (; r < n_valid;) {
      LoadChunk(srow_ptr[r] + cc * kVec, srows + r * rs + cc * kVec);
      cc += kThreads;
      while (cc >= cpr) cc -= cpr, ++r;
    }
    __syncthreads();

    float sc[kHeadsPerWarp];
#pragma unroll
    for (int i = 0; i < kHeadsPerWarp; ++i) sc[i] = 0.0f;
    if (lane < n_valid) {
      const float* row = srows + lane * rs;
      for (int k = 0; k < rw; k += 4) {
        const float4 r4 = *reinterpret_cast<const float4*>(row + k);
#pragma unroll
        for (int i = 0; i < kHeadsPerWarp; ++i) {
          const float4 q4 = *reinterpret_cast<const float4*>(sq + (warp * kHeadsPerWarp + i) * rw + k);
          sc[i] = fmaf(q4.x, r4.x, sc[i]);
          sc[i] = fmaf(q4.y, r4.y, sc[i]);
          sc[i] = fmaf(q4.z, r4.z, sc[i]);
          sc[i] = fmaf(q4.w, r4.w, sc[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kHeadsPerWarp; ++i) {
      const float s = lane < n_valid ? sc[i] * a.scale : -INFINITY;
      const float m_new = fmaxf(m[i], detail::WarpMax(s));
      const float pr = s == -INFINITY ? 0.0f : expf(s - m_new);
      const float alpha = m[i] == m_new ? 1.0f : expf(m[i] - m_new);
      l[i] = l[i] * alpha + detail::WarpSum(pr);
      m[i] = m_new;
      sp[lane * kHeadsPerBlock + warp * kHeadsPerWarp + i] = pr;
      if (lane == 0) salpha[warp * kHeadsPerWarp + i] = alpha;
    }
    __syncthreads();

    if (d4 < vw) {
#pragma unroll
      for (int hh = 0; hh < kHeadsPerBlock; ++hh) {
        const float al = salpha[hh];
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[hh][c] *= al;
      }
      for (int r = 0; r < n_valid; ++r) {
        const float4 v4 = *reinterpret_cast<const float4*>(srows + r * rs + d4);
        const float4* p4 = reinterpret_cast<const float4*>(sp + r * kHeadsPerBlock);
#pragma unroll
        for (int g = 0; g < kHeadsPerBlock / 4; ++g) {
          const float4 pg = p4[g];
          const float pv[4] = {pg.x, pg.y, pg.z, pg.w};
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            float* ac = acc[4 * g + u];
            ac[0] = fmaf(pv[u], v4.x, ac[0]);
            ac[1] = fmaf(pv[u], v4.y, ac[1]);
            ac[2] = fmaf(pv[u], v4.z, ac[2]);
            ac[3] = fmaf(pv[u], v4.w, ac[3]);
          }
        }
      }
    }
    __syncthreads();  // the next tile overwrites srows, sp, salpha
  }

  const int64_t stride = vw + 4;  // 16-byte aligned rows
  float* ws = a.ws + ((seq * a.n_splits + split) * a.n_heads) * stride;
  if (d4 < vw) {
#pragma unroll
    for (int hh = 0; hh < kHeadsPerBlock; ++hh) {
      if (h0 + hh < a.n_heads) {
        *reinterpret_cast<float4*>(ws + (h0 + hh) * stride + d4) = make_float4(acc[hh][0], acc[hh][1], acc[hh][2], acc[hh][3]);
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < kHeadsPerWarp; ++i) {
      const int64_t h = h0 + warp * kHeadsPerWarp + i;
      if (h < a.n_heads) {
        ws[h * stride + vw] = m[i];
        ws[h * stride + vw + 1] = l[i];
      }
    }
  }
}

constexpr int kMaxSplits = 8192;  // the combine's factors in shared memory: 32 KB

// Block = (head, sequence): out = Σ_s e^{m_s - M} acc_s / Σ_s e^{m_s - M} l_s, splits in order, an
// empty split (m_s = -inf) skipped. The factors e^{m_s - M} are formed once per block into shared
// memory (NaN marks an empty split: expf of a finite difference is never NaN), so the value loop's
// loads do not wait on a branch and an expf each (44 us per layer at 22 splits before, latency).
__global__ void __launch_bounds__(kThreads) MlaCombineKernel(const float* ws, int n_splits, int64_t n_heads, int vw,
                                                             float* out, int64_t out_seq_stride) {
  PdlEnter();
  extern __shared__ float w_split[];  // [n_splits]
  const int64_t h = blockIdx.x, seq = blockIdx.y;
  const int64_t stride = vw + 4;  // 16-byte aligned rows
  const float* base = ws + (seq * n_splits * n_heads + h) * stride;
  const int64_t split_stride = n_heads * stride;
  float mx = -INFINITY;
  for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, base[s * split_stride + vw]);
  for (int s = threadIdx.x; s < n_splits; s += blockDim.x) {
    const float ms = base[s * split_stride + vw];
    w_split[s] = ms != -INFINITY ? expf(ms - mx) : __int_as_float(0x7fc00000);
  }
  __syncthreads();
  float den = 0.0f;
  for (int s = 0; s < n_splits; ++s) {
    const float w = w_split[s];
    if (!isnan(w)) den += base[s * split_stride + vw + 1] * w;
  }
  float* o = out + seq * out_seq_stride + h * vw;
  for (int d = threadIdx.x; d < vw; d += blockDim.x) {
    float num = 0.0f;
#pragma unroll 4
    for (int s = 0; s < n_splits; ++s) {
      const float a = base[s * split_stride + d];  // read even for an empty split: its slot exists
      const float w = w_split[s];
      if (!isnan(w)) num += a * w;
    }
    o[d] = den > 0.0f ? num / den : 0.0f;
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

int64_t MlaDecodeWorkspaceFloats(int64_t n_seqs, int64_t n_heads, int64_t value_width, int n_splits) {
  return n_seqs * n_splits * n_heads * (value_width + 4);
}

int MlaDecodeSplits(int64_t n_seqs, int64_t n_heads, int64_t max_len) {
  const int64_t per_split_set = n_seqs * detail::CeilDiv(n_heads, kHeadsPerBlock);
  if (per_split_set <= 0) return 1;
  // ~4 blocks of 4 warps per SM: the score/value loops are latency-bound at 1-2 blocks per SM
  // (batch 1, 4k context: 192 blocks took 157 us per layer).
  const int64_t want = detail::CeilDiv(4 * static_cast<int64_t>(detail::MultiprocessorCount()), per_split_set);
  const int64_t cap = detail::CeilDiv(max_len, 64);  // at least ~64 rows per split
  int64_t s = want < cap ? want : cap;
  if (s < 1) s = 1;
  if (s > 1024) s = 1024;
  return static_cast<int>(s);
}

cudaError_t MlaDecode(const MlaDecodeParams& p, cudaStream_t stream) {
  if (p.n_seqs < 0 || p.n_heads < 0 || p.n_splits < 1 || p.n_splits > kMaxSplits) return cudaErrorInvalidValue;
  if (p.n_seqs == 0 || p.n_heads == 0) return cudaSuccess;
  if (p.row_width < 8 || p.row_width > kMaxRow || p.row_width % 8 != 0) return cudaErrorInvalidValue;
  if (p.value_width < 4 || p.value_width > kMaxValue || p.value_width % 4 != 0 || p.value_width > p.row_width) {
    return cudaErrorInvalidValue;
  }
  if (p.q == nullptr || p.cache == nullptr || p.block_table == nullptr || p.seq_lens == nullptr || p.out == nullptr ||
      p.workspace == nullptr || p.page_size < 1) {
    return cudaErrorInvalidValue;
  }
  const int64_t vec = p.cache_type == MlaCacheType::kF16 ? 8 : 4;
  if (!Aligned16(p.cache) || !Aligned16(p.q) || !Aligned16(p.workspace) || p.page_stride % vec != 0 ||
      p.row_stride % vec != 0 || p.q_seq_stride % 4 != 0) {
    return cudaErrorMisalignedAddress;
  }
  if (p.q_seq_stride < p.n_heads * p.row_width || p.out_seq_stride < p.n_heads * p.value_width) return cudaErrorInvalidValue;
  const int64_t groups = detail::CeilDiv(p.n_heads, kHeadsPerBlock);
  if (groups > 65535 || p.n_seqs > 65535) return cudaErrorInvalidValue;

  SplitArgs a{};
  a.q = p.q;
  a.q_seq_stride = p.q_seq_stride;
  a.cache = p.cache;
  a.page_stride = p.page_stride;
  a.row_stride = p.row_stride;
  a.page_size = p.page_size;
  a.block_table = p.block_table;
  a.block_table_stride = p.block_table_stride;
  a.seq_lens = p.seq_lens;
  a.n_heads = p.n_heads;
  a.rw = static_cast<int>(p.row_width);
  a.vw = static_cast<int>(p.value_width);
  a.n_splits = p.n_splits;
  a.scale = p.scale;
  a.ws = p.workspace;
  const size_t smem = sizeof(float) * (kHeadsPerBlock * p.row_width + kTileRows * (p.row_width + 4) +
                                       kTileRows * kHeadsPerBlock + kHeadsPerBlock);
  const dim3 grid(static_cast<unsigned>(p.n_splits), static_cast<unsigned>(groups), static_cast<unsigned>(p.n_seqs));
  if (p.cache_type == MlaCacheType::kF16) {
    K3_CUDA_CHECK(cudaFuncSetAttribute(MlaSplitKernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    K3_CUDA_CHECK(LaunchKernel(MlaSplitKernel<__half>, grid, kThreads, smem, stream, a));
  } else {
    K3_CUDA_CHECK(cudaFuncSetAttribute(MlaSplitKernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    K3_CUDA_CHECK(LaunchKernel(MlaSplitKernel<float>, grid, kThreads, smem, stream, a));
  }
  K3_CUDA_CHECK(cudaGetLastError());
  K3_CUDA_CHECK(LaunchKernel(MlaCombineKernel, dim3(static_cast<unsigned>(p.n_heads), static_cast<unsigned>(p.n_seqs)),
                             kThreads, static_cast<size_t>(p.n_splits) * sizeof(float), stream, p.workspace, p.n_splits,
                             p.n_heads, a.vw, p.out, p.out_seq_stride));
  return cudaSuccess;
}

}  // namespace k3::cuda
