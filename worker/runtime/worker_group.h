// A worker group's step loop. Every rank holds its shard in an engine (CPU or GPU, behind
// RankEngine); the leader (rank 0)
// takes a step, broadcasts it, every rank runs its part, and the leader gathers each rank's
// vocabulary-band summary (and its status) and merges them into the step's result.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "worker/runtime/rank_engine.h"
#include "worker/runtime/step.h"

namespace k3::runtime {

class WorkerGroup {
 public:
  WorkerGroup(RankEngine& engine, coll::Communicator& comm) : engine_(engine), comm_(comm) {}

  bool is_leader() const { return comm_.rank() == 0; }

  // Leader only: runs one step on every rank. An error names the rank it came from. After a
  // collective failure (a rank died or stalled) the group is unusable: the caller exits.
  absl::StatusOr<StepResult> LeaderStep(const Step& step);

  // Followers: receive and run steps until a shutdown step or an error.
  absl::Status FollowerLoop();

 private:
  // Broadcast of the step's bytes from the leader (size first, then the bytes).
  absl::StatusOr<Step> ReceiveStep(const Step* leader_step);
  // Runs the step on this rank; returns this rank's band summaries (and band logits of rows
  // that want the full vocabulary) as one message of a size every rank can compute.
  std::vector<uint8_t> RunLocal(const Step& step, absl::Status& status);

  RankEngine& engine_;
  coll::Communicator& comm_;
};

// Bytes of one rank's summary message for `step` (equal on every rank).
int64_t SummaryBytes(const Step& step, int64_t band_width);

}  // namespace k3::runtime
