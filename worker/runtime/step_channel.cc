#include "worker/runtime/step_channel.h"

#include "spdlog/spdlog.h"
#include "worker/common/step_channel_protocol.h"

namespace k3::runtime {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kTick{200};  // how often a blocked wait looks at stop_
constexpr uint32_t kMaxHelloBytes = 4096;

absl::Status StepChannelServer::Start(const std::string& host, int port) {
  auto l = net::FrameListener::Listen(host, port);
  if (!l.ok()) return l.status();
  listener_ = std::move(*l);
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void StepChannelServer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  listener_.Close();
}

void StepChannelServer::Loop() {
  while (!stop_) {
    absl::StatusOr<net::FrameSocket> conn = listener_.Accept(kTick);
    if (!conn.ok()) {
      if (!absl::IsDeadlineExceeded(conn.status())) spdlog::warn("step channel: {}", conn.status().ToString());
      continue;
    }
    Serve(*conn);
  }
}

void StepChannelServer::Serve(net::FrameSocket& conn) {
  // Before the token is checked: a small frame, soon (a stranger neither allocates much nor holds
  // the channel for long).
  absl::StatusOr<std::string> hello =
      conn.Read(std::chrono::microseconds(0), Clock::now() + std::chrono::seconds(5), kMaxHelloBytes);
  if (!hello.ok()) return;
  const std::string_view h(*hello);
  if (h.substr(0, net::kStepHello.size()) != net::kStepHello || !auth_.Accepts(h.substr(net::kStepHello.size()))) {
    spdlog::warn("step channel: refused a connection (bad hello or token)");
    (void)conn.Write("unauthenticated");
    return;
  }
  if (!conn.Write(net::kStepHelloOk).ok()) return;
  spdlog::info("step channel: a coordinator connected");
  k3::v1::StepRequest req;
  k3::v1::StepResponse resp;
  std::string payload;
  while (!stop_) {
    absl::StatusOr<std::string> frame = conn.Read(kSpin, Clock::now() + kTick);
    if (!frame.ok()) {
      if (absl::IsDeadlineExceeded(frame.status())) continue;
      spdlog::info("step channel: connection ended ({})", frame.status().ToString());
      return;
    }
    req.Clear();
    resp.Clear();
    absl::Status st = req.ParseFromString(*frame) ? service_.Run(req, &resp)
                                                  : absl::InvalidArgumentError("malformed StepRequest frame");
    payload.clear();
    if (st.ok()) resp.SerializeToString(&payload);
    if (!conn.Write(net::EncodeStepReply(st, payload)).ok()) return;
  }
}

}  // namespace k3::runtime
