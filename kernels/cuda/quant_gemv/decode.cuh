// Per-type decoders of 8 consecutive weights, shared by the GPU kernels and a host test.
//
// Every ggml type decodes to w[k] = a * v[k] + b for a run of 8 weights, with v small exact
// values (integers, grid magnitudes with signs, or the float itself for F32/F16/BF16) and (a, b)
// constant over the run. The GEMV then computes Σ w·x as a·Σ v·x + b·Σ x: one FMA per weight,
// scales applied once per 8. Reconstructing a·v + b gives, for every type, the very f32 values of
// the CPU decoders (kernels/quant/decode_*.cc): tests/cuda/quant_decode_host_test checks that
// bit for bit on the host, where these functions also compile.
//
// `blk` points at the block's first byte (for the plain types: at the run's first element); it
// is 2-byte aligned (every block size is even). `sub` is the run's index inside the block
// (element offset / 8).
#pragma once

#include <cuda_runtime.h>
#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif

#include <cstdint>
#include <cstring>

#include "kernels/quant/ggml_type.h"
#include "kernels/quant/half.h"

#define K3_HD __host__ __device__ __forceinline__

namespace k3::cuda::qgemv {

// Lookup tables as the decoders see them: shared memory on the device, k3::quant's on the host.
struct IqTables {
  const uint64_t* iq1s = nullptr;    // [2048] iq1s_grid
  const uint64_t* iq2xxs = nullptr;  // [256]
  const uint64_t* iq2xs = nullptr;   // [512]
  const uint64_t* iq2s = nullptr;    // [1024]
  const uint32_t* iq3xxs = nullptr;  // [256]
  const uint32_t* iq3s = nullptr;    // [512]
  const uint8_t* ksigns = nullptr;   // [128] ksigns_iq2xs
  const int8_t* kvalues = nullptr;   // [16] kvalues_iq4nl
};

// Which tables a format needs (bit mask), so the kernel stages only those.
enum TableBits : uint32_t {
  kTabNone = 0,
  kTabIq1s = 1u << 0,
  kTabIq2xxs = 1u << 1,
  kTabIq2xs = 1u << 2,
  kTabIq2s = 1u << 3,
  kTabIq3xxs = 1u << 4,
  kTabIq3s = 1u << 5,
  kTabKsigns = 1u << 6,
  kTabKvalues = 1u << 7,
};

// ---- byte-level helpers (host and device) ----------------------------------------------------

K3_HD float AsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

K3_HD uint32_t AsBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

K3_HD uint32_t BytePerm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(x, y, s);
#else
  const uint64_t v = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t sel = (s >> (4 * i)) & 7u;
    r |= static_cast<uint32_t>((v >> (8 * sel)) & 0xffu) << (8 * i);
  }
  return r;
#endif
}

K3_HD uint32_t Ld8(const uint8_t* p) { return *p; }

K3_HD uint32_t Ld16(const uint8_t* p) {  // p 2-byte aligned
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}

K3_HD uint32_t Ld32(const uint8_t* p) { return Ld16(p) | (Ld16(p + 2) << 16); }  // p 2-byte aligned

K3_HD float HalfToFloat(uint32_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
#else
  return quant::F16ToF32(static_cast<uint16_t>(h));
#endif
}

// Byte k (0..3) of `word` as a float minus `bias` (bias an integer in [0, 255]): the byte is
// placed in the mantissa of 2^23 (exact), then 2^23 + bias is subtracted (exact). Two ALU
// instructions and no int->float conversion unit.
K3_HD float ByteF(uint32_t word, int k, float bias) {
  return AsFloat(BytePerm(word, 0x4B000000u, 0x7540u | static_cast<uint32_t>(k))) - (8388608.0f + bias);
}

// Eight bytes (lo word then hi word) as floats minus `bias`.
K3_HD void Bytes8(uint32_t lo, uint32_t hi, float bias, float v[8]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[k] = ByteF(lo, k, bias);
    v[k + 4] = ByteF(hi, k, bias);
  }
}

// A small signed integer (|i| < 2^22) as a float, exactly, without the conversion unit.
K3_HD float SmallIntF(int i) { return AsFloat(0x4B400000u + static_cast<uint32_t>(i)) - 12582912.0f; }

