// Instantiations of the dequantizing GEMM for: IQ3_XXS IQ3_S.
#include "kernels/cuda/quant_gemm/gemm_impl.cuh"

namespace k3::cuda::qgemm {

K3_GEMM_DEFINE(IQ3_XXS)
K3_GEMM_DEFINE(IQ3_S)

}  // namespace k3::cuda::qgemm
