// The ternary form of IQ1_S (kernels/cuda/quant_gemv/iq1s_ternary.h):
//   - read back by a decoder written from the header's layout, it gives exactly the values of the
//     CPU's IQ1_S decoder (quant::DequantizeRow), and its row padding is zero;
//   - the GPU repack writes the host repack's bytes;
//   - the GEMV on it (QuantGemvParams::iq1s_ternary: plain, gate|up with situ, expert-grouped)
//     writes bit for bit what the same product on the ggml rows writes, y poisoned with NaN
//     before each launch (padding included), so every output written and nothing else.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/quant_gemv/iq1s_ternary.h"
#include "kernels/cuda/quant_gemv/quant_gemv.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/half.h"
#include "kernels/quant/iq_tables.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/expert_passes.h"
#include "tests/cuda/quant_random.h"

namespace k3::cuda::testing {
namespace {

using quant::GgmlType;

constexpr float kBeta = 4.0f, kLambda = 25.0f;  // K3's situ_beta, situ_linear_beta

// One ternary row back to floats, as the header describes the layout; the products and order of
// quant::DequantizeRow's IQ1_S decoder (dl = d·(2·ls + 1), then dl·(g + δ)).
std::vector<float> DecodeTernaryRow(const uint8_t* row, int64_t cols) {
  std::vector<float> out(cols);
  for (int64_t b = 0; b < cols / 256; ++b) {
    const uint8_t* blk = row + kIq1sTernaryBlockBytes * b;
    uint32_t words[16], meta;
    uint16_t d_bits;
    std::memcpy(words, blk, 64);
    std::memcpy(&meta, blk + 64, 4);
    std::memcpy(&d_bits, blk + 68, 2);
    const float d = quant::F16ToF32(d_bits);
    for (int w = 0; w < 256; ++w) {
      const int j = w / 16, i = (w % 16) / 4, m = w % 4, ib = w / 32;
      const int g = static_cast<int>((words[j] >> (8 * m + 2 * i)) & 3u) - 1;
      const uint32_t nib = (meta >> (4 * ib)) & 15u;
      const float dl = d * static_cast<float>(2 * (nib & 7u) + 1);
      const float delta = (nib & 8u) ? -quant::kIq1sDelta : quant::kIq1sDelta;
      out[256 * b + w] = dl * (static_cast<float>(g) + delta);
    }
  }
  return out;
}

TEST(Iq1sTernaryTest, RowBytesPutRowsAnOddNumberOfWordsApart) {
  EXPECT_EQ(Iq1sTernaryRowBytes(3584), 14 * 72 + 8);
  EXPECT_EQ(Iq1sTernaryRowBytes(3072), 12 * 72 + 8);
  EXPECT_EQ(Iq1sTernaryRowBytes(3328), 13 * 72);
  EXPECT_EQ(Iq1sTernaryRowBytes(256), 72);
  for (int64_t cols = 256; cols <= 8192; cols += 256) EXPECT_EQ(Iq1sTernaryRowBytes(cols) / 8 % 2, 1) << cols;
}

TEST(Iq1sTernaryTest, HostFormDecodesToTheIq1sValues) {
  std::mt19937_64 rng(5);
  for (int64_t cols : {256, 3072, 3328, 3584}) {
    const int64_t rows = 9;
    const auto src = RandomQuantRows(GgmlType::kIQ1_S, rows, cols, rng);
    const int64_t tb = Iq1sTernaryRowBytes(cols), gb = cols / 256 * 50;
    std::vector<uint8_t> t(static_cast<size_t>(rows * tb), 0xAB);
    Iq1sToTernaryHost(src.data(), rows, cols, t.data());
    std::vector<float> want(cols);
    int64_t bad = 0, pad_nonzero = 0;
    for (int64_t r = 0; r < rows; ++r) {
      quant::DequantizeRow(GgmlType::kIQ1_S, src.data() + r * gb, want.data(), cols);
      const std::vector<float> got = DecodeTernaryRow(t.data() + r * tb, cols);
      bad += std::memcmp(got.data(), want.data(), cols * sizeof(float)) != 0;
      for (int64_t k = cols / 256 * kIq1sTernaryBlockBytes; k < tb; ++k) pad_nonzero += t[r * tb + k] != 0;
      for (int64_t b = 0; b < cols / 256; ++b) {  // each block's last two bytes are zero
        pad_nonzero += t[r * tb + 72 * b + 70] != 0 || t[r * tb + 72 * b + 71] != 0;
      }
    }
    EXPECT_EQ(bad, 0) << cols << " columns: rows whose values differ";
    EXPECT_EQ(pad_nonzero, 0) << cols << " columns";
  }
}

TEST(Iq1sTernaryTest, GpuRepackWritesTheHostBytes) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(6);
  for (int64_t cols : {3584, 3328, 256}) {
    const int64_t rows = 97;
    const auto src = RandomQuantRows(GgmlType::kIQ1_S, rows, cols, rng);
    std::vector<uint8_t> want(static_cast<size_t>(rows * Iq1sTernaryRowBytes(cols)));
    Iq1sToTernaryHost(src.data(), rows, cols, want.data());
    DeviceBuffer<uint8_t> d_src(src), d_dst(want.size());
    d_dst.Poison();
    K3_ASSERT_LAUNCH(Iq1sToTernary({d_src.get(), d_dst.get(), rows, cols}, nullptr));
    const std::vector<uint8_t> got = d_dst.Download();
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size())) << cols << " columns";
  }
  DeviceBuffer<uint8_t> buf(1024);
  EXPECT_EQ(Iq1sToTernary({buf.get(), buf.get(), 1, 100}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(Iq1sToTernary({buf.get(), buf.get() + 4, 1, 256}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(Iq1sToTernary({nullptr, buf.get(), 1, 256}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(Iq1sToTernary({buf.get(), buf.get(), 0, 256}, nullptr), cudaSuccess);
}

// n_pool random IQ1_S matrices of rows x cols, as ggml stacks and as their ternary stacks (each
// matrix at a 256-byte multiple).
struct Pools {
  int64_t rows = 0, cols = 0, n_pool = 0;
  size_t g_row = 0, g_stride = 0, t_row = 0, t_stride = 0;
  std::vector<uint8_t> ggml, ternary;
};
Pools MakePools(int64_t rows, int64_t cols, int64_t n_pool, std::mt19937_64& rng) {
  Pools p;
  p.rows = rows;
  p.cols = cols;
  p.n_pool = n_pool;
  p.g_row = static_cast<size_t>(cols / 256 * 50);
  p.t_row = static_cast<size_t>(Iq1sTernaryRowBytes(cols));
  p.g_stride = (p.g_row * rows + 255) / 256 * 256;
  p.t_stride = (p.t_row * rows + 255) / 256 * 256;
  p.ggml.assign(p.g_stride * n_pool, 0);
  p.ternary.assign(p.t_stride * n_pool, 0);
  for (int64_t m = 0; m < n_pool; ++m) {
    const auto w = RandomQuantRows(GgmlType::kIQ1_S, rows, cols, rng);
    std::copy_n(w.begin(), p.g_row * rows, p.ggml.begin() + m * p.g_stride);
    Iq1sToTernaryHost(w.data(), rows, cols, p.ternary.data() + m * p.t_stride);
  }
  return p;
}

// The ggml-form product's parameters and their ternary twin.
struct Twin {
  QuantGemvParams ggml, ternary;
};
Twin MakeTwin(const Pools& p, const void* g, const void* t, const float* x, float* y_g, float* y_t) {
  Twin tw;
  QuantGemvParams& q = tw.ggml;
  q.type = GgmlType::kIQ1_S;
  q.weight = g;
  q.rows = p.rows;
  q.cols = p.cols;
  q.row_bytes = p.g_row;
  q.mat_stride_bytes = static_cast<int64_t>(p.g_stride);
  q.x = x;
  q.y = y_g;
  q.int8_x = true;
  tw.ternary = q;
  tw.ternary.weight = t;
  tw.ternary.y = y_t;
  tw.ternary.row_bytes = p.t_row;
  tw.ternary.mat_stride_bytes = static_cast<int64_t>(p.t_stride);
  tw.ternary.iq1s_ternary = true;
  return tw;
}

struct PlainCase {
  int64_t rows, cols, n_tokens, n_mats, n_pool;
  bool shared_x;
};

void RunPlain(const PlainCase& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "rows " << c.rows << " cols " << c.cols << " tokens " << c.n_tokens
                                    << " mats " << c.n_mats << "/" << c.n_pool);
  std::mt19937_64 rng(seed);
  const Pools pools = MakePools(c.rows, c.cols, c.n_pool, rng);
  const Pools up = MakePools(c.rows, c.cols, c.n_pool, rng);
  std::vector<int32_t> ids(c.n_mats);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % c.n_pool);
  const int64_t x_stride = c.cols + 4, y_stride = c.rows + 3;
  const std::vector<float> x = Normal(rng, (c.shared_x ? 1 : c.n_mats) * c.n_tokens * x_stride, 0.0, 1.0);
  DeviceBuffer<uint8_t> d_g(pools.ggml), d_t(pools.ternary), d_up_g(up.ggml), d_up_t(up.ternary);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<int32_t> d_ids(ids);
  const size_t y_floats = static_cast<size_t>(c.n_mats * c.n_tokens * y_stride);
  DeviceBuffer<float> d_yg(y_floats), d_yt(y_floats);
  Twin tw = MakeTwin(pools, d_g.get(), d_t.get(), d_x.get(), d_yg.get(), d_yt.get());
  for (QuantGemvParams* q : {&tw.ggml, &tw.ternary}) {
    q->n_mats = c.n_mats;
    q->mat_ids = d_ids.get();
    q->x_stride = x_stride;
    q->x_mat_stride = c.shared_x ? 0 : c.n_tokens * x_stride;
    q->y_stride = y_stride;
    q->y_mat_stride = c.n_tokens * y_stride;
    q->n_tokens = c.n_tokens;
  }
  auto same = [&](const char* what) {
    const std::vector<float> a = d_yg.Download(), b = d_yt.Download();
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), y_floats * sizeof(float))) << what;
    int64_t unwritten = 0;
    for (int64_t s = 0; s < c.n_mats * c.n_tokens; ++s) {
      for (int64_t r = 0; r < c.rows; ++r) unwritten += std::isnan(b[s * y_stride + r]);
    }
    EXPECT_EQ(unwritten, 0) << what;
  };
  d_yg.Poison();
  d_yt.Poison();
  K3_ASSERT_LAUNCH(QuantGemv(tw.ggml, nullptr));
  K3_ASSERT_LAUNCH(QuantGemv(tw.ternary, nullptr));
  same("plain");

  // gate|up with situ: up from its own random stacks
  ASSERT_TRUE(QuantGemvGateUpSupports(tw.ternary));
  d_yg.Poison();
  d_yt.Poison();
  K3_ASSERT_LAUNCH(QuantGemvGateUpSitu(QuantGemvGateUpParams{tw.ggml, d_up_g.get(), kBeta, kLambda}, nullptr));
  K3_ASSERT_LAUNCH(QuantGemvGateUpSitu(QuantGemvGateUpParams{tw.ternary, d_up_t.get(), kBeta, kLambda}, nullptr));
  same("gate|up");
}

