// Collectives over NCCL for GPU ranks (one GPU per rank), behind coll::Communicator: every
// pointer is DEVICE memory and every operation is enqueued on the communicator's CUDA stream
// (no host synchronization, so a CUDA graph may capture it). The NCCL communicator is built from
// an ncclUniqueId that rank 0 creates and broadcasts over MPI. NVLink multicast (NVLS) is
// switched off (NCCL_NVLS_ENABLE=0) unless the environment already sets it: the shared hosts
// must not use it. Barrier() synchronizes the stream, checks the peer path's health, then
// MPI_Barrier.
//
// Small all-reduces (at most NcclOptions::peer_max_bytes) take a one-shot all-reduce over peer
// memory (collectives/peer_allreduce.h: one kernel, CUDA IPC, results bit-identical on every rank)
// when every rank is on one host with peer access between all GPUs; NCCL takes the larger ones,
// and all of them when the peer path is unavailable or switched off (K3_PEER_ALLREDUCE=0 in the
// environment of every rank, or peer_max_bytes = 0).
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>

#include <memory>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"

namespace k3::coll {

// All-reduces of up to this many bytes go over peer memory by default. Measured on 2 H200s (NV18,
// k3_allreduce_bench, in a CUDA graph): kInline 2.8-3.0 us from 14 to 56 KB vs NCCL's 6.9-7.3 us,
// and still 3.6 vs 8.2 us at 256 KB; 64 KB is the largest size the tests have checked.
inline constexpr int64_t kPeerAllReduceMaxBytes = 64 << 10;

struct NcclOptions {
  cudaStream_t stream = nullptr;  // where operations are enqueued (nullptr: the legacy stream)
  // All-reduces of at most this many bytes over peer memory (when available); 0: NCCL only.
  int64_t peer_max_bytes = kPeerAllReduceMaxBytes;
};

// Collective over `comm` (every rank calls it); the calling thread's current CUDA device is the
// rank's GPU. `comm` must outlive the result.
absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(MPI_Comm comm, const NcclOptions& options = {});

// The stream a NCCL communicator enqueues on may be changed between operations.
void SetNcclStream(Communicator& nccl_comm, cudaStream_t stream);

// OK when a NCCL communicator's small all-reduces take the peer path; otherwise why not
// (Unavailable: switched off, ranks on several hosts, no peer access, ...).
absl::Status PeerAllReduceStatus(const Communicator& nccl_comm);

// The peer path's sticky error, read without synchronizing: a kernel that waited for a peer's
// flag longer than its bound (10 s) left without reducing (its data and that of every later
// peer all-reduce stay per-rank partials). Barrier() returns it too; call it after a graph
// replay to learn whether the replay's all-reduces were done. OK when the path is not in use.
absl::Status CheckPeerHealth(const Communicator& nccl_comm);

}  // namespace k3::coll
