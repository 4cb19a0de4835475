// Instantiations of the direct-load GEMV (gemv_direct_kernel.cuh) for: Q8_0 (M = 1..8, R = 1 and 4).
#include "kernels/cuda/quant_gemv/gemv_direct_kernel.cuh"

namespace k3::cuda::direct {

K3_DIRECT_DEFINE(Q8_0)

}  // namespace k3::cuda::direct
