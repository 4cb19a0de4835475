// The CPU engine against the golden logits of an independent implementation
// (shared/data/golden/README.md): whole prompts, token by token, and all four prompts batched.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/common/golden_data.h"
#include "tests/common/logit_metrics.h"
#include "worker/engine/engine.h"

namespace k3::engine {
namespace {

const std::string kGolden = std::string(K3_SHARED_DIR) + "/data/golden/";

std::vector<std::vector<int32_t>> ReadPrompts() { return testing::ReadGoldenPrompts(kGolden + "prompts-a.txt"); }

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kGolden + "k3-golden-a.gguf")) {
      GTEST_SKIP() << "golden data not found at " << kGolden;
    }
    prompts_ = ReadPrompts();
    ASSERT_EQ(prompts_.size(), 4u);
    EngineOptions opt;
    opt.max_seqs = 8;
    opt.cache_tokens = 4096;
    opt.page_size = 16;  // several pages per prompt: exercises the block tables
    auto e = Engine::Open(kGolden + "k3-golden-a.gguf", opt);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
  }

  // Logits of every position of prompt p, fed in pieces of `step` tokens.
  std::vector<float> Run(size_t p, size_t step, SeqId id) {
    EXPECT_TRUE(engine_->cache().Add(id).ok());
    std::vector<float> all;
    const auto& toks = prompts_[p];
    for (size_t i = 0; i < toks.size(); i += step) {
      const size_t n = std::min(step, toks.size() - i);
      SeqInput in{id, std::span<const int32_t>(toks.data() + i, n), true};
      auto r = engine_->Forward(std::span<const SeqInput>(&in, 1));
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return {};
      all.insert(all.end(), r->logits.begin(), r->logits.end());
    }
    EXPECT_TRUE(engine_->cache().Free(id).ok());
    return all;
  }

  std::vector<std::vector<int32_t>> prompts_;
  std::unique_ptr<Engine> engine_;
};

void ExpectGoldenBars(const std::vector<float>& ref, const std::vector<float>& got, int64_t vocab,
                      const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  const auto m = testing::CompareLogits(ref.data(), got.data(), static_cast<int64_t>(ref.size()) / vocab, vocab);
  std::printf("%-28s relL2 %.3e  KL max %.3e  mean %.3e  top-1 %.3f\n", what.c_str(), m.rel_l2,
              m.kl_max, m.kl_mean, m.top1);
  EXPECT_LE(m.rel_l2, 2e-3) << what;
  EXPECT_LE(m.kl_max, 1e-4) << what;
  EXPECT_EQ(m.top1, 1.0) << what;
}

TEST_F(GoldenTest, WholePromptsMatchReference) {
  const int64_t V = engine_->config().vocab;
  for (size_t p = 0; p < prompts_.size(); ++p) {
    const auto ref = testing::ReadF32File(kGolden + "ref-a.p" + std::to_string(p) + ".f32");
    ExpectGoldenBars(ref, Run(p, prompts_[p].size(), 100 + p), V, "whole prompt " + std::to_string(p));
  }
}

TEST_F(GoldenTest, TokenByTokenMatchesReferenceAndWholePrompt) {
  const int64_t V = engine_->config().vocab;
  for (size_t p = 0; p < prompts_.size(); ++p) {
    const auto ref = testing::ReadF32File(kGolden + "ref-a.p" + std::to_string(p) + ".f32");
    const auto step = Run(p, 1, 200 + p);
    ExpectGoldenBars(ref, step, V, "token by token " + std::to_string(p));
    const auto whole = Run(p, prompts_[p].size(), 300 + p);
    const double d = testing::RelL2(whole, step);
    std::printf("prefill vs decode, prompt %zu: relL2 %.3e\n", p, d);
    EXPECT_LE(d, 1e-5) << "prompt " << p;
  }
}

TEST_F(GoldenTest, UnevenChunksMatchWholePrompt) {
  // 300 tokens as chunks of 37: chunk boundaries inside KDA chunks and MLA pages.
  const auto whole = Run(3, prompts_[3].size(), 400);
  const auto chunks = Run(3, 37, 401);
  EXPECT_LE(testing::RelL2(whole, chunks), 1e-5);
}

