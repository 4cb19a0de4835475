// The IQ1_S sub-block GEMV (gemv_iq1s_sub.cu): QuantGemv's path for IQ1_S at decode sizes.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

// Tokens per launch the kernel takes (templates for 1, 2, 4 and 8).
inline constexpr int kIq1sSubMaxTokens = 8;

// The product for a.n_tokens <= kIq1sSubMaxTokens, every field of `a` as QuantGemv fills it for
// IQ1_S (tiles_per_mat is recomputed for the kernel's own row grouping).
cudaError_t LaunchIq1sSub(const Args& a, cudaStream_t stream);

}  // namespace k3::cuda::qgemv
