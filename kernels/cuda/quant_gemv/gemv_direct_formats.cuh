// Chunk decoders of the direct GEMV (gemv_direct.h): one 16-byte load of a row (4 little-endian
// words) -> its weights as exact f32 values, word by word (kPerWord weights each; Q8_0: the int8
// quants, the f16 scale is applied per chunk by the kernel).
// Host and device; tests/cuda/quant_gemv_direct_test.cc checks them on the host against the CPU
// decoders bit for bit, like quant_decode_host_test does for decode.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/quant_gemv/decode.cuh"  // AsFloat, BytePerm, HalfToFloat, K3_HD

namespace k3::cuda::direct {

// Q8_0 (repacked): 16 int8 quants. v = q exactly: each byte, XORed with 0x80 (q + 128 as an
// unsigned byte; one LOP3 per 4 weights), is placed in the mantissa of 2^23 with a PRMT and
// 2^23 + 128 is subtracted with one FADD: 2 instructions per weight, no conversion unit.
struct DirectQ8_0 {
  static constexpr quant::GgmlType kType = quant::GgmlType::kQ8_0;
  static constexpr int kElems = 16, kPerWord = 4;
  static constexpr bool kScaled = true;
  K3_HD static void ConvertWord(uint32_t w, float v[4]) {
    w ^= 0x80808080u;
    for (int k = 0; k < 4; ++k) v[k] = qgemv::ByteF(w, k, 128.0f);  // constant trip counts: unrolled
  }
};

// F32: 4 floats, as they are.
struct DirectF32 {
  static constexpr quant::GgmlType kType = quant::GgmlType::kF32;
  static constexpr int kElems = 4, kPerWord = 1;
  static constexpr bool kScaled = false;
  K3_HD static void ConvertWord(uint32_t w, float v[1]) { v[0] = qgemv::AsFloat(w); }
};

// F16: 8 halves (low half of each word first), one conversion per weight.
struct DirectF16 {
  static constexpr quant::GgmlType kType = quant::GgmlType::kF16;
  static constexpr int kElems = 8, kPerWord = 2;
  static constexpr bool kScaled = false;
  K3_HD static void ConvertWord(uint32_t w, float v[2]) {
    v[0] = qgemv::HalfToFloat(w & 0xffffu);
    v[1] = qgemv::HalfToFloat(w >> 16);
  }
};

// BF16: 8 bfloat16 (low half first), a shift or a mask per weight.
struct DirectBF16 {
  static constexpr quant::GgmlType kType = quant::GgmlType::kBF16;
  static constexpr int kElems = 8, kPerWord = 2;
  static constexpr bool kScaled = false;
  K3_HD static void ConvertWord(uint32_t w, float v[2]) {
    v[0] = qgemv::AsFloat(w << 16);
    v[1] = qgemv::AsFloat(w & 0xffff0000u);
  }
};

// Word i (0..3) of a 16-byte chunk.
K3_HD uint32_t Word(const uint4& c, int i) { return i == 0 ? c.x : i == 1 ? c.y : i == 2 ? c.z : c.w; }

// The whole chunk, kElems weights in row order.
template <class F>
K3_HD void ConvertChunk(const uint4& c, float* v) {
  for (int i = 0; i < 4; ++i) F::ConvertWord(Word(c, i), v + i * F::kPerWord);
}

}  // namespace k3::cuda::direct
