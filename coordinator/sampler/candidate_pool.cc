#include "coordinator/sampler/candidate_pool.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace k3::sampling {
namespace {

// A functor, not a function pointer, so that sort and nth_element inline it.
struct EntryBetter {
  bool operator()(const PoolEntry& a, const PoolEntry& b) const {
    return Better(a.token, a.logit, b.token, b.logit);
  }
};

// How far the given logsumexp may be from the true one: the worker rounds it (and each band's)
// to float, so a few ulps; 8 leaves a margin.
double LogsumexpTolerance(float logsumexp) {
  const float a = std::max(std::fabs(logsumexp), 1.0f);
  return 8.0 * (std::nextafter(a, INFINITY) - a);
}

}  // namespace

absl::StatusOr<CandidatePool> CandidatePool::FromLogits(std::span<const float> logits,
                                                        const SamplingParams& p,
                                                        const PenaltyWindow& window,
                                                        PoolStorage storage) {
  if (logits.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("the vocabulary does not fit int32 token ids");
  }
  CandidatePool pool;
  pool.complete_ = true;
  pool.entries_ = std::move(storage.entries);
  pool.by_id_ = std::move(storage.by_id);
  pool.entries_.resize(logits.size());
  float mx = -INFINITY;
  for (size_t v = 0; v < logits.size(); ++v) {
    const float l = logits[v];
    if (std::isnan(l) || l == INFINITY) {
      return absl::InvalidArgumentError(absl::StrCat("logit of token ", v, " is ", l));
    }
    mx = std::max(mx, l);
    pool.entries_[v] = {static_cast<int32_t>(v), l, l};
  }
  if (mx == -INFINITY) return absl::InvalidArgumentError("every logit is -inf (or there are none)");
  for (const auto& [token, counts] : window.counts()) {
    // Ids beyond the logits (e.g. a prompt's special token the head lacks) cannot be sampled.
    if (token >= 0 && static_cast<size_t>(token) < logits.size() && Penalizes(p, counts)) {
      PoolEntry& e = pool.entries_[token];
      e.logit = Penalize(p, counts, e.raw);
    }
  }
  pool.by_id_.resize(logits.size());
  for (const PoolEntry& e : pool.entries_) pool.by_id_[e.token] = e.logit;
  pool.certain_ = pool.size();
  pool.logsumexp_ = LogSumExp(logits);
  return pool;
}

absl::StatusOr<CandidatePool> CandidatePool::FromTop(std::span<const TokenLogit> top,
                                                     float logsumexp, int64_t vocab_size,
                                                     const SamplingParams& p,
                                                     const PenaltyWindow& window,
                                                     PoolStorage storage) {
  if (top.empty()) return absl::InvalidArgumentError("no candidates and no logits");
  if (!std::isfinite(logsumexp)) {
    return absl::InvalidArgumentError(absl::StrCat("logsumexp is ", logsumexp));
  }
  if (vocab_size < 0 || (vocab_size > 0 && vocab_size < static_cast<int64_t>(top.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", vocab_size, " with ", top.size(), " candidates"));
  }
  CandidatePool pool;
  pool.entries_ = std::move(storage.entries);
  pool.entries_.clear();
  pool.by_id_ = std::move(storage.by_id);  // unused here; kept for the next full step
  if (vocab_size > 0) pool.n_outside_ = vocab_size - static_cast<int64_t>(top.size());
  absl::flat_hash_set<int32_t> in_pool;
  in_pool.reserve(top.size());
  for (size_t i = 0; i < top.size(); ++i) {
    const TokenLogit& c = top[i];
    if (c.token < 0 || (vocab_size > 0 && c.token >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat("candidate ", i, " has id ", c.token));
    }
    if (!std::isfinite(c.logit)) {
      return absl::InvalidArgumentError(absl::StrCat("candidate ", i, " has logit ", c.logit));
    }
    if (i > 0 && !Better(top[i - 1].token, top[i - 1].logit, c.token, c.logit)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "candidates must be sorted by logit descending, ties to the lower id; entry ", i,
          " (token ", c.token, ") is out of order"));
    }
    if (!in_pool.insert(c.token).second) {
      return absl::InvalidArgumentError(absl::StrCat("token ", c.token, " appears twice among the candidates"));
    }
    const TokenCounts counts = window.Get(c.token);
    pool.entries_.push_back({c.token, Penalizes(p, counts) ? Penalize(p, counts, c.logit) : c.logit, c.logit});
  }
  std::sort(pool.entries_.begin(), pool.entries_.end(), EntryBetter());
  pool.sorted_ = pool.size();
  pool.logsumexp_ = logsumexp;

  // Bounds on the outside raw mass X, relative to the best raw logit r0.
  const double r0 = top.front().logit;
  double s0 = 0;
  for (const TokenLogit& c : top) s0 += std::exp(static_cast<double>(c.logit) - r0);
  const double tol = LogsumexpTolerance(logsumexp);
  const double z_hi = std::exp(logsumexp - r0 + tol);
  const double z_lo = std::exp(logsumexp - r0 - tol);
  if (z_hi < s0 * (1 - 1e-3)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logsumexp ", logsumexp, " is below the candidates' own ", r0 + std::log(s0),
        ": it must cover the whole vocabulary's raw logits"));
  }
  double x_hi = std::max(0.0, z_hi - s0);
  if (pool.n_outside_ >= 0) {
    x_hi = std::min(x_hi, static_cast<double>(pool.n_outside_) * std::exp(top.back().logit - r0));
  }
  pool.log_outside_hi_ = std::log(x_hi) + r0;
  pool.log_outside_lo_ = std::min(std::log(std::max(0.0, z_lo - s0)) + r0, pool.log_outside_hi_);

  // Bounds on the outside tokens' raw logits: <= B, the N-th candidate's (on a tie the id is
  // higher), and each <= log X since its mass is part of X (which helps when N covers almost
  // everything). b is an upper bound in float; b_tie says whether a logit equal to it may
  // still beat an outside token by id.
  float b = top.back().logit;
  bool b_tie = true;
  if (pool.log_outside_hi_ < b) {
    float tight = static_cast<float>(pool.log_outside_hi_);
    if (tight < pool.log_outside_hi_) tight = std::nextafter(tight, INFINITY);
    if (tight < b) {  // rounding up may have reached B itself: then keep B and its tie rule
      b = tight;
      b_tie = false;
    }
  }
  const int32_t b_token = top.back().token;
  pool.boundary_ = b;
  float u_max = -INFINITY;
  int32_t u_token = INT32_MAX;  // the lowest id attaining u_max
  for (const auto& [token, counts] : window.counts()) {
    if (in_pool.contains(token) || !Penalizes(p, counts)) continue;
    const float u = Penalize(p, counts, b);
    pool.penalized_outside_.push_back(u);
    if (u > u_max || (u == u_max && token < u_token)) {
      u_max = u;
      u_token = token;
    }
  }
  pool.outside_max_ = std::max(b, u_max);
  auto beats_outside = [&](const PoolEntry& e) {
    const bool beats_unpenalized = e.logit > b || (b_tie && e.logit == b && e.token <= b_token);
    const bool beats_penalized = e.logit > u_max || (e.logit == u_max && e.token < u_token);
    return beats_unpenalized && beats_penalized;
  };
  while (pool.certain_ < pool.size() && beats_outside(pool.entries_[pool.certain_])) ++pool.certain_;
  return pool;
}

