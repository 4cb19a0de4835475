// Random quantized rows of any ggml type for the GPU tests: random bytes everywhere (every index,
// sign, nibble and scale bit pattern gets exercised), then the f16 super-scales set to finite
// values of a realistic size, so decoded weights are finite and O(0.01..1).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/quant/ggml_type.h"
#include "kernels/quant/half.h"

namespace k3::cuda::testing {

inline void PutF16(uint8_t* p, float v) {
  const uint16_t h = quant::F32ToF16(v);
  std::memcpy(p, &h, 2);
}

// `n_rows` rows of `cols` elements of `type`, row after row (dense).
inline std::vector<uint8_t> RandomQuantRows(quant::GgmlType type, int64_t n_rows, int64_t cols, std::mt19937_64& rng) {
  using quant::GgmlType;
  const quant::TypeTraits& tr = quant::Traits(type);
  const int64_t n_blocks = n_rows * (cols / tr.block_elems);
  const size_t bytes = static_cast<size_t>(n_blocks) * tr.block_bytes;
  std::vector<uint8_t> out(bytes + 8);
  for (size_t i = 0; i < out.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(out.data() + i, &r, 8);
  }
  out.resize(bytes);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  auto sgn = [&](float v) { return (rng() & 1) ? -v : v; };
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = out.data() + b * tr.block_bytes;
    switch (type) {
      case GgmlType::kF32: {
        const float v = normal(rng);
        std::memcpy(blk, &v, 4);
        break;
      }
      case GgmlType::kF16: PutF16(blk, normal(rng)); break;
      case GgmlType::kBF16: {
        const uint16_t h = quant::F32ToBf16(normal(rng));
        std::memcpy(blk, &h, 2);
        break;
      }
      case GgmlType::kQ2_K:
        PutF16(blk + 80, scale(rng));
        PutF16(blk + 82, scale(rng));
        break;
      case GgmlType::kQ3_K: PutF16(blk + 108, scale(rng)); break;
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K:
        PutF16(blk, scale(rng));
        PutF16(blk + 2, scale(rng));
        break;
      case GgmlType::kQ6_K: PutF16(blk + 208, scale(rng)); break;
      case GgmlType::kIQ1_M: {
        const uint16_t d16 = quant::F32ToF16(scale(rng));
        for (int i = 0; i < 4; ++i) {
          uint16_t sc;
          std::memcpy(&sc, blk + 48 + 2 * i, 2);
          sc = static_cast<uint16_t>((sc & 0x0fff) | (((d16 >> (4 * i)) & 0xf) << 12));
          std::memcpy(blk + 48 + 2 * i, &sc, 2);
        }
        break;
      }
      default: PutF16(blk, sgn(scale(rng))); break;  // d first: Q8_0, Q4_0, Q5_0, IQ4_NL, IQ2/IQ3, IQ1_S, IQ4_XS
    }
  }
  return out;
}

// Every type the GPU GEMV supports (the CPU's dequantizable set).
inline std::vector<quant::GgmlType> AllGpuTypes() {
  using quant::GgmlType;
  return {GgmlType::kF32,    GgmlType::kF16,     GgmlType::kBF16,    GgmlType::kQ8_0,    GgmlType::kQ4_0,
          GgmlType::kQ5_0,   GgmlType::kIQ4_NL,  GgmlType::kQ2_K,    GgmlType::kQ3_K,    GgmlType::kQ4_K,
          GgmlType::kQ5_K,   GgmlType::kQ6_K,    GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS,  GgmlType::kIQ2_S,
          GgmlType::kIQ3_XXS, GgmlType::kIQ3_S,  GgmlType::kIQ1_S,   GgmlType::kIQ1_M,   GgmlType::kIQ4_XS};
}

}  // namespace k3::cuda::testing
