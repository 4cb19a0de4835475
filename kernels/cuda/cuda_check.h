// The one error-return macro of the CUDA kernels: every host launcher returns cudaError_t, and
// every CUDA runtime call and every launch inside it goes through K3_CUDA_CHECK, which returns
// the error from the enclosing function.
//
//   K3_CUDA_CHECK(cudaMemsetAsync(p, 0, n, stream));
//   K3_CUDA_CHECK(LaunchKernel(Kernel, grid, block, smem, stream, args...));   // launch.cuh
//
// Callers that speak absl::Status wrap the result once (see CudaStatus in kernels/cuda/README.md).
#pragma once

#include <cuda_runtime.h>

#define K3_CUDA_CHECK(expr)                      \
  do {                                           \
    const cudaError_t k3_cuda_err_ = (expr);     \
    if (k3_cuda_err_ != cudaSuccess) {           \
      return k3_cuda_err_;                       \
    }                                            \
  } while (0)
