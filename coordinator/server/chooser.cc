#include "coordinator/server/chooser.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "coordinator/sampler/sampler.h"

namespace k3::coord {
namespace {

// Asks the worker for exactly what makes sampling exact: the candidates the sampler's
// parameters and history need, or the whole vocabulary when no number of candidates suffices.
class SamplerChooser final : public TokenChooser {
 public:
  SamplerChooser(sampling::Sampler s, int64_t vocab) : sampler_(std::move(s)), vocab_(vocab) {}

  absl::StatusOr<Choice> Choose(const k3::v1::RowOutput& row) override {
    std::vector<sampling::TokenLogit> top;
    top.reserve(row.top_size());
    for (const auto& c : row.top()) top.push_back({c.token(), c.logit()});
    sampling::Candidates cands;
    cands.top = top;
    cands.logsumexp = row.logsumexp();
    cands.vocab_size = vocab_;  // tightens the bound on the mass outside the candidates
    if (row.logits_size() > 0) cands.logits = std::span<const float>(row.logits().data(), row.logits_size());
    auto r = sampler_.Sample(cands);
    if (!r.ok()) return r.status();
    if (r->insufficient) {
      // Cannot happen when the step asked for top_n()/needs_full_logits(); a bug if it does.
      return absl::InternalError(absl::StrCat("sampler: candidates insufficient: ", r->reason));
    }
    Choice c;
    c.token = r->token;
    c.logprob = r->logprob;
    for (const auto& t : r->top_logprobs) c.top.push_back({t.token, t.logprob});
    return c;
  }
  int32_t top_n() const override {
    return needs_full_logits() ? std::max(1, sampler_.params().n_logprobs) : std::max(1, sampler_.RequiredTopN());
  }
  // Full logits also when the candidates would not fit a step (the worker refuses top_n past
  // kMaxWorkerTopN) or would cover the whole vocabulary (top-N input then cannot be complete).
  bool needs_full_logits() const override {
    const int32_t n = sampler_.RequiredTopN();
    return n == sampling::kNeedsFullLogits || n > kMaxWorkerTopN || (vocab_ > 0 && n >= vocab_);
  }
  uint64_t seed() const override { return sampler_.params().seed; }

 private:
  sampling::Sampler sampler_;
  int64_t vocab_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TokenChooser>> MakeChooser(const k3::v1::SamplingParams& p,
                                                          std::span<const int32_t> prompt, int64_t vocab) {
  sampling::SamplingParams sp;
  sp.temperature = p.temperature();
  sp.top_k = p.top_k();
  sp.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  sp.min_p = p.min_p();
  sp.repetition_penalty = p.repetition_penalty() == 0.0f ? 1.0f : p.repetition_penalty();
  sp.presence_penalty = p.presence_penalty();
  sp.frequency_penalty = p.frequency_penalty();
  sp.n_logprobs = p.logprobs();
  if (p.has_seed()) {
    sp.seed = p.seed();
  } else {
    std::random_device rd;
    sp.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  auto s = sampling::Sampler::Create(sp);
  if (!s.ok()) return s.status();
  s->AddPrompt(prompt);
  return std::make_unique<SamplerChooser>(std::move(*s), vocab);
}

}  // namespace k3::coord
