// Instantiations of the dequantizing GEMV for: Q2_K Q3_K Q4_K.
#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

K3_GEMV_DEFINE(Q2_K)
K3_GEMV_DEFINE(Q3_K)
K3_GEMV_DEFINE(Q4_K)

}  // namespace k3::cuda::qgemv
