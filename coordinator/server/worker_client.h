// The coordinator's connection to one worker group's leader (k3.v1.Worker).
#pragma once

#include <chrono>
#include <memory>
#include <random>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "k3/v1/worker.grpc.pb.h"

namespace k3::coord {

// How the coordinator reaches the leaders: the token they want (k3-worker --auth-token-file;
// empty: none) and TLS (null credentials: plaintext).
struct WorkerLink {
  std::string token;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

class WorkerClient {
 public:
  explicit WorkerClient(std::string address, WorkerLink link = {});
  ~WorkerClient();
  const std::string& address() const { return address_; }

  // One step. `poll` > 0: wait for the reply polling this client's completion queue without
  // sleeping for up to that long, then block (one thread at a time may call RunStep).
  absl::StatusOr<k3::v1::StepResponse> RunStep(const k3::v1::StepRequest& req, std::chrono::milliseconds timeout,
                                               std::chrono::microseconds poll = std::chrono::microseconds(0));
  // Sends the current session (k3.v1.WorkerInfoRequest.session): a leader that sees a new one
  // frees every sequence it holds, as left by a coordinator that died or gave the group up.
  absl::StatusOr<k3::v1::WorkerInfo> GetInfo(std::chrono::milliseconds timeout);
  // A new random session, for when this coordinator holds nothing on the group (it failed its
  // requests there) and wants it empty on the next GetInfo.
  void NewSession();

 private:
  std::string address_;
  std::string token_;
  std::mt19937_64 rng_;
  uint64_t session_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<k3::v1::Worker::Stub> stub_;
  grpc::CompletionQueue cq_;  // RunStep's calls when it polls
};

absl::Status FromGrpc(const grpc::Status& s);

}  // namespace k3::coord
