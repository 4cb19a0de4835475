// Length-prefixed frames over TCP ([u32 little-endian length][bytes], at most kMaxFrameBytes), the
// transport of the leader's step channel (worker/runtime/step_channel.h). Reads spin on a
// non-blocking socket for a bounded time before blocking in poll(): a thread that slept through a
// multi-millisecond step wakes up slowly (~0.1-0.2 ms on the GPU hosts: bench/device/grpc_rtt_bench.cc),
// one that spins does not. TCP_NODELAY on every socket. Errors are statuses, never exceptions or
// signals (MSG_NOSIGNAL).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace k3::net {

inline constexpr uint32_t kMaxFrameBytes = 256u << 20;

class FrameSocket {
 public:
  FrameSocket() = default;
  explicit FrameSocket(int fd) : fd_(fd) {}
  FrameSocket(FrameSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FrameSocket& operator=(FrameSocket&& o) noexcept;
  FrameSocket(const FrameSocket&) = delete;
  FrameSocket& operator=(const FrameSocket&) = delete;
  ~FrameSocket() { Close(); }

  // A connection to host:port (a name or a numeric address), within `timeout`.
  static absl::StatusOr<FrameSocket> Connect(const std::string& host, int port, std::chrono::milliseconds timeout);

  bool valid() const { return fd_ >= 0; }
  void Close();
  // One whole frame; Unavailable when the peer is gone.
  absl::Status Write(std::string_view bytes);
  // The next frame: spins for `spin`, then blocks until `deadline` for its first byte
  // (DeadlineExceeded after it, nothing consumed; the rest of a begun frame gets up to a minute);
  // Unavailable when the peer closed; DataLoss for a frame over `max_bytes` (nothing allocated).
  absl::StatusOr<std::string> Read(std::chrono::microseconds spin, std::chrono::steady_clock::time_point deadline,
                                   uint32_t max_bytes = kMaxFrameBytes);

 private:
  // Fills buf[0, n) from the socket (the same spin-then-poll wait).
  absl::Status ReadExactly(char* buf, size_t n, std::chrono::steady_clock::time_point spin_until,
                           std::chrono::steady_clock::time_point deadline);
  int fd_ = -1;
};

// A listening socket on host:port (port 0: any free one, port() says which).
class FrameListener {
 public:
  FrameListener() = default;
  FrameListener(FrameListener&& o) noexcept : fd_(o.fd_), port_(o.port_) { o.fd_ = -1; }
  FrameListener& operator=(FrameListener&& o) noexcept {
    if (this != &o) {
      Close();
      fd_ = o.fd_;
      port_ = o.port_;
      o.fd_ = -1;
    }
    return *this;
  }
  FrameListener(const FrameListener&) = delete;
  FrameListener& operator=(const FrameListener&) = delete;
  ~FrameListener() { Close(); }

  static absl::StatusOr<FrameListener> Listen(const std::string& host, int port);
  int port() const { return port_; }
  void Close();
  // The next connection, or DeadlineExceeded when none came within `timeout`.
  absl::StatusOr<FrameSocket> Accept(std::chrono::milliseconds timeout);

 private:
  int fd_ = -1, port_ = 0;
};

}  // namespace k3::net
