// The worker-group leader's gRPC endpoint (k3.v1.Worker): the coordinator sends steps, the
// leader runs them through the WorkerGroup one at a time. After a collective failure (a rank
// died or stalled) the group is marked broken: every later call is UNAVAILABLE and the process
// is expected to exit so that mpirun ends the job.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "k3/v1/worker.grpc.pb.h"
#include "worker/runtime/worker_group.h"

namespace k3::runtime {

struct LeaderInfo {
  std::string model_name, model_summary, plan;
  uint32_t ranks = 1, max_seqs = 0, page_size = 0, vocab = 0, context_length = 0;
  uint64_t cache_tokens = 0;
};

class LeaderService final : public k3::v1::Worker::Service {
 public:
  LeaderService(WorkerGroup& group, RankEngine& engine, LeaderInfo info)
      : group_(group), engine_(engine), info_(std::move(info)) {}

  grpc::Status RunStep(grpc::ServerContext* ctx, const k3::v1::StepRequest* req,
                       k3::v1::StepResponse* resp) override;
  grpc::Status GetInfo(grpc::ServerContext* ctx, const k3::v1::WorkerInfoRequest* req,
                       k3::v1::WorkerInfo* resp) override;

  bool broken() const { return broken_.load(); }
  // Sends the followers a shutdown step (once); later steps are refused.
  absl::Status Shutdown();

 private:
  WorkerGroup& group_;
  RankEngine& engine_;
  LeaderInfo info_;
  std::mutex mu_;  // one step at a time: the group has one step loop
  std::atomic<bool> broken_{false};
  bool shut_down_ = false;
};

// absl -> gRPC status codes (the numbering is the same; this keeps the message).
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace k3::runtime
