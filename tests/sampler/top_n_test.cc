// Top-N input: it must give exactly the full-logits result, or say it cannot.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "coordinator/sampler/sampler.h"
#include "tests/sampler/sampler_test_util.h"

namespace k3::sampling {
namespace {

using testing::Draw;
using testing::LogitsFromProbs;
using testing::MakeSampler;
using testing::Row;

bool Insufficient(Sampler& s, const Candidates& c) {
  absl::StatusOr<SampleResult> r = s.Sample(c);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() && r->insufficient;
}

// A peaked, LLM-like row: a few strong tokens over a long tail.
std::vector<float> RandomLogits(std::mt19937_64& gen, int vocab, double spread) {
  std::normal_distribution<double> normal(0, spread);  // only shapes the test's data
  std::vector<float> l(vocab);
  for (float& x : l) x = static_cast<float>(normal(gen));
  for (int i = 0; i < 5; ++i) l[gen() % vocab] += static_cast<float>(8 - i);
  return l;
}

struct Case {
  const char* name;
  SamplingParams params;
  int32_t top_n;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  auto add = [&](const char* name, int32_t n, auto edit) {
    SamplingParams p;
    edit(p);
    cases.push_back({name, p, n});
  };
  add("greedy", 1, [](SamplingParams& p) { p.temperature = 0; });
  add("t=1", 256, [](SamplingParams&) {});
  add("t=0.7", 64, [](SamplingParams& p) { p.temperature = 0.7f; });
  add("t=1.3", 1024, [](SamplingParams& p) { p.temperature = 1.3f; });
  add("top_k=40", 40, [](SamplingParams& p) { p.top_k = 40; });
  add("top_k=40 t=1.5", 64, [](SamplingParams& p) { p.top_k = 40; p.temperature = 1.5f; });
  add("top_p=0.9", 256, [](SamplingParams& p) { p.top_p = 0.9f; });
  add("top_p=0.95 t=0.8", 1024, [](SamplingParams& p) { p.top_p = 0.95f; p.temperature = 0.8f; });
  add("min_p=0.05", 64, [](SamplingParams& p) { p.min_p = 0.05f; });
  add("min_p=0.01 t=2", 1024, [](SamplingParams& p) { p.min_p = 0.01f; p.temperature = 2; });
  add("all", 128, [](SamplingParams& p) {
    p.top_k = 100; p.top_p = 0.9f; p.min_p = 0.02f; p.temperature = 0.9f; p.n_logprobs = 5;
  });
  add("rep=1.3 greedy", 8, [](SamplingParams& p) { p.temperature = 0; p.repetition_penalty = 1.3f; });
  add("presence+freq top_p", 256, [](SamplingParams& p) {
    p.top_p = 0.9f; p.presence_penalty = 1.0f; p.frequency_penalty = 0.5f;
  });
  add("rep=1.2 top_k=20", 32, [](SamplingParams& p) {
    p.top_k = 20; p.repetition_penalty = 1.2f; p.penalty_last_n = -1;
  });
  add("boost rep=0.7 t=0.8", 256, [](SamplingParams& p) {
    p.repetition_penalty = 0.7f; p.temperature = 0.8f;
  });
  add("boost presence=-1 top_p", 256, [](SamplingParams& p) {
    p.top_p = 0.8f; p.presence_penalty = -1.0f;
  });
  return cases;
}

// Runs two samplers with one seed over the same rows: one always gets full logits, the other
// the top-N and, only when it reports insufficient, the full logits. Their tokens, logprobs and
// top logprobs must agree at every step.
TEST(TopN, SameTokensAsFullLogitsOrInsufficient) {
  for (const bool with_vocab_size : {true, false}) {
  std::printf("vocabulary size %s:\n", with_vocab_size ? "given" : "unknown");
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    SCOPED_TRACE(with_vocab_size ? "vocab_size given" : "vocab_size unknown");
    std::mt19937_64 gen(99);
    Sampler full = MakeSampler(c.params);
    Sampler top = MakeSampler(c.params);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 30; ++i) prompt.push_back(static_cast<int32_t>(gen() % 64));
    full.AddPrompt(prompt);
    top.AddPrompt(prompt);
    const int kSteps = 200;
    int decided = 0;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> logits = RandomLogits(gen, 3000, step % 3 == 0 ? 1.0 : 2.5);
      // Make the history matter: recently used tokens are likely again.
      for (int32_t t : prompt) logits[t] += 3.0f;
      const Row row(std::move(logits));
      absl::StatusOr<SampleResult> want = full.Sample(row.Full());
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_FALSE(want->insufficient);
      const int32_t required = top.RequiredTopN();
      absl::StatusOr<SampleResult> got = top.Sample(row.Top(c.top_n, with_vocab_size));
      ASSERT_TRUE(got.ok()) << got.status();
      if (required != kNeedsFullLogits && required <= c.top_n) {
        EXPECT_FALSE(got->insufficient) << "step " << step << ": " << got->reason;
      }
      if (got->insufficient) {
        got = top.Sample(row.Full());
        ASSERT_TRUE(got.ok());
      } else {
        ++decided;
      }
      ASSERT_EQ(got->token, want->token) << "step " << step;
      EXPECT_NEAR(got->logprob, want->logprob, 1e-5);  // the float logsumexp vs the exact one
      ASSERT_EQ(got->top_logprobs.size(), want->top_logprobs.size());
      for (size_t i = 0; i < got->top_logprobs.size(); ++i) {
        EXPECT_EQ(got->top_logprobs[i].token, want->top_logprobs[i].token);
        EXPECT_NEAR(got->top_logprobs[i].logprob, want->top_logprobs[i].logprob, 1e-5);
      }
      prompt.push_back(want->token);
      if (prompt.size() > 30) prompt.erase(prompt.begin());
    }
    std::printf("  %-26s top_n=%-5d decided from top-N: %3d/%d\n", c.name, c.top_n, decided, kSteps);
  }
  }
}

