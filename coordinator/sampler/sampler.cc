#include "coordinator/sampler/sampler.h"

#include <algorithm>
#include <queue>

#include "coordinator/sampler/chain.h"

namespace k3::sampling {
namespace {

// The n best raw logits of the full vocabulary, best first.
std::vector<TokenLogit> BestRaw(std::span<const float> logits, int32_t n) {
  auto worse = [](const TokenLogit& a, const TokenLogit& b) {
    return Better(a.token, a.logit, b.token, b.logit);
  };
  // A min-heap (by candidate order) of the n best so far.
  std::priority_queue<TokenLogit, std::vector<TokenLogit>, decltype(worse)> heap(worse);
  for (size_t v = 0; v < logits.size() && n > 0; ++v) {
    const TokenLogit c{static_cast<int32_t>(v), logits[v]};
    if (static_cast<int32_t>(heap.size()) < n) {
      heap.push(c);
    } else if (Better(c.token, c.logit, heap.top().token, heap.top().logit)) {
      heap.pop();
      heap.push(c);
    }
  }
  std::vector<TokenLogit> best(heap.size());
  for (size_t i = best.size(); i-- > 0; heap.pop()) best[i] = heap.top();
  return best;
}

}  // namespace

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params) {
  if (absl::Status s = params.Validate(); !s.ok()) return s;
  return Sampler(params);
}

void Sampler::AddPrompt(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) window_.Add(t, /*generated=*/false);
}

void Sampler::AcceptGenerated(int32_t token) { window_.Add(token, /*generated=*/true); }

int32_t Sampler::RequiredTopN() const {
  int64_t penalized = 0;
  for (const auto& [token, counts] : window_.counts()) penalized += Penalizes(params_, counts);
  return sampling::RequiredTopN(params_, penalized);
}

absl::StatusOr<SampleResult> Sampler::Sample(const Candidates& row) {
  const bool full = !row.logits.empty();
  SampleResult out;
  if (!full && static_cast<int64_t>(row.top.size()) < params_.n_logprobs) {
    out.insufficient = true;
    out.reason = "n_logprobs exceeds the candidates";
    return out;
  }
  absl::StatusOr<CandidatePool> pool =
      full ? CandidatePool::FromLogits(row.logits, params_, window_, std::move(scratch_))
           : CandidatePool::FromTop(row.top, row.logsumexp, row.vocab_size, params_, window_,
                                    std::move(scratch_));
  if (!pool.ok()) return pool.status();

  Xoshiro256 rng = rng_;  // committed only if the step is decided
  const double u = params_.temperature == 0 ? 0.0 : rng.Uniform();
  const ChainResult chain = RunChain(params_, *pool, u);
  const double lse = pool->logsumexp();
  scratch_ = std::move(*pool).Release();
  if (!chain.decided) {
    out.insufficient = true;
    out.reason = chain.why_undecided;
    return out;
  }
  rng_ = rng;
  window_.Add(chain.chosen.token, /*generated=*/true);

  out.token = chain.chosen.token;
  out.logprob = static_cast<float>(chain.chosen.raw - lse);
  const std::vector<TokenLogit> best =
      full ? BestRaw(row.logits, params_.n_logprobs)
           : std::vector<TokenLogit>(row.top.begin(), row.top.begin() + params_.n_logprobs);
  out.top_logprobs.reserve(best.size());
  for (const TokenLogit& c : best) out.top_logprobs.push_back({c.token, static_cast<float>(c.logit - lse)});
  return out;
}

}  // namespace k3::sampling
