#include "coordinator/sampler/sampling_params.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

namespace k3::sampling {
namespace {

// Validate's error for params changed by `edit`, expecting it to name `field`.
template <typename Edit>
void ExpectInvalid(Edit edit, const std::string& field) {
  SamplingParams p;
  edit(p);
  const absl::Status s = p.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_NE(std::string(s.message()).find(field), std::string::npos) << s.message();
}

TEST(SamplingParams, DefaultsAndEdgesAreValid) {
  SamplingParams p;
  EXPECT_TRUE(p.Validate().ok());
  p.temperature = 0;
  p.top_p = 1;
  p.min_p = 1;
  p.top_k = 1;
  p.repetition_penalty = kMinRepetitionPenalty;
  p.presence_penalty = -2;
  p.frequency_penalty = 2;
  p.penalty_last_n = -1;
  p.n_logprobs = kMaxLogprobs;
  EXPECT_TRUE(p.Validate().ok()) << p.Validate();
}

TEST(SamplingParams, ValidateNamesTheBadField) {
  ExpectInvalid([](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  ExpectInvalid([](SamplingParams& p) { p.temperature = NAN; }, "temperature");
  ExpectInvalid([](SamplingParams& p) { p.temperature = INFINITY; }, "temperature");
  ExpectInvalid([](SamplingParams& p) { p.top_k = -1; }, "top_k");
  ExpectInvalid([](SamplingParams& p) { p.top_p = 0; }, "top_p");
  ExpectInvalid([](SamplingParams& p) { p.top_p = 1.01f; }, "top_p");
  ExpectInvalid([](SamplingParams& p) { p.top_p = NAN; }, "top_p");
  ExpectInvalid([](SamplingParams& p) { p.min_p = -0.01f; }, "min_p");
  ExpectInvalid([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  ExpectInvalid([](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty");
  ExpectInvalid([](SamplingParams& p) { p.repetition_penalty = -1; }, "repetition_penalty");
  ExpectInvalid([](SamplingParams& p) { p.repetition_penalty = 1e3f; }, "repetition_penalty");
  ExpectInvalid([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
  ExpectInvalid([](SamplingParams& p) { p.presence_penalty = NAN; }, "presence_penalty");
  ExpectInvalid([](SamplingParams& p) { p.frequency_penalty = -3; }, "frequency_penalty");
  ExpectInvalid([](SamplingParams& p) { p.penalty_last_n = -2; }, "penalty_last_n");
  ExpectInvalid([](SamplingParams& p) { p.n_logprobs = -1; }, "n_logprobs");
  ExpectInvalid([](SamplingParams& p) { p.n_logprobs = kMaxLogprobs + 1; }, "n_logprobs");
}

TEST(SamplingParams, RequiredTopN) {
  SamplingParams p;
  EXPECT_EQ(RequiredTopN(p), kNeedsFullLogits);  // plain temperature sampling
  p.top_p = 0.9f;
  EXPECT_EQ(RequiredTopN(p), kNeedsFullLogits);  // depends on the logits
  p.top_k = 40;
  EXPECT_EQ(RequiredTopN(p), 40);
  p.n_logprobs = 20;
  EXPECT_EQ(RequiredTopN(p), 40);

  SamplingParams g;
  g.temperature = 0;
  EXPECT_EQ(RequiredTopN(g), 1);
  g.n_logprobs = 5;
  EXPECT_EQ(RequiredTopN(g), 5);

  g.repetition_penalty = 1.1f;  // penalties on: the window's tokens may fall out of the top
  EXPECT_EQ(RequiredTopN(g), 1 + 64);
  EXPECT_EQ(RequiredTopN(g, 3), 5);  // max(1 + 3, n_logprobs)
  g.penalty_last_n = 0;              // window off: penalties off
  EXPECT_EQ(RequiredTopN(g), 5);
  g.penalty_last_n = -1;
  EXPECT_EQ(RequiredTopN(g), kNeedsFullLogits);
  EXPECT_EQ(RequiredTopN(g, 10), 11);

  SamplingParams b;
  b.top_k = 5;
  b.presence_penalty = -0.5f;  // boosting
  EXPECT_TRUE(PenaltiesBoost(b));
  EXPECT_EQ(RequiredTopN(b), kNeedsFullLogits);
  b.presence_penalty = 0.5f;
  EXPECT_FALSE(PenaltiesBoost(b));
  EXPECT_EQ(RequiredTopN(b), 5 + 64);
}

}  // namespace
}  // namespace k3::sampling
