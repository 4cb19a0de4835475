#include "coordinator/server/step_plan.h"

#include <algorithm>

namespace k3::coord {

std::vector<int64_t> PlanStep(std::span<const SeqState> seqs, const StepBudget& b) {
  std::vector<int64_t> plan(seqs.size(), -1);
  int64_t left = b.token_budget;
  bool decoding = false;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].decoding && left > 0) {
      plan[i] = 0;
      --left;
      decoding = true;
    }
  }
  int64_t chunk = b.prefill_chunk;
  if (!decoding && b.idle_prefill_chunk > b.prefill_chunk) {
    chunk = b.idle_prefill_chunk;
    left = std::max(left, b.idle_prefill_chunk);
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].decoding || seqs[i].prompt_left <= 0 || left <= 0) continue;
    const int64_t n = std::min({seqs[i].prompt_left, chunk, left});
    plan[i] = n;
    left -= n;
  }
  return plan;
}

}  // namespace k3::coord
