// Instantiations of the dequantizing GEMM for: IQ1_S IQ1_M.
#include "kernels/cuda/quant_gemm/gemm_impl.cuh"

namespace k3::cuda::qgemm {

K3_GEMM_DEFINE(IQ1_S)
K3_GEMM_DEFINE(IQ1_M)

}  // namespace k3::cuda::qgemm
