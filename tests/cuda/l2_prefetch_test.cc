// L2Prefetch: the requests are valid on real sizes (a range of many pieces with a ragged tail, two
// ranges, one piece, nothing) and change no byte; unaligned ranges are refused before launching.
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/l2_prefetch/l2_prefetch.h"
#include "tests/cuda/cuda_test_util.h"

namespace k3::cuda::testing {
namespace {

TEST(L2PrefetchTest, FetchesRangesAndChangesNothing) {
  K3_REQUIRE_GPU();
  const size_t bytes = (size_t{24} << 20) + 4096 + 48;  // 24 MiB and a ragged tail: 386 requests
  std::vector<uint8_t> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  DeviceBuffer<uint8_t> d(host);
  const uint8_t* p = d.get();
  K3_ASSERT_LAUNCH(L2Prefetch({p, bytes}, {nullptr, 0}, nullptr));
  K3_ASSERT_LAUNCH(L2Prefetch({p, 1 << 20}, {p + (8 << 20), (3 << 20) + 16}, nullptr));
  K3_ASSERT_LAUNCH(L2Prefetch({p + 16, 16}, {nullptr, 0}, nullptr));  // one piece of 16 bytes
  K3_ASSERT_LAUNCH(L2Prefetch({p, 15}, {nullptr, 0}, nullptr));       // under 16 bytes: nothing
  K3_ASSERT_LAUNCH(L2Prefetch({nullptr, 0}, {nullptr, 0}, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> back = d.Download();
  EXPECT_EQ(0, std::memcmp(back.data(), host.data(), bytes));
}

TEST(L2PrefetchTest, RejectsUnalignedRanges) {
  K3_REQUIRE_GPU();
  DeviceBuffer<uint8_t> d(4096);
  EXPECT_EQ(L2Prefetch({d.get() + 8, 1024}, {nullptr, 0}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(L2Prefetch({d.get(), 1024}, {d.get() + 4, 64}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // nothing was launched
}

}  // namespace
}  // namespace k3::cuda::testing
