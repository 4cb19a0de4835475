// IEEE binary16 (fp16) and bfloat16 <-> binary32 conversions, exact and portable.
// f32 -> 16-bit rounds to nearest, ties to even (what F16C's vcvtps2ph and ggml's
// reference quantizers do); NaN stays NaN (quiet), infinities and subnormals are kept.
#pragma once

#include <bit>
#include <cstdint>

namespace k3::quant {

// Branch-free so that decode loops vectorize. A subnormal's mantissa m is converted exactly as
// float(m) (a normal f32) and scaled by 2^-24 through its exponent field: no f32 subnormal is
// involved, so the result is right under flush-to-zero/DAZ modes too.
constexpr float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = h & 0x7c00u;
  const uint32_t mant = h & 0x3ffu;
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;  // exponent + mantissa, f32 place
  const uint32_t normal = shifted + ((127u - 15u) << 23);               // rebias the exponent
  const uint32_t inf_nan = shifted | 0x7f800000u;
  const uint32_t sub = std::bit_cast<uint32_t>(static_cast<float>(mant)) - (24u << 23);
  const uint32_t bits = exp == 0x7c00u ? inf_nan : exp != 0 ? normal : mant != 0 ? sub : 0u;
  return std::bit_cast<float>(bits | sign);
}

constexpr uint16_t F32ToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  // 65520 is the midpoint between 65504 (largest finite, odd mantissa) and 2^16: ties go up.
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax >= 0x38800000u) {  // normal in fp16 (>= 2^-14): rebias, then round the 13 dropped bits
    const uint32_t rebiased = ax - ((127u - 15u) << 23);
    const uint32_t rounded = rebiased + 0xfffu + ((rebiased >> 13) & 1u);  // carry may bump exponent
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  if (ax <= 0x33000000u) return sign;  // <= 2^-25: rounds to (signed) zero, 2^-25 itself is a tie
  // Subnormal result: value / 2^-24 = mant24 * 2^(e - 126), with shift 126 - e in [14, 24].
  const uint32_t e = ax >> 23;
  const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q may become 0x400: the smallest normal
  return static_cast<uint16_t>(sign | q);
}

constexpr float Bf16ToF32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

constexpr uint16_t F32ToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // RNE; overflow gives inf
}

}  // namespace k3::quant
