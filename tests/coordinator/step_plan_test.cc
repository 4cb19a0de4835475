// PlanStep (coordinator/server/step_plan.h): decode tokens first within the budget, then prompt
// chunks; small chunks while a sequence decodes, idle_prefill_chunk when none does.
#include "coordinator/server/step_plan.h"

#include <vector>

#include <gtest/gtest.h>

namespace k3::coord {
namespace {

using Plan = std::vector<int64_t>;

TEST(StepPlanTest, LonePromptGoesInIdleChunks) {
  const StepBudget b{512, 256, 16384};
  EXPECT_EQ(PlanStep(std::vector<SeqState>{{false, 32768}}, b), Plan({16384}));
  EXPECT_EQ(PlanStep(std::vector<SeqState>{{false, 1000}}, b), Plan({1000}));
  // Two prompts, nobody decoding: the first its idle chunk, the second what the grown budget leaves.
  EXPECT_EQ(PlanStep(std::vector<SeqState>{{false, 10000}, {false, 10000}}, b), Plan({10000, 6384}));
}

TEST(StepPlanTest, DecodingKeepsStepsShort) {
  const StepBudget b{512, 256, 16384};
  // One stream decoding: its token, then a 256-token chunk of the new prompt.
  EXPECT_EQ(PlanStep(std::vector<SeqState>{{true, 0}, {false, 32768}}, b), Plan({0, 256}));
  // The budget bounds the step: 300 decoders leave 212 prompt tokens.
  std::vector<SeqState> many(300, SeqState{true, 0});
  many.push_back({false, 32768});
  const Plan p = PlanStep(many, b);
  EXPECT_EQ(p.back(), 212);
  // More decoders than the budget: the rest wait for the next step, no prompt tokens.
  std::vector<SeqState> over(600, SeqState{true, 0});
  over.push_back({false, 100});
  const Plan q = PlanStep(over, b);
  EXPECT_EQ(q[511], 0);
  EXPECT_EQ(q[512], -1);
  EXPECT_EQ(q.back(), -1);
}

TEST(StepPlanTest, IdleChunkAtMostPrefillChunkChangesNothing) {
  const StepBudget b{512, 256, 128};
  EXPECT_EQ(PlanStep(std::vector<SeqState>{{false, 32768}}, b), Plan({256}));
  EXPECT_EQ(PlanStep(std::vector<SeqState>{{false, 300}, {false, 300}, {false, 300}}, b), Plan({256, 256, -1}));
}

TEST(StepPlanTest, FinishedPromptsWithoutATokenWait) {
  const StepBudget b{512, 256, 16384};
  // Prompt all sent, first token not chosen yet: not decoding, nothing to send.
  EXPECT_EQ(PlanStep(std::vector<SeqState>{{false, 0}, {false, 40}}, b), Plan({-1, 40}));
  EXPECT_EQ(PlanStep(std::vector<SeqState>{}, b), Plan({}));
}

}  // namespace
}  // namespace k3::coord
