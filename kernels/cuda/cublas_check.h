// The one check of a cuBLAS status in the kernel libraries: K3_CUBLAS_CHECK returns it, mapped to
// a cudaError_t (the launchers' return type), from the enclosing function.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace k3::cuda {

inline cudaError_t FromBlas(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return cudaSuccess;
    case CUBLAS_STATUS_INVALID_VALUE:
      return cudaErrorInvalidValue;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return cudaErrorNotSupported;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return cudaErrorMemoryAllocation;
    default:
      return cudaErrorUnknown;
  }
}

}  // namespace k3::cuda

#define K3_CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                             \
    if (const cublasStatus_t k3_blas_status_ = (expr); k3_blas_status_ != CUBLAS_STATUS_SUCCESS) { \
      return ::k3::cuda::FromBlas(k3_blas_status_);                                                \
    }                                                                                              \
  } while (0)
