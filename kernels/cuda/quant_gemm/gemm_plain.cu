// Instantiations of the dequantizing GEMM for: F32 F16 BF16.
#include "kernels/cuda/quant_gemm/gemm_impl.cuh"

namespace k3::cuda::qgemm {

K3_GEMM_DEFINE(F32)
K3_GEMM_DEFINE(F16)
K3_GEMM_DEFINE(BF16)

}  // namespace k3::cuda::qgemm
