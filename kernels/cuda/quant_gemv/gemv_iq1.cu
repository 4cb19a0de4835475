// Instantiations of the dequantizing GEMV for: IQ1_S IQ1_M.
#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

K3_GEMV_DEFINE(IQ1_S)
K3_GEMV_DEFINE(IQ1_M)

}  // namespace k3::cuda::qgemv
