// The collectives every rank of a worker group uses, behind one small interface: MPI for CPU
// ranks, NCCL (and a peer-memory one-shot all-reduce) for GPU ranks. Operations are in place
// where that makes sense, and each has a deadline: a rank that died or never arrives makes the
// call fail with an error instead of hanging the group forever.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace k3::coll {

enum class Op { kAllReduce = 0, kAllGather, kBroadcast, kGather, kBarrier, kCount };
std::string OpName(Op op);

// Calls and bytes per operation, for tests that check the collective count of a step and for
// the per-rank trace.
struct CollectiveStats {
  std::array<int64_t, static_cast<size_t>(Op::kCount)> calls{};
  std::array<int64_t, static_cast<size_t>(Op::kCount)> bytes{};
  int64_t Calls(Op op) const { return calls[static_cast<size_t>(op)]; }
  void Add(Op op, int64_t n_bytes) {
    ++calls[static_cast<size_t>(op)];
    bytes[static_cast<size_t>(op)] += n_bytes;
  }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[0..n) = Σ over ranks, identical on every rank afterwards.
  virtual absl::Status AllReduceSum(float* data, int64_t n) = 0;
  // recv[r * bytes .. (r+1) * bytes) = rank r's send, on every rank.
  virtual absl::Status AllGather(const void* send, void* recv, int64_t bytes) = 0;
  // data = root's data, on every rank.
  virtual absl::Status Broadcast(void* data, int64_t bytes, int root) = 0;
  // On root: recv[r * bytes ..) = rank r's send. recv is ignored elsewhere.
  virtual absl::Status Gather(const void* send, void* recv, int64_t bytes, int root) = 0;
  virtual absl::Status Barrier() = 0;
  // A failure the collectives recorded without a host synchronization (a GPU-side wait for a peer
  // that timed out inside a graph replay, say), read without waiting: call it after a step's
  // stream synchronization. OK when there is none or the implementation records none.
  virtual absl::Status Health() const { return absl::OkStatus(); }

  const CollectiveStats& stats() const { return stats_; }
  void ResetStats() { stats_ = {}; }

 protected:
  CollectiveStats stats_;
};

// One rank, no peers: every operation is a copy or nothing. The single-process engine uses it.
std::unique_ptr<Communicator> MakeLocalCommunicator();

}  // namespace k3::coll
