// Decoders of the non-linear 4-bit formats IQ4_NL (32 per block) and IQ4_XS (256 per block):
// each nibble indexes kvalues_iq4nl, a fixed 16-entry int8 codebook.
#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/half.h"
#include "kernels/quant/iq_tables.h"

namespace k3::quant {
namespace {

// 32 weights from 16 bytes: low nibbles first, then high nibbles.
inline void DecodeNibbles32(const uint8_t* qs, float scale, float* dst) {
  for (int j = 0; j < 16; ++j) {
    dst[j] = scale * static_cast<float>(kKvaluesIq4nl[qs[j] & 0x0f]);
    dst[j + 16] = scale * static_cast<float>(kKvaluesIq4nl[qs[j] >> 4]);
  }
}

}  // namespace

void DecodeIQ4_NL(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockIQ4_NL), dst += kQK) {
    const auto b = LoadBlock<BlockIQ4_NL>(src);
    DecodeNibbles32(b.qs, F16ToF32(b.d), dst);
  }
}

void DecodeIQ4_XS(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockIQ4_XS), dst += kQK_K) {
    const auto b = LoadBlock<BlockIQ4_XS>(src);
    const float d = F16ToF32(b.d);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      // 6-bit group scale, biased by 32: low 4 bits from scales_l, high 2 from scales_h.
      const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((b.scales_h >> (2 * ib)) & 3) << 4);
      DecodeNibbles32(b.qs + 16 * ib, d * static_cast<float>(ls - 32), dst + 32 * ib);
    }
  }
}

}  // namespace k3::quant
