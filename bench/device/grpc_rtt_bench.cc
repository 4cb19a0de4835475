// The coordinator -> leader step RPC alone, between two processes on one host: what a decode step
// adds on top of the engine's own time when served. The server answers k3.v1.Worker/RunStep with a
// decode step's reply (one entry, one row, one candidate) after keeping its thread busy for the
// step's engine time (the request's id, in microseconds: a GPU leader spins in the stream sync),
// so the client's thread sleeps that long, as the coordinator's does. The client prints, per engine
// time, the round trip minus that time for
//   blocking  the coordinator's call (WorkerClient::RunStep: a sync unary call), and
//   polling   the same call polled on its completion queue without sleeping
// Idle CPUs wake slowly (deep C-states, a VM's halt exit), so the blocking call's overhead grows with
// the step time while the polling one's does not: the difference is what a step channel whose
// waiting thread stays awake would save. --side-server runs an idle sync gRPC server in the client
// process, as the coordinator has (its polling threads then own gRPC's epoll set).
//
//   k3_grpc_rtt_bench --serve 127.0.0.1:51079 &
//   k3_grpc_rtt_bench --connect 127.0.0.1:51079 --work-us 0,1000,4400 --calls 400 [--side-server]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "k3/v1/worker.grpc.pb.h"
#include "worker/common/cli_args.h"

namespace {

using Clock = std::chrono::steady_clock;

// RunStep: busy for `id` microseconds, then a decode step's reply.
class BusyWorker final : public k3::v1::Worker::Service {
  grpc::Status RunStep(grpc::ServerContext*, const k3::v1::StepRequest* req, k3::v1::StepResponse* resp) override {
    const auto until = Clock::now() + std::chrono::microseconds(req->id());
    while (Clock::now() < until) {
    }
    resp->set_id(req->id());
    auto* c = resp->add_entries()->add_rows()->add_top();
    c->set_token(1234);
    c->set_logit(17.5f);
    return grpc::Status::OK;
  }
};

std::unique_ptr<grpc::Server> StartServer(const std::string& address, grpc::Service* service) {
  grpc::ServerBuilder b;
  b.AddListeningPort(address, grpc::InsecureServerCredentials());
  b.RegisterService(service);
  return b.BuildAndStart();
}

// A decode step's request: one entry of one token.
k3::v1::StepRequest DecodeStep(int64_t work_us) {
  k3::v1::StepRequest req;
  req.set_id(static_cast<uint64_t>(work_us));
  auto* e = req.add_entries();
  e->set_seq(1);
  e->add_tokens(4321);
  e->set_top_n(1);
  return req;
}

// One call, round trip in microseconds; `poll`: the completion queue polled without sleeping.
double Call(k3::v1::Worker::Stub& stub, grpc::CompletionQueue& cq, const k3::v1::StepRequest& req, bool poll) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  k3::v1::StepResponse resp;
  grpc::Status s;
  const auto t0 = Clock::now();
  if (!poll) {
    s = stub.RunStep(&ctx, req, &resp);
  } else {
    auto call = stub.AsyncRunStep(&ctx, req, &cq);
    call->Finish(&resp, &s, &resp);
    void* tag = nullptr;
    bool ok = false;
    while (cq.AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC)) != grpc::CompletionQueue::GOT_EVENT) {
    }
  }
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  if (!s.ok()) {
    std::fprintf(stderr, "RunStep failed: %s\n", s.error_message().c_str());
    std::exit(1);
  }
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  k3::CliArgs args(argc, argv);
  const std::string serve = args.Str("serve");
  const std::string connect = args.Str("connect");
  const std::string work_list = args.Str("work-us", "0,1000,4400");
  const bool side_server = args.Has("side-server");
  auto calls = args.Int("calls", 400);
  if (!calls.ok() || !args.Finish().ok() || serve.empty() == connect.empty() || *calls < 1) {
    std::fprintf(stderr, "usage: k3_grpc_rtt_bench --serve ADDR | --connect ADDR [--work-us 0,1000,4400] "
                         "[--calls 400] [--side-server]\n");
    return 2;
  }
  if (!serve.empty()) {
    BusyWorker worker;
    auto server = StartServer(serve, &worker);
    if (!server) return 1;
    std::printf("RTT SERVER READY %s\n", serve.c_str());
    std::fflush(stdout);
    server->Wait();
    return 0;
  }
  BusyWorker idle;  // never called: its server's threads only poll, as the coordinator's do
  std::unique_ptr<grpc::Server> side;
  if (side_server) side = StartServer("127.0.0.1:0", &idle);
  auto stub = k3::v1::Worker::NewStub(grpc::CreateChannel(connect, grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue cq;
  for (absl::string_view w : absl::StrSplit(work_list, ',', absl::SkipEmpty())) {
    int64_t work_us = 0;
    if (!absl::SimpleAtoi(w, &work_us) || work_us < 0) return 2;
    const k3::v1::StepRequest req = DecodeStep(work_us);
    for (bool poll : {false, true}) {
      std::vector<double> over;
      for (int64_t i = 0; i < *calls + 10; ++i) {
        const double us = Call(*stub, cq, req, poll);
        if (i >= 10) over.push_back(us - static_cast<double>(work_us));  // the first calls warm up
      }
      std::sort(over.begin(), over.end());
      const size_t n = over.size();
      std::printf("rtt over a %ld us step, %s%s: median %.1f us, p10 %.1f, p90 %.1f (%zu calls)\n",
                  static_cast<long>(work_us), poll ? "polling" : "blocking", side_server ? ", side server" : "",
                  over[n / 2], over[n / 10], over[n * 9 / 10], n);
      std::fflush(stdout);
    }
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  if (side) side->Shutdown();
  return 0;
}