// Negates v[k] where bit k of `signs` is set.
K3_HD void ApplySigns(uint32_t signs, float v[8]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    v[k] = AsFloat((((signs >> k) & 1u) << 31) ^ AsBits(v[k]));
  }
}


// Spreads the 4 low bits of `bits` to bit 0 of the 4 bytes of a word.
K3_HD uint32_t Spread4(uint32_t bits) {
  bits &= 15u;
  return (bits | (bits << 7) | (bits << 14) | (bits << 21)) & 0x01010101u;
}

// ---- the formats ---------------------------------------------------------------------------
// Each has kBlockElems, kBlockBytes, kTables, kHasOffset (b can be nonzero), kUnitScale (a == 1,
// b == 0) and Decode8(blk, sub, tables, a, b, v).

struct FmtF32 {
  static constexpr quant::GgmlType kType = quant::GgmlType::kF32;
  static constexpr int kBlockElems = 1, kBlockBytes = 4;
  static constexpr uint32_t kTables = kTabNone;
  static constexpr bool kHasOffset = false, kUnitScale = true;
  K3_HD static void Decode8(const uint8_t* blk, int, const IqTables&, float& a, float& b, float v[8]) {
    a = 1.0f;
    b = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = AsFloat(Ld32(blk + 4 * k));
  }
};

struct FmtF16 {
  static constexpr quant::GgmlType kType = quant::GgmlType::kF16;
  static constexpr int kBlockElems = 1, kBlockBytes = 2;
  static constexpr uint32_t kTables = kTabNone;
  static constexpr bool kHasOffset = false, kUnitScale = true;
  K3_HD static void Decode8(const uint8_t* blk, int, const IqTables&, float& a, float& b, float v[8]) {
    a = 1.0f;
    b = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = HalfToFloat(Ld16(blk + 2 * k));
  }
};

struct FmtBF16 {
  static constexpr quant::GgmlType kType = quant::GgmlType::kBF16;
  static constexpr int kBlockElems = 1, kBlockBytes = 2;
  static constexpr uint32_t kTables = kTabNone;
  static constexpr bool kHasOffset = false, kUnitScale = true;
  K3_HD static void Decode8(const uint8_t* blk, int, const IqTables&, float& a, float& b, float v[8]) {
    a = 1.0f;
    b = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = AsFloat(Ld16(blk + 2 * k) << 16);
  }
};

// d: f16 | qs[32] int8. w = d * q.
struct FmtQ8_0 {
  static constexpr quant::GgmlType kType = quant::GgmlType::kQ8_0;
  static constexpr int kBlockElems = 32, kBlockBytes = 34;
  static constexpr uint32_t kTables = kTabNone;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables&, float& a, float& b, float v[8]) {
    a = HalfToFloat(Ld16(blk));
    b = 0.0f;
    const uint8_t* q = blk + 2 + 8 * sub;
    Bytes8(Ld32(q) ^ 0x80808080u, Ld32(q + 4) ^ 0x80808080u, 128.0f, v);  // q + 128 as unsigned
  }
};

// d | qs[16]: element j < 16 in the low nibble of qs[j], j >= 16 in the high nibble of qs[j-16].
struct FmtQ4_0 {
  static constexpr quant::GgmlType kType = quant::GgmlType::kQ4_0;
  static constexpr int kBlockElems = 32, kBlockBytes = 18;
  static constexpr uint32_t kTables = kTabNone;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables&, float& a, float& b, float v[8]) {
    a = HalfToFloat(Ld16(blk));
    b = 0.0f;
    const uint8_t* q = blk + 2 + 8 * (sub & 1);
    const int sh = 4 * (sub >> 1);
    Bytes8((Ld32(q) >> sh) & 0x0F0F0F0Fu, (Ld32(q + 4) >> sh) & 0x0F0F0F0Fu, 8.0f, v);
  }
};

