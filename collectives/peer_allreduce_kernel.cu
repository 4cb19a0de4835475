// The one-shot all-reduce kernel over peer memory. Block b owns floats [b*B, (b+1)*B) of the
// message (B = block_floats, fixed per buffer) and runs its own little protocol, independent of
// the other blocks, with its own epoch counter and its own flags:
//
//   epoch = epochs[b] + 1 (device memory: each launch, eager or a graph replay, is a new epoch;
//           nothing host-side is baked into a graph); slot = epoch % 2
//   (1) copy this rank's data[b-range] into its own staging[slot][b-range]
//   (2) fence (system scope), barrier, then write epoch into flags[b][my rank] of every peer
//       (st.release.sys over NVLink)
//   (3) one thread per peer spins until my flags[b][peer] >= epoch (ld.acquire.sys), bounded by
//       timeout_ns; on time-out it sets the error words and the block leaves (data untouched)
//   (4) data[i] = Σ_{r = 0..R-1, in rank order} staging_r[slot][i] (peers read over NVLink; this
//       rank's own term read from data), so every rank computes the same float sums bit for bit
//
// Memory ordering: every thread's staging stores are followed by its own fence.acq_rel.sys and a
// __syncthreads before the release store of the flag, so a peer that acquires the flag sees the
// data (the pattern of cooperative groups' grid sync and vLLM's custom all-reduce, with a fence
// in every thread instead of relying on barrier cumulativity). On the reading side the acquire
// load of each flag precedes a __syncthreads before any thread reads that peer's slot.
//
// Why ">= epoch" and two slots are enough. Ranks run the same sequence of all-reduces, so epochs
// per block agree. A peer can be at most one epoch ahead of me: to finish epoch e it needs my
// flag e, which I write before I wait. So while I wait for e, its flag may already read e + 1
// (it finished e and announced e + 1), hence ">=" rather than "==". Its slot (e+1)%2 is the other
// slot, so the e data I am about to read in slot e%2 is intact; it cannot write slot e%2 again
// (epoch e + 2) before it has seen my flag e + 1, which I write only in my next launch, after
// this launch's reads of its slot have completed (kernels on one stream run in order).
// Conversely, my own slot e%2 was last written at epoch e - 2; every peer finished reading it
// before announcing e - 1, which I saw before finishing e - 1.
//
// PeerProtocol::kInline (the data is its own flag, after the "Lamport" all-reduce of TensorRT-LLM):
// receive slots hold -0.0f when empty. (1) each thread stores its float4s of data (-0.0 sent as
// +0.0) straight into region (slot, my rank) of every peer's receive buffer (volatile stores over
// NVLink, no fence, no flag); (2) it polls its own buffer's region (slot, r) of every peer r
// (volatile loads) until no lane is -0.0, sums in rank order, and stores -0.0 back (the slot is
// empty again for epoch e + 2). One NVLink crossing, one way, instead of a flag and a read. Two
// slots: a peer writes my slot e%2 again at epoch e + 2 only after it has my e + 1 data, which I
// send in my next launch, after this one has read and emptied slot e%2. No fence orders my
// emptying stores before that peer's e + 2 stores in the PTX model; kernel boundaries and the
// round trip through my e + 1 data do in practice (the same reliance as TensorRT-LLM's).
#include "collectives/peer_allreduce_kernel.h"
#include "kernels/cuda/launch.cuh"

#include <algorithm>

