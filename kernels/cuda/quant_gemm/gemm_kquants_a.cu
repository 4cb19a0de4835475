// Instantiations of the dequantizing GEMM for: Q2_K Q3_K Q4_K.
#include "kernels/cuda/quant_gemm/gemm_impl.cuh"

namespace k3::cuda::qgemm {

K3_GEMM_DEFINE(Q2_K)
K3_GEMM_DEFINE(Q3_K)
K3_GEMM_DEFINE(Q4_K)

}  // namespace k3::cuda::qgemm
