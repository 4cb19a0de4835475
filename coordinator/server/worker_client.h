// The coordinator's connection to one worker group's leader (k3.v1.Worker).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "k3/v1/worker.grpc.pb.h"

namespace k3::coord {

class WorkerClient {
 public:
  explicit WorkerClient(std::string address);
  const std::string& address() const { return address_; }

  absl::StatusOr<k3::v1::StepResponse> RunStep(const k3::v1::StepRequest& req,
                                               std::chrono::milliseconds timeout);
  absl::StatusOr<k3::v1::WorkerInfo> GetInfo(std::chrono::milliseconds timeout);

 private:
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<k3::v1::Worker::Stub> stub_;
};

absl::Status FromGrpc(const grpc::Status& s);

}  // namespace k3::coord
