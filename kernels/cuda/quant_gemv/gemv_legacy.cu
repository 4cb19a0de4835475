// Instantiations of the dequantizing GEMV for: Q4_0 Q5_0 IQ4_NL IQ4_XS.
#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

K3_GEMV_DEFINE(Q4_0)
K3_GEMV_DEFINE(Q5_0)
K3_GEMV_DEFINE(IQ4_NL)
K3_GEMV_DEFINE(IQ4_XS)

}  // namespace k3::cuda::qgemv
