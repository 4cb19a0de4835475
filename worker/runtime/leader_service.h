// The worker-group leader's gRPC endpoint (k3.v1.Worker): the coordinator sends steps, the
// leader runs them through the WorkerGroup one at a time. After a collective failure (a rank
// died or stalled) the group is marked broken: every later call is UNAVAILABLE and the process
// is expected to exit so that mpirun ends the job. With a token (k3-worker --auth-token-file)
// only callers that send it (the coordinator, --worker-token-file) get past UNAUTHENTICATED.
// The time since the last accepted call (idle()) lets the leader notice a coordinator that
// died: a live one calls GetInfo every second even when it has nothing to run.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>

#include "k3/v1/worker.grpc.pb.h"
#include "worker/common/grpc_security.h"
#include "worker/runtime/worker_group.h"

namespace k3::runtime {

struct LeaderInfo {
  std::string model_name, model_summary, plan;
  uint32_t ranks = 1, max_seqs = 0, page_size = 0, vocab = 0, context_length = 0;
  uint64_t cache_tokens = 0;
  uint32_t step_port = 0;  // the step channel's port (--step-port), 0: none
};

class LeaderService final : public k3::v1::Worker::Service {
 public:
  LeaderService(WorkerGroup& group, RankEngine& engine, LeaderInfo info, security::BearerAuth auth = {})
      : group_(group), engine_(engine), info_(std::move(info)), auth_(std::move(auth)) {}

  grpc::Status RunStep(grpc::ServerContext* ctx, const k3::v1::StepRequest* req,
                       k3::v1::StepResponse* resp) override;
  // The step itself, once the caller is authenticated (RunStep, and the step channel:
  // step_channel.h): one at a time through the group.
  absl::Status Run(const k3::v1::StepRequest& req, k3::v1::StepResponse* resp);
  // A request with a session other than the last one seen frees the sequences left by the
  // previous coordinator first (see WorkerInfoRequest.session).
  grpc::Status GetInfo(grpc::ServerContext* ctx, const k3::v1::WorkerInfoRequest* req,
                       k3::v1::WorkerInfo* resp) override;

  bool broken() const { return broken_.load(); }
  // How long no authenticated call has been running or arrived (zero while one runs); counted
  // from the service's start until the first call.
  std::chrono::steady_clock::duration idle() const;
  // Sends the followers a shutdown step (once); later steps are refused.
  absl::Status Shutdown();

 private:
  // Marks an accepted call as running, and when it ended (for idle()).
  class Activity {
   public:
    explicit Activity(LeaderService& s);
    ~Activity();

   private:
    LeaderService& s_;
  };

  // Records the sequences a step adds and frees (under mu_). A failed step may have applied
  // part of its changes: its adds count as live, its frees as not done.
  void Track(const Step& step, bool ok);
  // Frees every live sequence, one step each (an id the ranks do not hold fails alone); under mu_.
  absl::Status FreeAll();

  WorkerGroup& group_;
  RankEngine& engine_;
  LeaderInfo info_;
  std::set<int64_t> live_;     // sequences added and not freed, by the steps run (under mu_)
  uint64_t session_ = 0;       // the coordinator session of the last GetInfo (under mu_)
  security::BearerAuth auth_;
  std::atomic<int> active_{0};
  std::atomic<int64_t> last_call_ns_{std::chrono::steady_clock::now().time_since_epoch().count()};
  std::mutex mu_;  // one step at a time: the group has one step loop
  std::atomic<bool> broken_{false};
  bool shut_down_ = false;
};

// absl -> gRPC status codes (the numbering is the same; this keeps the message).
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace k3::runtime
