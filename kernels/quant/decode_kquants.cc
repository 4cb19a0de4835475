// Decoders of the K-quants (Q2_K..Q6_K): 256-element super-blocks with one or two fp16
// super-scales and small per-group integer scales (and mins for Q2_K/Q4_K/Q5_K).
#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/half.h"

namespace k3::quant {
namespace {

// Q4_K/Q5_K pack 8 six-bit scales and 8 six-bit mins in 12 bytes: groups 0-3 use the low 6 bits
// of bytes 0-3 (scale) and 4-7 (min); groups 4-7 take 4 bits from bytes 8-11 and their top 2 bits
// from the spare high bits of bytes 0-7.
inline void ScaleMinK4(int j, const uint8_t* s, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q3_K's 16 six-bit scales (biased by 32): low 4 bits are the nibbles of bytes 0-7 (groups 0-7
// low nibbles, 8-15 high nibbles); the top 2 bits come from bytes 8-11, 2 bits per group.
inline int ScaleQ3K(int j, const uint8_t* s) {
  const int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

}  // namespace

// Two halves of 128; in each, 32 bytes of qs hold four 2-bit planes (shift 0,2,4,6), each plane
// being 32 consecutive weights split in two groups of 16 with their own scale byte.
void DecodeQ2_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockQ2_K)) {
    const auto b = LoadBlock<BlockQ2_K>(src);
    const float d = F16ToF32(b.d);
    const float dmin = F16ToF32(b.dmin);
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int g = 0; g < 2; ++g) {
          const uint8_t sc = b.scales[is++];
          const float dl = d * static_cast<float>(sc & 0x0f);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            *dst++ = dl * static_cast<float>((q[16 * g + l] >> shift) & 3) - ml;
          }
        }
      }
    }
  }
}

// Layout as Q2_K for the low 2 bits; the third bit is in hmask (bit k of hmask[l] for plane k),
// and a clear bit means "subtract 4".
void DecodeQ3_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockQ3_K)) {
    const auto b = LoadBlock<BlockQ3_K>(src);
    const float d = F16ToF32(b.d);
    int is = 0;
    int plane = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, ++plane) {
        const uint8_t m = static_cast<uint8_t>(1u << plane);
        for (int g = 0; g < 2; ++g) {
          const float dl = d * static_cast<float>(ScaleQ3K(is++, b.scales));
          for (int l = 16 * g; l < 16 * g + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((b.hmask[l] & m) ? 0 : 4);
            *dst++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

// Four chunks of 64: 32 bytes of qs give the low nibbles (group 2c) then the high nibbles (2c+1).
void DecodeQ4_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockQ4_K)) {
    const auto b = LoadBlock<BlockQ4_K>(src);
    const float d = F16ToF32(b.d);
    const float dmin = F16ToF32(b.dmin);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = b.qs + 32 * c;
      int sc, mn;
      ScaleMinK4(2 * c, b.scales, sc, mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      ScaleMinK4(2 * c + 1, b.scales, sc, mn);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
      for (int l = 0; l < 32; ++l) *dst++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// As Q4_K; the 5th bit of weight l of group g is bit g of qh[l].
void DecodeQ5_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockQ5_K)) {
    const auto b = LoadBlock<BlockQ5_K>(src);
    const float d = F16ToF32(b.d);
    const float dmin = F16ToF32(b.dmin);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = b.qs + 32 * c;
      const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c));
      const uint8_t u2 = static_cast<uint8_t>(2u << (2 * c));
      int sc, mn;
      ScaleMinK4(2 * c, b.scales, sc, mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      ScaleMinK4(2 * c + 1, b.scales, sc, mn);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
      for (int l = 0; l < 32; ++l) {
        *dst++ = d1 * static_cast<float>((q[l] & 0x0f) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *dst++ = d2 * static_cast<float>((q[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
      }
    }
  }
}

// Two halves of 128. In a half, weight l (<32) of quarter k uses: low nibble of ql[l] (k=0),
// ql[l+32] (k=1), high nibble of ql[l] (k=2), ql[l+32] (k=3); bits 2k..2k+1 of qh[l];
// scale sc[2k + l/16].
void DecodeQ6_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += sizeof(BlockQ6_K), dst += kQK_K) {
    const auto b = LoadBlock<BlockQ6_K>(src);
    const float d = F16ToF32(b.d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b.ql + 64 * half;
      const uint8_t* qh = b.qh + 32 * half;
      const int8_t* sc = b.scales + 8 * half;
      float* y = dst + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

}  // namespace k3::quant
