// Instantiations of the dequantizing GEMV for: IQ3_XXS IQ3_S.
#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

K3_GEMV_DEFINE(IQ3_XXS)
K3_GEMV_DEFINE(IQ3_S)

}  // namespace k3::cuda::qgemv
