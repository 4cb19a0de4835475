// Setup of the peer-memory all-reduce: checks, allocation, handle exchange over MPI and mapping.
// Every step that may fail on one rank only is followed by an MPI_Allreduce of "ok" before the
// next collective call, so all ranks take the same branch (no rank waits in a collective that
// another skipped) and "unavailable" is the same answer everywhere.
#include "collectives/peer_allreduce.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace k3::coll {
namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}
// The one CUDA check of this file: returns an absl::Status from the enclosing function.
#define K3_PEER_CUDA(expr)                                      \
  do {                                                          \
    const cudaError_t k3_peer_err_ = (expr);                    \
    if (k3_peer_err_ != cudaSuccess) return CudaError(k3_peer_err_, #expr); \
  } while (0)

constexpr int kBusIdLen = 32;  // "0000:00:00.0" with room to spare

// This rank's answer to "can it map every peer's GPU memory": OK, or why not.
absl::Status CheckPeers(MPI_Comm comm, int rank, int size) {
  MPI_Comm node = MPI_COMM_NULL;
  int node_size = 0;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) != MPI_SUCCESS ||
      MPI_Comm_size(node, &node_size) != MPI_SUCCESS) {
    return absl::InternalError("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
  }
  MPI_Comm_free(&node);
  // The bus ids are gathered whatever this rank found: the other ranks are in the collective.
  int dev = 0;
  char bus[kBusIdLen] = {};
  const bool have_bus = cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetPCIBusId(bus, kBusIdLen, dev) == cudaSuccess;
  std::vector<char> buses(static_cast<size_t>(size) * kBusIdLen);
  if (MPI_Allgather(bus, kBusIdLen, MPI_CHAR, buses.data(), kBusIdLen, MPI_CHAR, comm) != MPI_SUCCESS) {
    return absl::InternalError("MPI_Allgather of the GPUs' bus ids failed");
  }
  if (node_size != size) return absl::UnavailableError("the ranks are not all on one host");
  if (!have_bus) return absl::UnavailableError("no PCI bus id for this rank's GPU");
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const char* id = &buses[static_cast<size_t>(r) * kBusIdLen];
    int peer_dev = -1, can = 0;
    if (cudaDeviceGetByPCIBusId(&peer_dev, id) != cudaSuccess) {
      cudaGetLastError();
      return absl::UnavailableError(absl::StrCat("rank ", r, "'s GPU ", id, " is not visible here"));
    }
    if (peer_dev == dev) return absl::UnavailableError(absl::StrCat("rank ", r, " shares this rank's GPU"));
    K3_PEER_CUDA(cudaDeviceCanAccessPeer(&can, dev, peer_dev));
    if (!can) return absl::UnavailableError(absl::StrCat("GPU ", dev, " cannot access peer GPU ", peer_dev));
  }
  return absl::OkStatus();
}

// MIN over the ranks of "this rank is fine": one bad rank makes every rank give up.
absl::StatusOr<bool> AllOk(MPI_Comm comm, bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) {
    return absl::InternalError("MPI_Allreduce failed");
  }
  return all == 1;
}

