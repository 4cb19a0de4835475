// The GPU fill's per-block generators (worker/synth_cuda/block_gen.h), compiled here as plain
// host C++: every block must be byte for byte what synth::FillBlocks writes. With this, CI (no
// GPU) checks everything of the device fill's bit-identity but the compiler it runs under; the
// GPU test tests/synth_cuda/ checks the rest.
#include "worker/synth_cuda/block_gen.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/quant/half.h"
#include "worker/synth/block_fill.h"
#include "worker/synth/counter_rng.h"

namespace k3::synth {
namespace {

using quant::GgmlType;

const GgmlType kGenTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,  GgmlType::kQ8_0,
                              GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,  GgmlType::kQ5_K,
                              GgmlType::kQ6_K, GgmlType::kIQ1_S, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS};

// What synth_fill_device.cc puts in the kernel's parameters.
gen::BlockGenTables Tables(GgmlType type, const ValueSpec& v) {
  gen::BlockGenTables t{};
  if (gen::IsPlain(type)) {
    t.mean = v.mean;
    t.std = v.std;
  } else {
    for (int k = 0; k < 16; ++k) {
      t.d[k] = BlockScalesFor(type, v, k).d;
      t.dmin[k] = BlockScalesFor(type, v, k).dmin;
    }
    for (int i = 0; i < 256; ++i) t.gauss_q8[i] = GaussQ8Table()[i];
  }
  return t;
}

void GenAny(GgmlType type, uint64_t key, uint64_t block, const gen::BlockGenTables& t, uint8_t* out) {
  switch (type) {
#define K3_CASE(T) \
  case GgmlType::T: return gen::GenBlock<GgmlType::T>(key, block, t, t.gauss_q8, out);
    K3_CASE(kF32)
    K3_CASE(kF16)
    K3_CASE(kBF16)
    K3_CASE(kQ8_0)
    K3_CASE(kIQ1_S)
    K3_CASE(kIQ2_XXS)
    K3_CASE(kIQ2_XS)
    K3_CASE(kQ2_K)
    K3_CASE(kQ3_K)
    K3_CASE(kQ4_K)
    K3_CASE(kQ5_K)
    K3_CASE(kQ6_K)
#undef K3_CASE
    default: FAIL() << "no generator";
  }
}

std::vector<ValueSpec> Specs(GgmlType type) {
  std::vector<ValueSpec> specs;
  for (const auto& [mean, std] : {std::pair<float, float>{0.0f, 0.0167f}, {0.0f, 0.5f}, {1.0f, 0.1f},
                                  {-0.3f, 1e-3f}, {0.0f, 3e-6f}}) {
    ValueSpec v;
    v.mean = gen::IsPlain(type) ? mean : 0.0f;
    v.std = std;
    specs.push_back(v);
  }
  return specs;
}

class GenType : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GenType, EveryBlockIsFillBlocksBytes) {
  const GgmlType type = GetParam();
  const uint32_t bb = quant::Traits(type).block_bytes;
  ASSERT_EQ(gen::GenBlockBytes(type), bb);
  ASSERT_TRUE(gen::SupportsBlockGen(type));
  std::vector<uint64_t> blocks;
  for (uint64_t b = 0; b < 600; ++b) blocks.push_back(b);
  for (uint64_t b : {uint64_t{1} << 32, (uint64_t{1} << 40) + 12345, ~uint64_t{0} - 1, ~uint64_t{0}}) blocks.push_back(b);
  for (const uint64_t key : {uint64_t{42}, TensorKey(7, "blk.1.ffn_gate_exps.weight"), ~uint64_t{0}}) {
    for (const ValueSpec& v : Specs(type)) {
      const gen::BlockGenTables t = Tables(type, v);
      std::vector<uint8_t> want(bb), got(bb);
      int bad = 0;
      for (uint64_t b : blocks) {
        FillBlocks(type, v, key, b, 1, want.data());
        std::fill(got.begin(), got.end(), 0xa5);
        GenAny(type, key, b, t, got.data());
        if (got != want && ++bad <= 3) {
          ADD_FAILURE() << quant::TypeName(type) << " key " << key << " std " << v.std << " block " << b;
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Synth, GenType, ::testing::ValuesIn(kGenTypes),
                         [](const auto& info) { return std::string(quant::TypeName(info.param)); });

// The d (and dmin) fields of FillBlocks' blocks are the table's entry for the block factor's
// 4 bits, and every entry is used.
TEST(BlockScalesFor, MatchTheBlocksScaleFields) {
  struct Field {
    GgmlType type;
    size_t d, dmin;  // offsets; dmin 0 = none
  };
  const Field fields[] = {{GgmlType::kQ8_0, 0, 0},  {GgmlType::kIQ1_S, 0, 0}, {GgmlType::kIQ2_XXS, 0, 0},
                          {GgmlType::kIQ2_XS, 0, 0}, {GgmlType::kQ2_K, 80, 82}, {GgmlType::kQ3_K, 108, 0},
                          {GgmlType::kQ4_K, 0, 2},  {GgmlType::kQ5_K, 0, 2},  {GgmlType::kQ6_K, 208, 0}};
  ValueSpec v;
  v.std = 0.0211f;
  for (const Field& f : fields) {
    const uint32_t bb = quant::Traits(f.type).block_bytes;
    std::vector<uint8_t> bytes(500 * bb);
    FillBlocks(f.type, v, 99, 0, 500, bytes.data());
    bool seen[16] = {};
    for (uint64_t b = 0; b < 500; ++b) {
      BlockRng r(99, b);
      const int k = static_cast<int>(r.Next() & 15);
      seen[k] = true;
      const BlockScaleBits s = BlockScalesFor(f.type, v, k);
      uint16_t d = 0, dmin = 0;
      std::memcpy(&d, bytes.data() + b * bb + f.d, 2);
      EXPECT_EQ(d, s.d) << quant::TypeName(f.type) << " block " << b;
      if (f.dmin != 0) {
        std::memcpy(&dmin, bytes.data() + b * bb + f.dmin, 2);
        EXPECT_EQ(dmin, s.dmin) << quant::TypeName(f.type) << " block " << b;
        EXPECT_NE(s.dmin, 0);
      } else {
        EXPECT_EQ(s.dmin, 0);
      }
    }
    for (bool x : seen) EXPECT_TRUE(x);
    // The 16 factors span [0.75, 1.25] of d0 = std / UnitRms.
    const double d0 = v.std / UnitRms(f.type);
    EXPECT_NEAR(quant::F16ToF32(BlockScalesFor(f.type, v, 0).d) / d0, 0.75, 2e-3);
    EXPECT_NEAR(quant::F16ToF32(BlockScalesFor(f.type, v, 15).d) / d0, 1.25, 2e-3);
  }
}

TEST(GaussQ8Table, IsSymmetricAndSpansTheInt8Range) {
  const auto& t = GaussQ8Table();
  EXPECT_EQ(t[0], -127);
  EXPECT_EQ(t[255], 127);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(t[i], -t[255 - i]);
  for (int i = 1; i < 256; ++i) EXPECT_LE(t[i - 1], t[i]);
}

// The window's index map: output block (e, r, c) from first + e * mat_pitch + r * row_pitch + c.
TEST(WindowSource, MapsPackedOutputBlocksToSourceBlocks) {
  gen::Window w;
  w.first_block = 1000;
  w.mat_pitch = 700;
  w.row_pitch = 35;
  w.n_rows = 6;
  w.n_col_blocks = 7;
  uint64_t i = 0;
  for (uint64_t e = 0; e < 3; ++e) {
    for (uint64_t r = 0; r < 6; ++r) {
      for (uint64_t c = 0; c < 7; ++c, ++i) {
        const uint64_t want = 1000 + e * 700 + r * 35 + c;
        EXPECT_EQ(gen::WindowSource<uint32_t>(w, static_cast<uint32_t>(i)), want);
        EXPECT_EQ(gen::WindowSource<uint64_t>(w, i), want);
      }
    }
  }
  // 64-bit: indices and pitches past 2^32.
  w.first_block = uint64_t{1} << 40;
  w.n_rows = uint64_t{1} << 20;
  w.n_col_blocks = uint64_t{1} << 13;
  w.row_pitch = uint64_t{1} << 14;
  w.mat_pitch = uint64_t{1} << 35;
  const uint64_t big = (uint64_t{5} << 33) + (uint64_t{77} << 13) + 9;  // e = 5, r = 77, c = 9
  EXPECT_EQ(gen::WindowSource<uint64_t>(w, big), (uint64_t{1} << 40) + 5 * (uint64_t{1} << 35) + 77 * (uint64_t{1} << 14) + 9);
}

}  // namespace
}  // namespace k3::synth
