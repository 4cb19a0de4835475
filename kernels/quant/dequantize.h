// Row dequantization of the ggml block formats to f32 on the CPU.
#pragma once

#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace k3::quant {

// True when DequantizeRow / DotRow / MatMul accept `type`.
bool CanDequantize(GgmlType type);

// Decodes the `n` elements of `type` at `src` into `dst`. `n` must be a multiple of the type's
// block size and `type` dequantizable; anything else is a programming error and aborts.
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace k3::quant
