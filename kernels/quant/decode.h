// Block decoders: one function per ggml type that turns whole blocks into f32.
// Internal to k3_quant: DequantizeRow, DotRow and MatMul are built on these, so all three
// produce the very same f32 weights for a given block.
#pragma once

#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace k3::quant {

// Decodes `n_blocks` consecutive blocks at `src` (no alignment needed) into
// n_blocks * block_elems floats at `dst`.
using DecodeFn = void (*)(const uint8_t* src, float* dst, int64_t n_blocks);

struct Decoder {
  uint32_t block_elems;
  uint32_t block_bytes;
  DecodeFn decode;
};

// The decoder of `type`, or nullptr when this project cannot decode it.
const Decoder* FindDecoder(GgmlType type);

// Per-family decoders (decode_plain.cc, decode_legacy.cc, decode_kquants.cc, decode_iq_grid.cc,
// decode_iq1.cc, decode_iq4.cc).
void DecodeF32(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeF16(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeBF16(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeQ4_0(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeQ5_0(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeQ8_0(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeQ2_K(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeQ3_K(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeQ4_K(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeQ5_K(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeQ6_K(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeIQ2_XXS(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeIQ2_XS(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeIQ2_S(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeIQ3_XXS(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeIQ3_S(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeIQ1_S(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeIQ1_M(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeIQ4_NL(const uint8_t* src, float* dst, int64_t n_blocks);
void DecodeIQ4_XS(const uint8_t* src, float* dst, int64_t n_blocks);

}  // namespace k3::quant
