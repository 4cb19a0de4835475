// MlaDecode against k3::cpu::MlaAttention: paged 576-wide cache (f32 and f16; pages scattered in
// a pool through the block table), 96 heads, several sequences of different lengths, split counts
// from one to more splits than tiles. Outputs are convex combinations of cached rows: within
// 2e-5 of the largest |row value| (f32 sums vs the CPU's double).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/mla_attention.h"
#include "kernels/cuda/mla/mla_decode.h"
#include "kernels/quant/half.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/mla_test_pool.h"

namespace k3::cuda::testing {
namespace {

struct MlaCase {
  std::vector<int64_t> lens;
  int64_t n_heads;
  MlaCacheType type;
  int n_splits;  // 0: MlaDecodeSplits
  int64_t page_size = 64;
};

void RunMla(const MlaCase& c, uint64_t seed) {
  const int64_t n_seqs = static_cast<int64_t>(c.lens.size());
  SCOPED_TRACE(::testing::Message() << "seqs " << n_seqs << " first len " << c.lens[0] << " heads " << c.n_heads
                                    << " f16 " << (c.type == MlaCacheType::kF16) << " splits " << c.n_splits);
  std::mt19937_64 rng(seed);
  const int64_t RW = kMlaRow, VW = kKvLora, ps = c.page_size;
  const int64_t row_stride = RW + 8, page_stride = ps * row_stride + 64;
  int64_t max_pages = 0, total_pages = 0;
  for (int64_t len : c.lens) {
    max_pages = std::max(max_pages, (len + ps - 1) / ps);
    total_pages += (len + ps - 1) / ps;
  }
  const int64_t pool_pages = total_pages + 3;
  MlaTestPool pool;
  FillMlaTestPool(rng, pool_pages, page_stride, c.type, &pool);
  const int64_t bt_stride = max_pages + 1;
  std::vector<int32_t> table(n_seqs * bt_stride, -1), lens32(n_seqs);
  int64_t next = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    lens32[s] = static_cast<int32_t>(c.lens[s]);
    for (int64_t pg = 0; pg < (c.lens[s] + ps - 1) / ps; ++pg) table[s * bt_stride + pg] = pool.order[next++];
  }
  const int64_t q_stride = c.n_heads * RW + 4, out_stride = c.n_heads * VW + 8;
  const auto q = Normal(rng, n_seqs * q_stride, 0.0, 1.0);
  const int64_t max_len = *std::max_element(c.lens.begin(), c.lens.end());
  const int splits = c.n_splits > 0 ? c.n_splits : MlaDecodeSplits(n_seqs, c.n_heads, max_len);

  DeviceBuffer<int32_t> d_table(table), d_lens(lens32);
  DeviceBuffer<float> d_q(q), d_out(n_seqs * out_stride), d_ws(MlaDecodeWorkspaceFloats(n_seqs, c.n_heads, VW, splits));
  d_out.Poison();
  d_ws.Poison();
  MlaDecodeParams p;
  p.q = d_q.get();
  p.q_seq_stride = q_stride;
  p.cache = pool.device(c.type);
  p.cache_type = c.type;
  p.page_stride = page_stride;
  p.row_stride = row_stride;
  p.page_size = ps;
  p.block_table = d_table.get();
  p.block_table_stride = bt_stride;
  p.seq_lens = d_lens.get();
  p.n_seqs = n_seqs;
  p.n_heads = c.n_heads;
  p.row_width = RW;
  p.value_width = VW;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kQkHeadDim));
  p.out = d_out.get();
  p.out_seq_stride = out_stride;
  p.n_splits = splits;
  p.workspace = d_ws.get();
  K3_ASSERT_LAUNCH(MlaDecode(p, nullptr));
  const auto out = d_out.Download();

  std::vector<float> got, ref;
  for (int64_t s = 0; s < n_seqs; ++s) {
    std::vector<const float*> pages;
    for (int64_t pg = 0; pg < (c.lens[s] + ps - 1) / ps; ++pg)
      pages.push_back(pool.values.data() + table[s * bt_stride + pg] * page_stride);
    std::vector<float> o(c.n_heads * VW);
    cpu::MlaAttention({&q[s * q_stride], pages.data(), ps, row_stride, c.lens[s], RW, VW, c.n_heads, p.scale, o.data()});
    ref.insert(ref.end(), o.begin(), o.end());
    got.insert(got.end(), out.begin() + s * out_stride, out.begin() + s * out_stride + c.n_heads * VW);
    for (int64_t i = c.n_heads * VW; i < out_stride; ++i) EXPECT_TRUE(std::isnan(out[s * out_stride + i])) << "padding written";
  }
  EXPECT_TRUE(AllClose(got, std::vector<double>(ref.begin(), ref.end()), 0.0, 1e-4));
}

TEST(CudaMlaDecodeTest, K3HeadsF32Cache) {
  K3_REQUIRE_GPU();
  RunMla({{1000, 37, 1}, kHeads, MlaCacheType::kF32, 0}, 1);
  RunMla({{1000, 37, 1}, kHeads, MlaCacheType::kF32, 1}, 2);
  RunMla({{1000, 37, 1}, kHeads, MlaCacheType::kF32, 50}, 3);  // more splits than tiles: empty splits
}

TEST(CudaMlaDecodeTest, K3HeadsF16Cache) {
  K3_REQUIRE_GPU();
  RunMla({{777, 64, 129}, kHeads, MlaCacheType::kF16, 0}, 4);
  RunMla({{8192}, kHeads, MlaCacheType::kF16, 0}, 5);
}

TEST(CudaMlaDecodeTest, FewHeadsOddPages) {
  K3_REQUIRE_GPU();
  RunMla({{300, 5}, 4, MlaCacheType::kF32, 0, 16}, 6);   // golden model: 4 heads
  RunMla({{100}, 20, MlaCacheType::kF16, 3, 7}, 7);      // heads not a multiple of 16, odd page size
}

// More splits than the combine holds factors for: refused, nothing launched.
TEST(CudaMlaDecodeTest, RejectsTooManySplits) {
  K3_REQUIRE_GPU();
  MlaDecodeParams p{};
  p.n_seqs = 1;
  p.n_heads = 1;
  p.n_splits = 8193;
  EXPECT_EQ(MlaDecode(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace k3::cuda::testing
