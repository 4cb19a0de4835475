// The device side of the one-shot all-reduce over peer memory (collectives/peer_allreduce.h):
// plain C++ over <cuda_runtime.h>, a params struct and a launcher returning cudaError_t, so the
// kernel file needs no Abseil. Every pointer is already mapped into this process (CUDA IPC).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace k3::coll {

// The most ranks the peer path serves (one flag per rank per block; a thread per peer spins).
inline constexpr int kPeerMaxRanks = 8;

// Error codes the kernel writes into the error words (0: healthy).
inline constexpr uint32_t kPeerErrorTimeout = 1;  // a peer's flag did not arrive within timeout_ns

// How a rank learns that a peer's data has arrived (see peer_allreduce_kernel.cu).
enum class PeerProtocol : int {
  kFlags = 0,   // pull: data into the own staging slot, fence, flag to every peer; read the peers' slots
  kInline = 1,  // push: data straight into every peer's receive slot; the data is its own flag
                // (slots hold -0.0 when empty; inputs' -0.0 travel as +0.0)
};

struct PeerReduceArgs {
  PeerProtocol protocol = PeerProtocol::kFlags;
  float* data = nullptr;  // this rank's input, overwritten with the sum (device memory)
  int64_t n = 0;          // floats in data; n <= slot_floats
  int rank = 0;           // this rank in [0, ranks)
  int ranks = 0;          // ranks in the group, 2..kPeerMaxRanks
  // staging[r]: rank r's buffer as mapped here; staging[rank] is this rank's own. kFlags: two
  // slots of slot_floats (slot 0, then slot 1). kInline: two slots of `ranks` regions of
  // slot_floats, region (slot, s) at (slot * ranks + s) * slot_floats, written by rank s.
  float* staging[kPeerMaxRanks] = {};
  // flags[r]: rank r's flag array as mapped here, flags[r][block * kPeerMaxRanks + s] = the last
  // epoch that rank s announced to rank r for that block.
  uint64_t* flags[kPeerMaxRanks] = {};
  uint64_t* epochs = nullptr;      // this rank's epoch per block (device memory, not shared)
  uint32_t* error_dev = nullptr;   // sticky error word in device memory (read by every launch)
  uint32_t* error_host = nullptr;  // the same error, in host-mapped memory (read by the host)
  int64_t slot_floats = 0;         // floats per staging slot (capacity of one all-reduce)
  int64_t block_floats = 0;        // floats one block reduces (a multiple of 4, fixed per buffer)
  int threads = 512;               // threads per block
  uint64_t timeout_ns = 0;         // bound of a wait for one peer's flag (globaltimer ns)
};

// data = Σ over ranks in rank order, in place, on `stream`: ceil(n / block_floats) blocks.
cudaError_t LaunchPeerReduce(const PeerReduceArgs& args, cudaStream_t stream);

// p[0..n) = -0.0f (the kInline protocol's "empty"), on `stream`.
cudaError_t LaunchPeerFillEmpty(float* p, int64_t n, cudaStream_t stream);

}  // namespace k3::coll
