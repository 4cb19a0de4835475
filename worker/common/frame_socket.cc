#include "worker/common/frame_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace k3::net {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

void Tune(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
}

// Waits in poll() for `events` until the deadline; false when it passed.
absl::Status WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left < 0) return absl::DeadlineExceededError("no data before the deadline");
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left + 1, 1000)));
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) return Errno("poll");
  }
}

absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int e = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (e != 0) return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(e)));
  return res;
}

}  // namespace

FrameSocket& FrameSocket::operator=(FrameSocket&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void FrameSocket::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::StatusOr<FrameSocket> FrameSocket::Connect(const std::string& host, int port, std::chrono::milliseconds timeout) {
  auto res = Resolve(host, port, false);
  if (!res.ok()) return res.status();
  const Clock::time_point deadline = Clock::now() + timeout;
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for ", host));
  for (addrinfo* a = *res; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    FrameSocket s(fd);
    Tune(fd);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = Errno(absl::StrCat("connect to ", host, ":", port));
      continue;
    }
    if (absl::Status w = WaitFor(fd, POLLOUT, deadline); !w.ok()) {
      last = w;
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      last = absl::UnavailableError(absl::StrCat("connect to ", host, ":", port, ": ", std::strerror(err)));
      continue;
    }
    freeaddrinfo(*res);
    return s;
  }
  freeaddrinfo(*res);
  return last;
}

absl::Status FrameSocket::Write(std::string_view bytes) {
  if (fd_ < 0) return absl::UnavailableError("not connected");
  if (bytes.size() > kMaxFrameBytes) return absl::InvalidArgumentError("frame too large");
  const uint32_t n = static_cast<uint32_t>(bytes.size());
  const char head[4] = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                        static_cast<char>(n >> 24)};
  const std::string_view parts[2] = {std::string_view(head, 4), bytes};
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  for (std::string_view p : parts) {
    while (!p.empty()) {
      const ssize_t w = send(fd_, p.data(), p.size(), MSG_NOSIGNAL);
      if (w > 0) {
        p.remove_prefix(static_cast<size_t>(w));
      } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (absl::Status s = WaitFor(fd_, POLLOUT, deadline); !s.ok()) return s;
      } else if (w < 0 && errno == EINTR) {
        continue;
      } else {
        return Errno("send");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status FrameSocket::ReadExactly(char* buf, size_t n, Clock::time_point spin_until, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t r = recv(fd_, buf, n, 0);
    if (r > 0) {
      buf += r;
      n -= static_cast<size_t>(r);
    } else if (r == 0) {
      return absl::UnavailableError("the peer closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Clock::now() >= spin_until) {
        if (absl::Status s = WaitFor(fd_, POLLIN, deadline); !s.ok()) return s;
      }
    } else if (errno != EINTR) {
      return Errno("recv");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FrameSocket::Read(std::chrono::microseconds spin, Clock::time_point deadline,
                                              uint32_t max_bytes) {
  if (fd_ < 0) return absl::UnavailableError("not connected");
  const Clock::time_point spin_until = Clock::now() + spin;
  unsigned char head[4];
  if (absl::Status s = ReadExactly(reinterpret_cast<char*>(head), 1, spin_until, deadline); !s.ok()) return s;
  // A frame has begun: the rest is awaited past `deadline` (a frame cut in two would lose the
  // stream's framing), within a minute.
  const Clock::time_point rest = std::max(deadline, Clock::now() + std::chrono::seconds(60));
  if (absl::Status s = ReadExactly(reinterpret_cast<char*>(head) + 1, 3, spin_until, rest); !s.ok()) return s;
  const uint32_t n = head[0] | (head[1] << 8) | (head[2] << 16) | (static_cast<uint32_t>(head[3]) << 24);
  if (n > max_bytes) return absl::DataLossError(absl::StrCat("frame of ", n, " bytes (at most ", max_bytes, ")"));
  std::string out(n, '\0');
  if (absl::Status s = ReadExactly(out.data(), n, spin_until, rest); !s.ok()) return s;
  return out;
}

void FrameListener::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::StatusOr<FrameListener> FrameListener::Listen(const std::string& host, int port) {
  auto res = Resolve(host, port, true);
  if (!res.ok()) return res.status();
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for ", host));
  for (addrinfo* a = *res; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 4) != 0) {
      last = Errno(absl::StrCat("listen on ", host, ":", port));
      close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    FrameListener l;
    l.fd_ = fd;
    l.port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    freeaddrinfo(*res);
    return l;
  }
  freeaddrinfo(*res);
  return last;
}

absl::StatusOr<FrameSocket> FrameListener::Accept(std::chrono::milliseconds timeout) {
  if (fd_ < 0) return absl::UnavailableError("not listening");
  if (absl::Status s = WaitFor(fd_, POLLIN, Clock::now() + timeout); !s.ok()) return s;
  const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return Errno("accept");
  Tune(fd);
  return FrameSocket(fd);
}

}  // namespace k3::net