// d | qh (u32: 5th bit of element j is bit j) | qs[16] as Q4_0. w = d * (q - 16).
struct FmtQ5_0 {
  static constexpr quant::GgmlType kType = quant::GgmlType::kQ5_0;
  static constexpr int kBlockElems = 32, kBlockBytes = 22;
  static constexpr uint32_t kTables = kTabNone;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables&, float& a, float& b, float v[8]) {
    a = HalfToFloat(Ld16(blk));
    b = 0.0f;
    const uint32_t qh = Ld32(blk + 2) >> (8 * sub);
    const uint8_t* q = blk + 6 + 8 * (sub & 1);
    const int sh = 4 * (sub >> 1);
    const uint32_t lo = ((Ld32(q) >> sh) & 0x0F0F0F0Fu) | (Spread4(qh) << 4);
    const uint32_t hi = ((Ld32(q + 4) >> sh) & 0x0F0F0F0Fu) | (Spread4(qh >> 4) << 4);
    Bytes8(lo, hi, 16.0f, v);
  }
};

// d | qs[16] as Q4_0; w = d * kvalues_iq4nl[nibble].
struct FmtIQ4_NL {
  static constexpr quant::GgmlType kType = quant::GgmlType::kIQ4_NL;
  static constexpr int kBlockElems = 32, kBlockBytes = 18;
  static constexpr uint32_t kTables = kTabKvalues;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables& t, float& a, float& b, float v[8]) {
    a = HalfToFloat(Ld16(blk));
    b = 0.0f;
    const uint8_t* q = blk + 2 + 8 * (sub & 1);
    const int sh = 4 * (sub >> 1);
    const uint32_t lo = Ld32(q) >> sh, hi = Ld32(q + 4) >> sh;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v[k] = SmallIntF(t.kvalues[(lo >> (8 * k)) & 15u]);
      v[k + 4] = SmallIntF(t.kvalues[(hi >> (8 * k)) & 15u]);
    }
  }
};

// scales[16] | qs[64] | d | dmin. Run s: half s/16; in the half, plane p, group g, offset l0.
struct FmtQ2_K {
  static constexpr quant::GgmlType kType = quant::GgmlType::kQ2_K;
  static constexpr int kBlockElems = 256, kBlockBytes = 84;
  static constexpr uint32_t kTables = kTabNone;
  static constexpr bool kHasOffset = true, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables&, float& a, float& b, float v[8]) {
    const int half = sub >> 4, r8 = sub & 15;
    const int p = r8 >> 2, g = (r8 >> 1) & 1, l0 = (r8 & 1) * 8;
    const uint32_t sc = Ld8(blk + 8 * half + 2 * p + g);
    const float d = HalfToFloat(Ld16(blk + 80)), dmin = HalfToFloat(Ld16(blk + 82));
    a = d * SmallIntF(static_cast<int>(sc & 15u));
    b = -(dmin * SmallIntF(static_cast<int>(sc >> 4)));
    const uint8_t* q = blk + 16 + 32 * half + 16 * g + l0;
    Bytes8((Ld32(q) >> (2 * p)) & 0x03030303u, (Ld32(q + 4) >> (2 * p)) & 0x03030303u, 0.0f, v);
  }
};

// hmask[32] | qs[64] | scales[12] | d. As Q2_K for the low 2 bits; a clear hmask bit subtracts 4.
struct FmtQ3_K {
  static constexpr quant::GgmlType kType = quant::GgmlType::kQ3_K;
  static constexpr int kBlockElems = 256, kBlockBytes = 110;
  static constexpr uint32_t kTables = kTabNone;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static int Scale(int j, const uint8_t* s) {
    const int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
  }
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables&, float& a, float& b, float v[8]) {
    const int half = sub >> 4, r8 = sub & 15;
    const int j = r8 >> 2, g = (r8 >> 1) & 1, l0 = 16 * g + (r8 & 1) * 8;
    const int plane = 4 * half + j;
    a = HalfToFloat(Ld16(blk + 108)) * SmallIntF(static_cast<int>(Scale(8 * half + 2 * j + g, blk + 96)));
    b = 0.0f;
    const uint8_t* q = blk + 32 + 32 * half + l0;
    const uint8_t* hm = blk + l0;
    const uint32_t lo = ((Ld32(q) >> (2 * j)) & 0x03030303u) | (((Ld32(hm) >> plane) & 0x01010101u) << 2);
    const uint32_t hi = ((Ld32(q + 4) >> (2 * j)) & 0x03030303u) | (((Ld32(hm + 4) >> plane) & 0x01010101u) << 2);
    Bytes8(lo, hi, 4.0f, v);
  }
};

