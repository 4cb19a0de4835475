// Instantiations of the dequantizing GEMV for: IQ2_XXS IQ2_XS IQ2_S.
#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

K3_GEMV_DEFINE(IQ2_XXS)
K3_GEMV_DEFINE(IQ2_XS)
K3_GEMV_DEFINE(IQ2_S)

}  // namespace k3::cuda::qgemv
