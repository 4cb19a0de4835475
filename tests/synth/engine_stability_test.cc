// Generated models behave like models on the CPU engine: finite logits with an O(1)-O(10)
// spread, prefill equal to token-by-token decode within the engine's bar (relative L2 1e-5),
// and top-1 choices that survive a tiny perturbation of the weights (no knife edges).
#include <omp.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "tests/synth/synth_test_util.h"
#include "worker/engine/engine.h"
#include "worker/gguf/gguf_file.h"

namespace k3::synth {
namespace {

struct Logits {
  int64_t width = 0;
  std::vector<float> v;  // [tokens][width]
};

std::vector<int32_t> Prompt(int64_t vocab, int n) {
  std::mt19937 rng(11);
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(rng() % vocab));
  return p;
}

// Logits of every position: the prompt whole, or fed one token at a time.
Logits RunPrompt(const std::string& path, const std::vector<int32_t>& prompt, bool token_by_token) {
  // The logits do not depend on the thread count (MatMul is thread-invariant); one thread keeps
  // OpenMP from spin-waiting on a busy CI box, where two threads ran 5x slower.
  omp_set_num_threads(1);
  engine::EngineOptions opt;
  opt.max_seqs = 1;
  opt.cache_tokens = 256;
  auto e = engine::Engine::Open(path, opt);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  EXPECT_TRUE((*e)->cache().Add(0).ok());
  Logits out;
  const size_t step = token_by_token ? 1 : prompt.size();
  for (size_t i = 0; i < prompt.size(); i += step) {
    engine::SeqInput in{0, std::span<const int32_t>(prompt.data() + i, step), true};
    auto r = (*e)->Forward(std::span<const engine::SeqInput>(&in, 1));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    out.width = static_cast<int64_t>(r->logits.size()) / r->n_rows[0];
    out.v.insert(out.v.end(), r->logits.begin(), r->logits.end());
  }
  return out;
}

double RelL2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(a[i]) * a[i];
  }
  return std::sqrt(num / den);
}

int64_t Argmax(const float* v, int64_t n) { return std::max_element(v, v + n) - v; }

