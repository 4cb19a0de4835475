#include "coordinator/server/worker_client.h"

#include "absl/strings/str_cat.h"
#include "worker/common/grpc_security.h"

namespace k3::coord {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

WorkerClient::WorkerClient(std::string address, WorkerLink link)
    : address_(std::move(address)), token_(std::move(link.token)), rng_(std::random_device{}()) {
  NewSession();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  channel_ = grpc::CreateCustomChannel(address_, link.credentials ? link.credentials : grpc::InsecureChannelCredentials(),
                                       args);
  stub_ = k3::v1::Worker::NewStub(channel_);
}

WorkerClient::~WorkerClient() {
  cq_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) {
  }
}

void WorkerClient::NewSession() {
  session_ = rng_() | 1;  // never 0 ("no session")
}

absl::StatusOr<k3::v1::StepResponse> WorkerClient::RunStep(const k3::v1::StepRequest& req,
                                                           std::chrono::milliseconds timeout,
                                                           std::chrono::microseconds poll) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  security::AddBearer(ctx, token_);
  k3::v1::StepResponse resp;
  grpc::Status s;
  if (poll.count() <= 0) {
    s = stub_->RunStep(&ctx, req, &resp);
  } else {
    // The same call, its reply awaited without sleeping: a thread that slept through a step wakes
    // up slowly (idle CPU states, a VM's halt exit: bench/device/grpc_rtt_bench.cc), one that
    // polls does not. The deadline ends the call, so the blocking wait after the polling ends too.
    auto call = stub_->AsyncRunStep(&ctx, req, &cq_);
    call->Finish(&resp, &s, &resp);
    void* tag = nullptr;
    bool ok = false;
    bool done = false;
    const auto until = std::chrono::steady_clock::now() + poll;
    while (!done && std::chrono::steady_clock::now() < until) {
      done = cq_.AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC)) == grpc::CompletionQueue::GOT_EVENT;
    }
    if (!done && !cq_.Next(&tag, &ok)) {
      return absl::UnavailableError(absl::StrCat("worker group ", address_, ": the client is shutting down"));
    }
  }
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("worker group ", address_, ": ", s.error_message()));
  }
  return resp;
}

absl::StatusOr<k3::v1::WorkerInfo> WorkerClient::GetInfo(std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  security::AddBearer(ctx, token_);
  k3::v1::WorkerInfo info;
  k3::v1::WorkerInfoRequest req;
  req.set_session(session_);
  grpc::Status s = stub_->GetInfo(&ctx, req, &info);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("worker group ", address_, ": ", s.error_message()));
  }
  return info;
}

}  // namespace k3::coord