// Q4_K/Q5_K's 6-bit scale and min of group j (0..7) from the 12 packed bytes.
K3_HD void ScaleMinK4(int j, const uint8_t* s, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// d | dmin | scales[12] | qs[128]: chunk c of 64 = low nibbles of qs[32c..] then high nibbles.
struct FmtQ4_K {
  static constexpr quant::GgmlType kType = quant::GgmlType::kQ4_K;
  static constexpr int kBlockElems = 256, kBlockBytes = 144;
  static constexpr uint32_t kTables = kTabNone;
  static constexpr bool kHasOffset = true, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables&, float& a, float& b, float v[8]) {
    const int c = sub >> 3, hi = (sub >> 2) & 1, l0 = (sub & 3) * 8;
    int sc, mn;
    ScaleMinK4(2 * c + hi, blk + 4, sc, mn);
    a = HalfToFloat(Ld16(blk)) * SmallIntF(static_cast<int>(sc));
    b = -(HalfToFloat(Ld16(blk + 2)) * SmallIntF(static_cast<int>(mn)));
    const uint8_t* q = blk + 16 + 32 * c + l0;
    const int sh = 4 * hi;
    Bytes8((Ld32(q) >> sh) & 0x0F0F0F0Fu, (Ld32(q + 4) >> sh) & 0x0F0F0F0Fu, 0.0f, v);
  }
};

// d | dmin | scales[12] | qh[32] | qs[128]: as Q4_K, the 5th bit of weight l of group g in qh[l].
struct FmtQ5_K {
  static constexpr quant::GgmlType kType = quant::GgmlType::kQ5_K;
  static constexpr int kBlockElems = 256, kBlockBytes = 176;
  static constexpr uint32_t kTables = kTabNone;
  static constexpr bool kHasOffset = true, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables&, float& a, float& b, float v[8]) {
    const int c = sub >> 3, hi = (sub >> 2) & 1, l0 = (sub & 3) * 8;
    int sc, mn;
    ScaleMinK4(2 * c + hi, blk + 4, sc, mn);
    a = HalfToFloat(Ld16(blk)) * SmallIntF(static_cast<int>(sc));
    b = -(HalfToFloat(Ld16(blk + 2)) * SmallIntF(static_cast<int>(mn)));
    const uint8_t* q = blk + 48 + 32 * c + l0;
    const uint8_t* qh = blk + 16 + l0;
    const int sh = 4 * hi, hb = 2 * c + hi;
    const uint32_t lo = ((Ld32(q) >> sh) & 0x0F0F0F0Fu) | (((Ld32(qh) >> hb) & 0x01010101u) << 4);
    const uint32_t hw = ((Ld32(q + 4) >> sh) & 0x0F0F0F0Fu) | (((Ld32(qh + 4) >> hb) & 0x01010101u) << 4);
    Bytes8(lo, hw, 0.0f, v);
  }
};

// ql[128] | qh[64] | scales[16] (int8) | d. w = d * sc * (q6 - 32).
struct FmtQ6_K {
  static constexpr quant::GgmlType kType = quant::GgmlType::kQ6_K;
  static constexpr int kBlockElems = 256, kBlockBytes = 210;
  static constexpr uint32_t kTables = kTabNone;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables&, float& a, float& b, float v[8]) {
    const int half = sub >> 4, r = 8 * (sub & 15);
    const int kq = r >> 5, l0 = r & 31;
    const int sc = static_cast<int8_t>(blk[192 + 8 * half + 2 * kq + (l0 >> 4)]);
    a = HalfToFloat(Ld16(blk + 208)) * SmallIntF(static_cast<int>(sc));
    b = 0.0f;
    const uint8_t* ql = blk + 64 * half + l0 + (kq & 1) * 32;
    const uint8_t* qh = blk + 128 + 32 * half + l0;
    const int sh = kq >= 2 ? 4 : 0;
    const uint32_t lo = ((Ld32(ql) >> sh) & 0x0F0F0F0Fu) | (((Ld32(qh) >> (2 * kq)) & 0x03030303u) << 4);
    const uint32_t hi = ((Ld32(ql + 4) >> sh) & 0x0F0F0F0Fu) | (((Ld32(qh + 4) >> (2 * kq)) & 0x03030303u) << 4);
    Bytes8(lo, hi, 32.0f, v);
  }
};

