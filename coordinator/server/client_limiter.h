// Requests in flight per client, so one client cannot take every slot and the whole queue
// (--max-queue) from the others. A client is its auth token when auth is on (every holder of
// the shared token is then one client), else the address it connects from (ClientFromPeer).
// Acquire answers at once: RESOURCE_EXHAUSTED past the limit, never a wait. The count is held
// by a Lease and given back when the lease ends, however the request ends.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace k3::coord {

class ClientLimiter {
 public:
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept : limiter_(other.limiter_), client_(std::move(other.client_)) { other.limiter_ = nullptr; }
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Release(); }
    void Release();

   private:
    friend class ClientLimiter;
    Lease(ClientLimiter* limiter, std::string client) : limiter_(limiter), client_(std::move(client)) {}
    ClientLimiter* limiter_ = nullptr;  // null: holds nothing
    std::string client_;
  };

  // 0: no limit (leases are still counted, for in_flight()).
  explicit ClientLimiter(int64_t max_per_client) : max_(max_per_client) {}

  // `label` names the client in the message (an address; never the token).
  absl::StatusOr<Lease> Acquire(const std::string& client, std::string_view label);

  int64_t in_flight(const std::string& client) const;
  size_t clients() const;  // clients with a request in flight (entries are dropped at 0)
  int64_t limit() const { return max_; }

 private:
  void Release(const std::string& client);

  const int64_t max_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> in_flight_;
};

// The client part of grpc::ServerContext::peer(): "ipv4:10.0.0.5:5123" -> "10.0.0.5",
// "ipv6:[::1]:5123" (or its %-escaped form) -> "::1"; other forms (unix:..., inproc) as they are.
std::string ClientFromPeer(std::string_view peer);

}  // namespace k3::coord
