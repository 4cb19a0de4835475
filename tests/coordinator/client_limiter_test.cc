// The per-client concurrency limit (--max-concurrent-per-client): counting, refusing at once
// past the limit, giving the count back however a lease ends, and who a client is.
#include "coordinator/server/client_limiter.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace k3::coord {
namespace {

TEST(ClientLimiter, RefusesPastTheLimitAtOnceAndPerClient) {
  ClientLimiter limiter(2);
  auto a1 = limiter.Acquire("10.0.0.1", "10.0.0.1");
  auto a2 = limiter.Acquire("10.0.0.1", "10.0.0.1");
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto a3 = limiter.Acquire("10.0.0.1", "10.0.0.1");
  ASSERT_FALSE(a3.ok());
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(a3.status().message(), "client 10.0.0.1 already has 2 requests in flight"))
      << a3.status();
  EXPECT_TRUE(absl::StrContains(a3.status().message(), "--max-concurrent-per-client")) << a3.status();
  // Another client is not affected.
  auto b1 = limiter.Acquire("10.0.0.2", "10.0.0.2");
  EXPECT_TRUE(b1.ok());
  EXPECT_EQ(limiter.in_flight("10.0.0.1"), 2);
  EXPECT_EQ(limiter.in_flight("10.0.0.2"), 1);
  EXPECT_EQ(limiter.clients(), 2u);
}

TEST(ClientLimiter, EveryWayALeaseEndsGivesTheCountBack) {
  ClientLimiter limiter(1);
  {
    auto a = limiter.Acquire("c", "c");
    ASSERT_TRUE(a.ok());
    EXPECT_FALSE(limiter.Acquire("c", "c").ok());
  }  // destroyed (the handler returned: finished, failed, cancelled)
  EXPECT_EQ(limiter.in_flight("c"), 0);
  auto a = limiter.Acquire("c", "c");
  ASSERT_TRUE(a.ok());
  a->Release();  // released early, then destroyed: counted once
  a->Release();
  EXPECT_EQ(limiter.in_flight("c"), 0);
  auto b = limiter.Acquire("c", "c");
  ASSERT_TRUE(b.ok());
  ClientLimiter::Lease moved = std::move(*b);  // a moved-from lease holds nothing
  EXPECT_EQ(limiter.in_flight("c"), 1);
  ClientLimiter::Lease other;
  other = std::move(moved);
  EXPECT_EQ(limiter.in_flight("c"), 1);
  other = ClientLimiter::Lease();  // assigning over a lease releases it
  EXPECT_EQ(limiter.in_flight("c"), 0);
  // Clients with nothing in flight leave the map: it does not grow with every address seen.
  EXPECT_EQ(limiter.clients(), 0u);
}

TEST(ClientLimiter, ZeroMeansNoLimit) {
  ClientLimiter limiter(0);
  std::vector<ClientLimiter::Lease> leases;
  for (int i = 0; i < 1000; ++i) {
    auto l = limiter.Acquire("c", "c");
    ASSERT_TRUE(l.ok());
    leases.push_back(std::move(*l));
  }
  EXPECT_EQ(limiter.in_flight("c"), 1000);
  leases.clear();
  EXPECT_EQ(limiter.in_flight("c"), 0);
}

TEST(ClientLimiter, ConcurrentAcquireNeverExceedsTheLimit) {
  ClientLimiter limiter(3);
  std::atomic<int> peak{0}, now{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto l = limiter.Acquire("c", "c");
        if (!l.ok()) continue;
        const int n = ++now;
        int p = peak.load();
        while (n > p && !peak.compare_exchange_weak(p, n)) {
        }
        --now;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), 3);
  EXPECT_EQ(limiter.in_flight("c"), 0);
}

TEST(ClientFromPeer, StripsThePort) {
  EXPECT_EQ(ClientFromPeer("ipv4:127.0.0.1:51234"), "127.0.0.1");
  EXPECT_EQ(ClientFromPeer("ipv4:10.1.2.3:80"), "10.1.2.3");
  EXPECT_EQ(ClientFromPeer("ipv6:[::1]:51234"), "::1");
  EXPECT_EQ(ClientFromPeer("ipv6:%5B::1%5D:51234"), "::1");
  EXPECT_EQ(ClientFromPeer("ipv6:[fe80::1%25eth0]:9"), "fe80::1%25eth0");
  EXPECT_EQ(ClientFromPeer("unix:/tmp/k3.sock"), "unix:/tmp/k3.sock");
  EXPECT_EQ(ClientFromPeer(""), "");
  // Two connections of one host are one client.
  EXPECT_EQ(ClientFromPeer("ipv4:192.168.0.7:1000"), ClientFromPeer("ipv4:192.168.0.7:2000"));
}

}  // namespace
}  // namespace k3::coord