// d | qs as 8 pairs of u32: four 8-bit grid indices; four 7-bit sign indices + 4-bit scale.
struct FmtIQ2_XXS {
  static constexpr quant::GgmlType kType = quant::GgmlType::kIQ2_XXS;
  static constexpr int kBlockElems = 256, kBlockBytes = 66;
  static constexpr uint32_t kTables = kTabIq2xxs | kTabKsigns;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables& t, float& a, float& b, float v[8]) {
    const int ib = sub >> 2, l = sub & 3;
    const uint32_t aux0 = Ld32(blk + 2 + 8 * ib), aux1 = Ld32(blk + 6 + 8 * ib);
    a = HalfToFloat(Ld16(blk)) * (0.5f + SmallIntF(static_cast<int>(aux1 >> 28))) * 0.25f;
    b = 0.0f;
    const uint64_t grid = t.iq2xxs[(aux0 >> (8 * l)) & 255u];
    Bytes8(static_cast<uint32_t>(grid), static_cast<uint32_t>(grid >> 32), 0.0f, v);
    ApplySigns(t.ksigns[(aux1 >> (7 * l)) & 127u], v);
  }
};

// d | qs u16[32]: 9-bit grid index | 7-bit sign index | scales[8]: two nibbles per group of 32.
struct FmtIQ2_XS {
  static constexpr quant::GgmlType kType = quant::GgmlType::kIQ2_XS;
  static constexpr int kBlockElems = 256, kBlockBytes = 74;
  static constexpr uint32_t kTables = kTabIq2xs | kTabKsigns;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables& t, float& a, float& b, float v[8]) {
    const int ib = sub >> 2, l = sub & 3;
    const uint32_t sc = Ld8(blk + 66 + ib);
    a = HalfToFloat(Ld16(blk)) * (0.5f + SmallIntF(static_cast<int>(l < 2 ? (sc & 15u) : (sc >> 4)))) * 0.25f;
    b = 0.0f;
    const uint32_t q = Ld16(blk + 2 + 2 * (4 * ib + l));
    const uint64_t grid = t.iq2xs[q & 511u];
    Bytes8(static_cast<uint32_t>(grid), static_cast<uint32_t>(grid >> 32), 0.0f, v);
    ApplySigns(t.ksigns[q >> 9], v);
  }
};

// d | qs[64] (32 low index bytes, then 32 sign bytes) | qh[8] | scales[8].
struct FmtIQ2_S {
  static constexpr quant::GgmlType kType = quant::GgmlType::kIQ2_S;
  static constexpr int kBlockElems = 256, kBlockBytes = 82;
  static constexpr uint32_t kTables = kTabIq2s;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables& t, float& a, float& b, float v[8]) {
    const int ib = sub >> 2, l = sub & 3;
    const uint32_t sc = Ld8(blk + 74 + ib);
    a = HalfToFloat(Ld16(blk)) * (0.5f + SmallIntF(static_cast<int>(l < 2 ? (sc & 15u) : (sc >> 4)))) * 0.25f;
    b = 0.0f;
    const uint32_t idx = Ld8(blk + 2 + 4 * ib + l) | (((Ld8(blk + 66 + ib) >> (2 * l)) & 3u) << 8);
    const uint64_t grid = t.iq2s[idx];
    Bytes8(static_cast<uint32_t>(grid), static_cast<uint32_t>(grid >> 32), 0.0f, v);
    ApplySigns(Ld8(blk + 2 + 32 + 4 * ib + l), v);
  }
};

