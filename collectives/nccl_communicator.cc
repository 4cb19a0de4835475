#include "collectives/nccl_communicator.h"

#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "collectives/peer_allreduce.h"

#include "absl/strings/str_cat.h"

namespace k3::coll {
namespace {

absl::Status NcclError(ncclResult_t r, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", ncclGetErrorString(r)));
}
#define K3_NCCL(call)                                          \
  do {                                                         \
    const ncclResult_t k3_nccl_r_ = (call);                    \
    if (k3_nccl_r_ != ncclSuccess) return NcclError(k3_nccl_r_, #call); \
  } while (0)

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm mpi, ncclComm_t comm, int rank, int size, cudaStream_t stream,
                   std::unique_ptr<PeerAllReduce> peer, absl::Status peer_status, int64_t peer_max_bytes)
      : mpi_(mpi), comm_(comm), rank_(rank), size_(size), stream_(stream), peer_(std::move(peer)),
        peer_status_(std::move(peer_status)), peer_max_bytes_(peer_max_bytes) {}
  ~NcclCommunicator() override {
    peer_.reset();
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void set_stream(cudaStream_t s) { stream_ = s; }

  absl::Status AllReduceSum(float* data, int64_t n) override {
    stats_.Add(Op::kAllReduce, n * 4);
    if (size_ == 1 || n == 0) return absl::OkStatus();
    if (peer_ != nullptr && n * 4 <= peer_max_bytes_) return peer_->AllReduceSum(data, n, stream_);
    K3_NCCL(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status AllGather(const void* send, void* recv, int64_t bytes) override {
    stats_.Add(Op::kAllGather, bytes);
    K3_NCCL(ncclAllGather(send, recv, static_cast<size_t>(bytes), ncclUint8, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    stats_.Add(Op::kBroadcast, bytes);
    K3_NCCL(ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status Gather(const void* send, void* recv, int64_t bytes, int root) override {
    stats_.Add(Op::kGather, bytes);
    K3_NCCL(ncclGroupStart());
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        K3_NCCL(ncclRecv(static_cast<uint8_t*>(recv) + static_cast<size_t>(r) * bytes, static_cast<size_t>(bytes),
                         ncclUint8, r, comm_, stream_));
      }
    }
    K3_NCCL(ncclSend(send, static_cast<size_t>(bytes), ncclUint8, root, comm_, stream_));
    K3_NCCL(ncclGroupEnd());
    return absl::OkStatus();
  }
  absl::Status Barrier() override {
    stats_.Add(Op::kBarrier, 0);
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cudaStreamSynchronize: ", cudaGetErrorString(e)));
    if (absl::Status h = CheckPeerHealth(); !h.ok()) return h;
    if (MPI_Barrier(mpi_) != MPI_SUCCESS) return absl::InternalError("MPI_Barrier failed");
    return absl::OkStatus();
  }
  absl::Status CheckPeerHealth() const { return peer_ != nullptr ? peer_->CheckHealth() : absl::OkStatus(); }
  absl::Status Health() const override { return CheckPeerHealth(); }
  const absl::Status& peer_status() const { return peer_status_; }

 private:
  MPI_Comm mpi_;
  ncclComm_t comm_;
  int rank_, size_;
  cudaStream_t stream_;
  std::unique_ptr<PeerAllReduce> peer_;  // null: NCCL only (peer_status_ says why)
  absl::Status peer_status_;
  int64_t peer_max_bytes_;  // all-reduces up to this many bytes take peer_
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(MPI_Comm comm, const NcclOptions& options) {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  int rank = 0, size = 1;
  if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS) {
    return absl::InternalError("MPI_Comm_rank/size failed");
  }
  ncclUniqueId id;
  if (rank == 0) K3_NCCL(ncclGetUniqueId(&id));
  if (MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm) != MPI_SUCCESS) return absl::InternalError("MPI_Bcast of the NCCL id failed");
  ncclComm_t nc;
  K3_NCCL(ncclCommInitRank(&nc, size, id, rank));
  // The peer path: only if every rank wants it (the environment might differ between ranks, and
  // PeerAllReduce::Create is collective).
  const char* env = std::getenv("K3_PEER_ALLREDUCE");
  const int want = options.peer_max_bytes > 0 && !(env != nullptr && std::strcmp(env, "0") == 0);
  int all_want = 0;
  if (MPI_Allreduce(&want, &all_want, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) {
    ncclCommDestroy(nc);
    return absl::InternalError("MPI_Allreduce failed");
  }
  std::unique_ptr<PeerAllReduce> peer;
  absl::Status peer_status = absl::UnavailableError("peer all-reduce switched off (K3_PEER_ALLREDUCE=0 or peer_max_bytes 0)");
  if (all_want && size > 1) {
    PeerAllReduceParams p;
    // Slots of peer_max_bytes, in whole blocks.
    const int64_t block_bytes = p.block_floats * 4;
    p.slot_bytes = (options.peer_max_bytes + block_bytes - 1) / block_bytes * block_bytes;
    absl::StatusOr<std::unique_ptr<PeerAllReduce>> made = PeerAllReduce::Create(comm, p);
    peer_status = made.status();
    if (made.ok()) peer = std::move(*made);
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, nc, rank, size, options.stream, std::move(peer),
                                                            std::move(peer_status), options.peer_max_bytes));
}

void SetNcclStream(Communicator& nccl_comm, cudaStream_t stream) {
  static_cast<NcclCommunicator&>(nccl_comm).set_stream(stream);
}

absl::Status PeerAllReduceStatus(const Communicator& nccl_comm) {
  return static_cast<const NcclCommunicator&>(nccl_comm).peer_status();
}

absl::Status CheckPeerHealth(const Communicator& nccl_comm) {
  return static_cast<const NcclCommunicator&>(nccl_comm).CheckPeerHealth();
}

}  // namespace k3::coll