namespace k3::coll {
namespace {

__device__ __forceinline__ uint64_t LoadAcquireSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void StoreReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void FenceSys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ float4 Add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// Phase (4) over floats [begin, end) of the message in float4s (data 16-byte aligned, begin and
// end multiples of 4). kVec float4 per thread per round: all R loads of a round are issued before
// any add, so the peers' NVLink reads overlap.
template <int R>
__device__ void SumVec(const PeerReduceArgs& a, int64_t slot_off, int64_t begin, int64_t end) {
  constexpr int kVec = R <= 2 ? 4 : (R <= 4 ? 2 : 1);
  float4* data4 = reinterpret_cast<float4*>(a.data);
  const int64_t b4 = begin / 4, e4 = end / 4;
  const int64_t step = static_cast<int64_t>(blockDim.x);
  for (int64_t j0 = b4 + threadIdx.x; j0 < e4; j0 += kVec * step) {
    float4 v[R][kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int64_t j = j0 + k * step;
      if (j < e4) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          v[r][k] = r == a.rank ? data4[j]
                                : __ldcg(reinterpret_cast<const float4*>(a.staging[r] + slot_off) + j);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int64_t j = j0 + k * step;
      if (j < e4) {
        float4 acc = v[0][k];
#pragma unroll
        for (int r = 1; r < R; ++r) acc = Add4(acc, v[r][k]);
        data4[j] = acc;
      }
    }
  }
}

template <int R>
__device__ void SumScalar(const PeerReduceArgs& a, int64_t slot_off, int64_t begin, int64_t end) {
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] = r == a.rank ? a.data[i] : __ldcg(a.staging[r] + slot_off + i);
    float acc = v[0];
#pragma unroll
    for (int r = 1; r < R; ++r) acc += v[r];
    a.data[i] = acc;
  }
}

template <int R>
__global__ void __launch_bounds__(1024) PeerReduceKernel(const PeerReduceArgs a) {
  k3::cuda::PdlWait();  // spins on the peers: no early launch of the next kernel
  __shared__ uint64_t s_epoch;
  __shared__ int s_stop;
  const int64_t b = blockIdx.x;
  if (threadIdx.x == 0) {
    // A previous time-out broke the protocol for good: leave data as it is (CheckHealth says why).
    s_stop = *reinterpret_cast<volatile uint32_t*>(a.error_dev) != 0;
    s_epoch = a.epochs[b] + 1;
  }
  __syncthreads();
  if (s_stop) return;
  const uint64_t epoch = s_epoch;
  const int64_t slot_off = static_cast<int64_t>(epoch & 1) * a.slot_floats;
  const int64_t begin = b * a.block_floats;
  const int64_t end = begin + a.block_floats < a.n ? begin + a.block_floats : a.n;
  const bool vec = (reinterpret_cast<uintptr_t>(a.data) & 15) == 0;
  // The vector part [begin, vend) and the scalar tail [vend, end) (all scalar when unaligned).
  const int64_t vend = vec ? begin + ((end - begin) & ~int64_t{3}) : begin;

  // (1) this rank's data into its own staging slot.
  float* own = a.staging[a.rank] + slot_off;
  for (int64_t j = begin / 4 + threadIdx.x; j < vend / 4; j += blockDim.x) {
    reinterpret_cast<float4*>(own)[j] = reinterpret_cast<const float4*>(a.data)[j];
  }
  for (int64_t i = vend + threadIdx.x; i < end; i += blockDim.x) own[i] = a.data[i];

  // (2) the data visible system-wide before any flag: every thread fences its own stores.
  FenceSys();
  __syncthreads();
  const int peer = static_cast<int>(threadIdx.x);
  if (peer < R && peer != a.rank) StoreReleaseSys(a.flags[peer] + b * kPeerMaxRanks + a.rank, epoch);

  // (3) wait for every peer's flag of this epoch (or a later one, see the file comment).
  if (peer < R && peer != a.rank) {
    const uint64_t* f = a.flags[a.rank] + b * kPeerMaxRanks + peer;
    if (LoadAcquireSys(f) < epoch) {
      const uint64_t t0 = GlobalTimerNs();
      while (LoadAcquireSys(f) < epoch) {
        if (GlobalTimerNs() - t0 > a.timeout_ns) {
          atomicExch(a.error_dev, kPeerErrorTimeout);
          *reinterpret_cast<volatile uint32_t*>(a.error_host) = kPeerErrorTimeout;
          __threadfence_system();
          s_stop = 1;
          break;
        }
      }
    }
  }
  __syncthreads();
  if (s_stop) return;

  // (4) the sum in rank order.
  SumVec<R>(a, slot_off, begin, vend);
  SumScalar<R>(a, slot_off, vend, end);
  if (threadIdx.x == 0) a.epochs[b] = epoch;
}