// d | qs[64] grid indices | 8 u32 of four 7-bit sign indices + 4-bit scale.
struct FmtIQ3_XXS {
  static constexpr quant::GgmlType kType = quant::GgmlType::kIQ3_XXS;
  static constexpr int kBlockElems = 256, kBlockBytes = 98;
  static constexpr uint32_t kTables = kTabIq3xxs | kTabKsigns;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables& t, float& a, float& b, float v[8]) {
    const int ib = sub >> 2, l = sub & 3;
    const uint32_t aux = Ld32(blk + 66 + 4 * ib);
    a = HalfToFloat(Ld16(blk)) * (0.5f + SmallIntF(static_cast<int>(aux >> 28))) * 0.5f;
    b = 0.0f;
    const uint8_t* q = blk + 2 + 8 * ib + 2 * l;
    Bytes8(t.iq3xxs[Ld8(q)], t.iq3xxs[Ld8(q + 1)], 0.0f, v);
    ApplySigns(t.ksigns[(aux >> (7 * l)) & 127u], v);
  }
};

// d | qs[64] | qh[8] | signs[32] | scales[4]: 9-bit indices, explicit signs, odd scales 1 + 2s.
struct FmtIQ3_S {
  static constexpr quant::GgmlType kType = quant::GgmlType::kIQ3_S;
  static constexpr int kBlockElems = 256, kBlockBytes = 110;
  static constexpr uint32_t kTables = kTabIq3s;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables& t, float& a, float& b, float v[8]) {
    const int ib = sub >> 2, l = sub & 3;
    const uint32_t s4 = (Ld8(blk + 106 + ib / 2) >> (4 * (ib & 1))) & 15u;
    a = HalfToFloat(Ld16(blk)) * SmallIntF(static_cast<int>(1 + 2 * static_cast<int>(s4)));
    b = 0.0f;
    const uint32_t qh = Ld8(blk + 66 + ib);
    const uint8_t* q = blk + 2 + 8 * ib + 2 * l;
    const uint32_t i1 = Ld8(q) | (((qh >> (2 * l)) & 1u) << 8);
    const uint32_t i2 = Ld8(q + 1) | (((qh >> (2 * l + 1)) & 1u) << 8);
    Bytes8(t.iq3s[i1], t.iq3s[i2], 0.0f, v);
    ApplySigns(Ld8(blk + 74 + 4 * ib + l), v);
  }
};

// d | qs[32] | qh u16[8] (shared/spec/gguf.md). w = dl * (g + delta), g in {-1, 0, 1}:
// a = dl, v = g, b = dl * delta (exact: delta is a power of two).
struct FmtIQ1_S {
  static constexpr quant::GgmlType kType = quant::GgmlType::kIQ1_S;
  static constexpr int kBlockElems = 256, kBlockBytes = 50;
  static constexpr uint32_t kTables = kTabIq1s;
  static constexpr bool kHasOffset = true, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables& t, float& a, float& b, float v[8]) {
    const int ib = sub >> 2, l = sub & 3;
    const uint32_t qh = Ld16(blk + 34 + 2 * ib);
    a = HalfToFloat(Ld16(blk)) * SmallIntF(static_cast<int>(2 * ((qh >> 12) & 7u) + 1));
    b = a * ((qh & 0x8000u) ? -0.125f : 0.125f);
    const uint64_t grid = t.iq1s[Ld8(blk + 2 + 4 * ib + l) | (((qh >> (3 * l)) & 7u) << 8)];
    Bytes8(static_cast<uint32_t>(grid) ^ 0x80808080u, static_cast<uint32_t>(grid >> 32) ^ 0x80808080u, 128.0f, v);
  }
};

// qs[32] | qh[16] | scales[8]: no d field; the f16 super-scale is the top nibbles of the 4 u16.
struct FmtIQ1_M {
  static constexpr quant::GgmlType kType = quant::GgmlType::kIQ1_M;
  static constexpr int kBlockElems = 256, kBlockBytes = 56;
  static constexpr uint32_t kTables = kTabIq1s;
  static constexpr bool kHasOffset = true, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables& t, float& a, float& b, float v[8]) {
    const int ib = sub >> 2, l = sub & 3;
    const uint32_t s0 = Ld16(blk + 48), s1 = Ld16(blk + 50), s2 = Ld16(blk + 52), s3 = Ld16(blk + 54);
    const uint32_t d16 = (s0 >> 12) | ((s1 >> 8) & 0x00f0u) | ((s2 >> 4) & 0x0f00u) | (s3 & 0xf000u);
    const uint32_t sc = Ld16(blk + 48 + 2 * (ib / 2));
    const int shift = 6 * (ib % 2) + 3 * (l / 2);
    a = HalfToFloat(d16) * SmallIntF(static_cast<int>(2 * ((sc >> shift) & 7u) + 1));
    const uint32_t nib = (Ld8(blk + 32 + 2 * ib + l / 2) >> (4 * (l % 2))) & 15u;
    b = a * ((nib & 8u) ? -0.125f : 0.125f);
    const uint64_t grid = t.iq1s[Ld8(blk + 4 * ib + l) | ((nib & 7u) << 8)];
    Bytes8(static_cast<uint32_t>(grid) ^ 0x80808080u, static_cast<uint32_t>(grid >> 32) ^ 0x80808080u, 128.0f, v);
  }
};

