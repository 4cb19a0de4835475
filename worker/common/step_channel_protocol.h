// The leader's step channel (k3-worker --step-port; worker/runtime/step_channel.h serves it,
// coordinator/server/worker_client.cc uses it): the coordinator's steps over one plain TCP
// connection of length-prefixed frames (worker/common/frame_socket.h) instead of one gRPC call
// each, both ends spinning a bounded time before they block, so neither sleeps through a step.
//   hello    client -> leader: kStepHello followed by the bearer token (empty without one)
//            leader -> client: "ok", or a refusal (then it closes the connection)
//   step     client -> leader: a serialized k3.v1.StepRequest
//            leader -> client: one byte absl::StatusCode, then the serialized k3.v1.StepResponse
//            (code 0) or the error message
// Plaintext: the leader refuses to open it beside TLS (--tls-cert); the token still guards it.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace k3::net {

inline constexpr std::string_view kStepHello = "k3-step-channel/1 ";
inline constexpr std::string_view kStepHelloOk = "ok";

inline std::string EncodeStepReply(const absl::Status& s, const std::string& payload) {
  std::string out(1, static_cast<char>(s.code()));
  out += s.ok() ? payload : std::string(s.message());
  return out;
}

}  // namespace k3::net
