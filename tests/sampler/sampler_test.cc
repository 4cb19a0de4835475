// The sampler over full logits: greedy, reproducibility, each parameter's effect, logprobs,
// input validation.
#include "coordinator/sampler/sampler.h"

#include <cmath>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "tests/sampler/sampler_test_util.h"

namespace k3::sampling {
namespace {

using testing::Draw;
using testing::LogitsFromProbs;
using testing::MakeSampler;
using testing::Row;

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

// The set of tokens drawn in n samples.
std::set<int32_t> Support(const SamplingParams& p, const Row& row, int n = 2000) {
  Sampler s = MakeSampler(p);
  std::set<int32_t> seen;
  for (int i = 0; i < n; ++i) seen.insert(Draw(s, row.Full()));
  return seen;
}

TEST(Sampler, GreedyTakesTheArgmaxTiesToTheLowerId) {
  const Row row({0.5f, 3.0f, -1.0f, 3.0f, 2.9f});
  Sampler s = MakeSampler(Greedy());
  EXPECT_EQ(Draw(s, row.Full()), 1);
  EXPECT_EQ(Draw(s, row.Top(1)), 1);
  EXPECT_EQ(Draw(s, row.Top(3)), 1);
  const Row masked({-INFINITY, -INFINITY, 7.0f});
  EXPECT_EQ(Draw(s, masked.Full()), 2);
}

TEST(Sampler, DrawInvertsTheSortedCdfWithTheSeedsStream) {
  // Expected tokens from an independent (Python) xoshiro256** + splitmix64 and the chain's
  // contract: the first token, best first, whose cumulative probability exceeds u.
  const Row row(LogitsFromProbs({0.1, 0.4, 0.2, 0.3}));  // order 1, 3, 2, 0; cum .4 .7 .9 1
  SamplingParams p;
  p.seed = 42;
  Sampler s = MakeSampler(p);
  std::vector<int32_t> got;
  for (int i = 0; i < 12; ++i) got.push_back(Draw(s, row.Full()));
  EXPECT_EQ(got, (std::vector<int32_t>{1, 1, 3, 0, 0, 2, 2, 2, 2, 3, 3, 1}));
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = static_cast<float>(std::sin(i * 0.7));
  const Row row(logits);
  SamplingParams p;
  p.seed = 1234;
  auto run = [&](const SamplingParams& q) {
    Sampler s = MakeSampler(q);
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(Draw(s, row.Full()));
    return out;
  };
  const std::vector<int32_t> a = run(p);
  EXPECT_EQ(run(p), a);
  SamplingParams q = p;
  q.seed = 1235;
  EXPECT_NE(run(q), a);
}

TEST(Sampler, LowTemperatureConcentratesHighSpreads) {
  const Row row(LogitsFromProbs({0.4, 0.3, 0.2, 0.1}));
  auto count_best = [&](float t) {
    SamplingParams p;
    p.temperature = t;
    Sampler s = MakeSampler(p);
    int best = 0;
    for (int i = 0; i < 4000; ++i) best += Draw(s, row.Full()) == 0;
    return best;
  };
  const int cold = count_best(0.02f), one = count_best(1.0f), hot = count_best(5.0f);
  EXPECT_GT(cold, 3995);  // (0.4/0.3)^50 ~ 1.8e6 times the next
  EXPECT_GT(one, 1450);
  EXPECT_LT(one, 1750);
  EXPECT_LT(hot, 1250);   // ~0.29 at t = 5
}

TEST(Sampler, TopKKeepsTheKBest) {
  const Row row(LogitsFromProbs({0.1, 0.3, 0.05, 0.25, 0.3}));
  SamplingParams p;
  p.top_k = 2;
  EXPECT_EQ(Support(p, row), (std::set<int32_t>{1, 4}));
  p.top_k = 1;  // the tie of 1 and 4 goes to the lower id
  EXPECT_EQ(Support(p, row), (std::set<int32_t>{1}));
  p.top_k = 100;
  EXPECT_EQ(Support(p, row).size(), 5u);
}

TEST(Sampler, TopPKeepsTheShortestPrefixReachingP) {
  const Row row(LogitsFromProbs({0.5, 0.3, 0.15, 0.05}));
  SamplingParams p;
  p.top_p = 0.45f;
  EXPECT_EQ(Support(p, row), (std::set<int32_t>{0}));
  p.top_p = 0.55f;  // the token that crosses p is kept
  EXPECT_EQ(Support(p, row), (std::set<int32_t>{0, 1}));
  p.top_p = 0.79f;
  EXPECT_EQ(Support(p, row), (std::set<int32_t>{0, 1}));
  p.top_p = 0.81f;
  EXPECT_EQ(Support(p, row), (std::set<int32_t>{0, 1, 2}));
  // After top_k, top_p judges the renormalized survivors: 0.5 / 0.8 = 0.625.
  p.top_k = 2;
  p.top_p = 0.6f;
  EXPECT_EQ(Support(p, row), (std::set<int32_t>{0}));
}

TEST(Sampler, MinPKeepsTokensWithinAFactorOfTheBest) {
  const Row row(LogitsFromProbs({0.5, 0.3, 0.15, 0.05}));
  SamplingParams p;
  p.min_p = 0.25f;  // threshold 0.125
  EXPECT_EQ(Support(p, row), (std::set<int32_t>{0, 1, 2}));
  p.min_p = 0.5f;  // 0.25
  EXPECT_EQ(Support(p, row), (std::set<int32_t>{0, 1}));
  p.min_p = 1.0f;
  EXPECT_EQ(Support(p, row), (std::set<int32_t>{0}));
  // min_p compares raw probabilities, before temperature (llama.cpp's order).
  p.min_p = 0.5f;
  p.temperature = 3.0f;
  EXPECT_EQ(Support(p, row), (std::set<int32_t>{0, 1}));
}

TEST(Sampler, RepetitionPenaltyCountsThePrompt) {
  const Row row({2.0f, 1.9f, -1.0f});
  SamplingParams p = Greedy();
  p.repetition_penalty = 1.1f;  // 2.0 / 1.1 = 1.82 < 1.9
  Sampler s = MakeSampler(p);
  const int32_t prompt[] = {0};
  s.AddPrompt(prompt);
  EXPECT_EQ(Draw(s, row.Full()), 1);
  // Now 1 is seen too: 1.9 / 1.1 = 1.73 < 1.82.
  EXPECT_EQ(Draw(s, row.Full()), 0);
  // A penalty below 1 boosts: a negative logit is multiplied toward 0, a positive one divided.
  SamplingParams b = Greedy();
  b.repetition_penalty = 0.01f;
  Sampler sb = MakeSampler(b);
  const int32_t seen[] = {2};
  sb.AddPrompt(seen);
  const Row negative({-0.5f, -0.2f, -1.0f});  // 2: -1.0 * 0.01 = -0.01 beats -0.2
  EXPECT_EQ(Draw(sb, negative.Full()), 2);
}

TEST(Sampler, PresenceAndFrequencyIgnoreThePrompt) {
  const Row row({2.0f, 1.5f, 1.4f});
  SamplingParams p = Greedy();
  p.presence_penalty = 0.3f;
  p.frequency_penalty = 0.2f;
  Sampler s = MakeSampler(p);
  const int32_t prompt[] = {0, 0, 0};
  s.AddPrompt(prompt);
  EXPECT_EQ(Draw(s, row.Full()), 0);  // the prompt does not count: 2.0
  EXPECT_EQ(Draw(s, row.Full()), 0);  // 2.0 - 0.3 - 0.2 = 1.5 ties 1.5, lower id wins
  EXPECT_EQ(Draw(s, row.Full()), 1);  // 2.0 - 0.3 - 0.4 = 1.3 < 1.5
  EXPECT_EQ(Draw(s, row.Full()), 2);  // 1: 1.0, 0: 1.3, 2: 1.4
  EXPECT_EQ(Draw(s, row.Full()), 0);  // 2: 0.9, 0: 1.3, 1: 1.0
}

TEST(Sampler, PenaltiesLeaveTheWindow) {
  const Row row({2.0f, 1.9f});
  SamplingParams p = Greedy();
  p.frequency_penalty = 1.0f;
  p.penalty_last_n = 2;
  Sampler s = MakeSampler(p);
  EXPECT_EQ(Draw(s, row.Full()), 0);  // window {0}
  EXPECT_EQ(Draw(s, row.Full()), 1);  // 0 at 1.0; window {0, 1}
  EXPECT_EQ(Draw(s, row.Full()), 0);  // 0: 1.0, 1: 0.9; window {1, 0}
  s.AcceptGenerated(5);               // window {0, 5}
  EXPECT_EQ(Draw(s, row.Full()), 1);  // 0 still penalized; window {5, 1}
  s.AcceptGenerated(5);               // window {1, 5}: 0 has left
  EXPECT_EQ(Draw(s, row.Full()), 0);
  p.penalty_last_n = 0;  // off
  Sampler off = MakeSampler(p);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Draw(off, row.Full()), 0);
}

TEST(Sampler, LogprobsAreTheRawLogSoftmax) {
  const std::vector<double> probs = {0.1, 0.4, 0.2, 0.3};
  const Row row(LogitsFromProbs(probs));
  SamplingParams p;
  p.temperature = 0.3f;  // neither temperature nor penalties change the reported logprobs
  p.presence_penalty = 1.5f;
  p.n_logprobs = 3;
  for (const bool full : {true, false}) {
    Sampler s = MakeSampler(p);
    for (int i = 0; i < 20; ++i) {
      absl::StatusOr<SampleResult> r = s.Sample(full ? row.Full() : row.Top(4));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_FALSE(r->insufficient) << r->reason;
      EXPECT_NEAR(r->logprob, std::log(probs[r->token]), 1e-6);
      ASSERT_EQ(r->top_logprobs.size(), 3u);
      EXPECT_EQ(r->top_logprobs[0].token, 1);
      EXPECT_EQ(r->top_logprobs[1].token, 3);
      EXPECT_EQ(r->top_logprobs[2].token, 2);
      EXPECT_NEAR(r->top_logprobs[0].logprob, std::log(0.4), 1e-6);
      EXPECT_NEAR(r->top_logprobs[2].logprob, std::log(0.2), 1e-6);
    }
  }
}

TEST(Sampler, TopLogprobsTieToTheLowerId) {
  const Row row({1.0f, 2.0f, 2.0f, 0.0f, 2.0f});
  SamplingParams p = Greedy();
  p.n_logprobs = 4;
  Sampler s = MakeSampler(p);
  absl::StatusOr<SampleResult> r = s.Sample(row.Full());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->top_logprobs.size(), 4u);
  EXPECT_EQ(r->top_logprobs[0].token, 1);
  EXPECT_EQ(r->top_logprobs[1].token, 2);
  EXPECT_EQ(r->top_logprobs[2].token, 4);
  EXPECT_EQ(r->top_logprobs[3].token, 0);
}

