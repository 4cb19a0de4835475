// Resident f16 copies of the dense weights (CudaEngineOptions::prefill_f16_weights_mb): the
// matrices that steps of many rows multiply on cuBLAS (prefill chunks, decode batches past the
// tensor-core GEMV) are decoded to f16 once at load, so each such product skips its per-call decode
// (QuantDequantF16 into the cuBLAS scratch, one pass over the weights: ~3.8 ms of a 4-layer PP4096
// on an H100) and runs as one GEMM instead of one per scratch-sized block of rows. The values are
// the per-call decode's, so only cuBLAS's summation order may differ.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine_cuda/device_weights.h"

namespace k3::engine_cuda {

// What the copies leave free on the device at least: the steps allocate nothing, but cuBLAS,
// NCCL and graph instantiation may still want some.
inline constexpr size_t kHalfWeightsReserveBytes = size_t{4} << 30;

struct HalfWeightsResult {
  int64_t matrices = 0;  // DMats given a resident copy (DMat::half)
  int64_t skipped = 0;   // eligible ones left without: over the budget or the free-memory reserve
  size_t bytes = 0;      // device bytes the copies take
};

// Gives every eligible matrix of `layers` (quantized, a type QuantDequantF16 decodes, the block
// layout present: the attention, dense FFN, shared expert and latent projections; not the F32
// router nor the expert stacks) an f16 copy from `arena`, layer by layer, while the copies stay
// within budget_bytes and the device keeps reserve_bytes free. F16 matrices point at their own rows.
// Synchronizes `stream` before returning.
absl::StatusOr<HalfWeightsResult> MakeResidentHalfWeights(std::vector<DLayer>& layers, DeviceArena& arena,
                                                          size_t budget_bytes, size_t reserve_bytes,
                                                          cudaStream_t stream);

}  // namespace k3::engine_cuda