constexpr uint32_t kEmpty = 0x80000000u;  // -0.0f

__device__ __forceinline__ float4 LoadVolatile4(const float* p) {
  float4 v;
  asm volatile("ld.volatile.global.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void StoreVolatile4(float* p, float4 v) {
  asm volatile("st.volatile.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ float LoadVolatile(const float* p) { return *reinterpret_cast<const volatile float*>(p); }
__device__ __forceinline__ void StoreVolatile(float* p, float v) { *reinterpret_cast<volatile float*>(p) = v; }
__device__ __forceinline__ bool Empty(float x) { return __float_as_uint(x) == kEmpty; }
__device__ __forceinline__ bool Empty4(float4 v) { return Empty(v.x) || Empty(v.y) || Empty(v.z) || Empty(v.w); }
__device__ __forceinline__ float Clean(float x) { return Empty(x) ? 0.f : x; }
__device__ __forceinline__ float4 Clean4(float4 v) { return make_float4(Clean(v.x), Clean(v.y), Clean(v.z), Clean(v.w)); }

// Polls until `load` returns a value with no empty lane or the bound passes (then the error words
// are set and false returned).
template <typename T, typename Load, typename IsEmpty>
__device__ __forceinline__ bool Poll(const PeerReduceArgs& a, Load load, IsEmpty is_empty, T* out) {
  T v = load();
  if (is_empty(v)) {
    const uint64_t t0 = GlobalTimerNs();
    while (is_empty(v = load())) {
      if (GlobalTimerNs() - t0 > a.timeout_ns) {
        atomicExch(a.error_dev, kPeerErrorTimeout);
        *reinterpret_cast<volatile uint32_t*>(a.error_host) = kPeerErrorTimeout;
        __threadfence_system();
        return false;
      }
    }
  }
  *out = v;
  return true;
}

template <int R>
__global__ void __launch_bounds__(1024) PeerInlineKernel(const PeerReduceArgs a) {
  k3::cuda::PdlWait();  // spins on the peers: no early launch of the next kernel
  const int64_t b = blockIdx.x;
  // Every thread reads the epoch and the error word itself (no barrier before the first store);
  // thread 0 advances the epoch after the closing barrier.
  bool live = *reinterpret_cast<volatile uint32_t*>(a.error_dev) == 0;
  const uint64_t epoch = *reinterpret_cast<volatile uint64_t*>(a.epochs + b) + 1;
  const int64_t slot = static_cast<int64_t>(epoch & 1);
  const int64_t begin = b * a.block_floats;
  const int64_t end = begin + a.block_floats < a.n ? begin + a.block_floats : a.n;
  const bool vec = (reinterpret_cast<uintptr_t>(a.data) & 15) == 0;
  const int64_t vend = vec ? begin + ((end - begin) & ~int64_t{3}) : begin;
  const int64_t region = a.slot_floats;
  auto send_off = [&](int64_t i) { return (slot * R + a.rank) * region + i; };       // my region at peers
  auto recv_ptr = [&](int r, int64_t i) { return a.staging[a.rank] + (slot * R + r) * region + i; };
  if (live) {
    // (1) push this rank's data into every peer's slot.
    for (int64_t i = begin + 4 * threadIdx.x; i < vend; i += 4 * blockDim.x) {
      const float4 v = Clean4(*reinterpret_cast<const float4*>(a.data + i));
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r != a.rank) StoreVolatile4(a.staging[r] + send_off(i), v);
      }
    }
    for (int64_t i = vend + threadIdx.x; i < end; i += blockDim.x) {
      const float v = Clean(a.data[i]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r != a.rank) StoreVolatile(a.staging[r] + send_off(i), v);
      }
    }
    // (2) wait for every peer's value, sum in rank order, empty the slot again.
    for (int64_t i = begin + 4 * threadIdx.x; i < vend && live; i += 4 * blockDim.x) {
      float4 v[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r == a.rank) {
          v[r] = Clean4(*reinterpret_cast<const float4*>(a.data + i));
        } else {
          const float* p = recv_ptr(r, i);
          live = live && Poll(a, [p] { return LoadVolatile4(p); }, [](float4 x) { return Empty4(x); }, &v[r]);
        }
      }
      if (!live) break;
      float4 acc = v[0];
#pragma unroll
      for (int r = 1; r < R; ++r) acc = Add4(acc, v[r]);
      *reinterpret_cast<float4*>(a.data + i) = acc;
      const float e = __uint_as_float(kEmpty);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r != a.rank) *reinterpret_cast<float4*>(recv_ptr(r, i)) = make_float4(e, e, e, e);
      }
    }
    for (int64_t i = vend + threadIdx.x; i < end && live; i += blockDim.x) {
      float v[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r == a.rank) {
          v[r] = Clean(a.data[i]);
        } else {
          const float* p = recv_ptr(r, i);
          live = live && Poll(a, [p] { return LoadVolatile(p); }, [](float x) { return Empty(x); }, &v[r]);
        }
      }
      if (!live) break;
      float acc = v[0];