// Copy of `src` with an F32 tensor's values multiplied by (1 + eps * N(0, 1)).
std::string Perturbed(const std::string& src, const std::string& tensor, double eps, const testing::TempDir& dir) {
  std::vector<uint8_t> bytes = testing::ReadAll(src);
  auto f = gguf::GgufFile::Open(src);
  EXPECT_TRUE(f.ok());
  const gguf::TensorInfo* t = (*f)->FindTensor(tensor);
  EXPECT_TRUE(t != nullptr && t->type == quant::GgmlType::kF32);
  std::mt19937 rng(5);
  std::normal_distribution<double> n(0, 1);
  for (uint64_t i = 0; i < t->n_elems; ++i) {
    float v;
    std::memcpy(&v, &bytes[t->file_offset + 4 * i], 4);
    v = static_cast<float>(v * (1 + eps * n(rng)));
    std::memcpy(&bytes[t->file_offset + 4 * i], &v, 4);
  }
  const std::string out = dir.File("perturbed.gguf");
  std::ofstream(out, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return out;
}

class Stability : public ::testing::TestWithParam<std::string> {};

TEST_P(Stability, FiniteSpreadPrefillEqualsDecodeAndTop1IsStable) {
  testing::TempDir dir;
  auto m = testing::PresetModel(GetParam());
  ASSERT_TRUE(m.ok()) << m.status();
  auto path = testing::WriteTo(*m, dir, "m.gguf");
  ASSERT_TRUE(path.ok()) << path.status();
  // Few tokens keep the test quick (small decodes at ~0.3 s a token on a busy 2-core box).
  const std::vector<int32_t> prompt = Prompt(m->config().vocab, GetParam() == "tiny" ? 10 : 6);

  const Logits whole = RunPrompt(*path, prompt, false);
  ASSERT_EQ(whole.v.size(), prompt.size() * static_cast<size_t>(whole.width));
  // (a) finite, with a spread that is neither flat nor one-hot
  double s = 0, s2 = 0, gap = 0, min_row_std = 1e9, max_row_std = 0;
  for (size_t t = 0; t < prompt.size(); ++t) {
    const float* row = whole.v.data() + t * whole.width;
    double rs = 0, rs2 = 0;
    std::vector<float> sorted(row, row + whole.width);
    for (float x : sorted) {
      ASSERT_TRUE(std::isfinite(x));
      rs += x;
      rs2 += static_cast<double>(x) * x;
    }
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    gap += (sorted[0] - sorted[1]) / prompt.size();
    const double rstd = std::sqrt(rs2 / whole.width - (rs / whole.width) * (rs / whole.width));
    min_row_std = std::min(min_row_std, rstd);
    max_row_std = std::max(max_row_std, rstd);
    s += rs;
    s2 += rs2;
  }
  const double n = static_cast<double>(whole.v.size());
  const double std = std::sqrt(s2 / n - (s / n) * (s / n));
  EXPECT_GT(min_row_std, 1.0);
  EXPECT_LT(max_row_std, 10.0);

  // (b) the engine's prefill-vs-decode bar
  const Logits steps = RunPrompt(*path, prompt, true);
  ASSERT_EQ(steps.v.size(), whole.v.size());
  const double rel = RelL2(whole.v, steps.v);
  EXPECT_LT(rel, 1e-5);

  // (c) a 1e-4 relative perturbation of layer 0's input norm moves the logits by O(1e-4) and
  // keeps every top-1
  const Logits pert = RunPrompt(Perturbed(*path, "blk.0.attn_norm.weight", 1e-4, dir), prompt, false);
  ASSERT_EQ(pert.v.size(), whole.v.size());
  int agree = 0;
  for (size_t t = 0; t < prompt.size(); ++t) {
    agree += Argmax(whole.v.data() + t * whole.width, whole.width) == Argmax(pert.v.data() + t * pert.width, pert.width);
  }
  const double rel_pert = RelL2(whole.v, pert.v);
  std::printf("%s: logits std %.3f (rows %.3f..%.3f), mean top1-top2 gap %.3f; prefill vs decode relL2 %.2e; "
              "1e-4 perturbation: relL2 %.2e, top-1 %d/%zu\n",
              GetParam().c_str(), std, min_row_std, max_row_std, gap, rel, rel_pert, agree, prompt.size());
  EXPECT_LT(rel_pert, 1e-2);
  EXPECT_GE(agree, static_cast<int>(prompt.size()) - 1);
}

INSTANTIATE_TEST_SUITE_P(Synth, Stability, ::testing::Values("tiny", "small"));

// Every type the engine computes with, in one tiny model: it runs, finite, prefill == decode.
TEST(Stability, MixedTypesRun) {
  testing::TempDir dir;
  auto m = testing::PresetModel("tiny", 3, "UD-Q2_K_XL",
                                {"blk.1.ffn_gate_exps.weight=IQ2_XXS", "blk.2.ffn_gate_exps.weight=Q2_K",
                                 "blk.1.ffn_up_exps.weight=Q3_K", "blk.2.ffn_up_exps.weight=Q4_K",
                                 "blk.3.ffn_up_exps.weight=Q5_K", "blk.*.ffn_down_exps.weight=Q6_K",
                                 "blk.0.attn_q.weight=F16", "blk.0.attn_k.weight=BF16"});
  ASSERT_TRUE(m.ok()) << m.status();
  auto path = testing::WriteTo(*m, dir, "q.gguf");
  ASSERT_TRUE(path.ok()) << path.status();
  const std::vector<int32_t> prompt = Prompt(m->config().vocab, 8);
  const Logits whole = RunPrompt(*path, prompt, false);
  const Logits steps = RunPrompt(*path, prompt, true);
  ASSERT_FALSE(whole.v.empty());
  for (float x : whole.v) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LT(RelL2(whole.v, steps.v), 1e-5);
}

}  // namespace
}  // namespace k3::synth
