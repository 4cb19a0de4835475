#include "coordinator/sampler/penalties.h"

#include <gtest/gtest.h>

namespace k3::sampling {
namespace {

TEST(PenaltyWindow, CountsPromptAndGeneratedSeparately) {
  PenaltyWindow w(-1);
  w.Add(5, false);
  w.Add(5, true);
  w.Add(7, true);
  w.Add(5, true);
  EXPECT_EQ(w.Get(5).all, 3);
  EXPECT_EQ(w.Get(5).generated, 2);
  EXPECT_EQ(w.Get(7).all, 1);
  EXPECT_EQ(w.Get(7).generated, 1);
  EXPECT_EQ(w.Get(9).all, 0);
  EXPECT_EQ(w.counts().size(), 2u);
}

TEST(PenaltyWindow, KeepsOnlyTheLastN) {
  PenaltyWindow w(3);
  w.Add(1, false);  // falls out after three more
  w.Add(2, true);
  w.Add(1, true);
  EXPECT_EQ(w.Get(1).all, 2);
  EXPECT_EQ(w.Get(1).generated, 1);
  w.Add(3, true);  // evicts the prompt's 1
  EXPECT_EQ(w.Get(1).all, 1);
  EXPECT_EQ(w.Get(1).generated, 1);
  w.Add(4, true);  // evicts 2
  EXPECT_EQ(w.Get(2).all, 0);
  EXPECT_FALSE(w.counts().contains(2));
  w.Add(4, true);  // evicts the generated 1
  EXPECT_FALSE(w.counts().contains(1));
  EXPECT_EQ(w.Get(4).generated, 2);
}

TEST(PenaltyWindow, ZeroWindowRecordsNothing) {
  PenaltyWindow w(0);
  w.Add(1, true);
  EXPECT_TRUE(w.counts().empty());
}

TEST(Penalize, RepetitionDividesPositiveAndMultipliesNegative) {
  SamplingParams p;
  p.repetition_penalty = 2;
  const TokenCounts prompt_only{1, 0};
  EXPECT_TRUE(Penalizes(p, prompt_only));
  EXPECT_FLOAT_EQ(Penalize(p, prompt_only, 3.0f), 1.5f);
  EXPECT_FLOAT_EQ(Penalize(p, prompt_only, -3.0f), -6.0f);
  EXPECT_FLOAT_EQ(Penalize(p, prompt_only, 0.0f), 0.0f);
  EXPECT_FALSE(Penalizes(p, TokenCounts{}));
  p.repetition_penalty = 0.5f;  // boosting
  EXPECT_FLOAT_EQ(Penalize(p, prompt_only, 3.0f), 6.0f);
  EXPECT_FLOAT_EQ(Penalize(p, prompt_only, -3.0f), -1.5f);
}

TEST(Penalize, PresenceAndFrequencyCountGeneratedTokensOnly) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  EXPECT_FALSE(Penalizes(p, TokenCounts{4, 0}));  // seen only in the prompt
  EXPECT_FLOAT_EQ(Penalize(p, TokenCounts{4, 0}, 1.0f), 1.0f);
  EXPECT_FLOAT_EQ(Penalize(p, TokenCounts{4, 1}, 1.0f), 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(Penalize(p, TokenCounts{4, 3}, 1.0f), 1.0f - 0.5f - 0.75f);
}

TEST(Penalize, RepetitionThenPresenceFrequencyAsLlamaCpp) {
  SamplingParams p;
  p.repetition_penalty = 2;
  p.presence_penalty = 1;
  p.frequency_penalty = 0.5f;
  EXPECT_FLOAT_EQ(Penalize(p, TokenCounts{3, 2}, 4.0f), 4.0f / 2 - 1 - 2 * 0.5f);
  EXPECT_FLOAT_EQ(Penalize(p, TokenCounts{3, 2}, -4.0f), -4.0f * 2 - 1 - 2 * 0.5f);
}

}  // namespace
}  // namespace k3::sampling
