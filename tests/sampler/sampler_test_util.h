// Shared by the sampler tests: one row's logits in both input forms, and a checked Sampler.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "coordinator/sampler/candidates.h"
#include "coordinator/sampler/sampler.h"

namespace k3::sampling::testing {

// A row as the worker would return it: full logits, or the best n + the full logsumexp.
struct Row {
  static constexpr size_t kMaxN = 1024;  // the most candidates a worker returns

  explicit Row(std::vector<float> l)
      : logits(std::move(l)),
        sorted(TopCandidates(logits, static_cast<int32_t>(std::min<size_t>(logits.size(), kMaxN)))),
        logsumexp(static_cast<float>(LogSumExp(logits))) {}

  Candidates Full() const { return Candidates{{}, logsumexp, logits}; }
  // The best n; `with_vocab_size` says whether the caller passes the vocabulary size.
  Candidates Top(int64_t n, bool with_vocab_size = true) const {
    Candidates c;
    c.top = std::span<const TokenLogit>(sorted).first(std::min<size_t>(n, sorted.size()));
    c.logsumexp = logsumexp;
    c.vocab_size = with_vocab_size ? static_cast<int64_t>(logits.size()) : 0;
    return c;
  }

  std::vector<float> logits;
  std::vector<TokenLogit> sorted;
  float logsumexp;
};

inline std::vector<float> LogitsFromProbs(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

inline Sampler MakeSampler(const SamplingParams& p) {
  absl::StatusOr<Sampler> s = Sampler::Create(p);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

// Samples one token, requiring a decided result.
inline int32_t Draw(Sampler& s, const Candidates& c) {
  absl::StatusOr<SampleResult> r = s.Sample(c);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return -1;
  EXPECT_FALSE(r->insufficient) << r->reason;
  return r->token;
}

}  // namespace k3::sampling::testing
