// Instantiations of the dequantizing GEMV for: F32 F16 BF16.
#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

K3_GEMV_DEFINE(F32)
K3_GEMV_DEFINE(F16)
K3_GEMV_DEFINE(BF16)

}  // namespace k3::cuda::qgemv
