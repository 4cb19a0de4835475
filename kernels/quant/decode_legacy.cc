// Decoders of the 32-element linear formats Q4_0, Q5_0, Q8_0.
#include <cstring>

#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/half.h"

namespace k3::quant {

void DecodeQ4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockQ4_0), dst += kQK) {
    const auto b = LoadBlock<BlockQ4_0>(src);
    const float d = F16ToF32(b.d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>((b.qs[j] & 0x0f) - 8) * d;
      dst[j + kQK / 2] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void DecodeQ5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockQ5_0), dst += kQK) {
    const auto b = LoadBlock<BlockQ5_0>(src);
    const float d = F16ToF32(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof(qh));
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b.qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + kQK / 2)) & 1u) << 4);
      dst[j] = static_cast<float>(lo - 16) * d;
      dst[j + kQK / 2] = static_cast<float>(hi - 16) * d;
    }
  }
}

void DecodeQ8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockQ8_0), dst += kQK) {
    const auto b = LoadBlock<BlockQ8_0>(src);
    const float d = F16ToF32(b.d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(b.qs[j]) * d;
  }
}

}  // namespace k3::quant
