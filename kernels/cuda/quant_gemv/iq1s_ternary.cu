// IQ1_S rows into their ternary form (iq1s_ternary.h): one block at a time, the same function on the
// host (the reference) and on the GPU (a thread per block).
#include "kernels/cuda/quant_gemv/iq1s_ternary.h"

#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_gemv/iq_tables_device.cuh"  // generated: k3::cuda::iqdev tables
#include "kernels/quant/iq_tables.h"

namespace k3::cuda {
namespace {

constexpr int64_t kIq1sBlockBytes = 50;  // ggml block_iq1_s: d (f16), qs[32], qh[8] (u16)

// One ggml block (src, 50 bytes) into its 72-byte ternary block (dst, 8-byte aligned); grid: the
// 2048 entries of ggml's iq1s_grid (eight int8 values g each).
__host__ __device__ inline void TernaryBlock(const uint8_t* src, const uint64_t* grid, uint8_t* dst) {
  uint32_t words[16] = {};
  uint32_t meta = 0;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t qh = static_cast<uint32_t>(src[34 + 2 * ib]) | static_cast<uint32_t>(src[35 + 2 * ib]) << 8;
    meta |= (qh >> 12) << (4 * ib);
    for (int l = 0; l < 4; ++l) {
      const uint32_t idx = static_cast<uint32_t>(src[2 + 4 * ib + l]) | ((qh >> (3 * l)) & 7u) << 8;
      const uint64_t g = grid[idx];
      for (int k = 0; k < 8; ++k) {
        const int w = 32 * ib + 8 * l + k;  // weight of the block
        const int v = static_cast<int8_t>(static_cast<uint8_t>(g >> (8 * k))) + 1;
        const int i = (w & 15) >> 2, m = w & 3;
        words[w >> 4] |= static_cast<uint32_t>(v) << (8 * m + 2 * i);
      }
    }
  }
  uint32_t* const out = reinterpret_cast<uint32_t*>(dst);
  for (int j = 0; j < 16; ++j) out[j] = words[j];
  out[16] = meta;
  out[17] = static_cast<uint32_t>(src[0]) | static_cast<uint32_t>(src[1]) << 8;
}

struct RepackArgs {
  const uint8_t* src;
  uint8_t* dst;
  int64_t n_blocks;   // rows · blocks per row
  int64_t blocks;     // per row
  int64_t src_row, dst_row;  // bytes
  bool pad;           // 8 zero bytes after each row's blocks
};

__global__ void __launch_bounds__(256) Iq1sToTernaryKernel(const RepackArgs a) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.n_blocks) return;
  const int64_t r = i / a.blocks, b = i % a.blocks;
  uint8_t* const row = a.dst + r * a.dst_row;
  TernaryBlock(a.src + r * a.src_row + kIq1sBlockBytes * b, iqdev::kIq1sGrid, row + kIq1sTernaryBlockBytes * b);
  if (a.pad && b == a.blocks - 1) {
    *reinterpret_cast<uint2*>(row + kIq1sTernaryBlockBytes * a.blocks) = make_uint2(0u, 0u);
  }
}

}  // namespace

void Iq1sToTernaryHost(const void* src, int64_t rows, int64_t cols, void* dst) {
  const int64_t blocks = cols / 256, src_row = kIq1sBlockBytes * blocks, dst_row = Iq1sTernaryRowBytes(cols);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* const row = d + r * dst_row;
    std::memset(row, 0, static_cast<size_t>(dst_row));
    for (int64_t b = 0; b < blocks; ++b) {
      alignas(8) uint8_t blk[kIq1sTernaryBlockBytes];
      TernaryBlock(s + r * src_row + kIq1sBlockBytes * b, quant::kIq1sGrid, blk);
      std::memcpy(row + kIq1sTernaryBlockBytes * b, blk, sizeof(blk));
    }
  }
}

cudaError_t Iq1sToTernary(const Iq1sToTernaryParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols <= 0 || p.cols % 256 != 0) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  if (p.src == nullptr || p.dst == nullptr || (reinterpret_cast<uintptr_t>(p.dst) & 7u) != 0) {
    return cudaErrorInvalidValue;
  }
  RepackArgs a{};
  a.src = static_cast<const uint8_t*>(p.src);
  a.dst = static_cast<uint8_t*>(p.dst);
  a.blocks = p.cols / 256;
  a.n_blocks = p.rows * a.blocks;
  a.src_row = kIq1sBlockBytes * a.blocks;
  a.dst_row = Iq1sTernaryRowBytes(p.cols);
  a.pad = a.dst_row != kIq1sTernaryBlockBytes * a.blocks;
  const int64_t grid = (a.n_blocks + 255) / 256;
  if (grid > 0x7fffffff) return cudaErrorInvalidValue;
  return LaunchKernel(Iq1sToTernaryKernel, static_cast<unsigned>(grid), 256, 0, stream, a);
}

}  // namespace k3::cuda
