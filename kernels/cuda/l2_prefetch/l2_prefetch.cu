#include "kernels/cuda/l2_prefetch/l2_prefetch.h"

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace {

constexpr int kThreads = 32;
constexpr int kMaxBlocks = 32;  // requests spread over several SMs' copy engines

// One request per kL2PrefetchPiece piece of the two ranges, strided over every thread of the grid.
__global__ void L2PrefetchKernel(const char* a, uint64_t a_bytes, const char* b, uint64_t b_bytes) {
  PdlEnter();
  const uint64_t a_pieces = (a_bytes + kL2PrefetchPiece - 1) / kL2PrefetchPiece;
  const uint64_t pieces = a_pieces + (b_bytes + kL2PrefetchPiece - 1) / kL2PrefetchPiece;
  for (uint64_t i = blockIdx.x * kThreads + threadIdx.x; i < pieces; i += gridDim.x * kThreads) {
    const bool in_a = i < a_pieces;
    const uint64_t off = (in_a ? i : i - a_pieces) * kL2PrefetchPiece, total = in_a ? a_bytes : b_bytes;
    const char* const p = (in_a ? a : b) + off;
    const uint32_t n = static_cast<uint32_t>(total - off < kL2PrefetchPiece ? total - off : kL2PrefetchPiece);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
#endif
  }
}

}  // namespace

cudaError_t L2Prefetch(const L2PrefetchRange& a, const L2PrefetchRange& b, cudaStream_t stream) {
  const uint64_t a_bytes = a.data != nullptr ? a.bytes & ~uint64_t{15} : 0;
  const uint64_t b_bytes = b.data != nullptr ? b.bytes & ~uint64_t{15} : 0;
  if ((reinterpret_cast<uintptr_t>(a.data) & 15u) != 0 || (reinterpret_cast<uintptr_t>(b.data) & 15u) != 0) {
    return cudaErrorInvalidValue;
  }
  const uint64_t pieces = (a_bytes + kL2PrefetchPiece - 1) / kL2PrefetchPiece + (b_bytes + kL2PrefetchPiece - 1) / kL2PrefetchPiece;
  if (pieces == 0) return cudaSuccess;
  const uint64_t want = (pieces + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(want < kMaxBlocks ? want : kMaxBlocks);
  K3_CUDA_CHECK(LaunchKernel(L2PrefetchKernel, blocks, kThreads, 0, stream, static_cast<const char*>(a.data), a_bytes,
                             static_cast<const char*>(b.data), b_bytes));
  return cudaSuccess;
}

}  // namespace k3::cuda
