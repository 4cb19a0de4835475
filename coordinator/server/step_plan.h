// What one scheduler step sends for each running sequence: one decode token for every sequence in
// generation, then prompt chunks within the step's token budget. Two regimes:
//   - some sequence is decoding: prompt chunks of at most prefill_chunk tokens and the step at most
//     token_budget tokens, so a long prompt delays running streams by one short step at a time;
//   - none is: nothing waits on the step's length, so prompts go in chunks of up to
//     idle_prefill_chunk (and the budget grows to match): a lone long prompt reaches its first
//     token in ceil(len / idle_prefill_chunk) steps, each as large as the worker's own prefill
//     chunks make efficient, instead of len / prefill_chunk small ones.
// A pure function of the sequences' states (GroupScheduler::Loop applies it), so the policy is
// tested on its own.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace k3::coord {

struct StepBudget {
  int64_t token_budget = 512;          // tokens per step while some sequence decodes
  int64_t prefill_chunk = 256;         // prompt tokens of one sequence per step then
  int64_t idle_prefill_chunk = 16384;  // prompt tokens of one sequence per step when none decodes
};

struct SeqState {
  bool decoding = false;    // prompt all sent and a chosen token to feed
  int64_t prompt_left = 0;  // prompt tokens not yet sent
};

// Per sequence, in order: 0 = one decode token, n > 0 = the next n prompt tokens, -1 = not in this
// step. Decode tokens first (in sequence order, within the budget), then prompt chunks.
std::vector<int64_t> PlanStep(std::span<const SeqState> seqs, const StepBudget& budget);

}  // namespace k3::coord
