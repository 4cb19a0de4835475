// One step of a worker group, as the leader receives it and broadcasts it to every rank, and
// what comes back. The wire form is a flat little-endian byte string; decoding checks every
// length against the buffer, so a corrupt or hostile step is an error, not a crash.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace k3::runtime {

using SeqId = int64_t;

struct StepEntry {
  SeqId seq = 0;
  std::vector<int32_t> tokens;  // appended at the sequence's current length
  int32_t top_n = 1;            // candidates to return per output row (>= 1; 1 = greedy)
  bool full_logits = false;     // also return the whole vocabulary's logits
  bool all_positions = false;   // output rows for every token of the run, else only the last
};

struct Step {
  uint64_t id = 0;
  std::vector<SeqId> free;                     // applied first
  std::vector<SeqId> add;                      // then new empty sequences
  std::vector<std::pair<SeqId, SeqId>> fork;   // then (src, dst) copies
  std::vector<StepEntry> entries;              // then one forward pass over all of these
  bool shutdown = false;                       // the group stops after this step
};

struct Candidate {
  int32_t token = 0;
  float logit = 0;
};

// One output row: its best candidates (descending logit, ties to the lower id), the
// log-normalizer of the full vocabulary, and optionally every logit.
struct RowOutput {
  std::vector<Candidate> top;
  float logsumexp = 0;
  std::vector<float> logits;  // [vocab] when full_logits was asked for
};

struct StepResult {
  uint64_t id = 0;
  std::vector<std::vector<RowOutput>> rows;  // per entry, its output rows
};

std::string EncodeStep(const Step& step);
absl::StatusOr<Step> DecodeStep(const std::string& bytes);

// Limits that keep one step's buffers bounded (a hostile step cannot ask for gigabytes).
inline constexpr int64_t kMaxStepTokens = 1 << 20;
inline constexpr int32_t kMaxTopN = 1024;

}  // namespace k3::runtime
