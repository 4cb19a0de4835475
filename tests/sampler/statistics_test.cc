// Empirical frequencies of 200k draws against the exact target distribution of each setting,
// by a chi-square test at significance 0.001. The seeds are fixed, so the outcome is too: a
// failure means the sampler's distribution is off, not bad luck.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "coordinator/sampler/sampler.h"
#include "tests/sampler/sampler_test_util.h"

namespace k3::sampling {
namespace {

using testing::MakeSampler;
using testing::Row;

constexpr int kDraws = 200000;

std::vector<float> FixedLogits() {
  std::vector<float> l(32);
  for (int i = 0; i < 32; ++i) {
    l[i] = static_cast<float>(2.5 * std::cos(1.3 * i) + 0.3 * std::sin(0.7 * i) - 0.04 * i);
  }
  return l;
}

// The chain, written out plainly in double: top-k -> top-p -> min-p -> temperature.
std::vector<double> TargetDistribution(const std::vector<float>& logits, const SamplingParams& p) {
  const int v = static_cast<int>(logits.size());
  std::vector<int> kept(v);
  std::iota(kept.begin(), kept.end(), 0);
  std::sort(kept.begin(), kept.end(), [&](int a, int b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  auto softmax = [&](const std::vector<int>& ids, double t) {
    std::vector<double> w;
    double z = 0;
    for (int id : ids) z += w.emplace_back(std::exp((logits[id] - logits[ids[0]]) / t));
    for (double& x : w) x /= z;
    return w;
  };
  if (p.top_k > 0 && p.top_k < v) kept.resize(p.top_k);
  if (p.top_p < 1) {
    const std::vector<double> prob = softmax(kept, 1.0);
    double cum = 0;
    size_t m = 0;
    while (m < kept.size() && cum < p.top_p) cum += prob[m++];
    kept.resize(m);
  }
  if (p.min_p > 0) {
    const double best = logits[kept[0]];
    std::erase_if(kept, [&](int id) { return logits[id] < best + std::log(p.min_p); });
  }
  std::vector<double> target(v, 0.0);
  const std::vector<double> prob = softmax(kept, p.temperature);
  for (size_t i = 0; i < kept.size(); ++i) target[kept[i]] = prob[i];
  return target;
}

// Pearson's chi-square over the tokens with expected count >= 5 (the rest with nonzero
// probability pooled into one bin); tokens of probability 0 must never be drawn.
struct ChiSquare {
  double statistic = 0;
  int df = 0;
  double critical = 0;  // at significance 0.001
};

ChiSquare RunChiSquare(const std::vector<int64_t>& counts, const std::vector<double>& target, int64_t n) {
  std::vector<std::pair<double, double>> bins;  // (observed, expected)
  double pooled_o = 0, pooled_e = 0;
  for (size_t t = 0; t < target.size(); ++t) {
    const double e = target[t] * n;
    if (target[t] == 0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " is outside the kept set";
    } else if (e >= 5) {
      bins.push_back({static_cast<double>(counts[t]), e});
    } else {
      pooled_o += counts[t];
      pooled_e += e;
    }
  }
  if (pooled_e > 0) {
    if (pooled_e >= 5 || bins.empty()) {
      bins.push_back({pooled_o, pooled_e});
    } else {
      bins.back().first += pooled_o;
      bins.back().second += pooled_e;
    }
  }
  ChiSquare c;
  for (const auto& [o, e] : bins) c.statistic += (o - e) * (o - e) / e;
  c.df = static_cast<int>(bins.size()) - 1;
  // Wilson-Hilferty: chi2_df quantile ~ df (1 - 2/(9df) + z sqrt(2/(9df)))^3, z(0.999) = 3.0902.
  const double k = 2.0 / (9.0 * std::max(c.df, 1));
  c.critical = std::max(c.df, 1) * std::pow(1 - k + 3.0902 * std::sqrt(k), 3);
  return c;
}

struct Setting {
  const char* name;
  SamplingParams params;
  int32_t top_n = 0;  // 0: full logits; else the top-N, with full logits when insufficient
};

std::vector<Setting> Settings() {
  std::vector<Setting> s;
  auto add = [&](const char* name, int32_t top_n, auto edit) {
    SamplingParams p;
    p.seed = 20240601 + s.size();
    edit(p);
    s.push_back({name, p, top_n});
  };
  add("temperature 1", 0, [](SamplingParams&) {});
  add("temperature 0.5", 0, [](SamplingParams& p) { p.temperature = 0.5f; });
  add("temperature 2", 0, [](SamplingParams& p) { p.temperature = 2.0f; });
  add("top_k 5", 0, [](SamplingParams& p) { p.top_k = 5; });
  add("top_p 0.7", 0, [](SamplingParams& p) { p.top_p = 0.7f; });
  add("min_p 0.1", 0, [](SamplingParams& p) { p.min_p = 0.1f; });
  add("k 12 p 0.9 min_p 0.05 t 0.7", 0, [](SamplingParams& p) {
    p.top_k = 12; p.top_p = 0.9f; p.min_p = 0.05f; p.temperature = 0.7f;
  });
  add("top_p 0.6 t 1.5", 0, [](SamplingParams& p) { p.top_p = 0.6f; p.temperature = 1.5f; });
  add("top-N 8: top_k 5 t 1.2", 8, [](SamplingParams& p) { p.top_k = 5; p.temperature = 1.2f; });
  add("top-N 12 (+full): t 0.8", 12, [](SamplingParams& p) { p.temperature = 0.8f; });
  add("top-N 8: top_p 0.6", 8, [](SamplingParams& p) { p.top_p = 0.6f; });
  return s;
}

TEST(SamplerStatistics, EmpiricalFrequenciesMatchTheTarget) {
  const Row row(FixedLogits());
  for (const Setting& s : Settings()) {
    SCOPED_TRACE(s.name);
    Sampler sampler = MakeSampler(s.params);
    std::vector<int64_t> counts(row.logits.size(), 0);
    int64_t fallbacks = 0;
    for (int i = 0; i < kDraws; ++i) {
      absl::StatusOr<SampleResult> r = sampler.Sample(s.top_n > 0 ? row.Top(s.top_n) : row.Full());
      ASSERT_TRUE(r.ok()) << r.status();
      if (r->insufficient) {
        ++fallbacks;
        r = sampler.Sample(row.Full());
        ASSERT_TRUE(r.ok() && !r->insufficient);
      }
      ++counts[r->token];
    }
    const ChiSquare c = RunChiSquare(counts, TargetDistribution(row.logits, s.params), kDraws);
    std::printf("%-30s chi2 = %7.2f  df = %2d  critical(0.001) = %6.2f  full-logit fallbacks = %lld\n",
                s.name, c.statistic, c.df, c.critical, static_cast<long long>(fallbacks));
    EXPECT_LT(c.statistic, c.critical);
  }
}

// The target itself, on a case small enough to check by hand.
TEST(SamplerStatistics, TargetDistributionByHand) {
  const std::vector<float> logits = testing::LogitsFromProbs({0.5, 0.3, 0.15, 0.05});
  SamplingParams p;
  p.top_p = 0.7f;  // {0, 1}
  const std::vector<double> t = TargetDistribution(logits, p);
  EXPECT_NEAR(t[0], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(t[1], 0.3 / 0.8, 1e-6);
  EXPECT_EQ(t[2], 0);
  EXPECT_EQ(t[3], 0);
}

}  // namespace
}  // namespace k3::sampling
