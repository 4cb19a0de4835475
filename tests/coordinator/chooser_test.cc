// The chooser asks the worker only for what a step can carry: found by fuzz_request
// (coordinator/server/fuzz_request.cc). A client's top_k of 5000 used to become a step entry's
// top_n of 5000, which every worker rank refuses to decode (kMaxTopN = 1024), and the
// followers left the group; a top_k past a small vocabulary asked for every token as top-N
// candidates, which the sampler cannot treat as complete, and the request failed INTERNAL.
#include "coordinator/server/chooser.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "worker/runtime/step.h"

namespace k3::coord {
namespace {

static_assert(kMaxWorkerTopN == runtime::kMaxTopN, "the chooser's limit must be the worker's");

k3::v1::SamplingParams Params(float temperature, int32_t top_k, float repetition_penalty = 1) {
  k3::v1::SamplingParams p;
  p.set_temperature(temperature);
  p.set_top_k(top_k);
  p.set_repetition_penalty(repetition_penalty);
  p.set_seed(7);
  return p;
}

// A row as the worker returns it for `chooser`: distinct logits, top_n best, full normalizer.
k3::v1::RowOutput Row(const TokenChooser& chooser, int64_t vocab) {
  std::vector<float> logits(vocab);
  for (int64_t v = 0; v < vocab; ++v) logits[v] = static_cast<float>((v * 37) % vocab) * 0.01f;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  k3::v1::RowOutput row;
  double mx = logits[order[0]], z = 0;
  for (float l : logits) z += std::exp(l - mx);
  row.set_logsumexp(static_cast<float>(mx + std::log(z)));
  for (int64_t k = 0; k < std::min<int64_t>(chooser.top_n(), vocab); ++k) {
    auto* c = row.add_top();
    c->set_token(order[k]);
    c->set_logit(logits[order[k]]);
  }
  if (chooser.needs_full_logits()) row.mutable_logits()->Assign(logits.begin(), logits.end());
  return row;
}

TEST(Chooser, TopKPastTheWorkersLimitAsksForFullLogits) {
  auto c = MakeChooser(Params(1.0f, 5000), std::vector<int32_t>{1, 2, 3}, 163840);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->needs_full_logits());
  EXPECT_LE((*c)->top_n(), kMaxWorkerTopN);
}

TEST(Chooser, PenaltiesThatPushTopNPastTheLimitAskForFullLogits) {
  std::vector<int32_t> prompt(100);
  std::iota(prompt.begin(), prompt.end(), 10);  // 100 distinct tokens: 64 in the penalty window
  auto c = MakeChooser(Params(1.0f, 1000, 1.1f), prompt, 163840);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->needs_full_logits());
  EXPECT_LE((*c)->top_n(), kMaxWorkerTopN);
}

TEST(Chooser, TopKCoveringTheVocabularyStillChooses) {
  const int64_t vocab = 278;  // the fuzzer's vocabulary; top_k 446 reaches past it
  auto c = MakeChooser(Params(0.7f, 446), std::vector<int32_t>{104, 256, 5}, vocab);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->needs_full_logits());
  for (int step = 0; step < 3; ++step) {
    auto choice = (*c)->Choose(Row(**c, vocab));
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_GE(choice->token, 0);
    EXPECT_LT(choice->token, vocab);
  }
}

TEST(Chooser, OrdinaryTopKStaysTopN) {
  auto c = MakeChooser(Params(0.8f, 40), std::vector<int32_t>{1, 2, 3}, 163840);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE((*c)->needs_full_logits());
  EXPECT_EQ((*c)->top_n(), 40);
  auto greedy = MakeChooser(Params(0.0f, 0), std::vector<int32_t>{1, 2, 3}, 163840);
  ASSERT_TRUE(greedy.ok());
  EXPECT_FALSE((*greedy)->needs_full_logits());
  EXPECT_EQ((*greedy)->top_n(), 1);
}

}  // namespace
}  // namespace k3::coord
