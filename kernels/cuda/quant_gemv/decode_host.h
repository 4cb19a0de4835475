// Host-side use of the GPU decoders (decode.cuh), for tests: decodes a row the way the GEMV
// kernel sees it (a·v + b per run of 8) with k3::quant's lookup tables.
#pragma once

#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace k3::cuda {

// Writes the n elements of `row` (whole blocks, n a multiple of 8) to `out`; false when the type
// has no GPU decoder.
bool DecodeRowLikeGpu(quant::GgmlType type, const void* row, int64_t n, float* out);

}  // namespace k3::cuda
