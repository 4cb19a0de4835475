// The step wire format and the vocabulary-band merge.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "worker/runtime/band_merge.h"
#include "worker/runtime/step.h"

namespace k3::runtime {
namespace {

Step SampleStep() {
  Step s;
  s.id = 42;
  s.free = {3, 4};
  s.add = {7};
  s.fork = {{7, 8}};
  s.entries = {{7, {1, 2, 3}, 5, true, false}, {8, {9}, 1, false, true}};
  s.shutdown = true;
  return s;
}

TEST(StepCodec, RoundTrips) {
  const Step s = SampleStep();
  auto d = DecodeStep(EncodeStep(s));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->id, 42u);
  EXPECT_EQ(d->free, s.free);
  EXPECT_EQ(d->add, s.add);
  EXPECT_EQ(d->fork, s.fork);
  ASSERT_EQ(d->entries.size(), 2u);
  EXPECT_EQ(d->entries[0].tokens, s.entries[0].tokens);
  EXPECT_EQ(d->entries[0].top_n, 5);
  EXPECT_TRUE(d->entries[0].full_logits);
  EXPECT_FALSE(d->entries[0].all_positions);
  EXPECT_TRUE(d->entries[1].all_positions);
  EXPECT_TRUE(d->shutdown);
}

TEST(StepCodec, EveryTruncationIsAnError) {
  const std::string bytes = EncodeStep(SampleStep());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeStep(bytes.substr(0, n)).ok()) << "truncated at " << n;
  }
  EXPECT_FALSE(DecodeStep(bytes + "x").ok());
}

TEST(StepCodec, HostileCountsAreRejectedWithoutAllocating) {
  std::string bytes = EncodeStep(Step{});
  // Overwrite the `free` count (after magic 4 + id 8 + flags 1) with a huge value.
  const uint64_t huge = ~0ull;
  bytes.replace(13, 8, reinterpret_cast<const char*>(&huge), 8);
  EXPECT_FALSE(DecodeStep(bytes).ok());
  Step bad = SampleStep();
  bad.entries[0].top_n = 0;
  EXPECT_FALSE(DecodeStep(EncodeStep(bad)).ok());
}

TEST(BandMerge, EqualsTheFullVocabulary) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0, 3);
  for (int bands : {1, 2, 4, 8}) {
    const int64_t V = 4096, W = V / bands;
    const int32_t k = 20;
    std::vector<float> logits(V);
    for (float& v : logits) v = n(rng);
    logits[100] = logits[3000] = 50;  // a tie across bands: the lower id wins
    std::vector<std::vector<Candidate>> tops(bands, std::vector<Candidate>(k));
    std::vector<float> lse(bands);
    for (int b = 0; b < bands; ++b) SummarizeBand(&logits[b * W], W, b * W, k, tops[b].data(), &lse[b]);
    std::vector<const Candidate*> ptrs;
    for (auto& t : tops) ptrs.push_back(t.data());
    RowOutput out = MergeBands(ptrs, lse, k);
    std::vector<int32_t> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    ASSERT_EQ(out.top.size(), static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) EXPECT_EQ(out.top[i].token, idx[i]) << bands << " bands, rank " << i;
    EXPECT_EQ(out.top[0].token, 100);
    double mx = *std::max_element(logits.begin(), logits.end()), z = 0;
    for (float v : logits) z += std::exp(v - mx);
    EXPECT_NEAR(out.logsumexp, mx + std::log(z), 1e-4);
  }
}

TEST(BandMerge, BandNarrowerThanTopN) {
  std::vector<float> a = {1, 2}, b = {3, 0};
  Candidate ta[4], tb[4];
  float la, lb;
  SummarizeBand(a.data(), 2, 0, 4, ta, &la);
  SummarizeBand(b.data(), 2, 2, 4, tb, &lb);
  const Candidate* ptrs[2] = {ta, tb};
  float lses[2] = {la, lb};
  RowOutput out = MergeBands(ptrs, lses, 4);
  ASSERT_EQ(out.top.size(), 4u);
  EXPECT_EQ(out.top[0].token, 2);
  EXPECT_EQ(out.top[1].token, 1);
  EXPECT_EQ(out.top[2].token, 0);
  EXPECT_EQ(out.top[3].token, 3);
}

}  // namespace
}  // namespace k3::runtime
