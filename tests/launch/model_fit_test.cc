// The fit check before launch: shapes from a preset (model not generated yet) or a GGUF header,
// PlanFit for every group (the shard plan must divide), RequireFit for cuda groups; refusals
// name the group's line.
#include <filesystem>

#include <gtest/gtest.h>

#include "launch/model_fit.h"
#include "tests/launch/test_util.h"

namespace k3::launch {
namespace {

using testing::HasError;
using testing::Parse;

absl::Status Fit(const std::string& yaml) {
  auto c = Parse(yaml);
  if (!c.ok()) return c.status();
  if (absl::Status s = CheckLaunchConfig(*c); !s.ok()) return s;
  auto shapes = LoadModelShapes(*c);
  if (!shapes.ok()) return shapes.status();
  return CheckGroupsFit(*c, *shapes).status();
}

std::string Synthetic(const std::string& preset, const std::string& group) {
  return "model:\n  synthetic: {preset: " + preset + ", output: /nonexistent/k3.gguf}\nworker_groups:\n" + group;
}

TEST(LaunchModelFit, FullModelFitsEightH200s) {
  const std::string y = Synthetic("full", R"(  - name: h200
    backend: cuda
    hosts: [localhost]
    ranks_per_host: 8
    gpus_per_host: 8
    max_seqs: 4
    cache_tokens: 524288
    listen: 127.0.0.1:50061
)");
  EXPECT_TRUE(Fit(y).ok()) << Fit(y);
}

TEST(LaunchModelFit, FullModelOnTwoH200sIsRefusedOnTheGroupsLine) {
  const std::string y = Synthetic("full", R"(  - name: pair
    backend: cuda
    hosts: [localhost]
    ranks_per_host: 2
    max_seqs: 1
    cache_tokens: 8192
    listen: 127.0.0.1:50061
)");
  EXPECT_TRUE(HasError(Fit(y), 4, {"worker_groups[0] (pair)", "the fit check refuses the plan",
                                   "2 ranks, 2 expert groups, 1 sequences x 8192 tokens", "rank 0 needs", "short by"}));
}

TEST(LaunchModelFit, TooMuchCacheOrTooSmallAGpu) {
  const std::string group = R"(  - name: g
    backend: cuda
    hosts: [localhost]
    ranks_per_host: 8
    max_seqs: 64
    cache_tokens: 67108864
    listen: 127.0.0.1:50061
)";
  EXPECT_TRUE(HasError(Fit(Synthetic("full", group)), 4, {"refuses", "64 sequences x 1048576 tokens"}));
  const std::string small_gpu = R"(  - name: g
    backend: cuda
    hosts: [localhost]
    ranks_per_host: 2
    gpu_memory_gib: 2
    listen: 127.0.0.1:50061
)";
  EXPECT_TRUE(HasError(Fit(Synthetic("tiny", small_gpu)), 4, {"refuses", "the device has 2.00 GiB"}));
}

TEST(LaunchModelFit, ShardPlanThatDoesNotDivideIsRefusedEvenOnCpu) {
  // The tiny preset has 4 heads: 3 ranks cannot split them.
  const std::string y = Synthetic("tiny", R"(  - name: odd
    hosts: [localhost]
    ranks_per_host: 3
    listen: 127.0.0.1:50061
)");
  EXPECT_TRUE(HasError(Fit(y), 4, {"worker_groups[0] (odd)", "the shard plan is refused", "3 ranks"}));
  // A cpu group is not held to a GPU's memory.
  const std::string big = Synthetic("full", R"(  - name: cpu
    hosts: [localhost]
    ranks_per_host: 2
    listen: 127.0.0.1:50061
)");
  EXPECT_TRUE(Fit(big).ok()) << Fit(big);
}

TEST(LaunchModelFit, MissingModelFileNamesThePathLine) {
  EXPECT_TRUE(HasError(Fit("model:\n  path: /no/such/model.gguf\nworker_groups:\n"
                           "  - {name: a, hosts: [h], ranks_per_host: 1, listen: 'h:1'}\n"),
                       2, {"model.path", "cannot open the model"}));
}

TEST(LaunchModelFit, ShapesFromAGgufHeader) {
  const std::string golden = std::string(K3_SHARED_DIR) + "/data/golden/k3-golden-a.gguf";
  if (!std::filesystem::exists(golden)) GTEST_SKIP() << "no " << golden;
  auto c = Parse("model:\n  path: " + golden + "\nworker_groups:\n"
                 "  - {name: a, hosts: [h], ranks_per_host: 2, listen: 'h:1', max_seqs: 4, cache_tokens: 4096}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  auto shapes = LoadModelShapes(*c);
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_NE(shapes->source.find("header of"), std::string::npos);
  auto fits = CheckGroupsFit(*c, *shapes);
  ASSERT_TRUE(fits.ok()) << fits.status();
  ASSERT_EQ(fits->size(), 1u);
  EXPECT_FALSE((*fits)[0].checked_memory);
  EXPECT_EQ((*fits)[0].report.request.context, 1024);  // 4096 tokens over 4 sequences
  EXPECT_EQ((*fits)[0].report.request.n_seqs, 4);
  EXPECT_EQ((*fits)[0].report.ranks.size(), 2u);
  // A synthetic model whose file is there is read from its header too.
  auto s = Parse("model:\n  synthetic: {preset: small, output: " + golden + "}\nworker_groups:\n"
                 "  - {name: a, hosts: [h], ranks_per_host: 2, listen: 'h:1'}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  auto from_file = LoadModelShapes(*s);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_NE(from_file->source.find("header of"), std::string::npos);
}

TEST(LaunchModelFit, RequestFromTheGroup) {
  model::K3Config c = model::RealK3Config();
  WorkerGroupSpec g;
  g.hosts = {"a", "b"};
  g.ranks_per_host = 8;
  g.max_seqs = 3;
  CoordinatorSpec co;
  co.prefill_chunk = 128;  // the coordinator's steps: not what sizes the worker's buffers
  model::FitRequest r = FitRequestFor(g, c, co);
  EXPECT_EQ(r.plan.ranks, 16);
  EXPECT_EQ(r.plan.expert_groups, 16);
  EXPECT_EQ(r.n_seqs, 3);
  EXPECT_EQ(r.context, std::min<int64_t>(c.context_length, 1 << 20));  // the worker's default cache
  EXPECT_EQ(r.prefill_chunk, kWorkerPrefillChunk);
  g.prefill_chunk = 8192;
  EXPECT_EQ(FitRequestFor(g, c, co).prefill_chunk, 8192);
  g.prefill_chunk = 0;
  EXPECT_EQ(r.device_bytes, model::kH200Bytes);
  g.cache_tokens = 1000;
  g.expert_groups = 4;
  g.gpu_memory_gib = 80;
  r = FitRequestFor(g, c, co);
  EXPECT_EQ(r.context, 334);  // rounded up
  EXPECT_EQ(r.plan.expert_groups, 4);
  EXPECT_EQ(r.device_bytes, 80ull << 30);
  EXPECT_FALSE(r.ternary_experts);
  g.worker_args = {"--int8-experts", "--ternary-experts"};  // the workers hold the experts' ternary form
  EXPECT_TRUE(FitRequestFor(g, c, co).ternary_experts);
}

}  // namespace
}  // namespace k3::launch