const PoolEntry& CandidatePool::Sorted(int64_t i) {
  if (i == 0 && sorted_ == 0) {
    // The best alone (greedy, and the reference of every weight): one scan.
    std::iter_swap(entries_.begin(), std::min_element(entries_.begin(), entries_.end(), EntryBetter()));
    sorted_ = 1;
  } else if (i >= sorted_) {
    const int64_t target = std::min(size(), std::max({i + 1, 2 * sorted_, int64_t{256}}));
    auto first = entries_.begin() + sorted_;
    auto mid = entries_.begin() + target;
    if (mid != entries_.end()) std::nth_element(first, mid, entries_.end(), EntryBetter());
    std::sort(first, mid, EntryBetter());
    sorted_ = target;
  }
  return entries_[i];
}

double CandidatePool::PoolMass(double ref, double t) const {
  // Summed in a fixed order (by id for full logits; sorting permutes entries_ in a way the
  // standard library does not specify), so the total is the same on every platform.
  double sum = 0;
  if (complete_) {
    for (float l : by_id_) sum += Weight(l, ref, t);
  } else {
    for (const PoolEntry& e : entries_) sum += Weight(e.logit, ref, t);
  }
  return sum;
}

MassBounds CandidatePool::OutsideMass(double ref, double t) const {
  if (complete_) return {0, 0};
  MassBounds m;
  // Unpenalized outside tokens: each l <= B, and their e^l sum to at most X. So for t <= 1,
  // e^(l/t) <= e^l * e^(B (1/t - 1)) sums to at most X e^(B (1/t - 1)); for any t, with the
  // count known, to at most (V - N) e^(B/t). Penalized ones: each at most e^(U_s / t).
  m.hi = INFINITY;
  if (t <= 1) {
    double log_hi = log_outside_hi_ - ref;
    if (t != 1) log_hi += (boundary_ - ref) * (1 / t - 1);  // (t = 1 would give -inf * 0)
    m.hi = std::exp(log_hi);
  }
  if (n_outside_ >= 0) m.hi = std::min(m.hi, static_cast<double>(n_outside_) * Weight(boundary_, ref, t));
  if (std::isinf(m.hi)) return m;
  for (float u : penalized_outside_) m.hi += Weight(u, ref, t);
  if (t == 1) {
    // At t = 1 the outside keeps at least X minus what penalties may have removed (<= e^B each).
    m.lo = std::exp(log_outside_lo_ - ref) -
           static_cast<double>(penalized_outside_.size()) * std::exp(boundary_ - ref);
    m.lo = std::max(0.0, m.lo);
  }
  return m;
}

}  // namespace k3::sampling
