// Decoders of the ~1.5-1.75 bit formats IQ1_S and IQ1_M (shared/spec/gguf.md has IQ1_S).
// Grid entries of iq1s_grid are 8 signed bytes in {-1, 0, +1}; a weight is scale * (g + delta).
#include <cstring>

#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/half.h"
#include "kernels/quant/iq_tables.h"

namespace k3::quant {
namespace {

inline void Emit8(uint64_t grid, float scale, float delta, float* dst) {
  for (int j = 0; j < 8; ++j) {
    const auto g = static_cast<int8_t>(static_cast<uint8_t>(grid >> (8 * j)));
    dst[j] = scale * (static_cast<float>(g) + delta);
  }
}

}  // namespace

void DecodeIQ1_S(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockIQ1_S)) {
    const auto b = LoadBlock<BlockIQ1_S>(src);
    const float d = F16ToF32(b.d);
    for (int ib = 0; ib < kQK_K / 32; ++ib, dst += 32) {
      const uint16_t qh = b.qh[ib];
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = (qh & 0x8000) ? -kIq1sDelta : kIq1sDelta;
      for (int l = 0; l < 4; ++l) {
        const int idx = b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
        Emit8(kIq1sGrid[idx], dl, delta, dst + 8 * l);
      }
    }
  }
}

// scales, read as four u16: bits 0-11 of each hold four 3-bit scales (two groups of 32, each with
// one scale per 16 weights); the top nibbles of the four u16 together are the fp16 super-scale.
// qh: one byte per 16 weights, per 8 weights a nibble = 3 high index bits + delta sign (bit 3).
void DecodeIQ1_M(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockIQ1_M)) {
    const auto b = LoadBlock<BlockIQ1_M>(src);
    uint16_t sc[4];
    std::memcpy(sc, b.scales, sizeof(sc));
    const auto d16 = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                           (sc[3] & 0xf000));
    const float d = F16ToF32(d16);
    for (int ib = 0; ib < kQK_K / 32; ++ib, dst += 32) {
      const int shift = 6 * (ib % 2);
      const float dl[2] = {d * static_cast<float>(2 * ((sc[ib / 2] >> shift) & 7) + 1),
                           d * static_cast<float>(2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1)};
      for (int l = 0; l < 4; ++l) {
        const int nib = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 0x0f;
        const int idx = b.qs[4 * ib + l] | ((nib & 7) << 8);
        const float delta = (nib & 8) ? -kIq1mDelta : kIq1mDelta;
        Emit8(kIq1sGrid[idx], dl[l / 2], delta, dst + 8 * l);
      }
    }
  }
}

}  // namespace k3::quant
