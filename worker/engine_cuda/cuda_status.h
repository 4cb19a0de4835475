// absl::Status from CUDA runtime return codes: the one checking macro of the GPU engine.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/common/status_macros.h"

namespace k3::engine_cuda {

inline absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

}  // namespace k3::engine_cuda

// Returns an InternalError naming the call when a CUDA runtime call or launcher fails.
#define K3_CU(expr) K3_RETURN_IF_ERROR(::k3::engine_cuda::CudaStatus((expr), #expr))
