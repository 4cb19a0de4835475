// RouteToken (spec 4.6) against a double-precision reference written from the spec:
//   p = σ(logits) (K3) or softmax(logits); sel = top_k(p + exp_probs_b), ties -> lower index;
//   wts = p[sel] (the UNBIASED probabilities); if normalize: wts /= max(Σ wts, 6.103515625e-5);
//   if scale ∉ {0, 1}: wts *= scale.
// Real shape: 896 experts, top-16. The selection is compared exactly, except that two
// experts whose double-precision choice values differ by < 1e-6 may swap (an f32 near-tie);
// weights are then checked for the kernel's own ids at 2e-6 relative.
#include "kernels/cpu/moe_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace k3::cpu {
namespace {

using namespace k3::cpu::testing;

constexpr double kFloor = 6.103515625e-5;  // 2^-14
constexpr double kRtol = 2e-6;

struct Config {
  bool sigmoid = true;
  bool normalize = true;
  float scale = 1.0f;
  int64_t k = kTopK;
};

struct Route {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

struct RefRoute {
  std::vector<double> prob, choice;
  std::vector<int32_t> ids;
};

RefRoute Reference(const std::vector<float>& logits, const std::vector<float>* bias, const Config& cfg) {
  const int64_t E = static_cast<int64_t>(logits.size());
  RefRoute r;
  r.prob.resize(E);
  if (cfg.sigmoid) {
    for (int64_t e = 0; e < E; ++e) r.prob[e] = SigmoidD(logits[e]);
  } else {
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (r.prob[e] = std::exp(logits[e] - mx));
    for (double& v : r.prob) v /= sum;
  }
  r.choice = r.prob;
  if (bias) {
    for (int64_t e = 0; e < E; ++e) r.choice[e] += (*bias)[e];
  }
  std::vector<int32_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return r.choice[a] > r.choice[b]; });
  r.ids.assign(order.begin(), order.begin() + cfg.k);
  return r;
}

// The expected weights for a given selection.
std::vector<double> RefWeights(const RefRoute& r, const std::vector<int32_t>& ids, const Config& cfg) {
  std::vector<double> w;
  double sum = 0;
  for (int32_t e : ids) sum += r.prob[e];
  for (int32_t e : ids) {
    double v = r.prob[e];
    if (cfg.normalize) v /= std::max(sum, kFloor);
    if (cfg.scale != 0.0f && cfg.scale != 1.0f) v *= cfg.scale;
    w.push_back(v);
  }
  return w;
}

Route RunRoute(const std::vector<float>& logits, const std::vector<float>* bias, const Config& cfg) {
  Route r{std::vector<int32_t>(cfg.k, -1), Poisoned(cfg.k)};
  RouteToken({logits.data(), bias ? bias->data() : nullptr, static_cast<int64_t>(logits.size()), cfg.k,
              cfg.sigmoid, cfg.normalize, cfg.scale, r.ids.data(), r.weights.data()});
  return r;
}

// Full check of one token; returns the kernel's route.
Route Check(const std::vector<float>& logits, const std::vector<float>* bias, const Config& cfg) {
  const auto ref = Reference(logits, bias, cfg);
  const auto got = RunRoute(logits, bias, cfg);
  std::set<int32_t> seen;
  for (int64_t i = 0; i < cfg.k; ++i) {
    const int32_t id = got.ids[i];
    EXPECT_TRUE(id >= 0 && id < static_cast<int32_t>(logits.size())) << "rank " << i << " id " << id;
    if (id < 0 || id >= static_cast<int32_t>(logits.size())) return got;
    EXPECT_TRUE(seen.insert(id).second) << "duplicate id " << id;
    if (id != ref.ids[i]) {
      EXPECT_NEAR(ref.choice[id], ref.choice[ref.ids[i]], 1e-6)
          << "rank " << i << ": got expert " << id << ", want " << ref.ids[i];
    }
  }
  EXPECT_TRUE(AllClose(got.weights, RefWeights(ref, got.ids, cfg), kRtol, 0.0));
  return got;
}

std::vector<float> Bias(std::mt19937_64& rng) { return Normal(rng, kExperts, 0.0, 0.05); }

TEST(MoeRouterTest, K3ConfigManyTokens) {
  std::mt19937_64 rng(701);
  const auto bias = Bias(rng);
  for (int t = 0; t < 64; ++t) {
    SCOPED_TRACE(t);
    const auto logits = Normal(rng, kExperts, -1.0, 2.0);
    Check(logits, &bias, Config{});
    Check(logits, nullptr, Config{});
  }
}

TEST(MoeRouterTest, SoftmaxGating) {
  std::mt19937_64 rng(702);
  const auto bias = Normal(rng, kExperts, 0.0, 1e-3);
  for (bool normalize : {true, false}) {
    for (int t = 0; t < 16; ++t) {
      SCOPED_TRACE(::testing::Message() << "normalize " << normalize << " token " << t);
      const auto logits = Normal(rng, kExperts, 0.0, 3.0);
      Config cfg;
      cfg.sigmoid = false;
      cfg.normalize = normalize;
      Check(logits, &bias, cfg);
      Check(logits, nullptr, cfg);
    }
  }
}

