// The worker group's step loop over GPU ranks: runtime::WorkerGroup's protocol (the leader
// broadcasts each encoded step over the host communicator; every rank applies the sequence
// changes and runs CudaEngine::Forward on its shard; every rank summarizes its vocabulary band
// per output row; the leader gathers the summaries and merges them with runtime::MergeBands),
// with a CudaEngine in place of engine::Engine. The engine's own all-reduces go through its
// device communicator (NCCL); this loop's broadcast and gather through the host one (MPI).
// Forks are not supported on the GPU yet (a step with forks fails on every rank).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "worker/engine_cuda/cuda_engine.h"
#include "worker/runtime/step.h"

namespace k3::engine_cuda {

class CudaWorkerGroup {
 public:
  CudaWorkerGroup(CudaEngine& engine, coll::Communicator& host_comm) : engine_(engine), comm_(host_comm) {}

  bool is_leader() const { return comm_.rank() == 0; }
  // Leader only: runs one step on every rank (runtime::WorkerGroup::LeaderStep's contract).
  absl::StatusOr<runtime::StepResult> LeaderStep(const runtime::Step& step);
  // Followers: receive and run steps until a shutdown step or an error.
  absl::Status FollowerLoop();

 private:
  absl::StatusOr<runtime::Step> ReceiveStep(const runtime::Step* leader_step);
  std::vector<uint8_t> RunLocal(const runtime::Step& step, absl::Status& status);

  CudaEngine& engine_;
  coll::Communicator& comm_;
};

}  // namespace k3::engine_cuda
