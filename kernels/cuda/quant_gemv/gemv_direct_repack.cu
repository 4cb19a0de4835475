// The repacked Q8_0 layout of the direct GEMV (gemv_direct.h): the one-time repack of ggml blocks
// and its inverse view (dequantization with the GEMV's own decoder, for tests).
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_gemv/gemv_direct.h"
#include "kernels/cuda/quant_gemv/gemv_direct_formats.cuh"
#include "kernels/cuda/launch.cuh"

namespace k3::cuda {
namespace direct {
namespace {

constexpr int kQ8Block = 32, kQ8BlockBytes = 34;
constexpr int kRepackThreads = 256;

// One thread per ggml block: d (f16) and 32 quants, read as 17 aligned 16-bit words (blocks are 34
// bytes: 2-byte aligned), written as two 16-byte stores into the quant plane and one f16 scale.
__global__ void __launch_bounds__(kRepackThreads) RepackQ8_0Kernel(const uint8_t* __restrict__ src, int64_t n_blocks,
                                                                  int64_t blocks_per_row, int64_t cols,
                                                                  uint8_t* __restrict__ quants,
                                                                  uint16_t* __restrict__ scales) {
  PdlEnter();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_blocks; i += stride) {
    const uint16_t* b = reinterpret_cast<const uint16_t*>(src + i * kQ8BlockBytes);
    uint32_t w[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j] = static_cast<uint32_t>(b[1 + 2 * j]) | (static_cast<uint32_t>(b[2 + 2 * j]) << 16);
    const int64_t row = i / blocks_per_row, blk = i - row * blocks_per_row;
    uint4* q = reinterpret_cast<uint4*>(quants + row * cols + blk * kQ8Block);
    q[0] = make_uint4(w[0], w[1], w[2], w[3]);
    q[1] = make_uint4(w[4], w[5], w[6], w[7]);
    scales[i] = b[0];  // [row][blk]: i = row * blocks_per_row + blk
  }
}

// One thread per 16-byte chunk: out = d · q with the GEMV's decoder (DirectQ8_0::ConvertWord).
__global__ void __launch_bounds__(kRepackThreads) DequantizeRepackedKernel(const uint8_t* __restrict__ quants,
                                                                          const uint16_t* __restrict__ scales,
                                                                          int64_t n_chunks, float* __restrict__ out) {
  PdlEnter();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_chunks; i += stride) {
    const uint4 c = reinterpret_cast<const uint4*>(quants)[i];
    const float d = qgemv::HalfToFloat(scales[i / 2]);  // 2 chunks per block, rows are whole blocks
    float v[16];
    ConvertChunk<DirectQ8_0>(c, v);
#pragma unroll
    for (int k = 0; k < 16; ++k) out[16 * i + k] = __fmul_rn(d, v[k]);
  }
}

int GridFor(int64_t n) {
  const int64_t want = (n + kRepackThreads - 1) / kRepackThreads;
  return static_cast<int>(want < 65536 ? want : 65536);  // grid-stride beyond
}

bool Overlap(const void* a, size_t na, const void* b, size_t nb) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + nb && pb < pa + na;
}

}  // namespace
}  // namespace direct

size_t RepackedQ8_0ScaleOffset(int64_t rows, int64_t cols) {
  const size_t q = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  return (q + 255) / 256 * 256;
}

size_t RepackedQ8_0Bytes(int64_t rows, int64_t cols) {
  return RepackedQ8_0ScaleOffset(rows, cols) + static_cast<size_t>(rows) * static_cast<size_t>(cols / 32) * 2;
}

cudaError_t RepackQ8_0Rows(const void* src, int64_t rows, int64_t cols, void* dst, int64_t dst_rows, int64_t dst_row0,
                           cudaStream_t stream) {
  using namespace direct;
  if (rows < 0 || cols <= 0 || cols % kQ8Block != 0 || src == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  if (dst_row0 < 0 || dst_rows < dst_row0 + rows) return cudaErrorInvalidValue;
  if ((reinterpret_cast<uintptr_t>(src) & 1u) != 0 || (reinterpret_cast<uintptr_t>(dst) & 15u) != 0) {
    return cudaErrorMisalignedAddress;
  }
  const int64_t blocks_per_row = cols / kQ8Block;
  const size_t src_bytes = static_cast<size_t>(rows) * static_cast<size_t>(blocks_per_row) * kQ8BlockBytes;
  if (Overlap(src, src_bytes, dst, RepackedQ8_0Bytes(dst_rows, cols))) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  auto* base = static_cast<uint8_t*>(dst);
  // Row r of the part is row dst_row0 + r of the whole: its quants and its scales shift by whole rows.
  uint8_t* quants = base + dst_row0 * cols;
  auto* scales = reinterpret_cast<uint16_t*>(base + RepackedQ8_0ScaleOffset(dst_rows, cols)) + dst_row0 * blocks_per_row;
  const int64_t n_blocks = rows * blocks_per_row;
  K3_CUDA_CHECK(LaunchKernel(RepackQ8_0Kernel, GridFor(n_blocks), kRepackThreads, 0, stream,
                             static_cast<const uint8_t*>(src), n_blocks, blocks_per_row, cols, quants, scales));
  return cudaSuccess;
}

cudaError_t RepackQ8_0(const void* src, int64_t rows, int64_t cols, void* dst, cudaStream_t stream) {
  return RepackQ8_0Rows(src, rows, cols, dst, rows, 0, stream);
}

cudaError_t DequantizeRepackedQ8_0(const void* repacked, int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  using namespace direct;
  if (rows < 0 || cols <= 0 || cols % kQ8Block != 0 || repacked == nullptr || out == nullptr) return cudaErrorInvalidValue;
  if ((reinterpret_cast<uintptr_t>(repacked) & 15u) != 0 || (reinterpret_cast<uintptr_t>(out) & 3u) != 0) {
    return cudaErrorMisalignedAddress;
  }
  if (rows == 0) return cudaSuccess;
  const auto* base = static_cast<const uint8_t*>(repacked);
  const auto* scales = reinterpret_cast<const uint16_t*>(base + RepackedQ8_0ScaleOffset(rows, cols));
  const int64_t n_chunks = rows * cols / 16;
  K3_CUDA_CHECK(LaunchKernel(DequantizeRepackedKernel, GridFor(n_chunks), kRepackThreads, 0, stream, base, scales,
                             n_chunks, out));
  return cudaSuccess;
}

}  // namespace k3::cuda
