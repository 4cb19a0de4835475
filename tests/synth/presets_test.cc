// The presets' shapes and the size overrides; the shard-count planner.
#include "worker/synth/presets.h"

#include <gtest/gtest.h>

#include "worker/model/quant_mix.h"
#include "worker/model/shard_rules.h"
#include "worker/model/tensor_manifest.h"
#include "worker/synth/synth_writer.h"

namespace k3::synth {
namespace {

using model::LayerKind;

TEST(Presets, AllAreValidAndKeepThePublishedTypes) {
  auto mix = model::QuantMix::Preset("UD-IQ1_S");
  ASSERT_TRUE(mix.ok());
  for (const std::string& name : PresetNames()) {
    auto c = PresetConfig(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_TRUE(CheckSynthConfig(*c).ok()) << name;
    EXPECT_EQ(c->layer_kinds[0], LayerKind::kKda) << name;
    EXPECT_EQ(c->n_dense_layers, 1) << name;
    // Every block-size constraint is met: no tensor falls back from its mix's type.
    for (const model::TensorSpec& s : model::ExpectedTensors(*c)) {
      const quant::GgmlType t = mix->TypeFor(s);
      if (s.role == model::TensorRole::kExperts) {
        EXPECT_EQ(t, quant::GgmlType::kIQ1_S) << name << " " << s.name;
      }
      if (s.role == model::TensorRole::kMatrix && s.base != "ffn_gate_inp" && s.base != "ssm_f_a" &&
          s.base != "ssm_beta") {
        EXPECT_EQ(t, quant::GgmlType::kQ8_0) << name << " " << s.name;
      }
    }
  }
  EXPECT_FALSE(PresetConfig("huge").ok());
}

TEST(Presets, ShapesAsDocumented) {
  const auto tiny = *PresetConfig("tiny");
  EXPECT_EQ(tiny.hidden, 256);
  EXPECT_EQ(tiny.n_layers, 4);
  EXPECT_TRUE(tiny.is_mla(3));
  EXPECT_EQ(tiny.kda_head_dim, 128);
  EXPECT_EQ(tiny.res_block_size, 2);
  const auto small = *PresetConfig("small");  // the golden model's shapes
  EXPECT_EQ(small.hidden, 512);
  EXPECT_EQ(small.n_mla_layers(), 2);
  EXPECT_TRUE(small.is_mla(3) && small.is_mla(7));
  EXPECT_EQ(small.n_experts, 32);
  EXPECT_EQ(small.expert_latent, 256);
  EXPECT_EQ(small.vocab, 4096);
  EXPECT_EQ(small.res_block_size, 3);
  const auto full = *PresetConfig("full");
  const auto real = model::RealK3Config();
  EXPECT_EQ(full.layer_kinds, real.layer_kinds);
  EXPECT_EQ(DefaultShards("full"), 14);
  const auto slice = *PresetConfig("slice");
  EXPECT_EQ(slice.hidden, real.hidden);
  EXPECT_EQ(slice.n_experts, real.n_experts);
  EXPECT_EQ(slice.dense_ffn, real.dense_ffn);
  EXPECT_EQ(slice.vocab, real.vocab);
}

TEST(Presets, Tp8SplitsOverEightRanksWithAnyExpertGrouping) {
  const auto c = *PresetConfig("tp8");
  EXPECT_GE(c.n_heads, 8);
  for (int groups : {1, 2, 4, 8}) {
    EXPECT_TRUE(model::CheckPlan(c, model::RankPlan{8, groups}).ok()) << groups << " expert groups";
  }
}

TEST(Presets, OverridesKeepTheLayerRhythm) {
  auto c = *PresetConfig("slice");
  SizeOverrides o;
  o.layers = 10;
  o.experts = 64;
  o.experts_used = 8;
  ASSERT_TRUE(ApplyOverrides(o, &c).ok());
  EXPECT_EQ(c.n_layers, 10);
  EXPECT_EQ(c.n_mla_layers(), 2);  // 3 and 7
  EXPECT_TRUE(c.is_mla(3) && c.is_mla(7) && !c.is_mla(9));
  EXPECT_EQ(c.n_experts, 64);

  auto full = *PresetConfig("full");
  SizeOverrides shorter;
  shorter.layers = 6;
  ASSERT_TRUE(ApplyOverrides(shorter, &full).ok());
  EXPECT_TRUE(full.is_mla(3) && full.is_mla(5));  // the real model's MLA last layer stays

  auto t = *PresetConfig("tiny");
  SizeOverrides explicit_mla;
  explicit_mla.mla_layers = std::vector<int64_t>{0, 2};
  ASSERT_TRUE(ApplyOverrides(explicit_mla, &t).ok());
  EXPECT_TRUE(t.is_mla(0) && t.is_mla(2) && !t.is_mla(3));

  auto bad = *PresetConfig("tiny");
  SizeOverrides too_many;
  too_many.experts_used = 17;
  EXPECT_FALSE(ApplyOverrides(too_many, &bad).ok());
  SizeOverrides out_of_range;
  out_of_range.mla_layers = std::vector<int64_t>{4};
  EXPECT_FALSE(ApplyOverrides(out_of_range, &bad).ok());
}

TEST(ShardLimit, GivesTheRequestedShardCount) {
  const std::vector<uint64_t> bytes = {100, 100, 100, 100, 100, 100, 100, 100, 100, 100};
  EXPECT_EQ(ShardLimitFor(bytes, 32, 1), 0u);  // no limit
  const uint64_t limit = ShardLimitFor(bytes, 32, 3);
  EXPECT_EQ(limit, 4 * 128u);  // 10 tensors of 128 padded bytes: 4 + 4 + 2
  EXPECT_LT(ShardLimitFor(bytes, 32, 5), limit);
}

}  // namespace
}  // namespace k3::synth
