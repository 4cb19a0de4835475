#include "worker/synth/block_fill.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/quant/blocks.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/half.h"
#include "worker/synth/counter_rng.h"

namespace k3::synth {
namespace {

using quant::GgmlType;

// The per-block factor of d: 16 steps over [0.75, 1.25], picked by the low 4 bits of a word.
float BlockFactorOf(uint64_t word) { return 0.75f + static_cast<float>(word & 15) * (0.5f / 15.0f); }
float BlockFactor(BlockRng& r) { return BlockFactorOf(r.Next()); }

// dmin / d of the K-quants whose mins equal their scales: every group is then zero-mean.
constexpr float kDminQ2_K = 1.5f;
constexpr float kDminQ4_K = 7.5f;
constexpr float kDminQ5_K = 15.5f;

double MeanSquareBlockFactor() {
  double s = 0;
  for (int k = 0; k < 16; ++k) {
    const double f = 0.75 + k * (0.5 / 15.0);
    s += f * f;
  }
  return s / 16;
}

void RandomBytes(BlockRng& r, uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t w = r.Next();
    std::memcpy(p + i, &w, n - i < 8 ? n - i : 8);
  }
}

// The low `bits` bits of *w, consumed.
inline int TakeBits(uint64_t* w, int bits) {
  const int v = static_cast<int>(*w & ((1ull << bits) - 1));
  *w >>= bits;
  return v;
}

// erf by its Taylor series, evaluated by the compiler: the table below is the same on every
// platform (no libm involved).
constexpr double ErfSeries(double x) {
  double term = x, sum = x;  // term_n = (-1)^n x^(2n+1) / n!
  for (int n = 1; n < 48; ++n) {  // |x| <= 2.9 here: converged to ~1e-15
    term *= -x * x / n;
    sum += term / (2 * n + 1);
  }
  return sum * 1.1283791670955126;  // 2 / sqrt(pi)
}

constexpr double NormalCdf(double z) { return 0.5 * (1.0 + ErfSeries(z * 0.70710678118654752)); }

constexpr double NormalQuantile(double p) {
  double lo = 0, hi = 4;  // p >= 0.5 only; the table is symmetric
  for (int i = 0; i < 44; ++i) {
    const double mid = 0.5 * (lo + hi);
    (NormalCdf(mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// A random byte -> a Gaussian int8: the 256 quantiles at (i + 0.5) / 256, scaled so the
// outermost is +-127 (as in a real Q8_0 block, whose largest weight maps to 127).
constexpr std::array<int8_t, 256> MakeGaussQ8() {
  std::array<int8_t, 256> t{};
  const double zmax = NormalQuantile(255.5 / 256);
  for (int i = 128; i < 256; ++i) {
    const auto q = static_cast<int8_t>(127.0 * NormalQuantile((i + 0.5) / 256) / zmax + 0.5);
    t[i] = q;
    t[255 - i] = static_cast<int8_t>(-q);
  }
  return t;
}
constexpr std::array<int8_t, 256> kGaussQ8 = MakeGaussQ8();
static_assert(kGaussQ8[0] == -127 && kGaussQ8[255] == 127 && kGaussQ8[128] == -kGaussQ8[127]);

// ---- one block each, super-scale d already including the block factor ----

void GenQ8_0(BlockRng& r, float d, uint8_t* out) {
  quant::BlockQ8_0 b;
  b.d = quant::F32ToF16(d);
  for (int j = 0; j < quant::kQK; j += 8) {
    const uint64_t w = r.Next();
    for (int k = 0; k < 8; ++k) b.qs[j + k] = kGaussQ8[(w >> (8 * k)) & 255];
  }
  std::memcpy(out, &b, sizeof(b));
}

// Group scales 4..7 of 0..7 (dl = d * (2s + 1)), random grid indices and delta signs.
void GenIQ1_S(BlockRng& r, float d, uint8_t* out) {
  quant::BlockIQ1_S b;
  b.d = quant::F32ToF16(d);
  RandomBytes(r, b.qs, sizeof(b.qs));
  for (int ib = 0; ib < 8; ib += 4) {
    uint64_t w = r.Next();
    for (int k = 0; k < 4; ++k) {
      const int hi = TakeBits(&w, 12);
      const int s = 4 + TakeBits(&w, 2);
      const int neg = TakeBits(&w, 1);
      b.qh[ib + k] = static_cast<uint16_t>(hi | (s << 12) | (neg << 15));
    }
  }
  std::memcpy(out, &b, sizeof(b));
}

// Per group: four 8-bit grid indices, four 7-bit sign indices, scale 8..15 of 0..15.
void GenIQ2_XXS(BlockRng& r, float d, uint8_t* out) {
  quant::BlockIQ2_XXS b;
  b.d = quant::F32ToF16(d);
  for (int ib = 0; ib < 8; ++ib) {
    uint64_t w = r.Next();
    uint32_t aux[2];
    aux[0] = static_cast<uint32_t>(TakeBits(&w, 32));
    aux[1] = static_cast<uint32_t>(TakeBits(&w, 28)) | (static_cast<uint32_t>(8 + TakeBits(&w, 3)) << 28);
    std::memcpy(b.qs + 4 * ib, aux, sizeof(aux));
  }
  std::memcpy(out, &b, sizeof(b));
}

// 9-bit grid index | 7-bit sign index per 8 weights; two scales 8..15 per group.
void GenIQ2_XS(BlockRng& r, float d, uint8_t* out) {
  quant::BlockIQ2_XS b;
  b.d = quant::F32ToF16(d);
  RandomBytes(r, reinterpret_cast<uint8_t*>(b.qs), sizeof(b.qs));
  uint64_t w = r.Next();
  for (int ib = 0; ib < 8; ++ib) {
    const int lo = 8 + TakeBits(&w, 3), hi = 8 + TakeBits(&w, 3);
    b.scales[ib] = static_cast<uint8_t>(lo | (hi << 4));
  }
  std::memcpy(out, &b, sizeof(b));
}

// x = d*sc*q - dmin*m with m = sc and dmin = 1.5 d: every group is d*sc*(q - 1.5), zero-mean.
void GenQ2_K(BlockRng& r, float d, uint8_t* out) {
  quant::BlockQ2_K b;
  uint64_t w = r.Next();
  for (int j = 0; j < 16; ++j) {
    const int sc = 8 + TakeBits(&w, 3);
    b.scales[j] = static_cast<uint8_t>(sc | (sc << 4));
  }
  RandomBytes(r, b.qs, sizeof(b.qs));
  b.d = quant::F32ToF16(d);
  b.dmin = quant::F32ToF16(kDminQ2_K * d);
  std::memcpy(out, &b, sizeof(b));
}

// Signed 6-bit scales (stored +32) of magnitude 16..31 and random sign: quants in -4..3 are
// not symmetric, the random sign makes the weights so.
void GenQ3_K(BlockRng& r, float d, uint8_t* out) {
  quant::BlockQ3_K b;
  RandomBytes(r, b.hmask, sizeof(b.hmask));
  RandomBytes(r, b.qs, sizeof(b.qs));
  std::memset(b.scales, 0, sizeof(b.scales));
  uint64_t w = 0;
  for (int j = 0; j < 16; ++j) {
    if (j % 8 == 0) w = r.Next();  // 5 bits a scale
    const int mag = 16 + TakeBits(&w, 4);
    const int v = (TakeBits(&w, 1) ? -mag : mag) + 32;  // 0..63
    const int lo = v & 15, hi = v >> 4;
    if (j < 8) {
      b.scales[j] |= static_cast<uint8_t>(lo);
    } else {
      b.scales[j - 8] |= static_cast<uint8_t>(lo << 4);
    }
    b.scales[8 + j % 4] |= static_cast<uint8_t>(hi << (2 * (j / 4)));
  }
  b.d = quant::F32ToF16(d);
  std::memcpy(out, &b, sizeof(b));
}

// Q4_K/Q5_K: 8 six-bit (scale, min) pairs in 12 bytes; min = scale, so with dmin = mid * d
// every group is d*sc*(q - mid), zero-mean.
void PackScaleMinK4(const int sc[8], uint8_t s[12]) {
  std::memset(s, 0, 12);
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
}

void RandomScalesK4(BlockRng& r, uint8_t s[12]) {
  uint64_t w = r.Next();
  int sc[8];
  for (int& v : sc) v = 32 + TakeBits(&w, 5);
  PackScaleMinK4(sc, s);
}

void GenQ4_K(BlockRng& r, float d, uint8_t* out) {
  quant::BlockQ4_K b;
  b.d = quant::F32ToF16(d);
  b.dmin = quant::F32ToF16(kDminQ4_K * d);
  RandomScalesK4(r, b.scales);
  RandomBytes(r, b.qs, sizeof(b.qs));
  std::memcpy(out, &b, sizeof(b));
}

void GenQ5_K(BlockRng& r, float d, uint8_t* out) {
  quant::BlockQ5_K b;
  b.d = quant::F32ToF16(d);
  b.dmin = quant::F32ToF16(kDminQ5_K * d);
  RandomScalesK4(r, b.scales);
  RandomBytes(r, b.qh, sizeof(b.qh));
  RandomBytes(r, b.qs, sizeof(b.qs));
  std::memcpy(out, &b, sizeof(b));
}

// int8 scales of magnitude 16..31, random sign (quants -32..31 are not symmetric).
void GenQ6_K(BlockRng& r, float d, uint8_t* out) {
  quant::BlockQ6_K b;
  RandomBytes(r, b.ql, sizeof(b.ql));
  RandomBytes(r, b.qh, sizeof(b.qh));
  uint64_t w = 0;
  for (int j = 0; j < 16; ++j) {
    if (j % 8 == 0) w = r.Next();  // 5 bits a scale
    const int mag = 16 + TakeBits(&w, 4);
    b.scales[j] = static_cast<int8_t>(TakeBits(&w, 1) ? -mag : mag);
  }
  b.d = quant::F32ToF16(d);
  std::memcpy(out, &b, sizeof(b));
}

using BlockGen = void (*)(BlockRng&, float, uint8_t*);

BlockGen GenFor(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0: return GenQ8_0;
    case GgmlType::kIQ1_S: return GenIQ1_S;
    case GgmlType::kIQ2_XXS: return GenIQ2_XXS;
    case GgmlType::kIQ2_XS: return GenIQ2_XS;
    case GgmlType::kQ2_K: return GenQ2_K;
    case GgmlType::kQ3_K: return GenQ3_K;
    case GgmlType::kQ4_K: return GenQ4_K;
    case GgmlType::kQ5_K: return GenQ5_K;
    case GgmlType::kQ6_K: return GenQ6_K;
    default: return nullptr;
  }
}

constexpr std::array<GgmlType, 9> kBlockTypes = {
    GgmlType::kQ8_0, GgmlType::kIQ1_S, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kQ2_K,
    GgmlType::kQ3_K, GgmlType::kQ4_K,  GgmlType::kQ5_K,    GgmlType::kQ6_K};

// RMS of decoded payloads at d = 1 (block factor excluded), from enough sample blocks that the
// estimate is good to ~0.3%. Fixed key: the same value on every run and every machine.
double PayloadRms(GgmlType type) {
  const quant::TypeTraits& t = quant::Traits(type);
  const int n_blocks = 262144 / static_cast<int>(t.block_elems);
  std::vector<uint8_t> bytes(static_cast<size_t>(n_blocks) * t.block_bytes);
  const BlockGen gen = GenFor(type);
  for (int b = 0; b < n_blocks; ++b) {
    BlockRng r(0x5eed5eed5eed5eedull, static_cast<uint64_t>(b));
    gen(r, 1.0f, bytes.data() + static_cast<size_t>(b) * t.block_bytes);
  }
  std::vector<float> v(static_cast<size_t>(n_blocks) * t.block_elems);
  quant::DequantizeRow(type, bytes.data(), v.data(), static_cast<int64_t>(v.size()));
  double s2 = 0;
  for (float x : v) s2 += static_cast<double>(x) * x;
  return std::sqrt(s2 / static_cast<double>(v.size()));
}

struct UnitRmsTable {
  std::array<double, 32> rms{};
  UnitRmsTable() {
    const double f = std::sqrt(MeanSquareBlockFactor());
    for (GgmlType type : kBlockTypes) rms[static_cast<size_t>(type)] = PayloadRms(type) * f;
  }
};

float PlainValue(const ValueSpec& v, BlockRng& r) {
  if (v.kind == ValueKind::kNegExpUniform) {
    return -static_cast<float>(std::exp(static_cast<double>(v.lo + (v.hi - v.lo) * r.Uniform())));
  }
  return v.mean + v.std * r.Normal();
}

// d before the block factor: the spec's std over the type's RMS per unit d.
float BaseScale(GgmlType type, const ValueSpec& values) { return static_cast<float>(values.std / UnitRms(type)); }

}  // namespace

BlockScaleBits BlockScalesFor(GgmlType type, const ValueSpec& values, int k) {
  if (GenFor(type) == nullptr || values.kind != ValueKind::kNormal || k < 0 || k > 15) std::abort();
  const float d = BaseScale(type, values) * BlockFactorOf(static_cast<uint64_t>(k));  // as FillBlocks
  BlockScaleBits s;
  s.d = quant::F32ToF16(d);  // as every Gen*
  switch (type) {  // as GenQ2_K / GenQ4_K / GenQ5_K
    case GgmlType::kQ2_K: s.dmin = quant::F32ToF16(kDminQ2_K * d); break;
    case GgmlType::kQ4_K: s.dmin = quant::F32ToF16(kDminQ4_K * d); break;
    case GgmlType::kQ5_K: s.dmin = quant::F32ToF16(kDminQ5_K * d); break;
    default: break;
  }
  return s;
}

const std::array<int8_t, 256>& GaussQ8Table() { return kGaussQ8; }

bool CanSynthesize(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16 ||
         GenFor(type) != nullptr;
}

double UnitRms(GgmlType type) {
  static const UnitRmsTable table;  // immutable once built; C++ makes the build thread-safe
  const auto i = static_cast<size_t>(type);
  return i < table.rms.size() ? table.rms[i] : 0.0;
}

void FillBlocks(GgmlType type, const ValueSpec& values, uint64_t key, uint64_t first_block,
                uint64_t n_blocks, uint8_t* out) {
  switch (type) {
    case GgmlType::kF32:
      for (uint64_t i = 0; i < n_blocks; ++i) {
        BlockRng r(key, first_block + i);
        const float v = PlainValue(values, r);
        std::memcpy(out + 4 * i, &v, 4);
      }
      return;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (uint64_t i = 0; i < n_blocks; ++i) {
        BlockRng r(key, first_block + i);
        const float v = PlainValue(values, r);
        const uint16_t h = type == GgmlType::kF16 ? quant::F32ToF16(v) : quant::F32ToBf16(v);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    default:
      break;
  }
  const BlockGen gen = GenFor(type);
  if (gen == nullptr || values.kind != ValueKind::kNormal) {
    std::abort();  // callers check CanSynthesize; block types only carry normal weights
  }
  const uint32_t block_bytes = quant::Traits(type).block_bytes;
  const float d0 = BaseScale(type, values);
  for (uint64_t i = 0; i < n_blocks; ++i) {
    BlockRng r(key, first_block + i);
    const float d = d0 * BlockFactor(r);
    gen(r, d, out + i * block_bytes);
  }
}

}  // namespace k3::synth