#pragma unroll
      for (int r = 1; r < R; ++r) acc += v[r];
      a.data[i] = acc;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r != a.rank) *recv_ptr(r, i) = __uint_as_float(kEmpty);
      }
    }
  }
  // The epoch advances only when every thread of the block finished (and none timed out).
  live = __syncthreads_and(live);
  if (threadIdx.x == 0 && live) a.epochs[b] = epoch;
}

__global__ void FillEmptyKernel(float* p, int64_t n) {
  k3::cuda::PdlEnter();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = __uint_as_float(kEmpty);
  }
}

template <int R>
cudaError_t Launch(const PeerReduceArgs& a, cudaStream_t stream) {
  const int64_t blocks = (a.n + a.block_floats - 1) / a.block_floats;
  if (a.protocol == PeerProtocol::kInline) {
    K3_CUDA_CHECK(k3::cuda::LaunchKernel(PeerInlineKernel<R>, static_cast<unsigned>(blocks), a.threads, 0, stream, a));
  } else {
    K3_CUDA_CHECK(k3::cuda::LaunchKernel(PeerReduceKernel<R>, static_cast<unsigned>(blocks), a.threads, 0, stream, a));
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPeerFillEmpty(float* p, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  K3_CUDA_CHECK(k3::cuda::LaunchKernel(FillEmptyKernel, static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 1024)),
                                       256, 0, stream, p, n));
  return cudaSuccess;
}

cudaError_t LaunchPeerReduce(const PeerReduceArgs& a, cudaStream_t stream) {
  if (a.n <= 0) return cudaSuccess;
  if (a.n > a.slot_floats || a.block_floats <= 0 || a.block_floats % 4 != 0 || a.threads < kPeerMaxRanks ||
      a.threads > 1024 || a.rank < 0 || a.rank >= a.ranks) {
    return cudaErrorInvalidValue;
  }
  switch (a.ranks) {
    case 2: return Launch<2>(a, stream);
    case 3: return Launch<3>(a, stream);
    case 4: return Launch<4>(a, stream);
    case 5: return Launch<5>(a, stream);
    case 6: return Launch<6>(a, stream);
    case 7: return Launch<7>(a, stream);
    case 8: return Launch<8>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace k3::coll
