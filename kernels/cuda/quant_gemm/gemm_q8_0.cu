// Instantiations of the dequantizing GEMM for: Q8_0.
#include "kernels/cuda/quant_gemm/gemm_impl.cuh"

namespace k3::cuda::qgemm {

K3_GEMM_DEFINE(Q8_0)

}  // namespace k3::cuda::qgemm
