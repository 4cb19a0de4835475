// Instantiations of the dequantizing GEMM for: IQ2_XXS IQ2_XS IQ2_S.
#include "kernels/cuda/quant_gemm/gemm_impl.cuh"

namespace k3::cuda::qgemm {

K3_GEMM_DEFINE(IQ2_XXS)
K3_GEMM_DEFINE(IQ2_XS)
K3_GEMM_DEFINE(IQ2_S)

}  // namespace k3::cuda::qgemm
