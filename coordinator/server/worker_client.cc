#include "coordinator/server/worker_client.h"

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/common/grpc_security.h"
#include "worker/common/step_channel_protocol.h"

namespace k3::coord {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

WorkerClient::WorkerClient(std::string address, WorkerLink link)
    : address_(std::move(address)), token_(std::move(link.token)), rng_(std::random_device{}()), tls_(link.tls) {
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
  steps_.Close();
}

namespace {

// The host part of "host:port" ("[v6]:port" too).
std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

absl::StatusOr<k3::v1::StepResponse> WorkerClient::RunStep(const k3::v1::StepRequest& req,
                                                           std::chrono::milliseconds timeout,
                                                           std::chrono::microseconds poll) {
  if (steps_.valid()) {
    auto fail = [&](const absl::Status& why) {
      steps_.Close();
      return absl::Status(why.code(), absl::StrCat("worker group ", address_, ": step channel: ", why.message()));
    };
    std::string bytes;
    req.SerializeToString(&bytes);
    if (absl::Status w = steps_.Write(bytes); !w.ok()) return fail(w);
    absl::StatusOr<std::string> frame = steps_.Read(poll, std::chrono::steady_clock::now() + timeout);
    if (!frame.ok()) return fail(frame.status());
    if (frame->empty()) return fail(absl::DataLossError("empty reply"));
    const auto code = static_cast<absl::StatusCode>(static_cast<unsigned char>((*frame)[0]));
    if (code != absl::StatusCode::kOk) {
      return absl::Status(code, absl::StrCat("worker group ", address_, ": ", frame->substr(1)));
    }
    k3::v1::StepResponse resp;
    if (!resp.ParseFromArray(frame->data() + 1, static_cast<int>(frame->size() - 1))) {
      return fail(absl::DataLossError("malformed StepResponse"));
    }
    return resp;
  }
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
  if (!steps_.valid() && !tls_ && info.step_port() > 0) ConnectSteps(static_cast<int>(info.step_port()), timeout);
  return info;
}

void WorkerClient::ConnectSteps(int port, std::chrono::milliseconds timeout) {
  const std::string host = HostOf(address_);
  absl::StatusOr<net::FrameSocket> sock = net::FrameSocket::Connect(host, port, timeout);
  absl::Status st = sock.status();
  if (st.ok()) st = sock->Write(std::string(net::kStepHello) + token_);
  if (st.ok()) {
    absl::StatusOr<std::string> reply =
        sock->Read(std::chrono::microseconds(0), std::chrono::steady_clock::now() + timeout);
    st = !reply.ok()                   ? reply.status()
         : *reply == net::kStepHelloOk ? absl::OkStatus()
                                       : absl::PermissionDeniedError(absl::StrCat("the leader said: ", *reply));
  }
  if (!st.ok()) {
    spdlog::warn("worker group {}: no step channel on {}:{} ({}); steps go over gRPC", address_, host, port,
                 st.ToString());
    return;
  }
  steps_ = std::move(*sock);
  spdlog::info("worker group {}: steps over the step channel {}:{}", address_, host, port);
}

}  // namespace k3::coord