TEST(Sampler, CreateRejectsInvalidParams) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_EQ(Sampler::Create(p).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Sampler, RejectsMalformedRows) {
  Sampler s = MakeSampler(SamplingParams{});
  EXPECT_EQ(s.Sample(Candidates{}).status().code(), absl::StatusCode::kInvalidArgument);

  const std::vector<float> nan_logits = {1.0f, NAN};
  EXPECT_EQ(s.Sample(Candidates{{}, 0, nan_logits}).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<float> all_masked = {-INFINITY, -INFINITY};
  EXPECT_EQ(s.Sample(Candidates{{}, 0, all_masked}).status().code(), absl::StatusCode::kInvalidArgument);

  const std::vector<TokenLogit> unsorted = {{0, 1.0f}, {1, 2.0f}};
  EXPECT_EQ(s.Sample(Candidates{unsorted, 3.0f, {}}).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<TokenLogit> tie_order = {{1, 2.0f}, {0, 2.0f}};
  EXPECT_EQ(s.Sample(Candidates{tie_order, 3.0f, {}}).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<TokenLogit> dup = {{3, 2.0f}, {1, 1.0f}, {3, 0.5f}};
  EXPECT_EQ(s.Sample(Candidates{dup, 3.0f, {}}).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<TokenLogit> negative_id = {{-1, 2.0f}};
  EXPECT_EQ(s.Sample(Candidates{negative_id, 3.0f, {}}).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<TokenLogit> ok = {{3, 2.0f}, {1, 1.0f}};
  // A logsumexp below the candidates' own (e.g. one taken after temperature) is a caller bug.
  EXPECT_EQ(s.Sample(Candidates{ok, 1.5f, {}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Sample(Candidates{ok, NAN, {}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s.Sample(Candidates{ok, 2.5f, {}}).ok());
}

}  // namespace
}  // namespace k3::sampling
