#include <cstring>

#include "collectives/communicator.h"

namespace k3::coll {
namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Status AllReduceSum(float*, int64_t n) override {
    stats_.Add(Op::kAllReduce, n * 4);
    return absl::OkStatus();
  }
  absl::Status AllGather(const void* send, void* recv, int64_t bytes) override {
    stats_.Add(Op::kAllGather, bytes);
    if (send != recv) std::memmove(recv, send, bytes);
    return absl::OkStatus();
  }
  absl::Status Broadcast(void*, int64_t bytes, int) override {
    stats_.Add(Op::kBroadcast, bytes);
    return absl::OkStatus();
  }
  absl::Status Gather(const void* send, void* recv, int64_t bytes, int) override {
    stats_.Add(Op::kGather, bytes);
    if (send != recv) std::memmove(recv, send, bytes);
    return absl::OkStatus();
  }
  absl::Status Barrier() override {
    stats_.Add(Op::kBarrier, 0);
    return absl::OkStatus();
  }
};

}  // namespace

std::string OpName(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
    case Op::kGather: return "gather";
    case Op::kBarrier: return "barrier";
    case Op::kCount: break;
  }
  return "?";
}

std::unique_ptr<Communicator> MakeLocalCommunicator() { return std::make_unique<LocalCommunicator>(); }

}  // namespace k3::coll