// A large bias on 16 low-probability experts selects exactly them, but their weights are still
// their own unbiased σ(logit) (raw without normalization, renormalized with it).
TEST(MoeRouterTest, SelectionBiasChangesChoiceNotWeights) {
  std::mt19937_64 rng(703);
  const auto logits = Normal(rng, kExperts, 0.0, 2.0);
  std::vector<int32_t> by_prob(kExperts);
  std::iota(by_prob.begin(), by_prob.end(), 0);
  std::sort(by_prob.begin(), by_prob.end(), [&](int32_t a, int32_t b) { return logits[a] < logits[b]; });
  std::vector<float> bias(kExperts, 0.0f);
  std::set<int32_t> boosted(by_prob.begin() + 100, by_prob.begin() + 116);  // far below the top 16
  for (int32_t e : boosted) bias[e] = 1.0f;
  for (bool normalize : {false, true}) {
    Config cfg;
    cfg.normalize = normalize;
    const auto plain = Check(logits, nullptr, cfg);
    const auto biased = Check(logits, &bias, cfg);
    EXPECT_EQ(std::set<int32_t>(biased.ids.begin(), biased.ids.end()), boosted);
    for (int32_t e : plain.ids) EXPECT_EQ(boosted.count(e), 0u);
    if (!normalize) {
      for (int64_t i = 0; i < kTopK; ++i) {
        EXPECT_NEAR(biased.weights[i], SigmoidD(logits[biased.ids[i]]), 1e-6 * SigmoidD(logits[biased.ids[i]]));
      }
    } else {
      double sum = 0;
      for (float w : biased.weights) sum += w;
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
  }
  // Softmax gating: the same.
  Config cfg;
  cfg.sigmoid = false;
  const auto biased = Check(logits, &bias, cfg);
  EXPECT_EQ(std::set<int32_t>(biased.ids.begin(), biased.ids.end()), boosted);
}

// Ties go to the lower index: with all logits equal the choice is 0..k-1 in order; with 20
// experts tied at the top, the 16 lowest indices of them, ascending.
TEST(MoeRouterTest, TiesGoToLowerIndex) {
  for (bool sigmoid : {true, false}) {
    SCOPED_TRACE(sigmoid);
    Config cfg;
    cfg.sigmoid = sigmoid;
    const std::vector<float> flat(kExperts, 0.25f);
    const auto r = Check(flat, nullptr, cfg);
    for (int32_t i = 0; i < kTopK; ++i) EXPECT_EQ(r.ids[i], i);
    for (float w : r.weights) EXPECT_NEAR(w, 1.0 / kTopK, 1e-7);

    std::mt19937_64 rng(704);
    auto logits = Normal(rng, kExperts, 0.0, 1.0);
    std::vector<int32_t> all(kExperts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> tied(all.begin(), all.begin() + 20);
    std::vector<float> bias(kExperts, 0.0f);
    for (int32_t e : tied) {
      logits[e] = 9.0f;
      bias[e] = 0.125f;  // same bias too: still a tie in p + b
    }
    std::sort(tied.begin(), tied.end());
    const std::vector<float>* biases[] = {nullptr, &bias};
    for (const std::vector<float>* b : biases) {
      const auto t = Check(logits, b, cfg);
      for (int32_t i = 0; i < kTopK; ++i) EXPECT_EQ(t.ids[i], tied[i]) << "rank " << i;
    }
  }
}

// Σ wts below 2^-14 is floored: the weights are p / 6.103515625e-5, not renormalized to 1.
TEST(MoeRouterTest, NormalizationFloor) {
  std::mt19937_64 rng(705);
  auto logits = Normal(rng, kExperts, -16.0, 0.5);  // σ ~ 1e-7 each, Σ of 16 ~ 2e-6
  const auto r = Check(logits, nullptr, Config{});
  double sum = 0;
  for (float w : r.weights) sum += w;
  double psum = 0;
  for (int32_t e : r.ids) psum += SigmoidD(logits[e]);
  EXPECT_LT(psum, kFloor);
  EXPECT_NEAR(sum, psum / kFloor, 1e-6 * psum / kFloor);
  EXPECT_LT(sum, 0.5);
  // Just above the floor the weights sum to 1.
  for (float& l : logits) l = -9.0f + 0.001f * l;  // σ ~ 1.2e-4 each
  const auto r2 = Check(logits, nullptr, Config{});
  double sum2 = 0;
  for (float w : r2.weights) sum2 += w;
  EXPECT_NEAR(sum2, 1.0, 1e-6);
}

// The scale multiplies the weights unless it is 0 or 1; normalization off leaves raw σ.
TEST(MoeRouterTest, ScaleOnlyWhenNotZeroOrOne) {
  std::mt19937_64 rng(706);
  const auto logits = Normal(rng, kExperts, 0.0, 2.0);
  const auto bias = Bias(rng);
  Config one;
  const auto base = Check(logits, &bias, one);
  for (float scale : {0.0f, 1.0f, 2.5f, 0.5f, -1.0f}) {
    for (bool normalize : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "scale " << scale << " normalize " << normalize);
      Config cfg;
      cfg.scale = scale;
      cfg.normalize = normalize;
      const auto r = Check(logits, &bias, cfg);
      EXPECT_EQ(r.ids, base.ids);
      const double factor = (scale == 0.0f || scale == 1.0f) ? 1.0 : scale;
      double sum = 0;
      for (float w : r.weights) sum += w;
      if (normalize) {
        EXPECT_NEAR(sum, factor, 1e-6 * std::fabs(factor));
      }
    }
  }
}

// Other k: 1 and all experts.
TEST(MoeRouterTest, OtherTopK) {
  std::mt19937_64 rng(707);
  const auto logits = Normal(rng, kExperts, 0.0, 2.0);
  const auto bias = Bias(rng);
  for (int64_t k : {int64_t{1}, int64_t{8}, kExperts}) {
    SCOPED_TRACE(k);
    Config cfg;
    cfg.k = k;
    Check(logits, &bias, cfg);
  }
}

}  // namespace
}  // namespace k3::cpu
