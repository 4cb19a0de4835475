// The coordinator's connection to one worker group's leader (k3.v1.Worker). Steps go over the
// leader's step channel (worker/common/step_channel_protocol.h) when its GetInfo advertises one
// and the link is plaintext; over gRPC otherwise, and GetInfo always.
#pragma once

#include <chrono>
#include <memory>
#include <random>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "k3/v1/worker.grpc.pb.h"
#include "worker/common/frame_socket.h"

namespace k3::coord {

// How the coordinator reaches the leaders: the token they want (k3-worker --auth-token-file;
// empty: none) and TLS (null credentials: plaintext).
struct WorkerLink {
  std::string token;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  bool tls = false;  // `credentials` are TLS: steps stay on gRPC (the step channel is plaintext)
};

class WorkerClient {
 public:
  explicit WorkerClient(std::string address, WorkerLink link = {});
  ~WorkerClient();
  const std::string& address() const { return address_; }

  // One step. `poll` > 0: wait for the reply polling (this client's completion queue, or the step
  // channel's socket) without sleeping for up to that long, then block (one thread at a time may
  // call RunStep or GetInfo). A step channel that fails is closed (the step's outcome is unknown:
  // Unavailable); the next successful GetInfo connects it again.
  absl::StatusOr<k3::v1::StepResponse> RunStep(const k3::v1::StepRequest& req, std::chrono::milliseconds timeout,
                                               std::chrono::microseconds poll = std::chrono::microseconds(0));
  // Sends the current session (k3.v1.WorkerInfoRequest.session): a leader that sees a new one
  // frees every sequence it holds, as left by a coordinator that died or gave the group up.
  absl::StatusOr<k3::v1::WorkerInfo> GetInfo(std::chrono::milliseconds timeout);
  // A new random session, for when this coordinator holds nothing on the group (it failed its
  // requests there) and wants it empty on the next GetInfo. Closes the step channel.
  void NewSession();
  bool step_channel() const { return steps_.valid(); }

 private:
  // Connects the step channel on this leader's host (a failure is logged; steps stay on gRPC).
  void ConnectSteps(int port, std::chrono::milliseconds timeout);

  std::string address_;
  std::string token_;
  std::mt19937_64 rng_;
  uint64_t session_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<k3::v1::Worker::Stub> stub_;
  grpc::CompletionQueue cq_;  // RunStep's calls when it polls
  bool tls_ = false;          // the link has TLS: steps stay on gRPC
  net::FrameSocket steps_;    // the leader's step channel, when connected
};

absl::Status FromGrpc(const grpc::Status& s);

}  // namespace k3::coord