// Small vocabularies make every boundary case common: tied logits, penalties of both signs
// pushing candidates across the N-th logit, truncations ending exactly at N.
TEST(TopN, RandomSmallVocabulariesWithTiesAndPenalties) {
  std::mt19937_64 gen(7);
  int decided = 0;
  const int kTrials = 50000;
  for (int trial = 0; trial < kTrials; ++trial) {
    const int v = 2 + static_cast<int>(gen() % 20);
    std::vector<float> logits(v);
    std::normal_distribution<float> normal(0, 2);
    for (float& x : logits) x = gen() % 3 == 0 ? static_cast<float>(gen() % 17) * 0.5f - 4 : normal(gen);
    SamplingParams p;
    p.seed = gen();
    const float temps[] = {0, 0.5f, 1, 1.7f};
    p.temperature = temps[gen() % 4];
    if (gen() % 3 == 0) p.top_k = 1 + static_cast<int32_t>(gen() % v);
    if (gen() % 3 == 0) p.top_p = 0.3f + 0.007f * static_cast<float>(gen() % 100);
    if (gen() % 3 == 0) p.min_p = 0.01f * static_cast<float>(gen() % 100);
    if (gen() % 2 == 0) p.repetition_penalty = gen() % 2 ? 1.5f : 0.6f;
    if (gen() % 2 == 0) p.presence_penalty = gen() % 2 ? 0.5f : -0.5f;
    if (gen() % 3 == 0) p.frequency_penalty = gen() % 2 ? 0.5f : -0.5f;
    p.n_logprobs = static_cast<int32_t>(gen() % 3);
    Sampler full = MakeSampler(p);
    Sampler top = MakeSampler(p);
    for (int i = 0; i < 6; ++i) {
      const int32_t t = static_cast<int32_t>(gen() % v);
      if (i < 3) {
        full.AddPrompt(std::span<const int32_t>(&t, 1));
        top.AddPrompt(std::span<const int32_t>(&t, 1));
      } else {
        full.AcceptGenerated(t);
        top.AcceptGenerated(t);
      }
    }
    const Row row(logits);
    const int n = 1 + static_cast<int>(gen() % v);
    absl::StatusOr<SampleResult> want = full.Sample(row.Full());
    absl::StatusOr<SampleResult> got = top.Sample(row.Top(n, gen() % 2 == 0));
    ASSERT_TRUE(want.ok() && got.ok());
    if (got->insufficient) continue;
    ++decided;
    ASSERT_EQ(got->token, want->token) << "trial " << trial;
  }
  std::printf("decided from top-N in %d of %d random cases, all equal to full logits\n", decided, kTrials);
}