TEST(Iq1sTernaryTest, GemvMatchesTheGgmlRowsBitForBit) {
  K3_REQUIRE_GPU();
  RunPlain({3072, 3584, 1, 16, 24, true}, 11);    // K3's gate|up at batch 1: one latent row for all
  RunPlain({3584, 3072, 1, 16, 24, false}, 12);   // K3's down: each expert its own x
  RunPlain({97, 3328, 2, 6, 9, false}, 13);       // 13 blocks (no row padding); last tiles of 33 and 1 rows (cp.async)
  RunPlain({64, 3584, 1, 40, 48, false}, 14);     // ranges crossing matrices: x re-read
  RunPlain({256, 256, 1, 4, 32, true}, 15);       // the golden model's expert shape (one block a row)
}

// The expert-grouped form on the ternary stacks against the ggml stacks' grouped launches (which
// are bit for bit the per-pair launches: quant_gemv_test's Iq1sGroupedMatchesPerPairLaunches).
void RunGrouped(int64_t rows, int64_t cols, int64_t n_pool, int64_t n_groups, int64_t n_x, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "grouped rows " << rows << " cols " << cols);
  std::mt19937_64 rng(seed);
  const Pools gate = MakePools(rows, cols, n_pool, rng);
  const Pools up = MakePools(rows, cols, n_pool, rng);
  const ExpertPasses ep = RandomExpertPasses(n_pool, n_groups, n_x, 5, rng);
  const int64_t n_pos = static_cast<int64_t>(ep.x_rows.size()), n_passes = static_cast<int64_t>(ep.pass_mat.size());
  const int64_t x_stride = cols + 4, y_stride = rows + 3;
  const std::vector<float> x = Normal(rng, n_x * x_stride, 0.0, 0.5);
  DeviceBuffer<uint8_t> d_gg(gate.ggml), d_gt(gate.ternary), d_ug(up.ggml), d_ut(up.ternary);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<int32_t> d_x_rows(ep.x_rows), d_mat(ep.pass_mat), d_row0(ep.pass_row0), d_n(ep.pass_n);
  DeviceBuffer<int32_t> d_count(std::vector<int32_t>{static_cast<int32_t>(n_passes)});
  const size_t y_floats = static_cast<size_t>(n_pos * y_stride);
  DeviceBuffer<float> d_yg(y_floats), d_yt(y_floats);
  Twin tw = MakeTwin(gate, d_gg.get(), d_gt.get(), d_x.get(), d_yg.get(), d_yt.get());
  for (QuantGemvParams* q : {&tw.ggml, &tw.ternary}) {
    q->x_stride = x_stride;
    q->y_stride = y_stride;
  }
  ASSERT_TRUE(QuantGemvGroupedSupports(tw.ternary));
  const QuantGemvPasses passes{d_count.get(), d_mat.get(), d_row0.get(), d_n.get(), d_x_rows.get(), n_passes + 3};
  auto same = [&](const char* what) {
    const std::vector<float> a = d_yg.Download(), b = d_yt.Download();
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), y_floats * sizeof(float))) << what;
    int64_t nan_rows = 0;
    for (int64_t p = 0; p < n_pos; ++p) nan_rows += std::isnan(b[p * y_stride]);
    EXPECT_EQ(nan_rows, 0) << what;
  };
  d_yg.Poison();
  d_yt.Poison();
  K3_ASSERT_LAUNCH(QuantGemvGrouped(tw.ggml, passes, nullptr));
  K3_ASSERT_LAUNCH(QuantGemvGrouped(tw.ternary, passes, nullptr));
  same("plain");
  d_yg.Poison();
  d_yt.Poison();
  K3_ASSERT_LAUNCH(QuantGemvGateUpSituGrouped(QuantGemvGateUpParams{tw.ggml, d_ug.get(), kBeta, kLambda}, passes,
                                              nullptr));
  K3_ASSERT_LAUNCH(QuantGemvGateUpSituGrouped(QuantGemvGateUpParams{tw.ternary, d_ut.get(), kBeta, kLambda}, passes,
                                              nullptr));
  same("gate|up");
}

