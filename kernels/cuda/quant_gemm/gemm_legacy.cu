// Instantiations of the dequantizing GEMM for: Q4_0 Q5_0 IQ4_NL.
#include "kernels/cuda/quant_gemm/gemm_impl.cuh"

namespace k3::cuda::qgemm {

K3_GEMM_DEFINE(Q4_0)
K3_GEMM_DEFINE(Q5_0)
K3_GEMM_DEFINE(IQ4_NL)

}  // namespace k3::cuda::qgemm
