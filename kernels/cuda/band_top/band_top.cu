#include "kernels/cuda/band_top/band_top.h"

#include <climits>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kChunkThreads = 256;
constexpr int kPerThread = 16;                      // logits of one group (one chunk thread)
constexpr int64_t kChunk = kChunkThreads * kPerThread;  // 4096 logits per chunk block
constexpr int kRowThreads = 512;

// The workspace: per row, the group keys [chunks * 256], the chunks' Σexp [chunks] and maxima [chunks].
struct Layout {
  int64_t chunks = 0;
  size_t keys = 0, sums = 0, maxs = 0, bytes = 0;  // offsets and total, in bytes
};

Layout LayoutFor(int64_t rows, int64_t band_width) {
  Layout l;
  l.chunks = (band_width + kChunk - 1) / kChunk;
  const size_t cells = static_cast<size_t>(rows) * static_cast<size_t>(l.chunks);
  l.keys = 0;
  l.sums = l.keys + cells * kChunkThreads * sizeof(uint64_t);
  l.maxs = l.sums + cells * sizeof(double);
  l.bytes = (l.maxs + cells * sizeof(float) + 255) / 256 * 256;
  return l;
}

// Larger key = better candidate; 0 = none (NaN, or a column outside the band). The order bits of
// a non-NaN logit are >= 0x007FFFFF (-inf), so a real key is never 0.
__device__ __forceinline__ uint64_t MakeKey(float v, int64_t col) {
  if (isnan(v)) return 0;
  uint32_t b = __float_as_uint(v);
  if (b == 0x80000000u) b = 0;  // -0 ties with +0
  const uint32_t ord = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(ord) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(col));
}

__device__ __forceinline__ int64_t KeyColumn(uint64_t key) { return 0xFFFFFFFFu - static_cast<uint32_t>(key); }

// Group g is chunk thread g % 256 of chunk g / 256: columns chunk·4096 + g % 256 + j·256, j < 16.
__device__ __forceinline__ int64_t GroupColumn(int64_t g, int j) {
  return (g / kChunkThreads) * kChunk + g % kChunkThreads + static_cast<int64_t>(j) * kChunkThreads;
}

__device__ __forceinline__ double WarpSumD(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(detail::kFullMask, v, o);
  return v;
}

// Block-wide max / f64 sum in a fixed order (deterministic); every thread gets the result.
__device__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = detail::WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : -INFINITY;
  return detail::WarpMax(v);
}

__device__ double BlockSumD(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = WarpSumD(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : 0.0;
  return WarpSumD(v);
}

// (1) Per chunk: its max and Σexp(l − max) (NaN propagates, -inf adds 0), and each thread's best key.
__global__ void __launch_bounds__(kChunkThreads)
    ChunkKernel(const BandTopParams p, int64_t chunks, uint64_t* keys, double* sums, float* maxs) {
  PdlEnter();
  __shared__ float s_max[32];
  __shared__ double s_sum[32];
  const int64_t chunk = blockIdx.x, row = blockIdx.y;
  const int tid = threadIdx.x;
  const float* lg = p.logits + row * p.logits_stride;
  const int64_t col0 = chunk * kChunk + tid;
  float v[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t col = col0 + j * kChunkThreads;
    v[j] = col < p.band_width ? lg[col] : -INFINITY;  // outside the band: no term, no key
  }
  uint64_t best = 0;
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t col = col0 + j * kChunkThreads;
    if (col < p.band_width) {
      const uint64_t k = MakeKey(v[j], col);
      best = k > best ? k : best;
      mx = fmaxf(mx, v[j]);  // ignores NaN
    }
  }
  keys[(row * chunks + chunk) * kChunkThreads + tid] = best;
  mx = BlockMax(mx, s_max);
  double s = 0.0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    if (v[j] != -INFINITY) s += static_cast<double>(expf(v[j] - mx));
  }
  s = BlockSumD(s, s_sum);
  if (tid == 0) {
    sums[row * chunks + chunk] = s;
    maxs[row * chunks + chunk] = mx;
  }
}

struct RowShared {
  unsigned hist[256];
  int sel[kBandTopMaxN];        // the selected groups
  uint64_t buf[kBandTopMaxN];   // the selected keys, then sorted
  uint64_t prefix;              // radix select: the digits found so far
  unsigned remaining;           // keys still to take from the current bin
  int done;
  int count;
  float fscratch[32];
  double dscratch[32];
};

