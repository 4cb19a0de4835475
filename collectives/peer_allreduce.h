// A one-shot all-reduce over peer memory (CUDA IPC) for the small all-reduces of a decode step,
// where NCCL's latency dominates (NcclCommunicator falls back to NCCL above max_floats()). Every
// rank owns a device staging buffer of two slots plus a flag array; the ranks exchange
// cudaIpcMemHandle_t over MPI and map each other's buffers. An all-reduce is ONE kernel on the
// caller's stream (no host sync, so CUDA graphs may capture it): copy in, announce, wait for the
// peers, sum every rank's slot in rank order (results bit-identical on every rank). The epoch
// that tells calls apart lives in device memory and is advanced by the kernel itself, so graph
// replays are safe. The protocol and its memory ordering: collectives/peer_allreduce_kernel.cu.
//
// A wait for a peer is bounded (timeout_s): a rank that died or never arrives makes the kernel
// leave instead of hanging the GPU; the error is sticky (every later call leaves data as it
// was, a per-rank partial) and CheckHealth() reports it. Destroy it on every rank when no rank
// will call it again (e.g. after a barrier): a peer's kernel may still read this rank's buffer.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/peer_allreduce_kernel.h"

namespace k3::coll {

struct PeerAllReduceParams {
  // kInline: data pushed into the peers' slots, the data its own flag (one NVLink crossing);
  // kFlags: own slot, fence, flag, peers read it (collectives/peer_allreduce_kernel.cu).
  PeerProtocol protocol = PeerProtocol::kInline;
  int64_t slot_bytes = 256 << 10;  // one staging slot: the largest all-reduce it takes (bytes)
  // Floats one thread block reduces (a multiple of 4). Fixed for the buffer's life: a block's part
  // of a slot and its flags must not move between calls. 2048 floats (8 KB): a 28 KB all-reduce
  // runs on 4 blocks; slot_bytes / 4 gives one block for every size.
  int64_t block_floats = 2048;
  int threads = 512;       // threads per block (kPeerMaxRanks..1024)
  double timeout_s = 10;   // bound of one wait for a peer's flag, then the error is set
};

class PeerAllReduce {
 public:
  // Collective over `comm` (every rank calls it; the calling thread's current CUDA device is the
  // rank's GPU). Unavailable (the same on every rank) unless there are 2..kPeerMaxRanks ranks,
  // all on this host (MPI_COMM_TYPE_SHARED), on distinct GPUs that can all access each other
  // (cudaDeviceCanAccessPeer), and every rank allocated and mapped the buffers.
  static absl::StatusOr<std::unique_ptr<PeerAllReduce>> Create(MPI_Comm comm, const PeerAllReduceParams& params = {});
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  // data[0..n) = Σ over ranks (rank order), in place, enqueued on `stream`. Every rank calls it
  // with the same n, in the same order. n <= max_floats().
  absl::Status AllReduceSum(float* data, int64_t n, cudaStream_t stream);
  // The sticky error a kernel wrote (a peer's flag timed out), read from host-mapped memory
  // without synchronizing: OK while healthy. Errors of kernels still in flight show up later.
  absl::Status CheckHealth() const;
  int64_t max_floats() const { return args_.slot_floats; }

 private:
  PeerAllReduce() = default;
  PeerReduceArgs args_;       // everything but data and n, set once mapped
  void* own_buffer_ = nullptr;  // this rank's staging + flags (cudaMalloc, exported)
  void* peer_buffers_[kPeerMaxRanks] = {};  // the peers' buffers as opened here (own: nullptr)
  uint32_t* error_host_ = nullptr;  // host view of the host-mapped error word (cudaHostAlloc)
};

}  // namespace k3::coll
