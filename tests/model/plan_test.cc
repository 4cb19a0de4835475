// The shard plan tiles every tensor exactly, refuses plans that do not divide, and the fit check
// predicts per-rank memory from shapes alone (the real 2.8T model included).
#include <map>

#include <gtest/gtest.h>

#include "worker/model/fit_check.h"
#include "worker/model/quant_mix.h"
#include "worker/model/shard_rules.h"

namespace k3::model {
namespace {

// A small config with the golden model's shapes, built without the file.
K3Config GoldenShapes() {
  K3Config c = RealK3Config();
  c.n_layers = 8;
  c.layer_kinds.assign(8, LayerKind::kKda);
  c.layer_kinds[3] = c.layer_kinds[7] = LayerKind::kMla;
  c.hidden = 512;
  c.vocab = 4096;
  c.n_heads = 4;
  c.q_lora_rank = 256;
  c.dense_ffn = 1024;
  c.n_experts = 32;
  c.n_experts_used = 4;
  c.expert_ffn = 256;
  c.expert_latent = 256;
  c.res_block_size = 3;
  return c;
}

// For every tensor: ranks holding a split part cover each split dimension exactly once;
// replicated tensors are held whole by every rank.
void ExpectTiles(const K3Config& c, const RankPlan& p) {
  ASSERT_TRUE(CheckPlan(c, p).ok()) << CheckPlan(c, p);
  for (const TensorSpec& spec : ExpectedTensors(c)) {
    std::map<std::pair<int64_t, int64_t>, int> pieces;  // (range begin, range2 begin) -> count
    int64_t covered = 0;
    for (int r = 0; r < p.ranks; ++r) {
      const SliceRange s = SliceOf(c, spec, ShardFor(c, p, r));
      if (s.dim < 0) {
        ++pieces[{-1, -1}];
        continue;
      }
      ASSERT_LT(s.dim, static_cast<int>(spec.ne.size())) << spec.name;
      ASSERT_LE(s.end, spec.ne[s.dim]) << spec.name;
      int64_t n = s.end - s.begin;
      if (s.dim2 >= 0) {
        ASSERT_LE(s.end2, spec.ne[s.dim2]) << spec.name;
        n *= s.end2 - s.begin2;
      }
      covered += n;
      ++pieces[{s.begin, s.dim2 >= 0 ? s.begin2 : 0}];
    }
    const std::pair<int64_t, int64_t> kWhole{-1, -1};
    if (pieces.contains(kWhole)) {
      EXPECT_EQ(pieces[kWhole], p.ranks) << spec.name << " replicated on some ranks only";
      EXPECT_EQ(AxisFor(spec), ShardAxis::kReplicated);
      continue;
    }
    // Disjoint pieces (no two ranks start the same piece) whose sizes add up to the tensor.
    for (const auto& [k, n] : pieces) EXPECT_EQ(n, 1) << spec.name << " piece held twice";
    const SliceRange s0 = SliceOf(c, spec, ShardFor(c, p, 0));
    int64_t whole = spec.ne[s0.dim] * (s0.dim2 >= 0 ? spec.ne[s0.dim2] : 1);
    EXPECT_EQ(covered, whole) << spec.name;
  }
}

TEST(ShardPlan, TilesEveryTensor) {
  for (int ranks : {1, 2, 4}) ExpectTiles(GoldenShapes(), {ranks, ranks});
  for (int ranks : {1, 2, 4, 8}) ExpectTiles(RealK3Config(), {ranks, ranks});
  ExpectTiles(RealK3Config(), {8, 2});  // 2 expert groups x 4 FFN bands
  ExpectTiles(RealK3Config(), {8, 4});
  ExpectTiles(RealK3Config(), {2, 1});
}

TEST(ShardPlan, RefusesPlansThatDoNotDivide) {
  auto s = CheckPlan(GoldenShapes(), {3, 3});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("heads"), std::string::npos) << s;
  s = CheckPlan(RealK3Config(), {5, 5});
  EXPECT_FALSE(s.ok());
  s = CheckPlan(RealK3Config(), {8, 3});
  EXPECT_FALSE(s.ok());
  // Bands that would cut IQ1_S blocks of the expert FFN (3072 = 12 blocks of 256).
  s = CheckPlan(RealK3Config(), {8, 1});
  EXPECT_FALSE(s.ok()) << "8 bands of 384 would cut 256-blocks";
}

TEST(FitCheck, RealK3OnEightH200At128k) {
  auto mix = QuantMix::Preset("UD-IQ1_S");
  ASSERT_TRUE(mix.ok());
  TypeOf type_of = [&](const TensorSpec& s) { return mix->TypeFor(s); };
  FitRequest req;
  req.plan = {8, 8};
  req.context = 131072;
  auto r = PlanFit(RealK3Config(), type_of, req);
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("%s", r->Table().c_str());
  // 553 GiB at UD-IQ1_S (spec): the shapes and the quant mix reproduce the published size.
  EXPECT_NEAR(static_cast<double>(r->model_bytes) / kGiB, 553.0, 2.0);
  EXPECT_TRUE(r->fits());
  EXPECT_TRUE(RequireFit(*r).ok());
  // Sharded + replicated bytes account for the whole model exactly.
  const RankFit& f = r->ranks[0];
  EXPECT_EQ((f.weights - f.replicated) * 8 + f.replicated, r->model_bytes);
  // MLA cache: 24 layers x 576 x 2 bytes x 128k = 3.375 GiB per sequence.
  EXPECT_EQ(f.mla_cache, 24ull * 576 * 2 * 131072);
}

// The routed experts' IQ1_S rows in the ternary form (k3-worker --ternary-experts): per rank the
// expert slices grow to Iq1sTernaryRowBytes per row (gate/up 3584 wide: 1016 bytes for 700; down
// 3072 wide: 872 for 600), everything else stays, and the real K3 still fits 8 H200 at 128k.
TEST(FitCheck, TernaryExpertsCountTheirRows) {
  auto mix = QuantMix::Preset("UD-IQ1_S");
  ASSERT_TRUE(mix.ok());
  TypeOf type_of = [&](const TensorSpec& s) { return mix->TypeFor(s); };
  FitRequest req;
  req.plan = {8, 8};
  req.context = 131072;
  auto plain = PlanFit(RealK3Config(), type_of, req);
  req.ternary_experts = true;
  auto ternary = PlanFit(RealK3Config(), type_of, req);
  ASSERT_TRUE(plain.ok() && ternary.ok());
  uint64_t extra = 0;  // what the ternary rows add on one rank, tensor by tensor
  for (const TensorSpec& s : ExpectedTensors(RealK3Config())) {
    if (AxisFor(s) != ShardAxis::kExperts || type_of(s) != quant::GgmlType::kIQ1_S) continue;
    const uint64_t rows = static_cast<uint64_t>(s.ne[1] * s.ne[2] / 8);  // 8 groups of whole experts
    const uint64_t ggml = static_cast<uint64_t>(s.ne[0] / 256 * 50), tern = s.ne[0] == 3584 ? 1016 : 872;
    ASSERT_TRUE(s.ne[0] == 3584 || s.ne[0] == 3072) << s.name;
    extra += rows * (tern - ggml);
  }
  EXPECT_GT(extra, 200 * kGiB / 8);  // most of the model is IQ1_S experts
  const RankFit &p = plain->ranks[0], &t = ternary->ranks[0];
  EXPECT_EQ(t.weights, p.weights + extra);
  EXPECT_EQ(t.replicated, p.replicated);
  EXPECT_EQ(t.mla_cache, p.mla_cache);
  EXPECT_EQ(ternary->model_bytes, plain->model_bytes);  // the file's bytes
  EXPECT_TRUE(ternary->fits()) << ternary->Table();
}

TEST(FitCheck, OneH200IsRefusedNamingRankAndShortfall) {
  auto mix = QuantMix::Preset("UD-IQ1_S");
  ASSERT_TRUE(mix.ok());
  FitRequest req;
  req.plan = {1, 1};
  auto r = PlanFit(RealK3Config(), [&](const TensorSpec& s) { return mix->TypeFor(s); }, req);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->fits());
  auto s = RequireFit(*r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(s.message()).find("rank 0"), std::string::npos);
  EXPECT_NE(std::string(s.message()).find("short by"), std::string::npos);
}