TEST_F(GoldenTest, BatchedPromptsMatchOneAtATime) {
  const int64_t V = engine_->config().vocab;
  std::vector<std::vector<float>> alone;
  for (size_t p = 0; p < prompts_.size(); ++p) alone.push_back(Run(p, prompts_[p].size(), 500 + p));
  std::vector<SeqInput> batch;
  for (size_t p = 0; p < prompts_.size(); ++p) {
    ASSERT_TRUE(engine_->cache().Add(600 + p).ok());
    batch.push_back({static_cast<SeqId>(600 + p), prompts_[p], true});
  }
  auto r = engine_->Forward(batch);
  ASSERT_TRUE(r.ok()) << r.status();
  for (size_t p = 0; p < prompts_.size(); ++p) {
    std::vector<float> got(r->row(p), r->row(p) + r->n_rows[p] * V);
    const double d = testing::RelL2(alone[p], got);
    std::printf("batched vs alone, prompt %zu: relL2 %.3e\n", p, d);
    EXPECT_LE(d, 1e-6) << "prompt " << p;
  }
  // And a decode step of all four together continues each correctly.
  std::vector<int32_t> next = {1, 2, 3, 4};
  std::vector<SeqInput> step;
  for (size_t p = 0; p < prompts_.size(); ++p) step.push_back({static_cast<SeqId>(600 + p), std::span<const int32_t>(&next[p], 1), false});
  auto r2 = engine_->Forward(step);
  ASSERT_TRUE(r2.ok()) << r2.status();
  for (size_t p = 0; p < prompts_.size(); ++p) {
    auto toks = prompts_[p];
    toks.push_back(next[p]);
    ASSERT_TRUE(engine_->cache().Add(700 + p).ok());
    SeqInput in{static_cast<SeqId>(700 + p), toks, false};
    auto single = engine_->Forward(std::span<const SeqInput>(&in, 1));
    ASSERT_TRUE(single.ok());
    std::vector<float> a(single->row(0), single->row(0) + V), b(r2->row(p), r2->row(p) + V);
    EXPECT_LE(testing::RelL2(a, b), 1e-5) << "prompt " << p;
  }
}

TEST_F(GoldenTest, BadInputsAreErrors) {
  ASSERT_TRUE(engine_->cache().Add(1).ok());
  std::vector<int32_t> bad = {5, 99999};
  SeqInput in{1, bad, false};
  EXPECT_EQ(engine_->Forward(std::span<const SeqInput>(&in, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  SeqInput unknown{42, prompts_[0], false};
  EXPECT_EQ(engine_->Forward(std::span<const SeqInput>(&unknown, 1)).status().code(),
            absl::StatusCode::kNotFound);
  SeqInput twice[2] = {{1, prompts_[0], false}, {1, prompts_[0], false}};
  EXPECT_EQ(engine_->Forward(twice).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->cache().Length(1), 0);
}

TEST_F(GoldenTest, ForkContinuesLikeTheOriginal) {
  // Prefill prompt 2, fork, feed the same token to both: identical logits (copy-on-write pages).
  ASSERT_TRUE(engine_->cache().Add(10).ok());
  SeqInput in{10, prompts_[2], false};
  ASSERT_TRUE(engine_->Forward(std::span<const SeqInput>(&in, 1)).ok());
  ASSERT_TRUE(engine_->cache().Fork(10, 11).ok());
  const int32_t tok = 7;
  SeqInput both[2] = {{10, std::span<const int32_t>(&tok, 1), false}, {11, std::span<const int32_t>(&tok, 1), false}};
  auto r = engine_->Forward(both);
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t V = engine_->config().vocab;
  std::vector<float> a(r->row(0), r->row(0) + V), b(r->row(1), r->row(1) + V);
  EXPECT_EQ(a, b);
  // Diverge: different tokens must not disturb each other.
  const int32_t t1 = 8, t2 = 9;
  SeqInput div[2] = {{10, std::span<const int32_t>(&t1, 1), false}, {11, std::span<const int32_t>(&t2, 1), false}};
  ASSERT_TRUE(engine_->Forward(div).ok());
  EXPECT_EQ(engine_->cache().Length(10), engine_->cache().Length(11));
}

}  // namespace
}  // namespace k3::engine
