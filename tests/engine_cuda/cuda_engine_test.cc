// The GPU engine (k3::engine_cuda::CudaEngine) against the golden logits (the CPU engine's bars),
// against the CPU engine on a generated model, and against itself (graphs vs eager, batched vs
// alone, f16 cache). Skips when no CUDA device is usable.
#include <cuda_runtime.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/common/golden_data.h"
#include "tests/common/logit_metrics.h"
#include "worker/engine/engine.h"
#include "worker/engine_cuda/cuda_engine.h"
#include "worker/synth/presets.h"
#include "worker/synth/synth_model.h"
#include "worker/synth/synth_writer.h"

namespace k3::engine_cuda {
namespace {

const std::string kGolden = std::string(K3_SHARED_DIR) + "/data/golden/";

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: the GPU engine tests need one"

std::vector<std::vector<int32_t>> ReadPrompts() { return k3::testing::ReadGoldenPrompts(kGolden + "prompts-a.txt"); }

testing::LogitComparison Bars(const std::vector<float>& ref, const std::vector<float>& got, int64_t vocab,
                              const std::string& what, double rel = 2e-3, double kl = 1e-4, double top1 = 1.0) {
  EXPECT_EQ(ref.size(), got.size()) << what;
  if (ref.size() != got.size() || ref.empty()) return {};
  const auto m = k3::testing::CompareLogits(ref.data(), got.data(), static_cast<int64_t>(ref.size()) / vocab, vocab);
  std::printf("%-34s relL2 %.3e  KL max %.3e  mean %.3e  top-1 %.4f\n", what.c_str(), m.rel_l2, m.kl_max, m.kl_mean,
              m.top1);
  EXPECT_LE(m.rel_l2, rel) << what;
  EXPECT_LE(m.kl_max, kl) << what;
  EXPECT_GE(m.top1, top1) << what;
  return m;
}

std::vector<float> RunPrompt(CudaEngine& e, const std::vector<int32_t>& toks, SeqId id) {
  EXPECT_TRUE(e.Add(id).ok());
  SeqInput in{id, std::span<const int32_t>(toks), true};
  auto r = e.Forward(std::span<const SeqInput>(&in, 1));
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(e.Free(id).ok());
  return r.ok() ? r->logits : std::vector<float>{};
}

class CudaGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    if (!std::filesystem::exists(kGolden + "k3-golden-a.gguf")) GTEST_SKIP() << "golden data not found at " << kGolden;
    prompts_ = ReadPrompts();
    ASSERT_EQ(prompts_.size(), 4u);
  }
  std::unique_ptr<CudaEngine> Open(bool f16, bool graphs) {
    CudaEngineOptions opt;
    opt.max_seqs = 8;
    opt.max_batch = 4;
    opt.cache_tokens = 4096;
    opt.page_size = 16;  // several pages per prompt: exercises the block tables
    opt.cache_f16 = f16;
    opt.use_graphs = graphs;
    opt.verbose = false;
    auto e = CudaEngine::Open(kGolden + "k3-golden-a.gguf", opt);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_F(CudaGoldenTest, TokenByTokenMatchesReference) {
  auto e = Open(false, true);
  ASSERT_NE(e, nullptr);
  const int64_t V = e->config().vocab;
  for (size_t p = 0; p < prompts_.size(); ++p) {
    const auto ref = k3::testing::ReadF32File(kGolden + "ref-a.p" + std::to_string(p) + ".f32");
    Bars(ref, RunPrompt(*e, prompts_[p], 100 + p), V, "gpu token by token " + std::to_string(p));
  }
  std::printf("graphs captured: %lld\n", static_cast<long long>(e->graphs_captured()));
}

TEST_F(CudaGoldenTest, BatchedMatchesReferenceAndEagerMatchesGraphs) {
  auto e = Open(false, true);
  ASSERT_NE(e, nullptr);
  const int64_t V = e->config().vocab;
  std::vector<SeqInput> batch;
  for (size_t p = 0; p < prompts_.size(); ++p) {
    ASSERT_TRUE(e->Add(600 + p).ok());
    batch.push_back({static_cast<SeqId>(600 + p), prompts_[p], true});
  }
  auto r = e->Forward(batch);
  ASSERT_TRUE(r.ok()) << r.status();
  auto eager = Open(false, false);
  ASSERT_NE(eager, nullptr);
  for (size_t p = 0; p < prompts_.size(); ++p) {
    const auto ref = k3::testing::ReadF32File(kGolden + "ref-a.p" + std::to_string(p) + ".f32");
    std::vector<float> got(r->row(p), r->row(p) + r->n_rows[p] * V);
    Bars(ref, got, V, "gpu batched (4 seqs) " + std::to_string(p));
    const auto alone = RunPrompt(*eager, prompts_[p], 700 + p);
    const double d = k3::testing::RelL2(alone, got);
    std::printf("batched graphs vs alone eager, prompt %zu: relL2 %.3e\n", p, d);
    EXPECT_LE(d, 1e-4);
  }
}

TEST_F(CudaGoldenTest, F16CacheStaysClose) {
  auto e = Open(true, true);
  ASSERT_NE(e, nullptr);
  const int64_t V = e->config().vocab;
  for (size_t p = 0; p < prompts_.size(); ++p) {
    const auto ref = k3::testing::ReadF32File(kGolden + "ref-a.p" + std::to_string(p) + ".f32");
    Bars(ref, RunPrompt(*e, prompts_[p], 800 + p), V, "gpu f16 cache " + std::to_string(p), 2e-2, 1e-2, 0.97);
  }
}

// A generated model: the CPU engine reads the file, the GPU engine fills the same bytes in memory.
TEST(CudaEngineSynthTest, MatchesCpuEngineOnGeneratedModel) {
  SKIP_WITHOUT_GPU();
  auto cfg = synth::PresetConfig("small");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  SynthSource src{*cfg, "UD-IQ1_S", 7};
  auto mix = model::QuantMix::Preset(src.quant);
  ASSERT_TRUE(mix.ok());
  synth::SynthOptions so;
  so.seed = src.seed;
  auto model = synth::SynthModel::Create(src.config, *mix, so);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string path = (std::filesystem::temp_directory_path() / "k3-cuda-engine-small-7.gguf").string();
  auto wr = synth::WriteModel(*model, path, synth::WriteOptions{});
  ASSERT_TRUE(wr.ok()) << wr.status();

  engine::EngineOptions copt;
  copt.cache_tokens = 1024;
  auto cpu = engine::Engine::Open(path, copt);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  CudaEngineOptions gopt;
  gopt.cache_tokens = 1024;
  gopt.verbose = false;
  auto gpu = CudaEngine::OpenSynth(src, gopt);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t V = (*cpu)->config().vocab;
  std::mt19937 rng(3);
  for (int p = 0; p < 3; ++p) {
    std::vector<int32_t> toks(20 + 17 * p);
    for (auto& t : toks) t = static_cast<int32_t>(rng() % V);
    ASSERT_TRUE((*cpu)->cache().Add(p).ok());
    SeqInput in{p, toks, true};
    auto cr = (*cpu)->Forward(std::span<const SeqInput>(&in, 1));
    ASSERT_TRUE(cr.ok()) << cr.status();
    Bars(cr->logits, RunPrompt(**gpu, toks, p), V, "gpu vs cpu, generated " + std::to_string(p));
  }
  std::filesystem::remove(path);
}

TEST(CudaEngineSynthTest, RejectsBadInput) {
  SKIP_WITHOUT_GPU();
  auto cfg = synth::PresetConfig("tiny");
  ASSERT_TRUE(cfg.ok());
  CudaEngineOptions opt;
  opt.cache_tokens = 256;
  opt.max_seqs = 2;
  opt.verbose = false;
  auto e = CudaEngine::OpenSynth(SynthSource{*cfg, "UD-IQ1_S", 1}, opt);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE((*e)->Add(1).ok());
  EXPECT_FALSE((*e)->Add(1).ok());
  ASSERT_TRUE((*e)->Add(2).ok());
  EXPECT_FALSE((*e)->Add(3).ok());  // no slot
  const int32_t bad = static_cast<int32_t>((*e)->config().vocab);
  SeqInput in{1, std::span<const int32_t>(&bad, 1), false};
  EXPECT_FALSE((*e)->Forward(std::span<const SeqInput>(&in, 1)).ok());
  EXPECT_EQ((*e)->Length(1), 0);
}

}  // namespace
}  // namespace k3::engine_cuda