// Warp 0, after a histogram round: the bin (from the top) holding the remaining-th largest alive key.
__device__ void FindDigit(int shift, RowShared& sh) {
  const int lane = threadIdx.x & 31;
  const unsigned rem = sh.remaining;
  unsigned c[8], sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    c[j] = sh.hist[255 - 8 * lane - j];
    sum += c[j];
  }
  unsigned incl = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned t = __shfl_up_sync(detail::kFullMask, incl, o);
    if (lane >= o) incl += t;
  }
  const unsigned total = __shfl_sync(detail::kFullMask, incl, 31);
  if (total < rem) {  // fewer keys than wanted (first round only): take them all
    if (lane == 0) {
      sh.prefix = 0;
      sh.done = 1;
    }
    return;
  }
  const unsigned excl = incl - sum;
  if (excl < rem && rem <= incl) {  // exactly one lane
    unsigned acc = excl;
    for (int j = 0; j < 8; ++j) {
      if (acc + c[j] >= rem) {
        const unsigned left = rem - acc;
        sh.prefix |= static_cast<uint64_t>(255 - 8 * lane - j) << shift;
        sh.remaining = left;
        // The whole bin is taken: every key >= prefix (lower bits 0) is in, nothing else.
        sh.done = c[j] == left;
        break;
      }
      acc += c[j];
    }
  }
}

// Radix select over keys key_at(0..count) (block-wide, 8-bit digits from the top): a threshold K
// such that exactly m keys are >= K, or 0 when fewer than m keys are not 0. Keys other than 0 must
// be distinct. Call from all threads.
template <class KeyAt>
__device__ uint64_t NthLargest(int64_t count, int m, const KeyAt& key_at, RowShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  __syncthreads();  // the previous user of sh is done
  if (tid == 0) {
    sh.prefix = 0;
    sh.remaining = static_cast<unsigned>(m);
    sh.done = 0;
  }
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += blockDim.x) sh.hist[b] = 0;
    __syncthreads();
    const uint64_t prefix = sh.prefix;
    const uint64_t mask = shift == 56 ? 0 : ~uint64_t{0} << (shift + 8);
    for (int64_t base = 0; base < count; base += blockDim.x) {
      const int64_t i = base + tid;
      bool alive = false;
      unsigned digit = 0;
      if (i < count) {
        const uint64_t k = key_at(i);
        alive = (k & mask) == prefix;
        digit = static_cast<unsigned>(k >> shift) & 255u;
      }
      const unsigned alive_mask = __ballot_sync(detail::kFullMask, alive);
      if (alive) {
        // Logits crowd into few bins: one atomic per distinct digit of the warp.
        const unsigned peers = __match_any_sync(alive_mask, digit);
        if (lane == __ffs(peers) - 1) atomicAdd(&sh.hist[digit], static_cast<unsigned>(__popc(peers)));
      }
    }
    __syncthreads();
    if (warp == 0) FindDigit(shift, sh);
    __syncthreads();
    if (sh.done) break;
  }
  return sh.prefix;
}

__device__ void SortDescending(uint64_t* a, int size) {
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += blockDim.x) {
        const int l = i ^ j;
        if (l > i) {
          const uint64_t x = a[i], y = a[l];
          if ((i & k) == 0 ? x < y : x > y) {
            a[i] = y;
            a[l] = x;
          }
        }
      }
      __syncthreads();
    }
  }
}

