// The synthetic generator's blocks, one at a time, as host-and-device code: the GPU fill
// (synth_fill_device.cu) runs these; compiled as plain C++ (no CUDA needed) the CPU test
// tests/synth/block_gen_test.cc checks them against synth::FillBlocks, so the bit-identity of
// the device fill is tested in CI too.
//
// Each Gen* mirrors the Gen* of worker/synth/block_fill.cc word for word: the same BlockRng
// words, consumed in the same order, the same bits taken from each, written to the same field
// offsets of the quant::Block* struct. No floating point is done here for block types: the
// fp16 scale fields come precomputed (BlockGenTables::d/dmin, from synth::BlockScalesFor, i.e.
// the host's own f32 arithmetic), indexed by the block factor's 4 bits. Only the plain types
// (F32/F16/BF16, kNormal values) compute a float: mean + std * NormalFromWord(w), as two
// separately rounded f32 operations, as block_fill.cc does (built with -ffp-contract=off).
//
// Output: `out` points to block_bytes bytes, 2-byte aligned. Every field of every block type
// sits at an even offset and has an even size, so all stores are 16-bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/quant/blocks.h"
#include "kernels/quant/ggml_type.h"
#include "kernels/quant/half.h"
#include "worker/synth/counter_rng.h"

namespace k3::synth::gen {

// What the generators read besides the random words; a host fills it once per fill call.
struct BlockGenTables {
  uint16_t d[16];        // fp16 d by block-factor index (BlockScalesFor(type, values, k).d)
  uint16_t dmin[16];     // fp16 dmin likewise (Q2_K/Q4_K/Q5_K; else unused)
  int8_t gauss_q8[256];  // GaussQ8Table() (Q8_0 only)
  float mean, std;       // plain types: the ValueSpec's (kNormal)
};

// ---- stores ----

K3_SYNTH_HD inline void Put16(uint8_t* p, uint16_t v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint16_t*>(p) = v;
#else
  std::memcpy(p, &v, 2);
#endif
}

// 8 bytes, little-endian, at a 2-byte aligned address.
K3_SYNTH_HD inline void Put64(uint8_t* p, uint64_t w) {
  Put16(p, static_cast<uint16_t>(w));
  Put16(p + 2, static_cast<uint16_t>(w >> 16));
  Put16(p + 4, static_cast<uint16_t>(w >> 32));
  Put16(p + 6, static_cast<uint16_t>(w >> 48));
}

// block_fill.cc's RandomBytes for n a multiple of 8 (every use of it is).
template <int kN>
K3_SYNTH_HD inline void RandomBytes(BlockRng& r, uint8_t* p) {
  static_assert(kN % 8 == 0);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < kN; i += 8) Put64(p + i, r.Next());
}

// The low `bits` bits of *w, consumed.
K3_SYNTH_HD inline int TakeBits(uint64_t* w, int bits) {
  const int v = static_cast<int>(*w & ((1ull << bits) - 1));
  *w >>= bits;
  return v;
}

// ---- one block each; the caller has drawn the block-factor word (index k) already ----

K3_SYNTH_HD inline void GenQ8_0(BlockRng& r, const BlockGenTables& t, const int8_t* gauss, int k, uint8_t* out) {
  using B = quant::BlockQ8_0;
  Put16(out + offsetof(B, d), t.d[k]);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 0; j < quant::kQK; j += 8) {
    const uint64_t w = r.Next();
    uint64_t q = 0;
    for (int b = 0; b < 8; ++b) q |= static_cast<uint64_t>(static_cast<uint8_t>(gauss[(w >> (8 * b)) & 255])) << (8 * b);
    Put64(out + offsetof(B, qs) + j, q);
  }
}

K3_SYNTH_HD inline void GenIQ1_S(BlockRng& r, const BlockGenTables& t, int k, uint8_t* out) {
  using B = quant::BlockIQ1_S;
  Put16(out + offsetof(B, d), t.d[k]);
  RandomBytes<sizeof(B::qs)>(r, out + offsetof(B, qs));
  for (int ib = 0; ib < 8; ib += 4) {
    uint64_t w = r.Next();
    for (int j = 0; j < 4; ++j) {
      const int hi = TakeBits(&w, 12);
      const int s = 4 + TakeBits(&w, 2);
      const int neg = TakeBits(&w, 1);
      Put16(out + offsetof(B, qh) + 2 * (ib + j), static_cast<uint16_t>(hi | (s << 12) | (neg << 15)));
    }
  }
}

