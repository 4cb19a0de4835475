#include "coordinator/server/client_limiter.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace k3::coord {

ClientLimiter::Lease& ClientLimiter::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    limiter_ = other.limiter_;
    client_ = std::move(other.client_);
    other.limiter_ = nullptr;
  }
  return *this;
}

void ClientLimiter::Lease::Release() {
  if (limiter_ != nullptr) limiter_->Release(client_);
  limiter_ = nullptr;
}

absl::StatusOr<ClientLimiter::Lease> ClientLimiter::Acquire(const std::string& client, std::string_view label) {
  std::lock_guard<std::mutex> l(mu_);
  int64_t& n = in_flight_[client];
  if (max_ > 0 && n >= max_) {
    return absl::ResourceExhaustedError(absl::StrCat("client ", std::string(label), " already has ", n,
                                                     " requests in flight, the most one client may have "
                                                     "(--max-concurrent-per-client); retry when one ends"));
  }
  ++n;
  return Lease(this, client);
}

void ClientLimiter::Release(const std::string& client) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = in_flight_.find(client);
  if (it == in_flight_.end()) return;
  if (--it->second <= 0) in_flight_.erase(it);  // no entry per client ever seen: the map stays small
}

int64_t ClientLimiter::in_flight(const std::string& client) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = in_flight_.find(client);
  return it == in_flight_.end() ? 0 : it->second;
}

size_t ClientLimiter::clients() const {
  std::lock_guard<std::mutex> l(mu_);
  return in_flight_.size();
}

std::string ClientFromPeer(std::string_view peer) {
  if (peer.starts_with("ipv4:")) {
    const std::string_view rest = peer.substr(5);
    return std::string(rest.substr(0, rest.rfind(':')));  // npos: the whole rest
  }
  if (peer.starts_with("ipv6:")) {
    // gRPC writes "[::1]:5123"; newer versions %-escape the brackets ("%5B::1%5D:5123").
    const std::string s = absl::StrReplaceAll(std::string(peer.substr(5)), {{"%5B", "["}, {"%5D", "]"}, {"%5b", "["}, {"%5d", "]"}});
    const size_t close = s.find(']');
    if (!s.empty() && s[0] == '[' && close != std::string::npos) return s.substr(1, close - 1);
    return s;
  }
  return std::string(peer);
}

}  // namespace k3::coord