absl::Status Unavailable(const absl::Status& local) {
  return absl::UnavailableError(absl::StrCat("peer all-reduce not available: ",
                                             local.ok() ? "another rank cannot use it" : local.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerAllReduce>> PeerAllReduce::Create(MPI_Comm comm, const PeerAllReduceParams& p) {
  int rank = 0, size = 1;
  if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS) {
    return absl::InternalError("MPI_Comm_rank/size failed");
  }
  // The same answer on every rank (same size, same params): no collective is skipped by one.
  if (size < 2 || size > kPeerMaxRanks) {
    return absl::UnavailableError(absl::StrCat("peer all-reduce not available: ", size, " ranks"));
  }
  if (p.block_floats <= 0 || p.block_floats % 4 != 0 || p.slot_bytes < 16 || p.slot_bytes % 16 != 0 ||
      p.threads < kPeerMaxRanks || p.threads > 1024 || p.threads % 32 != 0 || !(p.timeout_s > 0)) {
    return absl::InvalidArgumentError("PeerAllReduceParams out of range");
  }
  std::unique_ptr<PeerAllReduce> self(new PeerAllReduce());
  PeerReduceArgs& a = self->args_;
  a.protocol = p.protocol;
  a.rank = rank;
  a.ranks = size;
  a.slot_floats = p.slot_bytes / 4;
  a.block_floats = p.block_floats;
  a.threads = p.threads;
  a.timeout_ns = static_cast<uint64_t>(p.timeout_s * 1e9);
  const int64_t max_blocks = (a.slot_floats + a.block_floats - 1) / a.block_floats;
  const bool inline_data = p.protocol == PeerProtocol::kInline;
  // kInline: a region per sending rank in each slot, no flags. kFlags: one region, then flags.
  const size_t staging_bytes = 2 * static_cast<size_t>(p.slot_bytes) * (inline_data ? size : 1);
  const size_t flag_bytes = inline_data ? 0 : static_cast<size_t>(max_blocks) * kPeerMaxRanks * sizeof(uint64_t);

  absl::Status local = CheckPeers(comm, rank, size);
  cudaIpcMemHandle_t handle{};
  if (local.ok()) {
    local = [&]() -> absl::Status {
      // Staging (two slots) and flags in one allocation: one handle per rank. Flags zero ("epoch
      // 0"), kInline slots empty (-0.0), before the handles are exchanged: no peer writes first.
      K3_PEER_CUDA(cudaMalloc(&self->own_buffer_, staging_bytes + flag_bytes));
      K3_PEER_CUDA(cudaMemset(self->own_buffer_, 0, staging_bytes + flag_bytes));
      if (inline_data) {
        K3_PEER_CUDA(LaunchPeerFillEmpty(static_cast<float*>(self->own_buffer_), staging_bytes / 4, nullptr));
      }
      K3_PEER_CUDA(cudaMalloc(&a.epochs, static_cast<size_t>(max_blocks) * sizeof(uint64_t)));
      K3_PEER_CUDA(cudaMemset(a.epochs, 0, static_cast<size_t>(max_blocks) * sizeof(uint64_t)));
      K3_PEER_CUDA(cudaMalloc(&a.error_dev, sizeof(uint32_t)));
      K3_PEER_CUDA(cudaMemset(a.error_dev, 0, sizeof(uint32_t)));
      K3_PEER_CUDA(cudaHostAlloc(&self->error_host_, sizeof(uint32_t), cudaHostAllocMapped));
      *self->error_host_ = 0;
      K3_PEER_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&a.error_host), self->error_host_, 0));
      K3_PEER_CUDA(cudaDeviceSynchronize());
      K3_PEER_CUDA(cudaIpcGetMemHandle(&handle, self->own_buffer_));
      return absl::OkStatus();
    }();
  }
  absl::StatusOr<bool> all = AllOk(comm, local.ok());
  if (!all.ok()) return all.status();
  if (!*all) return Unavailable(local);

  std::vector<cudaIpcMemHandle_t> handles(static_cast<size_t>(size));
  if (MPI_Allgather(&handle, sizeof(handle), MPI_BYTE, handles.data(), sizeof(handle), MPI_BYTE, comm) != MPI_SUCCESS) {
    return absl::InternalError("MPI_Allgather of the IPC handles failed");
  }
  for (int r = 0; r < size && local.ok(); ++r) {
    if (r == rank) continue;
    const cudaError_t e = cudaIpcOpenMemHandle(&self->peer_buffers_[r], handles[static_cast<size_t>(r)],
                                               cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      self->peer_buffers_[r] = nullptr;
      cudaGetLastError();
      local = absl::UnavailableError(absl::StrCat("cudaIpcOpenMemHandle of rank ", r, ": ", cudaGetErrorString(e)));
    }
  }
  all = AllOk(comm, local.ok());
  if (!all.ok()) return all.status();
  if (!*all) return Unavailable(local);

  for (int r = 0; r < size; ++r) {
    char* base = static_cast<char*>(r == rank ? self->own_buffer_ : self->peer_buffers_[r]);
    a.staging[r] = reinterpret_cast<float*>(base);
    a.flags[r] = inline_data ? nullptr : reinterpret_cast<uint64_t*>(base + staging_bytes);
  }
  return self;
}

PeerAllReduce::~PeerAllReduce() {
  // Kernels of this rank done before its buffers go (a peer's may still read: see the header).
  cudaDeviceSynchronize();
  for (void* p : peer_buffers_) {
    if (p != nullptr) cudaIpcCloseMemHandle(p);
  }
  if (own_buffer_ != nullptr) cudaFree(own_buffer_);
  if (args_.epochs != nullptr) cudaFree(args_.epochs);
  if (args_.error_dev != nullptr) cudaFree(args_.error_dev);
  if (error_host_ != nullptr) cudaFreeHost(error_host_);
}

absl::Status PeerAllReduce::AllReduceSum(float* data, int64_t n, cudaStream_t stream) {
  if (n > args_.slot_floats) {
    return absl::InvalidArgumentError(absl::StrCat("peer all-reduce of ", n, " floats, the buffer holds ", args_.slot_floats));
  }
  if (absl::Status h = CheckHealth(); !h.ok()) return h;
  PeerReduceArgs a = args_;
  a.data = data;
  a.n = n;
  K3_PEER_CUDA(LaunchPeerReduce(a, stream));
  return absl::OkStatus();
}

absl::Status PeerAllReduce::CheckHealth() const {
  const uint32_t e = *static_cast<volatile const uint32_t*>(error_host_);
  if (e == 0) return absl::OkStatus();
  if (e == kPeerErrorTimeout) {
    return absl::DeadlineExceededError(absl::StrCat("peer all-reduce: rank ", args_.rank,
                                                    " timed out waiting for a peer's flag; the peer path is off for good"));
  }
  return absl::InternalError(absl::StrCat("peer all-reduce: error word ", e));
}

}  // namespace k3::coll
