#include "kernels/cuda/quant_gemm/blas_gemm.h"

#include <algorithm>

#include "kernels/cuda/cublas_check.h"
#include "kernels/cuda/cuda_check.h"

namespace k3::cuda {

int64_t QuantGemmBlasRowBlock(int64_t cols, size_t weight_bytes) {
  if (cols <= 0) return 0;
  const int64_t rows = static_cast<int64_t>(weight_bytes / (static_cast<size_t>(cols) * 2));
  return rows / 128 * 128;
}

cudaError_t QuantGemmBlas(const QuantGemmParams& p, const BlasScratch& blas, cudaStream_t stream,
                          const void* weight_half, const void* x_half) {
  if (p.n_groups != 1 || p.group_offsets != nullptr || p.x_rows != nullptr || p.mat_ids != nullptr || p.split_x) {
    return cudaErrorInvalidValue;
  }
  if (p.rows < 0 || p.cols <= 0 || p.n_tokens < 0 || p.n_tokens > 0x7fffffff || p.rows > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  if (!QuantGemmSupports(p.type)) return cudaErrorInvalidValue;
  const quant::TypeTraits& tr = quant::Traits(p.type);
  if (p.cols % tr.block_elems != 0 || p.cols % 32 != 0 || p.cols > (int64_t{1} << 25) ||
      static_cast<int64_t>(p.row_bytes) != p.cols / tr.block_elems * tr.block_bytes) {
    return cudaErrorInvalidValue;
  }
  if (p.x_stride < p.cols || p.x_stride % 4 != 0) return cudaErrorInvalidValue;
  if (p.y_stride < p.rows || p.y_stride > 0x7fffffff || p.y == nullptr) return cudaErrorInvalidValue;
  if (p.rows == 0 || p.n_tokens == 0) return cudaSuccess;
  if (blas.handle == nullptr) return cudaErrorInvalidValue;
  const bool resident = weight_half != nullptr;
  if (resident && (reinterpret_cast<uintptr_t>(weight_half) & 15u) != 0) return cudaErrorMisalignedAddress;
  const int64_t block = resident ? p.rows : QuantGemmBlasRowBlock(p.cols, blas.weight_bytes);
  if (block == 0 || (!resident && blas.weights == nullptr)) return cudaErrorInvalidValue;
  if (p.weight == nullptr) return cudaErrorInvalidValue;
  if (x_half == nullptr &&
      (p.x == nullptr || p.workspace == nullptr || p.workspace_bytes < QuantGemmWorkspaceBytes(p))) {
    return cudaErrorInvalidValue;
  }
  if ((!resident && (reinterpret_cast<uintptr_t>(blas.weights) & 255u) != 0) ||
      (x_half == nullptr && (reinterpret_cast<uintptr_t>(p.workspace) & 255u) != 0) ||
      (reinterpret_cast<uintptr_t>(x_half) & 15u) != 0) {
    return cudaErrorMisalignedAddress;
  }
  const void* b = x_half;
  if (b == nullptr) {
    K3_CUDA_CHECK(RoundRowsToHalf(p.x, p.x_stride, p.n_tokens, p.cols, p.workspace, stream));
    b = p.workspace;
  }
  K3_CUBLAS_CHECK(cublasSetStream(blas.handle, stream));
  const float one = 1.0f, zero = 0.0f;
  const int k = static_cast<int>(p.cols);
  for (int64_t r0 = 0; r0 < p.rows; r0 += block) {
    const int64_t n_rows = std::min(block, p.rows - r0);
    const void* a = weight_half;
    if (!resident) {
      QuantDequantF16Params d{p.type, p.weight, p.cols, p.row_bytes, r0, n_rows, blas.weights};
      K3_CUDA_CHECK(QuantDequantF16(d, stream));
      a = blas.weights;
    }
    // Column-major view: C (n_rows x n_tokens, ld y_stride) = A^T B, with A the f16 rows as a
    // (cols x n_rows) matrix and B the f16 activations as (cols x n_tokens).
    K3_CUBLAS_CHECK(cublasGemmEx(blas.handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_rows),
                                 static_cast<int>(p.n_tokens), k, &one, a, CUDA_R_16F, k, b, CUDA_R_16F, k,
                                 &zero, p.y + r0, CUDA_R_32F, static_cast<int>(p.y_stride), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
  }
  return cudaSuccess;
}

cudaError_t F32GemmBlas(const F32GemmParams& p, cublasHandle_t handle, cudaStream_t stream) {
  constexpr int64_t kMax = 0x7fffffff;
  if (p.rows < 0 || p.cols <= 0 || p.n_tokens < 0 || p.rows > kMax || p.cols > kMax || p.n_tokens > kMax) {
    return cudaErrorInvalidValue;
  }
  if (p.x_stride < p.cols || p.y_stride < p.rows || p.x_stride > kMax || p.y_stride > kMax)
    return cudaErrorInvalidValue;
  if (p.rows == 0 || p.n_tokens == 0) return cudaSuccess;
  if (handle == nullptr || p.w == nullptr || p.x == nullptr || p.y == nullptr) return cudaErrorInvalidValue;
  K3_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const float one = 1.0f, zero = 0.0f;
  // Column-major view as in QuantGemmBlas; CUBLAS_COMPUTE_32F_PEDANTIC: no TF32 whatever the
  // handle's math mode or the environment says.
  K3_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.rows), static_cast<int>(p.n_tokens),
                               static_cast<int>(p.cols), &one, p.w, CUDA_R_32F, static_cast<int>(p.cols), p.x,
                               CUDA_R_32F, static_cast<int>(p.x_stride), &zero, p.y, CUDA_R_32F,
                               static_cast<int>(p.y_stride), CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
  return cudaSuccess;
}

}  // namespace k3::cuda