// d | scales_h (u16) | scales_l[4] | qs[128]: group ib of 32 = 16 bytes, low nibbles then high.
struct FmtIQ4_XS {
  static constexpr quant::GgmlType kType = quant::GgmlType::kIQ4_XS;
  static constexpr int kBlockElems = 256, kBlockBytes = 136;
  static constexpr uint32_t kTables = kTabKvalues;
  static constexpr bool kHasOffset = false, kUnitScale = false;
  K3_HD static void Decode8(const uint8_t* blk, int sub, const IqTables& t, float& a, float& b, float v[8]) {
    const int ib = sub >> 2, j0 = 8 * (sub & 3);
    const int ls = static_cast<int>(((Ld8(blk + 4 + ib / 2) >> (4 * (ib % 2))) & 15u) |
                                    (((Ld16(blk + 2) >> (2 * ib)) & 3u) << 4));
    a = HalfToFloat(Ld16(blk)) * SmallIntF(static_cast<int>(ls - 32));
    b = 0.0f;
    const uint8_t* q = blk + 8 + 16 * ib + (j0 & 15);
    const int sh = j0 >= 16 ? 4 : 0;
    const uint32_t lo = Ld32(q) >> sh, hi = Ld32(q + 4) >> sh;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v[k] = SmallIntF(t.kvalues[(lo >> (8 * k)) & 15u]);
      v[k + 4] = SmallIntF(t.kvalues[(hi >> (8 * k)) & 15u]);
    }
  }
};

// Calls fn(Fmt{}) for the format of `type`; returns false for a type without a GPU decoder.
template <class Fn>
inline bool VisitFormat(quant::GgmlType type, Fn&& fn) {
  using quant::GgmlType;
  switch (type) {
    case GgmlType::kF32: fn(FmtF32{}); return true;
    case GgmlType::kF16: fn(FmtF16{}); return true;
    case GgmlType::kBF16: fn(FmtBF16{}); return true;
    case GgmlType::kQ8_0: fn(FmtQ8_0{}); return true;
    case GgmlType::kQ4_0: fn(FmtQ4_0{}); return true;
    case GgmlType::kQ5_0: fn(FmtQ5_0{}); return true;
    case GgmlType::kIQ4_NL: fn(FmtIQ4_NL{}); return true;
    case GgmlType::kQ2_K: fn(FmtQ2_K{}); return true;
    case GgmlType::kQ3_K: fn(FmtQ3_K{}); return true;
    case GgmlType::kQ4_K: fn(FmtQ4_K{}); return true;
    case GgmlType::kQ5_K: fn(FmtQ5_K{}); return true;
    case GgmlType::kQ6_K: fn(FmtQ6_K{}); return true;
    case GgmlType::kIQ2_XXS: fn(FmtIQ2_XXS{}); return true;
    case GgmlType::kIQ2_XS: fn(FmtIQ2_XS{}); return true;
    case GgmlType::kIQ2_S: fn(FmtIQ2_S{}); return true;
    case GgmlType::kIQ3_XXS: fn(FmtIQ3_XXS{}); return true;
    case GgmlType::kIQ3_S: fn(FmtIQ3_S{}); return true;
    case GgmlType::kIQ1_S: fn(FmtIQ1_S{}); return true;
    case GgmlType::kIQ1_M: fn(FmtIQ1_M{}); return true;
    case GgmlType::kIQ4_XS: fn(FmtIQ4_XS{}); return true;
    default: return false;
  }
}

}  // namespace k3::cuda::qgemv