TEST(Iq1sTernaryTest, GroupedMatchesTheGgmlRowsBitForBit) {
  K3_REQUIRE_GPU();
  RunGrouped(3072, 3584, 40, 30, 16, 21);  // K3's gate|up shape
  RunGrouped(3584, 3072, 24, 20, 64, 22);  // K3's down shape
  RunGrouped(97, 3328, 9, 11, 5, 23);      // 13 blocks a row, a last tile of 1 row
}

TEST(Iq1sTernaryTest, GemvRejectsWhatOnlyTheGgmlFormTakes) {
  K3_REQUIRE_GPU();
  DeviceBuffer<uint8_t> w(static_cast<size_t>(Iq1sTernaryRowBytes(4096) * 64 + 64));
  DeviceBuffer<float> x(4096), y(64);
  QuantGemvParams p;
  p.type = GgmlType::kIQ1_S;
  p.weight = w.get();
  p.rows = 64;
  p.cols = 3584;
  p.row_bytes = static_cast<size_t>(Iq1sTernaryRowBytes(3584));
  p.x = x.get();
  p.x_stride = 4096;
  p.y = y.get();
  p.y_stride = 64;
  p.n_tokens = 1;
  p.int8_x = true;
  p.iq1s_ternary = true;
  EXPECT_EQ(QuantGemv(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  QuantGemvParams q = p;
  q.int8_x = false;  // the exact path reads ggml rows only
  EXPECT_EQ(QuantGemv(q, nullptr), cudaErrorInvalidValue);
  q = p;
  q.iq1s_row_lanes = false;
  EXPECT_EQ(QuantGemv(q, nullptr), cudaErrorInvalidValue);
  q = p;
  q.row_bytes = 14 * 50;  // ggml's row bytes
  EXPECT_EQ(QuantGemv(q, nullptr), cudaErrorInvalidValue);
  q = p;
  q.cols = 4096;  // 16 blocks: wider than the lane-per-row kernel takes, and no other kernel reads the form
  q.row_bytes = static_cast<size_t>(Iq1sTernaryRowBytes(4096));
  EXPECT_EQ(QuantGemv(q, nullptr), cudaErrorInvalidValue);
  q = p;
  q.type = GgmlType::kQ8_0;
  q.row_bytes = 3584 / 32 * 34;
  EXPECT_EQ(QuantGemv(q, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace k3::cuda::testing
