#include "coordinator/sampler/penalties.h"

namespace k3::sampling {

void PenaltyWindow::Add(int32_t token, bool generated) {
  if (last_n_ == 0) return;
  window_.emplace_back(token, generated);
  TokenCounts& c = counts_[token];
  ++c.all;
  c.generated += generated;
  if (last_n_ > 0 && window_.size() > static_cast<size_t>(last_n_)) {
    const auto [old, old_generated] = window_.front();
    window_.pop_front();
    auto it = counts_.find(old);
    if (--it->second.all == 0) {
      counts_.erase(it);
    } else {
      it->second.generated -= old_generated;
    }
  }
}

TokenCounts PenaltyWindow::Get(int32_t token) const {
  auto it = counts_.find(token);
  return it == counts_.end() ? TokenCounts{} : it->second;
}

bool Penalizes(const SamplingParams& p, TokenCounts c) {
  return (c.all > 0 && p.repetition_penalty != 1) ||
         (c.generated > 0 && (p.presence_penalty != 0 || p.frequency_penalty != 0));
}

float Penalize(const SamplingParams& p, TokenCounts c, float logit) {
  if (c.all > 0 && p.repetition_penalty != 1) {
    logit = logit > 0 ? logit / p.repetition_penalty : logit * p.repetition_penalty;
  }
  if (c.generated > 0) {
    logit -= static_cast<float>(c.generated) * p.frequency_penalty + p.presence_penalty;
  }
  return logit;
}

}  // namespace k3::sampling