TEST(TopN, RequiredTopNIsEnough) {
  // Greedy / top_k need exactly their N, never more, on any row.
  std::mt19937_64 gen(5);
  for (int step = 0; step < 200; ++step) {
    const Row row(RandomLogits(gen, 500, 3.0));
    SamplingParams g;
    g.temperature = 0;
    Sampler sg = MakeSampler(g);
    EXPECT_EQ(Draw(sg, row.Top(RequiredTopN(g))), row.sorted[0].token);
    SamplingParams k;
    k.top_k = 7;
    k.temperature = 3;
    Sampler sk = MakeSampler(k);
    const int32_t t = Draw(sk, row.Top(RequiredTopN(k)));
    EXPECT_TRUE(t == row.sorted[0].token || t == row.sorted[1].token || t == row.sorted[2].token ||
                t == row.sorted[3].token || t == row.sorted[4].token || t == row.sorted[5].token ||
                t == row.sorted[6].token);
  }
}

TEST(TopN, InsufficientWhenTopKExceedsN) {
  const Row row(LogitsFromProbs({0.3, 0.25, 0.2, 0.15, 0.1}));
  SamplingParams p;
  p.top_k = 4;
  Sampler s = MakeSampler(p);
  EXPECT_TRUE(Insufficient(s, row.Top(3)));
  Draw(s, row.Top(4));
}

TEST(TopN, InsufficientWhenTheNucleusMayNotFit) {
  const Row row(LogitsFromProbs({0.4, 0.3, 0.1, 0.1, 0.05, 0.05}));
  SamplingParams p;
  p.top_p = 0.75f;
  Sampler s = MakeSampler(p);
  EXPECT_TRUE(Insufficient(s, row.Top(1)));  // 0.4 < 0.75
  EXPECT_TRUE(Insufficient(s, row.Top(2)));  // 0.7 < 0.75
  const int32_t t = Draw(s, row.Top(3));     // 0.8 >= 0.75: nucleus {0, 1, 2}
  EXPECT_TRUE(t == 0 || t == 1 || t == 2);
}

TEST(TopN, InsufficientWhenMinPMayAdmitOutsideTokens) {
  const Row row(LogitsFromProbs({0.4, 0.3, 0.1, 0.1, 0.05, 0.05}));
  SamplingParams p;
  p.min_p = 0.2f;  // threshold 0.08: tokens 0..3
  Sampler s = MakeSampler(p);
  EXPECT_TRUE(Insufficient(s, row.Top(2)));
  EXPECT_TRUE(Insufficient(s, row.Top(4)));  // the 4th is above: the 5th might be too
  const int32_t t = Draw(s, row.Top(5));
  EXPECT_LE(t, 3);
}

