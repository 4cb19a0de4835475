// The IQ1_S sub-block GEMV (gemv_iq1s_sub.cu): QuantGemv's path for IQ1_S at decode sizes.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

// Tokens per launch the kernel takes (passes of up to 4 inside) and the widest rows (a team of up
// to 8 warps covers a row: 256 sub-blocks of 32 weights).
inline constexpr int kIq1sSubMaxTokens = 8;
inline constexpr int kIq1sSubMaxCols = 8192;

// The product for a.n_tokens <= kIq1sSubMaxTokens and rows of at most kIq1sSubMaxCols weights
// (cudaErrorInvalidValue otherwise), every field of `a` as QuantGemv fills it for IQ1_S; int8_x:
// x rounded to int8 per 32 columns (QuantGemvParams::int8_x).
cudaError_t LaunchIq1sSub(const Args& a, bool int8_x, cudaStream_t stream);

}  // namespace k3::cuda::qgemv