K3_SYNTH_HD inline void GenIQ2_XXS(BlockRng& r, const BlockGenTables& t, int k, uint8_t* out) {
  using B = quant::BlockIQ2_XXS;
  Put16(out + offsetof(B, d), t.d[k]);
  for (int ib = 0; ib < 8; ++ib) {
    uint64_t w = r.Next();
    const uint32_t a0 = static_cast<uint32_t>(TakeBits(&w, 32));
    const uint32_t a1 = static_cast<uint32_t>(TakeBits(&w, 28)) | (static_cast<uint32_t>(8 + TakeBits(&w, 3)) << 28);
    Put64(out + offsetof(B, qs) + 8 * ib, static_cast<uint64_t>(a0) | (static_cast<uint64_t>(a1) << 32));
  }
}

K3_SYNTH_HD inline void GenIQ2_XS(BlockRng& r, const BlockGenTables& t, int k, uint8_t* out) {
  using B = quant::BlockIQ2_XS;
  Put16(out + offsetof(B, d), t.d[k]);
  RandomBytes<sizeof(B::qs)>(r, out + offsetof(B, qs));
  uint64_t w = r.Next();
  uint8_t sc[8];
  for (int ib = 0; ib < 8; ++ib) {
    const int lo = 8 + TakeBits(&w, 3), hi = 8 + TakeBits(&w, 3);
    sc[ib] = static_cast<uint8_t>(lo | (hi << 4));
  }
  for (int j = 0; j < 8; j += 2) Put16(out + offsetof(B, scales) + j, static_cast<uint16_t>(sc[j] | (sc[j + 1] << 8)));
}

K3_SYNTH_HD inline void GenQ2_K(BlockRng& r, const BlockGenTables& t, int k, uint8_t* out) {
  using B = quant::BlockQ2_K;
  uint64_t w = r.Next();
  uint8_t sc[16];
  for (int j = 0; j < 16; ++j) {
    const int s = 8 + TakeBits(&w, 3);
    sc[j] = static_cast<uint8_t>(s | (s << 4));
  }
  for (int j = 0; j < 16; j += 2) Put16(out + offsetof(B, scales) + j, static_cast<uint16_t>(sc[j] | (sc[j + 1] << 8)));
  RandomBytes<sizeof(B::qs)>(r, out + offsetof(B, qs));
  Put16(out + offsetof(B, d), t.d[k]);
  Put16(out + offsetof(B, dmin), t.dmin[k]);
}

K3_SYNTH_HD inline void GenQ3_K(BlockRng& r, const BlockGenTables& t, int k, uint8_t* out) {
  using B = quant::BlockQ3_K;
  RandomBytes<sizeof(B::hmask)>(r, out + offsetof(B, hmask));
  RandomBytes<sizeof(B::qs)>(r, out + offsetof(B, qs));
  uint8_t s[12] = {};
  uint64_t w = 0;
  for (int j = 0; j < 16; ++j) {
    if (j % 8 == 0) w = r.Next();
    const int mag = 16 + TakeBits(&w, 4);
    const int v = (TakeBits(&w, 1) ? -mag : mag) + 32;
    const int lo = v & 15, hi = v >> 4;
    if (j < 8) {
      s[j] |= static_cast<uint8_t>(lo);
    } else {
      s[j - 8] |= static_cast<uint8_t>(lo << 4);
    }
    s[8 + j % 4] |= static_cast<uint8_t>(hi << (2 * (j / 4)));
  }
  for (int j = 0; j < 12; j += 2) Put16(out + offsetof(B, scales) + j, static_cast<uint16_t>(s[j] | (s[j + 1] << 8)));
  Put16(out + offsetof(B, d), t.d[k]);
}