// (2) Per row: logsumexp from the chunks, the n best groups, the n best of their logits, sorted.
__global__ void __launch_bounds__(kRowThreads)
    RowKernel(const BandTopParams p, int64_t chunks, const uint64_t* keys, const double* sums, const float* maxs) {
  PdlEnter();
  __shared__ RowShared sh;
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x;

  // logsumexp: max of the chunk maxima, then Σ s_c·exp(m_c − max) (chunks of only -inf add 0).
  const float* cm = maxs + row * chunks;
  const double* cs = sums + row * chunks;
  float mx = -INFINITY;
  for (int64_t c = tid; c < chunks; c += blockDim.x) mx = fmaxf(mx, cm[c]);
  mx = BlockMax(mx, sh.fscratch);
  double s = 0.0;
  for (int64_t c = tid; c < chunks; c += blockDim.x) {
    if (cs[c] != 0.0) s += cs[c] * exp(static_cast<double>(cm[c]) - static_cast<double>(mx));
  }
  s = BlockSumD(s, sh.dscratch);
  if (tid == 0) p.logsumexp[row] = static_cast<float>(static_cast<double>(mx) + log(s));

  // The n best groups.
  const int64_t n_groups = chunks * kChunkThreads;
  const uint64_t* gk = keys + row * n_groups;
  const uint64_t group_floor = NthLargest(n_groups, p.n, [&](int64_t i) { return gk[i]; }, sh);
  if (tid == 0) sh.count = 0;
  __syncthreads();
  const uint64_t take_group = group_floor > 0 ? group_floor : 1;
  for (int64_t g = tid; g < n_groups; g += blockDim.x) {
    if (gk[g] >= take_group) sh.sel[atomicAdd(&sh.count, 1)] = static_cast<int>(g);  // at most n
  }
  __syncthreads();
  const int n_sel = sh.count;

  // The n best logits of those groups (only keys >= group_floor can be among them).
  const float* lg = p.logits + row * p.logits_stride;
  auto candidate = [&](int64_t i) -> uint64_t {
    const int64_t col = GroupColumn(sh.sel[i / kPerThread], static_cast<int>(i % kPerThread));
    if (col >= p.band_width) return 0;
    const uint64_t k = MakeKey(lg[col], col);
    return k >= group_floor ? k : 0;
  };
  const int64_t n_cand = static_cast<int64_t>(n_sel) * kPerThread;
  const uint64_t cand_floor = NthLargest(n_cand, p.n, candidate, sh);
  if (tid == 0) sh.count = 0;
  __syncthreads();
  const uint64_t take = cand_floor > 0 ? cand_floor : 1;
  for (int64_t i = tid; i < n_cand; i += blockDim.x) {
    const uint64_t k = candidate(i);
    if (k >= take) sh.buf[atomicAdd(&sh.count, 1)] = k;  // at most n
  }
  __syncthreads();
  const int found = sh.count;
  int size = 1;
  while (size < found) size <<= 1;
  for (int i = found + tid; i < size; i += blockDim.x) sh.buf[i] = 0;
  __syncthreads();
  SortDescending(sh.buf, size);

  BandTopCandidate* out = p.top + row * p.n;
  for (int i = tid; i < p.n; i += blockDim.x) {
    if (i < found) {
      const int64_t col = KeyColumn(sh.buf[i]);
      out[i] = BandTopCandidate{static_cast<int32_t>(p.band_begin + col), lg[col]};
    } else {
      out[i] = BandTopCandidate{INT32_MAX, -INFINITY};
    }
  }
}

}  // namespace

size_t BandTopWorkspaceBytes(int64_t rows, int64_t band_width, int32_t /*n*/) {
  if (rows < 0 || band_width < 1) return 0;
  return LayoutFor(rows, band_width).bytes;
}

cudaError_t BandTop(const BandTopParams& p, cudaStream_t stream) {
  if (p.n < 1 || p.n > kBandTopMaxN || p.band_width < 1 || p.band_begin < 0 ||
      p.band_begin + p.band_width > INT32_MAX || p.logits_stride < p.band_width || p.rows < 0 || p.rows > 65535) {
    return cudaErrorInvalidValue;
  }
  if (p.rows == 0) return cudaSuccess;
  const Layout l = LayoutFor(p.rows, p.band_width);
  if (p.logits == nullptr || p.top == nullptr || p.logsumexp == nullptr || p.workspace == nullptr ||
      p.workspace_bytes < l.bytes) {
    return cudaErrorInvalidValue;
  }
  if (reinterpret_cast<uintptr_t>(p.workspace) % 16 != 0) return cudaErrorMisalignedAddress;
  uint8_t* ws = static_cast<uint8_t*>(p.workspace);
  uint64_t* keys = reinterpret_cast<uint64_t*>(ws + l.keys);
  double* sums = reinterpret_cast<double*>(ws + l.sums);
  float* maxs = reinterpret_cast<float*>(ws + l.maxs);
  const dim3 grid(static_cast<unsigned>(l.chunks), static_cast<unsigned>(p.rows));
  K3_CUDA_CHECK(LaunchKernel(ChunkKernel, grid, kChunkThreads, 0, stream, p, l.chunks, keys, sums, maxs));
  K3_CUDA_CHECK(
      LaunchKernel(RowKernel, static_cast<unsigned>(p.rows), kRowThreads, 0, stream, p, l.chunks, keys, sums, maxs));
  return cudaSuccess;
}

}  // namespace k3::cuda
