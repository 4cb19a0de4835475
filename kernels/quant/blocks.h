// Byte layouts of the ggml quantization blocks (ggml/src/ggml-common.h), as this project reads them.
// Multi-byte fields are little-endian in the file; the structs assume a little-endian host.
// Fields named `d`/`dmin` are fp16 bit patterns (see half.h).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace k3::quant {

static_assert(std::endian::native == std::endian::little, "the block structs mirror little-endian files");

inline constexpr int kQK = 32;    // elements per block of the 32-wide formats
inline constexpr int kQK_K = 256;  // elements per super-block of the K- and IQ formats

// x = d * (q - 8), q 4-bit; element j in the low nibble of qs[j], element j+16 in its high nibble.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};

// x = d * (q - 16), q 5-bit: the 5th bit of element j is bit j of the little-endian u32 qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// x = d * q, q int8.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};

// x = d * kvalues_iq4nl[q], q 4-bit, nibble order as Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];
};

// 16 groups of 16: x = d*(sc&15)*q - dmin*(sc>>4), q 2-bit.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};

// 16 groups of 16: x = d*(s6-32)*(q2 - (hmask bit ? 0 : 4)); 6-bit scales packed in 12 bytes.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};

// 8 groups of 32: x = d*sc6*q4 - dmin*m6; scales/mins packed 6-bit in 12 bytes.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};

// As Q4_K with a 5th bit per element in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};

// 16 groups of 16: x = d*sc8*(q6 - 32); low 4 bits in ql, high 2 in qh.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};

// 8 groups of 32, each two u32: four 8-bit grid indices; 4x7 sign bits + 4-bit scale.
struct BlockIQ2_XXS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];
};

// Each u16 of qs: 9-bit grid index | 7-bit sign index; two 4-bit scales per group of 32.
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];
  uint8_t scales[kQK_K / 32];
};

// qs: 32 low bytes of 10-bit grid indices, then 32 bytes of explicit signs; qh: high index bits.
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};

// qs: 64 grid indices (4 values each), then 8 u32 of 4x7 sign bits + 4-bit scale.
struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[3 * kQK_K / 8];
};

// 9-bit grid indices (low 8 in qs, 9th in qh), explicit sign bits, 4-bit scales per 32.
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];
};

// See shared/spec/gguf.md: 11-bit grid indices, 3-bit scale and delta sign per group of 32.
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];
};

// No separate d: the fp16 super-scale is spread over the top nibbles of the four u16 of scales.
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];
  uint8_t scales[kQK_K / 32];
};

// 8 groups of 32: x = d*(s6-32)*kvalues_iq4nl[q]; s6 = 4 bits of scales_l | 2 bits of scales_h.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};

// Copies one block out of a byte stream: files give no alignment guarantee for the structs.
template <class Block>
inline Block LoadBlock(const uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof(Block));
  return b;
}

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockIQ2_XXS) == 66);
static_assert(sizeof(BlockIQ2_XS) == 74);
static_assert(sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98);
static_assert(sizeof(BlockIQ3_S) == 110);
static_assert(sizeof(BlockIQ1_S) == 50);
static_assert(sizeof(BlockIQ1_M) == 56);
static_assert(sizeof(BlockIQ4_XS) == 136);

}  // namespace k3::quant
