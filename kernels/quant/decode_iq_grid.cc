// Decoders of the lattice ("grid") formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S.
// A grid entry packs 8 (IQ2) or 4 (IQ3) unsigned magnitudes, one per byte; signs come either as
// a 7-bit index into ksigns_iq2xs (whose 8th bit makes the sign count even) or as explicit bits.
#include <cstring>

#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/half.h"
#include "kernels/quant/iq_tables.h"

namespace k3::quant {
namespace {

inline uint8_t GridByte(uint64_t entry, int j) { return static_cast<uint8_t>(entry >> (8 * j)); }
inline uint8_t GridByte(uint32_t entry, int j) { return static_cast<uint8_t>(entry >> (8 * j)); }

// dst[j] = scale * magnitude_j, negated where bit j of `signs` is set; 8 weights.
inline void Emit8(uint64_t grid, uint8_t signs, float scale, float* dst) {
  for (int j = 0; j < 8; ++j) {
    const float v = scale * static_cast<float>(GridByte(grid, j));
    dst[j] = (signs & (1u << j)) ? -v : v;
  }
}

// As Emit8 for two IQ3 grid entries of 4 magnitudes each.
inline void Emit4x2(uint32_t g1, uint32_t g2, uint8_t signs, float scale, float* dst) {
  for (int j = 0; j < 4; ++j) {
    const float v1 = scale * static_cast<float>(GridByte(g1, j));
    const float v2 = scale * static_cast<float>(GridByte(g2, j));
    dst[j] = (signs & (1u << j)) ? -v1 : v1;
    dst[j + 4] = (signs & (1u << (j + 4))) ? -v2 : v2;
  }
}

}  // namespace

// Per group of 32: u32 a = four 8-bit grid indices; u32 b = four 7-bit sign indices, then a
// 4-bit scale in the top bits: scale = d * (0.5 + s) / 4.
void DecodeIQ2_XXS(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockIQ2_XXS)) {
    const auto b = LoadBlock<BlockIQ2_XXS>(src);
    const float d = F16ToF32(b.d);
    for (int ib = 0; ib < kQK_K / 32; ++ib, dst += 32) {
      uint32_t aux[2];
      std::memcpy(aux, b.qs + 4 * ib, sizeof(aux));
      const float db = d * (0.5f + static_cast<float>(aux[1] >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const uint64_t grid = kIq2xxsGrid[(aux[0] >> (8 * l)) & 0xff];
        Emit8(grid, kKsignsIq2xs[(aux[1] >> (7 * l)) & 127], db, dst + 8 * l);
      }
    }
  }
}

// Each u16 of qs: grid index (9 bits) | sign index (7 bits). Scales: two nibbles per group of 32,
// the low one for its first 16 weights.
void DecodeIQ2_XS(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockIQ2_XS)) {
    const auto b = LoadBlock<BlockIQ2_XS>(src);
    const float d = F16ToF32(b.d);
    for (int ib = 0; ib < kQK_K / 32; ++ib, dst += 32) {
      const float db[2] = {d * (0.5f + static_cast<float>(b.scales[ib] & 0x0f)) * 0.25f,
                           d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l) {
        const uint16_t q = b.qs[4 * ib + l];
        Emit8(kIq2xsGrid[q & 511], kKsignsIq2xs[q >> 9], db[l / 2], dst + 8 * l);
      }
    }
  }
}

// Grid index = qs[l] | 2 bits of qh[group] (bits 2l, 2l+1) as bits 8-9; explicit sign bytes.
void DecodeIQ2_S(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockIQ2_S)) {
    const auto b = LoadBlock<BlockIQ2_S>(src);
    const float d = F16ToF32(b.d);
    const uint8_t* signs = b.qs + kQK_K / 8;
    for (int ib = 0; ib < kQK_K / 32; ++ib, dst += 32) {
      const float db[2] = {d * (0.5f + static_cast<float>(b.scales[ib] & 0x0f)) * 0.25f,
                           d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l) {
        const int idx = b.qs[4 * ib + l] | (((b.qh[ib] >> (2 * l)) & 3) << 8);
        Emit8(kIq2sGrid[idx], signs[4 * ib + l], db[l / 2], dst + 8 * l);
      }
    }
  }
}

// qs: 64 grid indices (two per 8 weights); then per group of 32 a u32 of four 7-bit sign indices
// and a 4-bit scale on top: scale = d * (0.5 + s) / 2.
void DecodeIQ3_XXS(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockIQ3_XXS)) {
    const auto b = LoadBlock<BlockIQ3_XXS>(src);
    const float d = F16ToF32(b.d);
    const uint8_t* scales_and_signs = b.qs + kQK_K / 4;
    for (int ib = 0; ib < kQK_K / 32; ++ib, dst += 32) {
      uint32_t aux;
      std::memcpy(&aux, scales_and_signs + 4 * ib, sizeof(aux));
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
      const uint8_t* q = b.qs + 8 * ib;
      for (int l = 0; l < 4; ++l) {
        Emit4x2(kIq3xxsGrid[q[2 * l]], kIq3xxsGrid[q[2 * l + 1]], kKsignsIq2xs[(aux >> (7 * l)) & 127], db,
                dst + 8 * l);
      }
    }
  }
}

// 9-bit grid indices: qs byte | bit k of qh[group] as bit 8 (k = index within the group of 8
// indices); explicit sign bytes; 4-bit odd scales 1 + 2s, two groups of 32 per scale byte.
void DecodeIQ3_S(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockIQ3_S)) {
    const auto b = LoadBlock<BlockIQ3_S>(src);
    const float d = F16ToF32(b.d);
    for (int ib = 0; ib < kQK_K / 32; ++ib, dst += 32) {
      const int s = (b.scales[ib / 2] >> (4 * (ib % 2))) & 0x0f;
      const float db = d * static_cast<float>(1 + 2 * s);
      const uint8_t* q = b.qs + 8 * ib;
      const uint8_t* signs = b.signs + 4 * ib;
      const int qh = b.qh[ib];
      for (int l = 0; l < 4; ++l) {
        const int i1 = q[2 * l] | (((qh >> (2 * l)) & 1) << 8);
        const int i2 = q[2 * l + 1] | (((qh >> (2 * l + 1)) & 1) << 8);
        Emit4x2(kIq3sGrid[i1], kIq3sGrid[i2], signs[l], db, dst + 8 * l);
      }
    }
  }
}

}  // namespace k3::quant
