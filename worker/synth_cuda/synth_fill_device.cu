// The GPU fill's kernels: one thread per output block, generating it with block_gen.h's GenBlock
// into shared memory; then the CTA's tile (kThreads consecutive output blocks, one contiguous
// byte range of the output) goes to global memory in aligned 16-byte stores.
//
// Bit-identity with synth::FillBlocks (worker/synth/block_fill.cc), step by step:
//  - the words: BlockRng/Mix64 (counter_rng.h, marked __host__ __device__) is 64-bit integer
//    arithmetic only, exact on any machine;
//  - the block factor and d: not computed here; the 16 possible fp16 d (and dmin) come from the
//    host's BlockScalesFor, which runs FillBlocks' own f32 expression in block_fill.cc;
//  - the payload bits: GenBlock takes the same words, in the same order, the same bits of each,
//    and writes them to the same struct offsets (the CPU test block_gen_test checks this by
//    running block_gen.h on the host against FillBlocks);
//  - Q8_0's quants: the host's kGaussQ8 table, copied into the kernel parameters;
//  - plain types: NormalFromWord is integer -> double (exact), one double subtraction and one
//    multiplication by a compile-time constant (no FMA shape), one f64 -> f32 rounding; then
//    mean + std * n as __fmul_rn, __fadd_rn (block_fill.cc is built -ffp-contract=off); then
//    quant::F32ToF16/F32ToBf16, integer-only constexpr code. This file is also compiled with
//    -fmad=false, so no contraction can appear anywhere.
#include <cstdint>

#include "worker/synth_cuda/block_gen.h"
#include "worker/synth_cuda/synth_fill_kernels.h"
#include "kernels/cuda/launch.cuh"

namespace k3::synth::detail {
namespace {

using quant::GgmlType;

constexpr int kThreads = 128;       // output blocks per tile (and threads per CTA)
constexpr uint64_t kMaxGrid = 65536;  // CTAs; each loops over tiles beyond that

template <GgmlType kType, class Index>
__global__ void __launch_bounds__(kThreads) SynthFillKernel(const __grid_constant__ SynthFillKernelArgs a) {
  k3::cuda::PdlEnter();
  constexpr uint32_t kBB = gen::GenBlockBytes(kType);
  static_assert(kBB % 2 == 0 || kBB == 0);
  constexpr uint32_t kWords = sizeof(gen::BlockGenTables) / 4;
  static_assert(sizeof(gen::BlockGenTables) % 4 == 0);
  __shared__ gen::BlockGenTables s_tab;
  __shared__ __align__(16) uint8_t s_stage[kThreads * kBB + 16];

  for (uint32_t j = threadIdx.x; j < kWords; j += kThreads) {
    reinterpret_cast<uint32_t*>(&s_tab)[j] = reinterpret_cast<const uint32_t*>(&a.tables)[j];
  }
  __syncthreads();

  const uint64_t n = a.n_blocks;
  const uint64_t tiles = (n + kThreads - 1) / kThreads;
  for (uint64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const uint64_t i0 = tile * kThreads;
    const uint32_t count = static_cast<uint32_t>(n - i0 < kThreads ? n - i0 : kThreads);
    uint8_t* g = a.out + i0 * kBB;
    // Stage at the output's alignment mod 16 (even: out and every block offset are even).
    const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(g) & 15);
    uint8_t* st = s_stage + mis;
    if (threadIdx.x < count) {
      const uint64_t src = gen::WindowSource<Index>(a.window, static_cast<Index>(i0 + threadIdx.x));
      gen::GenBlock<kType>(a.key, src, s_tab, s_tab.gauss_q8, st + threadIdx.x * kBB);
    }
    __syncthreads();
    const uint32_t bytes = count * kBB;
    const uint32_t head = min(bytes, (16u - mis) & 15u);  // bytes up to g's next 16-byte boundary
    for (uint32_t j = threadIdx.x; j < head; j += kThreads) g[j] = st[j];
    const uint32_t n16 = (bytes - head) / 16;
    const uint4* sv = reinterpret_cast<const uint4*>(st + head);  // 16-aligned: mis + head is 0 or 16
    uint4* gv = reinterpret_cast<uint4*>(g + head);
    for (uint32_t j = threadIdx.x; j < n16; j += kThreads) gv[j] = sv[j];
    for (uint32_t j = head + n16 * 16 + threadIdx.x; j < bytes; j += kThreads) g[j] = st[j];
    __syncthreads();  // the stage is rewritten by the next tile
  }
}

template <GgmlType kType>
cudaError_t Launch(const SynthFillKernelArgs& a, cudaStream_t stream) {
  const uint64_t tiles = (a.n_blocks + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(tiles < kMaxGrid ? tiles : kMaxGrid);
  // 32-bit index arithmetic (the window's divisions) whenever every output index fits.
  if (a.n_blocks <= 0xffffffffull) {
    K3_CUDA_CHECK(k3::cuda::LaunchKernel(SynthFillKernel<kType, uint32_t>, grid, kThreads, 0, stream, a));
  } else {
    K3_CUDA_CHECK(k3::cuda::LaunchKernel(SynthFillKernel<kType, uint64_t>, grid, kThreads, 0, stream, a));
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSynthFillKernel(const SynthFillKernelArgs& a, cudaStream_t stream) {
  switch (a.type) {
    case GgmlType::kF32: return Launch<GgmlType::kF32>(a, stream);
    case GgmlType::kF16: return Launch<GgmlType::kF16>(a, stream);
    case GgmlType::kBF16: return Launch<GgmlType::kBF16>(a, stream);
    case GgmlType::kQ8_0: return Launch<GgmlType::kQ8_0>(a, stream);
    case GgmlType::kIQ1_S: return Launch<GgmlType::kIQ1_S>(a, stream);
    case GgmlType::kIQ2_XXS: return Launch<GgmlType::kIQ2_XXS>(a, stream);
    case GgmlType::kIQ2_XS: return Launch<GgmlType::kIQ2_XS>(a, stream);
    case GgmlType::kQ2_K: return Launch<GgmlType::kQ2_K>(a, stream);
    case GgmlType::kQ3_K: return Launch<GgmlType::kQ3_K>(a, stream);
    case GgmlType::kQ4_K: return Launch<GgmlType::kQ4_K>(a, stream);
    case GgmlType::kQ5_K: return Launch<GgmlType::kQ5_K>(a, stream);
    case GgmlType::kQ6_K: return Launch<GgmlType::kQ6_K>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace k3::synth::detail
