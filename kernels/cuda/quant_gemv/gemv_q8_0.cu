// Instantiations of the dequantizing GEMV for: Q8_0.
#include "kernels/cuda/quant_gemv/gemv_impl.cuh"

namespace k3::cuda::qgemv {

K3_GEMV_DEFINE(Q8_0)

}  // namespace k3::cuda::qgemv
