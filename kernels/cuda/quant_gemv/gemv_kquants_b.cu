// Instantiations of the dequantizing GEMV for: Q5_K Q6_K.
#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

K3_GEMV_DEFINE(Q5_K)
K3_GEMV_DEFINE(Q6_K)

}  // namespace k3::cuda::qgemv
