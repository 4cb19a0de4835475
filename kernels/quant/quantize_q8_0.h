// f32 -> Q8_0, byte-exact with ggml's reference quantizer (quantize_row_q8_0_ref).
#pragma once

#include <cstdint>

namespace k3::quant {

// Quantizes `n` floats (a multiple of 32) into n/32 Q8_0 blocks (34 bytes each) at `dst`.
// Per block: d = amax/127, q = round(x / d) (ties away from zero), d stored as fp16.
void QuantizeRowQ8_0(const float* src, void* dst, int64_t n);

}  // namespace k3::quant
