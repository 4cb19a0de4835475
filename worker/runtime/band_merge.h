// The LM head is split by vocabulary band: each rank summarizes its band's logits per output
// row (best candidates + log-normalizer) and the leader merges the bands exactly, so the
// sampler gets the top of the full distribution without shipping the vocabulary every step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/runtime/step.h"

namespace k3::runtime {

// The n best (logit desc, id asc) of one band's row, ids made global by band_begin, and the
// band's logsumexp.
void SummarizeBand(const float* logits, int64_t band_width, int64_t band_begin, int32_t n,
                   Candidate* top, float* logsumexp);

// Merges the bands' summaries of one row: the n best overall and the full logsumexp.
RowOutput MergeBands(std::span<const Candidate* const> band_tops, std::span<const float> band_lse, int32_t n);

}  // namespace k3::runtime