TEST(TopN, UntruncatedHotTemperatureNeedsTheVocabularySize) {
  const Row row(LogitsFromProbs({0.9, 0.05, 0.03, 0.01, 0.01}));
  SamplingParams p;
  p.temperature = 1.5f;
  Sampler s = MakeSampler(p);
  EXPECT_EQ(s.RequiredTopN(), kNeedsFullLogits);
  // Unknown vocabulary: any number of tiny outside tokens could gain any mass at t > 1.
  EXPECT_TRUE(Insufficient(s, row.Top(3, /*with_vocab_size=*/false)));
  // Known: the 2 outside tokens hold at most 2 * 0.03^(1/t), so most draws are decided.
  Sampler full = MakeSampler(p);
  int decided = 0;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<SampleResult> r = s.Sample(row.Top(3));
    ASSERT_TRUE(r.ok());
    if (!r->insufficient) ++decided;
    const int32_t want = Draw(full, row.Full());
    EXPECT_EQ(r->insufficient ? Draw(s, row.Full()) : r->token, want);
  }
  EXPECT_GT(decided, 120);
}

TEST(TopN, UntruncatedDrawBeyondTheCandidatesIsInsufficient) {
  // The 2 candidates hold 0.5 of the mass: about half the draws land outside.
  std::vector<double> probs = {0.3, 0.2};
  for (int i = 0; i < 50; ++i) probs.push_back(0.01);
  const Row row(LogitsFromProbs(probs));
  SamplingParams p;
  p.seed = 3;
  Sampler top = MakeSampler(p);
  Sampler full = MakeSampler(p);
  int insufficient = 0;
  for (int i = 0; i < 400; ++i) {
    absl::StatusOr<SampleResult> r = top.Sample(row.Top(2));
    ASSERT_TRUE(r.ok());
    if (r->insufficient) {
      ++insufficient;
      r = top.Sample(row.Full());
    }
    EXPECT_EQ(r->token, Draw(full, row.Full()));
  }
  EXPECT_GT(insufficient, 150);
  EXPECT_LT(insufficient, 250);
}

TEST(TopN, InsufficientLeavesTheSamplerUnchanged) {
  const Row row(LogitsFromProbs({0.4, 0.3, 0.1, 0.1, 0.05, 0.05}));
  SamplingParams p;
  p.top_p = 0.9f;
  p.frequency_penalty = 0.5f;
  Sampler a = MakeSampler(p);
  Sampler b = MakeSampler(p);
  for (int i = 0; i < 50; ++i) {
    EXPECT_TRUE(Insufficient(a, row.Top(2)));  // no draw, no token recorded
    EXPECT_EQ(Draw(a, row.Full()), Draw(b, row.Full()));
  }
}

TEST(TopN, PenalizedCandidatesFallingBelowTheBoundary) {
  // Candidates 0 and 1 are both penalized below the 3rd-ranked logit (B = 4.0), so a token
  // outside the top-3 with a logit up to 4.0 could be the best: greedy cannot decide from 3 ...
  const Row row({5.0f, 4.5f, 4.0f, 3.9f, 0.0f});
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 2.0f;
  Sampler s = MakeSampler(p);
  s.AcceptGenerated(0);
  s.AcceptGenerated(1);
  s.AcceptGenerated(2);
  EXPECT_EQ(s.RequiredTopN(), 4);
  EXPECT_TRUE(Insufficient(s, row.Top(3)));
  // ... but from 4 it can: the 4th candidate (3.9, unpenalized) beats everything outside.
  EXPECT_EQ(Draw(s, row.Top(4)), 3);
}

TEST(TopN, BoostedTokensOutsideTheCandidates) {
  const Row row({5.0f, 4.0f, 3.0f, 2.0f, 1.0f});
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 0.5f;
  Sampler s = MakeSampler(p);
  const int32_t prompt[] = {4};
  s.AddPrompt(prompt);
  EXPECT_EQ(s.RequiredTopN(), kNeedsFullLogits);
  // Token 4 (outside the top-2) could reach 4.0 / 0.5 = 8 > 5: undecidable from 2 ...
  EXPECT_TRUE(Insufficient(s, row.Top(2)));
  // ... from 4 its bound is 2.0 / 0.5 = 4 < 5: token 0 it is (token 4's true 2.0 is below).
  EXPECT_EQ(Draw(s, row.Top(4)), 0);
}

}  // namespace
}  // namespace k3::sampling
