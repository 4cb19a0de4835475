// Instantiations of the direct-load GEMV (gemv_direct_kernel.cuh) for: BF16 (M = 1..8, R = 1 and 4).
#include "kernels/cuda/quant_gemv/gemv_direct_kernel.cuh"

namespace k3::cuda::direct {

K3_DIRECT_DEFINE(BF16)

}  // namespace k3::cuda::direct
