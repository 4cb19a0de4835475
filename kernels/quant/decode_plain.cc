// Decoders of the plain float types (one element per "block").
#include <cstring>

#include "kernels/quant/decode.h"
#include "kernels/quant/half.h"

namespace k3::quant {

void DecodeF32(const uint8_t* src, float* dst, int64_t n_blocks) {
  std::memcpy(dst, src, static_cast<size_t>(n_blocks) * sizeof(float));
}

void DecodeF16(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = F16ToF32(h);
  }
}

void DecodeBF16(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint16_t b;
    std::memcpy(&b, src + 2 * i, 2);
    dst[i] = Bf16ToF32(b);
  }
}

}  // namespace k3::quant