// Q4_K/Q5_K: 8 six-bit (scale, min) pairs with min = scale, 32..63, packed in 12 bytes.
K3_SYNTH_HD inline void RandomScalesK4(BlockRng& r, uint8_t* out) {
  uint64_t w = r.Next();
  int sc[8];
  for (int j = 0; j < 8; ++j) sc[j] = 32 + TakeBits(&w, 5);
  uint8_t s[12] = {};
  for (int j = 0; j < 8; ++j) {
    const int m = sc[j];
    if (j < 4) {
      s[j] |= static_cast<uint8_t>(sc[j] & 63);
      s[j + 4] |= static_cast<uint8_t>(m & 63);
    } else {
      s[j + 4] = static_cast<uint8_t>((sc[j] & 15) | ((m & 15) << 4));
      s[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      s[j] |= static_cast<uint8_t>((m >> 4) << 6);
    }
  }
  for (int j = 0; j < 12; j += 2) Put16(out + j, static_cast<uint16_t>(s[j] | (s[j + 1] << 8)));
}

K3_SYNTH_HD inline void GenQ4_K(BlockRng& r, const BlockGenTables& t, int k, uint8_t* out) {
  using B = quant::BlockQ4_K;
  Put16(out + offsetof(B, d), t.d[k]);
  Put16(out + offsetof(B, dmin), t.dmin[k]);
  RandomScalesK4(r, out + offsetof(B, scales));
  RandomBytes<sizeof(B::qs)>(r, out + offsetof(B, qs));
}

K3_SYNTH_HD inline void GenQ5_K(BlockRng& r, const BlockGenTables& t, int k, uint8_t* out) {
  using B = quant::BlockQ5_K;
  Put16(out + offsetof(B, d), t.d[k]);
  Put16(out + offsetof(B, dmin), t.dmin[k]);
  RandomScalesK4(r, out + offsetof(B, scales));
  RandomBytes<sizeof(B::qh)>(r, out + offsetof(B, qh));
  RandomBytes<sizeof(B::qs)>(r, out + offsetof(B, qs));
}

K3_SYNTH_HD inline void GenQ6_K(BlockRng& r, const BlockGenTables& t, int k, uint8_t* out) {
  using B = quant::BlockQ6_K;
  RandomBytes<sizeof(B::ql)>(r, out + offsetof(B, ql));
  RandomBytes<sizeof(B::qh)>(r, out + offsetof(B, qh));
  uint8_t s[16];
  uint64_t w = 0;
  for (int j = 0; j < 16; ++j) {
    if (j % 8 == 0) w = r.Next();
    const int mag = 16 + TakeBits(&w, 4);
    s[j] = static_cast<uint8_t>(static_cast<int8_t>(TakeBits(&w, 1) ? -mag : mag));
  }
  for (int j = 0; j < 16; j += 2) Put16(out + offsetof(B, scales) + j, static_cast<uint16_t>(s[j] | (s[j + 1] << 8)));
  Put16(out + offsetof(B, d), t.d[k]);
}

// block_fill.cc's PlainValue for kNormal: mean + std * N, two f32 roundings (no FMA).
K3_SYNTH_HD inline float PlainNormal(float mean, float std, uint64_t w) {
  const float n = BlockRng::NormalFromWord(w);
#if defined(__CUDA_ARCH__)
  return __fadd_rn(mean, __fmul_rn(std, n));
#else
  volatile float p = std * n;  // keeps a host compiler from contracting into an FMA
  return mean + p;
#endif
}

// Block `block` of the tensor with key `key`, as synth::FillBlocks writes it (kNormal values).
// kType is a type SupportsBlockGen accepts; `gauss` is t.gauss_q8 or a copy of it (the device
// passes one in shared memory).
template <quant::GgmlType kType>
K3_SYNTH_HD inline void GenBlock(uint64_t key, uint64_t block, const BlockGenTables& t, const int8_t* gauss,
                                 uint8_t* out) {
  BlockRng r(key, block);
  const uint64_t w0 = r.Next();  // plain: the value's word; blocks: the block factor's
  if constexpr (kType == quant::GgmlType::kF32) {
    const float v = PlainNormal(t.mean, t.std, w0);
    uint32_t u;
    std::memcpy(&u, &v, 4);
    Put16(out, static_cast<uint16_t>(u));
    Put16(out + 2, static_cast<uint16_t>(u >> 16));
  } else if constexpr (kType == quant::GgmlType::kF16) {
    Put16(out, quant::F32ToF16(PlainNormal(t.mean, t.std, w0)));
  } else if constexpr (kType == quant::GgmlType::kBF16) {
    Put16(out, quant::F32ToBf16(PlainNormal(t.mean, t.std, w0)));
  } else {
    const int k = static_cast<int>(w0 & 15);
    if constexpr (kType == quant::GgmlType::kQ8_0) GenQ8_0(r, t, gauss, k, out);
    if constexpr (kType == quant::GgmlType::kIQ1_S) GenIQ1_S(r, t, k, out);
    if constexpr (kType == quant::GgmlType::kIQ2_XXS) GenIQ2_XXS(r, t, k, out);
    if constexpr (kType == quant::GgmlType::kIQ2_XS) GenIQ2_XS(r, t, k, out);
    if constexpr (kType == quant::GgmlType::kQ2_K) GenQ2_K(r, t, k, out);
    if constexpr (kType == quant::GgmlType::kQ3_K) GenQ3_K(r, t, k, out);
    if constexpr (kType == quant::GgmlType::kQ4_K) GenQ4_K(r, t, k, out);
    if constexpr (kType == quant::GgmlType::kQ5_K) GenQ5_K(r, t, k, out);
    if constexpr (kType == quant::GgmlType::kQ6_K) GenQ6_K(r, t, k, out);
  }
}

// Bytes of one block of `type` as GenBlock writes it; 0 for a type GenBlock does not make.
constexpr uint32_t GenBlockBytes(quant::GgmlType type) {
  switch (type) {
    case quant::GgmlType::kF32: return 4;
    case quant::GgmlType::kF16: return 2;
    case quant::GgmlType::kBF16: return 2;
    case quant::GgmlType::kQ8_0: return sizeof(quant::BlockQ8_0);
    case quant::GgmlType::kIQ1_S: return sizeof(quant::BlockIQ1_S);
    case quant::GgmlType::kIQ2_XXS: return sizeof(quant::BlockIQ2_XXS);
    case quant::GgmlType::kIQ2_XS: return sizeof(quant::BlockIQ2_XS);
    case quant::GgmlType::kQ2_K: return sizeof(quant::BlockQ2_K);
    case quant::GgmlType::kQ3_K: return sizeof(quant::BlockQ3_K);
    case quant::GgmlType::kQ4_K: return sizeof(quant::BlockQ4_K);
    case quant::GgmlType::kQ5_K: return sizeof(quant::BlockQ5_K);
    case quant::GgmlType::kQ6_K: return sizeof(quant::BlockQ6_K);
    default: return 0;
  }
}

// The types GenBlock makes (the plain ones for kNormal values only).
constexpr bool SupportsBlockGen(quant::GgmlType type) { return GenBlockBytes(type) != 0; }

// Whether `type` is a block type (its fp16 scales come from BlockGenTables::d/dmin).
constexpr bool IsPlain(quant::GgmlType type) {
  return type == quant::GgmlType::kF32 || type == quant::GgmlType::kF16 || type == quant::GgmlType::kBF16;
}

// ---- the window: which source block lands at output block i ----

// The output is n_mats x n_rows x n_col_blocks blocks, packed; output block (e, r, c) comes from
// source block first_block + e * mat_pitch + r * row_pitch + c.
struct Window {
  uint64_t first_block = 0;
  uint64_t mat_pitch = 0;
  uint64_t row_pitch = 0;
  uint64_t n_rows = 1;
  uint64_t n_col_blocks = 0;
};

template <class Index>  // uint32_t when every output index and count fits, else uint64_t
K3_SYNTH_HD inline uint64_t WindowSource(const Window& w, Index i) {
  const Index ncb = static_cast<Index>(w.n_col_blocks), nr = static_cast<Index>(w.n_rows);
  const Index q = i / ncb, c = i - q * ncb;
  const Index e = q / nr, row = q - e * nr;
  return w.first_block + static_cast<uint64_t>(e) * w.mat_pitch + static_cast<uint64_t>(row) * w.row_pitch +
         static_cast<uint64_t>(c);
}

}  // namespace k3::synth::gen
