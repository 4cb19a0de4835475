// The leader's end of the step channel (protocol: worker/common/step_channel_protocol.h): a thread
// that accepts one coordinator connection at a time, checks its hello against the bearer token,
// and runs each step frame through LeaderService::Run (the same path, lock and bookkeeping as the
// gRPC RunStep), replying with one frame. Between steps it spins kSpin on the socket before it
// blocks, so the next step's frame (sent ~20 us after the reply) is seen at once. GetInfo and
// health stay on gRPC.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "worker/common/frame_socket.h"
#include "worker/common/grpc_security.h"
#include "worker/runtime/leader_service.h"

namespace k3::runtime {

class StepChannelServer {
 public:
  static constexpr std::chrono::microseconds kSpin{2000};

  StepChannelServer(LeaderService& service, security::BearerAuth auth) : service_(service), auth_(std::move(auth)) {}
  ~StepChannelServer() { Stop(); }

  // Listens on host:port (0: any free port) and starts serving.
  absl::Status Start(const std::string& host, int port);
  int port() const { return listener_.port(); }
  // Stops accepting and ends the connection being served (within ~0.2 s); idempotent.
  void Stop();

 private:
  void Loop();
  void Serve(net::FrameSocket& conn);

  LeaderService& service_;
  security::BearerAuth auth_;
  net::FrameListener listener_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace k3::runtime
