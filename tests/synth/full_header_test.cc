// The full 93-layer model, header-only: written in well under a second, in 14 shards, and the
// fit check planned from it is the fit check of RealK3Config (k3-plan --model == k3-plan --real).
#include <chrono>

#include <gtest/gtest.h>

#include "tests/synth/synth_test_util.h"
#include "worker/gguf/gguf_file.h"
#include "worker/model/fit_check.h"
#include "worker/model/k3_config.h"
#include "worker/model/tensor_manifest.h"

namespace k3::synth {
namespace {

TEST(FullHeaderOnly, FastShardedAndPlansLikeTheRealModel) {
  testing::TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  auto m = testing::PresetModel("full");
  ASSERT_TRUE(m.ok()) << m.status();
  WriteOptions wo;
  wo.header_only = true;
  wo.shards = DefaultShards("full");
  auto r = WriteModel(*m, dir.File("full.gguf"), wo);
  ASSERT_TRUE(r.ok()) << r.status();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("full model header-only: %zu shards, %.1f KiB, %.3f s; %.1f GiB of tensors declared\n",
              r->paths.size(), r->file_bytes / 1024.0, seconds, m->data_bytes() / double(1ull << 30));
  EXPECT_LT(seconds, 10.0);
  ASSERT_EQ(r->paths.size(), 14u);
  EXPECT_LT(r->file_bytes, 4u << 20);
  // 553 GiB at UD-IQ1_S, as published.
  EXPECT_NEAR(m->data_bytes() / double(1ull << 30), 553.4, 0.5);

  auto f = gguf::GgufFile::Open(r->paths[0], /*allow_header_only=*/true);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->header_only());
  EXPECT_EQ((*f)->shard_paths().size(), 14u);
  auto c = model::ParseK3Config(**f);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(model::ValidateManifest(*c, **f).ok());
  const model::K3Config real = model::RealK3Config();
  EXPECT_EQ(c->layer_kinds, real.layer_kinds);
  EXPECT_EQ(c->n_mla_layers(), 24);
  EXPECT_TRUE(c->is_mla(92));

  model::FitRequest req;
  req.plan = model::RankPlan{8, 8};
  req.context = 131072;
  const gguf::GgufFile* file = f->get();
  auto from_file = model::PlanFit(*c, [file](const model::TensorSpec& s) { return file->FindTensor(s.name)->type; }, req);
  auto mix = model::QuantMix::Preset("UD-IQ1_S");
  ASSERT_TRUE(mix.ok());
  auto from_real = model::PlanFit(real, [&](const model::TensorSpec& s) { return mix->TypeFor(s); }, req);
  ASSERT_TRUE(from_file.ok() && from_real.ok());
  EXPECT_EQ(from_file->model_bytes, from_real->model_bytes);
  EXPECT_EQ(from_file->Table(), from_real->Table());
  std::printf("%s", from_file->Table().c_str());
}

}  // namespace
}  // namespace k3::synth