TEST(FitCheck, MoreSequencesNeedMoreCache) {
  auto mix = QuantMix::Preset("UD-IQ1_S");
  ASSERT_TRUE(mix.ok());
  FitRequest req;
  req.plan = {8, 8};
  req.context = 131072;
  req.n_seqs = 64;  // 64 x 3.4 GiB of MLA cache per rank does not fit
  auto r = PlanFit(RealK3Config(), [&](const TensorSpec& s) { return mix->TypeFor(s); }, req);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->fits());
}

TEST(QuantMix, PresetsAndOverrides) {
  auto m = QuantMix::Preset("UD-IQ1_S");
  ASSERT_TRUE(m.ok());
  const K3Config c = RealK3Config();
  std::map<std::string, quant::GgmlType> got;
  for (const TensorSpec& s : ExpectedTensors(c)) {
    if (s.layer <= 1) got[s.base] = m->TypeFor(s);
  }
  EXPECT_EQ(got["ffn_gate_exps"], quant::GgmlType::kIQ1_S);
  EXPECT_EQ(got["attn_q"], quant::GgmlType::kQ8_0);
  EXPECT_EQ(got["ffn_gate_inp"], quant::GgmlType::kF32);
  EXPECT_EQ(got["ssm_f_a"], quant::GgmlType::kF32);
  EXPECT_EQ(got["attn_norm"], quant::GgmlType::kF32);
  ASSERT_TRUE(m->AddOverride("blk.*.ffn_down_exps.weight=IQ2_XXS").ok());
  for (const TensorSpec& s : ExpectedTensors(c)) {
    if (s.base == "ffn_down_exps") {
      EXPECT_EQ(m->TypeFor(s), quant::GgmlType::kIQ2_XXS);
    }
  }
  EXPECT_FALSE(m->AddOverride("nonsense").ok());
  EXPECT_FALSE(m->AddOverride("x=IQ3_S").ok());  // not a type the engine computes with
  EXPECT_FALSE(QuantMix::Preset("Q9").ok());
}

}  // namespace
}  // namespace k3::model
