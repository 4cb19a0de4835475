#include "coordinator/sampler/chain.h"

#include <algorithm>
#include <cmath>

namespace k3::sampling {
namespace {

constexpr int64_t kAll = -1;        // nothing truncated yet: the whole vocabulary survives
constexpr int64_t kNotFound = -1;
constexpr int64_t kAmbiguous = -2;

ChainResult Decided(const PoolEntry& e) { return {true, "", e}; }
ChainResult Undecided(const char* why) { return {false, why, {}}; }

double PrefixMass(CandidatePool& pool, int64_t n, double ref, double t) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += Weight(pool.Sorted(i).logit, ref, t);
  return sum;
}

// The shortest prefix (within `limit`) whose temperature-1 mass reaches the target, for every
// target in [lo, hi]; kAmbiguous when the interval straddles a boundary.
int64_t NucleusLength(CandidatePool& pool, int64_t limit, double ref, double lo, double hi) {
  double cum = 0;
  for (int64_t i = 0; i < limit; ++i) {
    const double before = cum;
    cum += Weight(pool.Sorted(i).logit, ref, 1.0);
    if (cum >= hi) return before < lo ? i + 1 : kAmbiguous;
  }
  return kNotFound;
}

// The first index (within `limit`) whose cumulative weight exceeds x, for every x in [lo, hi].
int64_t Invert(CandidatePool& pool, int64_t limit, double ref, double t, double lo, double hi) {
  double cum = 0;
  for (int64_t i = 0; i < limit; ++i) {
    const double before = cum;
    cum += Weight(pool.Sorted(i).logit, ref, t);
    if (hi < cum) return before <= lo ? i : kAmbiguous;
  }
  return kNotFound;
}

// An exact draw over the first `limit` entries (normalizer known).
PoolEntry Draw(CandidatePool& pool, int64_t limit, double ref, double t, double z, double u) {
  int64_t i = Invert(pool, limit, ref, t, u * z, u * z);
  if (i < 0) {
    // u * z reached the total only through rounding: take the last token with any weight.
    i = limit - 1;
    while (i > 0 && Weight(pool.Sorted(i).logit, ref, t) == 0) --i;
  }
  return pool.Sorted(i);
}

}  // namespace

ChainResult RunChain(const SamplingParams& p, CandidatePool& pool, double u) {
  const int64_t certain = pool.certain();
  if (certain == 0) return Undecided("a token outside the candidates may be the best after penalties");
  const PoolEntry best = pool.Sorted(0);
  if (p.temperature == 0) return Decided(best);
  const double ref = best.logit;

  int64_t kept = kAll;
  if (p.top_k > 0) {
    if (!pool.complete() && p.top_k > certain) {
      return Undecided("top_k reaches past the candidates known to rank above the rest");
    }
    kept = std::min<int64_t>(p.top_k, pool.size());
  }

  if (p.top_p < 1) {
    const double top_p = p.top_p;
    int64_t n;
    if (kept != kAll) {
      const double z = PrefixMass(pool, kept, ref, 1.0);
      n = NucleusLength(pool, kept, ref, top_p * z, top_p * z);
    } else {
      const double s = pool.PoolMass(ref, 1.0);
      const MassBounds out = pool.OutsideMass(ref, 1.0);
      n = NucleusLength(pool, certain, ref, top_p * (s + out.lo), top_p * (s + out.hi));
      if (n == kNotFound && !pool.complete()) {
        return Undecided("the candidates do not cover top_p of the probability mass");
      }
    }
    if (n == kAmbiguous) return Undecided("the candidates' logsumexp cannot place the top_p boundary");
    if (n != kNotFound) kept = n;  // else rounding left the sum short of top_p: keep all (llama.cpp)
  }

  if (p.min_p > 0) {
    const double threshold = ref + std::log(static_cast<double>(p.min_p));
    if (kept == kAll && !(pool.outside_max() < threshold)) {  // -inf when complete
      return Undecided("tokens outside the candidates may pass min_p");
    }
    const int64_t limit = kept == kAll ? pool.size() : kept;
    int64_t n = 0;
    while (n < limit && pool.Sorted(n).logit >= threshold) ++n;
    kept = n;
  }

  const double t = p.temperature;
  if (kept != kAll) return Decided(Draw(pool, kept, ref, t, PrefixMass(pool, kept, ref, t), u));
  if (pool.complete()) return Decided(Draw(pool, pool.size(), ref, t, pool.PoolMass(ref, t), u));

  // Untruncated over a top-N pool: decided when the draw lands, for every possible outside
  // mass, on the same candidate among those known to rank above the rest.
  const MassBounds out = pool.OutsideMass(ref, t);
  if (!std::isfinite(out.hi)) {
    return Undecided("temperature > 1 without top_k / top_p / min_p needs the vocabulary size or the full logits");
  }
  const double s = pool.PoolMass(ref, t);
  const int64_t i = Invert(pool, certain, ref, t, u * (s + out.lo), u * (s + out.hi));
  if (i == kNotFound) return Undecided("the draw fell beyond the candidates");
  if (i == kAmbiguous) return Undecided("the draw is too close to a boundary the candidates cannot place");
  return Decided(pool.Sorted(i));
}

}  // namespace k3::sampling
