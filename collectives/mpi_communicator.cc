#include "collectives/mpi_communicator.h"

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace k3::coll {

absl::Status MpiError(int code, const char* what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, msg, &len);
  return absl::InternalError(absl::StrCat(what, " failed: ", std::string(msg, len)));
}

namespace {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, const MpiOptions& options) : comm_(comm), options_(options) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Errors come back as codes (checked by K3_MPI_CHECK) instead of aborting the job.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Reduce to rank 0, then broadcast: every rank gets the SAME bits, which the replicated
  // router relies on (an all-reduce algorithm may round differently on different ranks).
  absl::Status AllReduceSum(float* data, int64_t n) override {
    stats_.Add(Op::kAllReduce, n * 4);
    if (size_ == 1) return absl::OkStatus();
    MPI_Request req;
    if (rank_ == 0) {
      K3_MPI_CHECK(MPI_Ireduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, 0, comm_, &req));
    } else {
      K3_MPI_CHECK(MPI_Ireduce(data, nullptr, static_cast<int>(n), MPI_FLOAT, MPI_SUM, 0, comm_, &req));
    }
    if (auto s = Wait(req, "all_reduce (reduce)"); !s.ok()) return s;
    K3_MPI_CHECK(MPI_Ibcast(data, static_cast<int>(n), MPI_FLOAT, 0, comm_, &req));
    return Wait(req, "all_reduce (broadcast)");
  }

  absl::Status AllGather(const void* send, void* recv, int64_t bytes) override {
    stats_.Add(Op::kAllGather, bytes);
    MPI_Request req;
    K3_MPI_CHECK(MPI_Iallgather(send == recv ? MPI_IN_PLACE : send, static_cast<int>(bytes), MPI_BYTE, recv,
                                static_cast<int>(bytes), MPI_BYTE, comm_, &req));
    return Wait(req, "all_gather");
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    stats_.Add(Op::kBroadcast, bytes);
    if (size_ == 1) return absl::OkStatus();
    MPI_Request req;
    K3_MPI_CHECK(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &req));
    return Wait(req, "broadcast");
  }

  // Gather as point-to-point messages so that, on a timeout, the root knows which ranks are
  // missing and can name them.
  absl::Status Gather(const void* send, void* recv, int64_t bytes, int root) override {
    stats_.Add(Op::kGather, bytes);
    constexpr int kTag = 7301;
    if (rank_ != root) {
      MPI_Request req;
      K3_MPI_CHECK(MPI_Isend(send, static_cast<int>(bytes), MPI_BYTE, root, kTag, comm_, &req));
      return Wait(req, "gather (send)");
    }
    std::vector<MPI_Request> reqs(size_, MPI_REQUEST_NULL);
    for (int r = 0; r < size_; ++r) {
      char* dst = static_cast<char*>(recv) + static_cast<int64_t>(r) * bytes;
      if (r == root) {
        if (dst != send) std::memmove(dst, send, bytes);
        continue;
      }
      K3_MPI_CHECK(MPI_Irecv(dst, static_cast<int>(bytes), MPI_BYTE, r, kTag, comm_, &reqs[r]));
    }
    return WaitAll(reqs, "gather");
  }

  absl::Status Barrier() override {
    stats_.Add(Op::kBarrier, 0);
    MPI_Request req;
    K3_MPI_CHECK(MPI_Ibarrier(comm_, &req));
    return Wait(req, "barrier");
  }

 private:
  absl::Status Wait(MPI_Request& req, const char* what) {
    std::vector<MPI_Request> one = {req};
    absl::Status s = WaitAll(one, what);
    req = one[0];
    return s;
  }

  // Polls until every request completes or the deadline passes. On a timeout the pending
  // requests are abandoned (the group is unusable afterwards; the leader reports and exits).
  absl::Status WaitAll(std::vector<MPI_Request>& reqs, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    auto backoff = std::chrono::microseconds(1);
    while (true) {
      int done = 0;
      K3_MPI_CHECK(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
      if (done) return absl::OkStatus();
      if (std::chrono::steady_clock::now() > deadline) {
        std::vector<int> missing;
        for (size_t r = 0; r < reqs.size(); ++r) {
          if (reqs[r] != MPI_REQUEST_NULL) missing.push_back(static_cast<int>(r));
        }
        std::string who = reqs.size() > 1
                              ? absl::StrCat("; no answer from rank(s) ", absl::StrJoin(missing, ","))
                              : "";
        return absl::DeadlineExceededError(absl::StrCat(
            "rank ", rank_, ": ", what, " did not complete within ", options_.timeout.count(),
            " ms (a peer rank died or stalled)", who));
      }
      // Spin briefly (decode-step collectives finish in microseconds), then back off.
      if (backoff < std::chrono::microseconds(1000)) backoff *= 2;
      if (backoff > std::chrono::microseconds(50)) std::this_thread::sleep_for(backoff);
    }
  }

  MPI_Comm comm_;
  MpiOptions options_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> MakeMpiCommunicator(MPI_Comm comm, const MpiOptions& options) {
  return std::make_unique<MpiCommunicator>(comm, options);
}

}  // namespace k3::coll
