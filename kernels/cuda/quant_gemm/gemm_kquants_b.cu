// Instantiations of the dequantizing GEMM for: Q5_K Q6_K IQ4_XS.
#include "kernels/cuda/quant_gemm/gemm_impl.cuh"

namespace k3::cuda::qgemm {

K3_GEMM_DEFINE(Q5_K)
K3_GEMM_DEFINE(Q6_K)
K3_GEMM_DEFINE(IQ4_XS)

}  // namespace k3::cuda::qgemm
