// Collectives over NCCL for GPU ranks (one GPU per rank), behind coll::Communicator: every
// pointer is DEVICE memory and every operation is enqueued on the communicator's CUDA stream
// (no host synchronization, so a CUDA graph may capture it). The NCCL communicator is built from
// an ncclUniqueId that rank 0 creates and broadcasts over MPI. NVLink multicast (NVLS) is
// switched off (NCCL_NVLS_ENABLE=0) unless the environment already sets it: the shared hosts
// must not use it. Barrier() synchronizes the stream, then MPI_Barrier.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>

#include <memory>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"

namespace k3::coll {

struct NcclOptions {
  cudaStream_t stream = nullptr;  // where operations are enqueued (nullptr: the legacy stream)
};

// Collective over `comm` (every rank calls it); the calling thread's current CUDA device is the
// rank's GPU. `comm` must outlive the result.
absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(MPI_Comm comm, const NcclOptions& options = {});

// The stream a NCCL communicator enqueues on may be changed between operations.
void SetNcclStream(Communicator& nccl_comm, cudaStream_t stream);

}  // namespace k3::coll
