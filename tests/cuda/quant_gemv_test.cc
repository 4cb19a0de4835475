// QuantGemv against k3::quant::MatMul (the CPU reference) on random weights of every type and on
// the real K3 shapes (7168 -> 12288 and 12288 -> 7168 Q8_0, the F32 router, 3584 <-> 3072 IQ1_S
// experts batched through mat_ids). y is poisoned with NaN, including the padding between rows
// (y_stride > rows), which must stay NaN: every output written, nothing else.
//
// Tolerance per output: 3e-5 · Σ_c |w_c x_c| (f32 sums in two different orders differ by a few
// 1e-7 of that; one wrong weight moves the result by about 1/cols of it, i.e. 1e-4 at 7168).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/activation.h"
#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/quant_gemv/quant_gemv.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/dot.h"
#include "kernels/quant/half.h"
#include "kernels/quant/iq_tables.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/expert_passes.h"
#include "tests/cuda/quant_random.h"

namespace k3::cuda::testing {
namespace {

using quant::GgmlType;

struct Case {
  GgmlType type;
  int64_t rows, cols, n_tokens;
  int64_t n_mats = 1;   // slots in the launch
  int64_t n_pool = 1;   // distinct matrices in memory (slots pick through mat_ids when > 1)
  bool shared_x = true; // every slot reads the same x
  bool int8_x = false;  // IQ1_S: x rounded to int8 per 32 columns (QuantGemvParams::int8_x)
  bool row_lanes = true;  // int8_x: the lane-per-row kernel where it applies (QuantGemvParams::iq1s_row_lanes)
};

// The int8-activation IQ1_S product of one row and one token, in double (the kernel's function):
// per 32 columns x is rounded to q = rn(x·(127/amax)) in f32 with scale sx = amax/127, and the
// sub-block is dl·(sx·Σ g·q + δ·Σx). `bound` gets 3e-5 of the sum of the terms' magnitudes.
double Iq1sInt8XRow(const uint8_t* row, int64_t cols, const float* x, double* bound) {
  double y = 0, mag = 0;
  for (int64_t b = 0; b < cols / 256; ++b, row += 50) {
    const float d = quant::F16ToF32(static_cast<uint16_t>(row[0] | row[1] << 8));
    for (int ib = 0; ib < 8; ++ib) {
      const float* xs = x + 256 * b + 32 * ib;
      const uint16_t qh = static_cast<uint16_t>(row[34 + 2 * ib] | row[35 + 2 * ib] << 8);
      const double dl = d * static_cast<double>(2 * ((qh >> 12) & 7) + 1);
      const double delta = (qh & 0x8000) ? -quant::kIq1sDelta : quant::kIq1sDelta;
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xs[j]));
      const float sx = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
      double gq = 0, gq_abs = 0, xsum = 0, x_abs = 0;
      for (int l = 0; l < 4; ++l) {
        const int idx = row[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
        for (int k = 0; k < 8; ++k) {
          const int g = static_cast<int8_t>(static_cast<uint8_t>(quant::kIq1sGrid[idx] >> (8 * k)));
          const float xv = xs[8 * l + k];
          const double q = std::nearbyint(xv * inv);
          gq += g * q, gq_abs += std::fabs(g * q), xsum += xv, x_abs += std::fabs(xv);
        }
      }
      y += dl * (sx * gq + delta * xsum);
      mag += std::fabs(dl) * (sx * gq_abs + std::fabs(delta) * x_abs);
    }
  }
  *bound = 3e-5 * mag + 1e-30;
  return y;
}

void RunCase(const Case& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << quant::TypeName(c.type) << " rows " << c.rows << " cols " << c.cols
                                    << " tokens " << c.n_tokens << " mats " << c.n_mats << "/" << c.n_pool);
  std::mt19937_64 rng(seed);
  const quant::TypeTraits& tr = quant::Traits(c.type);
  const size_t row_bytes = static_cast<size_t>(c.cols / tr.block_elems) * tr.block_bytes;
  const size_t mat_bytes = row_bytes * c.rows;
  const size_t mat_stride = (mat_bytes + 255) / 256 * 256;  // experts of a 3-D tensor are packed; keep 16-aligned
  std::vector<uint8_t> pool(mat_stride * c.n_pool);
  for (int64_t m = 0; m < c.n_pool; ++m) {
    const auto mat = RandomQuantRows(c.type, c.rows, c.cols, rng);
    std::copy(mat.begin(), mat.end(), pool.begin() + m * mat_stride);
  }
  std::vector<int32_t> ids(c.n_mats);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % c.n_pool);
  if (c.n_mats == 1) ids[0] = 0;
  const int64_t x_stride = c.cols + 4, y_stride = c.rows + 3;
  const int64_t x_slots = c.shared_x ? 1 : c.n_mats;
  const std::vector<float> x = Normal(rng, x_slots * c.n_tokens * x_stride, 0.0, 1.0);

  DeviceBuffer<uint8_t> d_w(pool);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<int32_t> d_ids(ids);
  DeviceBuffer<float> d_y(static_cast<size_t>(c.n_mats * c.n_tokens * y_stride));
  d_y.Poison();

  QuantGemvParams p;
  p.type = c.type;
  p.weight = d_w.get();
  p.rows = c.rows;
  p.cols = c.cols;
  p.row_bytes = row_bytes;
  p.n_mats = c.n_mats;
  p.mat_stride_bytes = static_cast<int64_t>(mat_stride);
  p.mat_ids = c.n_mats > 1 ? d_ids.get() : nullptr;
  p.x = d_x.get();
  p.x_stride = x_stride;
  p.x_mat_stride = c.shared_x ? 0 : c.n_tokens * x_stride;
  p.y = d_y.get();
  p.y_stride = y_stride;
  p.y_mat_stride = c.n_tokens * y_stride;
  p.n_tokens = c.n_tokens;
  p.int8_x = c.int8_x;
  p.iq1s_row_lanes = c.row_lanes;
  K3_ASSERT_LAUNCH(QuantGemv(p, nullptr));
  const std::vector<float> y = d_y.Download();

  std::vector<float> ref(c.n_tokens * c.rows), w(c.cols);
  std::vector<double> bound(c.n_tokens * c.rows);
  for (int64_t s = 0; s < c.n_mats; ++s) {
    const uint8_t* mat = pool.data() + ids[s] * mat_stride;
    const float* xs = x.data() + (c.shared_x ? 0 : s * c.n_tokens * x_stride);
    quant::MatMul({c.type, mat, c.rows, c.cols, row_bytes}, xs, c.n_tokens, x_stride, ref.data(), c.rows);
    for (int64_t r = 0; r < c.rows; ++r) {
      quant::DequantizeRow(c.type, mat + r * row_bytes, w.data(), c.cols);
      for (int64_t t = 0; t < c.n_tokens; ++t) {
        double a = 0;
        for (int64_t i = 0; i < c.cols; ++i) a += std::fabs(static_cast<double>(w[i]) * xs[t * x_stride + i]);
        bound[t * c.rows + r] = 3e-5 * a + 1e-30;
        if (c.int8_x) {
          ref[t * c.rows + r] = static_cast<float>(
              Iq1sInt8XRow(mat + r * row_bytes, c.cols, xs + t * x_stride, &bound[t * c.rows + r]));
        }
      }
    }
    std::vector<float> got(c.n_tokens * c.rows);
    std::vector<double> want(ref.begin(), ref.end());
    int64_t pad_written = 0;
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      const float* yt = y.data() + s * c.n_tokens * y_stride + t * y_stride;
      std::copy(yt, yt + c.rows, got.begin() + t * c.rows);
      for (int64_t r = c.rows; r < y_stride; ++r) pad_written += !std::isnan(yt[r]);
    }
    EXPECT_TRUE(AllClose(got, want, 0.0, 0.0, &bound)) << "slot " << s << " (matrix " << ids[s] << ")";
    EXPECT_EQ(pad_written, 0) << "slot " << s << ": writes past `rows`";
  }
}

TEST(QuantGemvTest, EveryTypeEveryTokenCount) {
  K3_REQUIRE_GPU();
  uint64_t seed = 1000;
  for (GgmlType type : AllGpuTypes()) {
    for (int64_t tokens : {1, 3, 16, 20}) {
      // 258 rows: a partial last tile of 4 rows; 7168 columns: the hidden width.
      RunCase({type, 258, 7168, tokens}, ++seed);
    }
  }
}

TEST(QuantGemvTest, K3ProjectionQ8_0_7168To12288) {
  K3_REQUIRE_GPU();
  RunCase({GgmlType::kQ8_0, 12288, 7168, 1}, 1);
  RunCase({GgmlType::kQ8_0, 12288, 7168, 16}, 2);
}

TEST(QuantGemvTest, K3OutputProjectionQ8_0_12288To7168) {
  K3_REQUIRE_GPU();
  RunCase({GgmlType::kQ8_0, 7168, 12288, 1}, 3);
  RunCase({GgmlType::kQ8_0, 7168, 12288, 5}, 4);
}

TEST(QuantGemvTest, K3RouterF32_7168To896) {
  K3_REQUIRE_GPU();
  RunCase({GgmlType::kF32, 896, 7168, 1}, 5);
  RunCase({GgmlType::kF32, 896, 7168, 8}, 6);
}

TEST(QuantGemvTest, K3ExpertsIQ1S_3584To3072_Batched) {
  K3_REQUIRE_GPU();
  // gate/up: 16 chosen experts (of a pool of 24) read the same latent x
  RunCase({GgmlType::kIQ1_S, 3072, 3584, 1, 16, 24, true}, 7);
  // down: 3072 -> 3584, each expert its own input row
  RunCase({GgmlType::kIQ1_S, 3584, 3072, 1, 16, 24, false}, 8);
  // a few tokens per expert
  RunCase({GgmlType::kIQ1_S, 3072, 3584, 4, 8, 12, false}, 9);
  // every pass size of the sub-block kernel (1, 2, 4, 8 token templates, partial passes), a
  // partial last item of rows, and the generic kernel above 8 tokens
  for (int64_t tokens : {2, 5, 8, 9}) RunCase({GgmlType::kIQ1_S, 3074, 3584, tokens, 3, 5, false}, 20 + tokens);
  RunCase({GgmlType::kIQ1_S, 7, 7168, 3, 2, 2, true}, 31);
  // 4 + 2 tokens (two passes of the column kernel), and rows wider than 8192 weights (left to the
  // block GEMV by QuantGemv)
  RunCase({GgmlType::kIQ1_S, 3074, 3584, 6, 3, 5, false}, 32);
  RunCase({GgmlType::kIQ1_S, 9, 9216, 1, 2, 2, false}, 33);
  RunCase({GgmlType::kIQ1_S, 9, 9216, 3, 2, 2, false}, 34);
}

// One IQ1_S matrix [rows][cols] (dense rows) with packed token rows of x and y.
QuantGemvParams PackedIq1s(const void* w, const float* x, float* y, int64_t rows, int64_t cols) {
  QuantGemvParams p;
  p.type = GgmlType::kIQ1_S;
  p.weight = w;
  p.rows = rows;
  p.cols = cols;
  p.row_bytes = static_cast<size_t>(cols / 256 * 50);
  p.x = x;
  p.x_stride = cols;
  p.y = y;
  p.y_stride = rows;
  return p;
}

// int8 activations: the same cases as the exact kernel against the int8 function, then how far
// that function is from the exact product on the real expert shape (x ~ N(0, 1): the rounding
// error of one x is at most amax/254, relative L2 of the outputs about 5e-3).
TEST(QuantGemvTest, K3ExpertsIQ1S_Int8X) {
  K3_REQUIRE_GPU();
  Case c{GgmlType::kIQ1_S, 3072, 3584, 1, 16, 24, true};
  c.int8_x = true;
  RunCase(c, 7);
  c = {GgmlType::kIQ1_S, 3584, 3072, 1, 16, 24, false};
  c.int8_x = true;
  RunCase(c, 8);
  for (int64_t tokens : {2, 5, 8}) {
    c = {GgmlType::kIQ1_S, 3074, 3584, tokens, 3, 5, false};
    c.int8_x = true;
    RunCase(c, 40 + tokens);
  }
  c = {GgmlType::kIQ1_S, 7, 7168, 3, 2, 2, true};
  c.int8_x = true;
  RunCase(c, 51);
  c = {GgmlType::kIQ1_S, 256, 256, 1, 4, 32, true};  // the golden model's expert shape
  c.int8_x = true;
  RunCase(c, 52);
  // the lane-per-row kernel's edges: 13 blocks per row (odd: a lane's block starts 2 bytes into a
  // word on every other row), a last tile of 33 rows, one of 1 row (14 blocks, its widest rows),
  // tiles of one launch spread over 40 matrices (each block's range crosses matrices: x re-read),
  // and rows of 16 blocks (wider than it takes: the sub-block kernel)
  c = {GgmlType::kIQ1_S, 97, 3328, 1, 6, 9, false};
  c.int8_x = true;
  RunCase(c, 53);
  c = {GgmlType::kIQ1_S, 129, 3584, 2, 3, 4, false};
  c.int8_x = true;
  RunCase(c, 54);
  c = {GgmlType::kIQ1_S, 64, 3584, 1, 40, 48, false};
  c.int8_x = true;
  RunCase(c, 55);
  c = {GgmlType::kIQ1_S, 65, 4096, 2, 3, 4, false};
  c.int8_x = true;
  RunCase(c, 56);
  // the sub-block kernel's int8 path, which the lane-per-row kernel replaced for these shapes
  for (int64_t tokens : {1, 3}) {
    c = {GgmlType::kIQ1_S, 3072, 3584, tokens, 16, 24, tokens == 1};
    c.int8_x = true;
    c.row_lanes = false;
    RunCase(c, 60 + tokens);
  }

  std::mt19937_64 rng(91);
  const int64_t rows = 3072, cols = 3584;
  const auto w = RandomQuantRows(GgmlType::kIQ1_S, rows, cols, rng);
  const std::vector<float> x = Normal(rng, cols, 0.0, 1.0);
  DeviceBuffer<uint8_t> d_w(w);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<float> d_y(static_cast<size_t>(rows));
  QuantGemvParams p = PackedIq1s(d_w.get(), d_x.get(), d_y.get(), rows, cols);
  p.n_tokens = 1;
  p.int8_x = true;
  K3_ASSERT_LAUNCH(QuantGemv(p, nullptr));
  const std::vector<float> y = d_y.Download();
  std::vector<float> exact(rows);
  quant::MatMul({GgmlType::kIQ1_S, w.data(), rows, cols, static_cast<size_t>(p.row_bytes)}, x.data(), 1, cols,
                exact.data(), rows);
  double num = 0, den = 0;
  for (int64_t r = 0; r < rows; ++r) {
    num += (static_cast<double>(y[r]) - exact[r]) * (static_cast<double>(y[r]) - exact[r]);
    den += static_cast<double>(exact[r]) * exact[r];
  }
  const double rel = std::sqrt(num / den);
  std::printf("int8 x vs exact, 3584 -> 3072: relative L2 %.2e\n", rel);
  EXPECT_LT(rel, 1e-2);
  EXPECT_GT(rel, 1e-5);  // the rounding is really there (not the f32 path)
}

// The fused gate|up product with the activation (QuantGemvGateUpSitu) against the three launches it
// replaces (QuantGemv on each stack, int8 x, then Situ): bit for bit, every output written and the
// padding untouched; and against the CPU (the int8 function per row, then the CPU's situ).
// n_pool random IQ1_S gate and up matrices of rows x cols each, 256-byte aligned in their stacks
// (matrix m's gate, then its up, drawn from rng).
struct GateUpPools {
  size_t row_bytes, mat_stride;
  std::vector<uint8_t> gate, up;
};
GateUpPools RandomGateUpPools(int64_t rows, int64_t cols, int64_t n_pool, std::mt19937_64& rng) {
  GateUpPools p;
  p.row_bytes = static_cast<size_t>(cols / 256 * 50);
  p.mat_stride = (p.row_bytes * rows + 255) / 256 * 256;
  p.gate.assign(p.mat_stride * n_pool, 0);
  p.up.assign(p.mat_stride * n_pool, 0);
  for (int64_t m = 0; m < n_pool; ++m) {
    const auto g = RandomQuantRows(GgmlType::kIQ1_S, rows, cols, rng);
    const auto u = RandomQuantRows(GgmlType::kIQ1_S, rows, cols, rng);
    std::copy(g.begin(), g.end(), p.gate.begin() + m * p.mat_stride);
    std::copy(u.begin(), u.end(), p.up.begin() + m * p.mat_stride);
  }
  return p;
}

struct GateUpCase {
  int64_t rows, cols, n_tokens, n_mats, n_pool;
  bool shared_x;
};

void RunGateUp(const GateUpCase& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "gate|up rows " << c.rows << " cols " << c.cols << " tokens " << c.n_tokens
                                    << " mats " << c.n_mats << "/" << c.n_pool << " shared x " << c.shared_x);
  constexpr float kBeta = 4.0f, kLambda = 25.0f;  // K3's situ_beta, situ_linear_beta
  std::mt19937_64 rng(seed);
  const GateUpPools pools = RandomGateUpPools(c.rows, c.cols, c.n_pool, rng);
  const size_t row_bytes = pools.row_bytes, mat_stride = pools.mat_stride;
  const std::vector<uint8_t>& gate = pools.gate;
  const std::vector<uint8_t>& up = pools.up;
  std::vector<int32_t> ids(c.n_mats);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % c.n_pool);
  const int64_t x_stride = c.cols + 4, y_stride = c.rows + 3;
  const int64_t x_slots = c.shared_x ? 1 : c.n_mats;
  // x ~ N(0, 0.5): gate and up values of a few units, where situ is far from linear
  const std::vector<float> x = Normal(rng, x_slots * c.n_tokens * x_stride, 0.0, 0.5);
  DeviceBuffer<uint8_t> d_gate(gate), d_up(up);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<int32_t> d_ids(ids);
  const size_t y_floats = static_cast<size_t>(c.n_mats * c.n_tokens * y_stride);
  DeviceBuffer<float> d_y(y_floats), d_g(y_floats), d_u(y_floats);
  d_y.Poison();
  d_g.Poison();
  d_u.Poison();

  QuantGemvParams p = PackedIq1s(d_gate.get(), d_x.get(), d_g.get(), c.rows, c.cols);
  p.n_mats = c.n_mats;
  p.mat_stride_bytes = static_cast<int64_t>(mat_stride);
  p.mat_ids = d_ids.get();
  p.x_stride = x_stride;
  p.x_mat_stride = c.shared_x ? 0 : c.n_tokens * x_stride;
  p.y_stride = y_stride;
  p.y_mat_stride = c.n_tokens * y_stride;
  p.n_tokens = c.n_tokens;
  p.int8_x = true;
  ASSERT_TRUE(QuantGemvGateUpSupports(p));
  K3_ASSERT_LAUNCH(QuantGemv(p, nullptr));
  QuantGemvParams pu = p;
  pu.weight = d_up.get();
  pu.y = d_u.get();
  K3_ASSERT_LAUNCH(QuantGemv(pu, nullptr));
  SituParams sp{d_g.get(), d_u.get(), d_g.get(), c.n_mats * c.n_tokens, c.rows, y_stride, y_stride, y_stride,
                kBeta, kLambda};
  K3_ASSERT_LAUNCH(Situ(sp, nullptr));
  QuantGemvGateUpParams gp{p, d_up.get(), kBeta, kLambda};
  gp.gate.y = d_y.get();
  K3_ASSERT_LAUNCH(QuantGemvGateUpSitu(gp, nullptr));
  const std::vector<float> got = d_y.Download(), three = d_g.Download();

  // the padding of the unfused output is NaN too (Situ writes rows only): compare every byte
  EXPECT_EQ(0, std::memcmp(got.data(), three.data(), y_floats * sizeof(float)));
  double num = 0, den = 0;
  int64_t pad_written = 0;
  for (int64_t s = 0; s < c.n_mats; ++s) {
    const uint8_t* g_mat = gate.data() + ids[s] * mat_stride;
    const uint8_t* u_mat = up.data() + ids[s] * mat_stride;
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      const float* xs = x.data() + ((c.shared_x ? 0 : s * c.n_tokens) + t) * x_stride;
      const float* ys = got.data() + (s * c.n_tokens + t) * y_stride;
      for (int64_t r = 0; r < c.rows; ++r) {
        double bound = 0;
        const float gv = static_cast<float>(Iq1sInt8XRow(g_mat + r * row_bytes, c.cols, xs, &bound));
        const float uv = static_cast<float>(Iq1sInt8XRow(u_mat + r * row_bytes, c.cols, xs, &bound));
        const double want = cpu::Situ(gv, uv, kBeta, kLambda);
        num += (ys[r] - want) * (ys[r] - want);
        den += want * want;
      }
      for (int64_t r = c.rows; r < y_stride; ++r) pad_written += !std::isnan(ys[r]);
    }
  }
  EXPECT_EQ(pad_written, 0);
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

TEST(QuantGemvTest, Iq1sGateUpSituMatchesThreeLaunches) {
  K3_REQUIRE_GPU();
  RunGateUp({3072, 3584, 1, 16, 24, true}, 301);   // K3's experts at batch 1 (one latent row for all)
  RunGateUp({3072, 3584, 1, 32, 48, false}, 302);  // two tokens' experts, x per slot
  RunGateUp({97, 3328, 2, 6, 9, false}, 303);      // 13 blocks per row; a last tile of 1 row; 2 tokens
  RunGateUp({33, 3584, 1, 40, 48, false}, 304);    // tiles of 32 + 1 rows, ranges crossing matrices
  RunGateUp({256, 256, 1, 4, 32, true}, 305);      // the golden model's expert shape (one block)
}

TEST(QuantGemvTest, Iq1sGateUpSituRejects) {
  K3_REQUIRE_GPU();
  DeviceBuffer<uint8_t> w(50 * 64 + 64);
  DeviceBuffer<float> x(512), y(64);
  QuantGemvParams p = PackedIq1s(w.get(), x.get(), y.get(), 64, 256);
  p.n_tokens = 1;
  p.int8_x = true;
  EXPECT_TRUE(QuantGemvGateUpSupports(p));
  QuantGemvGateUpParams gp{p, w.get(), 4.0f, 25.0f};
  gp.up_weight = nullptr;
  EXPECT_EQ(QuantGemvGateUpSitu(gp, nullptr), cudaErrorInvalidValue);
  gp.up_weight = w.get() + 8;
  EXPECT_EQ(QuantGemvGateUpSitu(gp, nullptr), cudaErrorMisalignedAddress);
  gp.up_weight = w.get();
  gp.situ_beta = 0.0f;
  EXPECT_EQ(QuantGemvGateUpSitu(gp, nullptr), cudaErrorInvalidValue);
  gp.situ_beta = 4.0f;
  gp.gate.int8_x = false;  // the exact f32 path has no fused form
  EXPECT_FALSE(QuantGemvGateUpSupports(gp.gate));
  EXPECT_EQ(QuantGemvGateUpSitu(gp, nullptr), cudaErrorInvalidValue);
  gp.gate.int8_x = true;
  gp.gate.cols = 4096;  // 16 blocks: wider than the lane-per-row kernel takes
  gp.gate.row_bytes = 16 * 50;
  EXPECT_FALSE(QuantGemvGateUpSupports(gp.gate));
  gp.gate.type = GgmlType::kQ8_0;
  EXPECT_FALSE(QuantGemvGateUpSupports(gp.gate));
}

// The expert-grouped form (QuantGemvGrouped, QuantGemvGateUpSituGrouped) against the per-pair
// launches it replaces (QuantGemv / QuantGemvGateUpSitu with a matrix id and a copy of x per
// position): bit for bit, every position's row written and nothing else (y poisoned, padding
// included). Groups of 1..5 positions of one matrix cut into passes of kQuantGemvPassRows, x rows
// picked through x_rows, more passes allowed than used (the grid is sized for max_passes).
struct GroupedCase {
  int64_t rows, cols, n_pool, n_groups, n_x;
  int max_group = 5;
};

void RunGrouped(const GroupedCase& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "grouped rows " << c.rows << " cols " << c.cols << " pool " << c.n_pool
                                    << " groups " << c.n_groups);
  constexpr float kBeta = 4.0f, kLambda = 25.0f;
  std::mt19937_64 rng(seed);
  const GateUpPools pools = RandomGateUpPools(c.rows, c.cols, c.n_pool, rng);
  const size_t mat_stride = pools.mat_stride;
  const std::vector<uint8_t>& gate = pools.gate;
  const std::vector<uint8_t>& up = pools.up;
  // groups (a matrix, 1..max_group positions), cut into passes; a position's x row at random
  const ExpertPasses ep = RandomExpertPasses(c.n_pool, c.n_groups, c.n_x, c.max_group, rng);
  const int64_t n_pos = static_cast<int64_t>(ep.pos_mat.size()), n_passes = static_cast<int64_t>(ep.pass_mat.size());
  const int64_t x_stride = c.cols + 4, y_stride = c.rows + 3;
  const std::vector<float> x = Normal(rng, c.n_x * x_stride, 0.0, 0.5);
  std::vector<float> xe(n_pos * x_stride);  // the per-pair launches' copy of x per position
  for (int64_t p = 0; p < n_pos; ++p) {
    std::copy_n(x.begin() + ep.x_rows[p] * x_stride, x_stride, xe.begin() + p * x_stride);
  }
  DeviceBuffer<uint8_t> d_gate(gate), d_up(up);
  DeviceBuffer<float> d_x(x), d_xe(xe);
  DeviceBuffer<int32_t> d_pos_mat(ep.pos_mat), d_x_rows(ep.x_rows), d_pass_mat(ep.pass_mat), d_pass_row0(ep.pass_row0),
      d_pass_n(ep.pass_n);
  DeviceBuffer<int32_t> d_count(std::vector<int32_t>{static_cast<int32_t>(n_passes)});
  const size_t y_floats = static_cast<size_t>(n_pos * y_stride);
  DeviceBuffer<float> d_want(y_floats), d_got(y_floats), d_u(y_floats);

  QuantGemvParams pair = PackedIq1s(d_gate.get(), d_xe.get(), d_want.get(), c.rows, c.cols);
  pair.n_mats = n_pos;
  pair.mat_stride_bytes = static_cast<int64_t>(mat_stride);
  pair.mat_ids = d_pos_mat.get();
  pair.x_stride = x_stride;
  pair.x_mat_stride = x_stride;
  pair.y_stride = y_stride;
  pair.y_mat_stride = y_stride;
  pair.n_tokens = 1;
  pair.int8_x = true;
  QuantGemvParams grouped = PackedIq1s(d_gate.get(), d_x.get(), d_got.get(), c.rows, c.cols);
  grouped.mat_stride_bytes = static_cast<int64_t>(mat_stride);
  grouped.x_stride = x_stride;
  grouped.y_stride = y_stride;
  grouped.int8_x = true;
  ASSERT_TRUE(QuantGemvGroupedSupports(grouped));
  const QuantGemvPasses passes{d_count.get(), d_pass_mat.get(), d_pass_row0.get(), d_pass_n.get(), d_x_rows.get(),
                               n_passes + 3};
  auto same = [&](const char* what) {
    const std::vector<float> want = d_want.Download(), got = d_got.Download();
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), y_floats * sizeof(float))) << what;
    int64_t nan_rows = 0;  // every position's row written (the padding stays NaN in both)
    for (int64_t p = 0; p < n_pos; ++p) nan_rows += std::isnan(got[p * y_stride]);
    EXPECT_EQ(nan_rows, 0) << what;
  };

  d_want.Poison();
  d_got.Poison();
  K3_ASSERT_LAUNCH(QuantGemv(pair, nullptr));
  K3_ASSERT_LAUNCH(QuantGemvGrouped(grouped, passes, nullptr));
  same("plain");

  d_want.Poison();
  d_got.Poison();
  K3_ASSERT_LAUNCH(QuantGemvGateUpSitu(QuantGemvGateUpParams{pair, d_up.get(), kBeta, kLambda}, nullptr));
  K3_ASSERT_LAUNCH(QuantGemvGateUpSituGrouped(QuantGemvGateUpParams{grouped, d_up.get(), kBeta, kLambda}, passes,
                                              nullptr));
  same("gate|up");

  // positions as x rows (x_rows nullptr: the down products' form)
  QuantGemvParams by_pos = grouped;
  by_pos.x = d_xe.get();
  QuantGemvPasses own = passes;
  own.x_rows = nullptr;
  d_want.Poison();
  d_got.Poison();
  K3_ASSERT_LAUNCH(QuantGemv(pair, nullptr));
  K3_ASSERT_LAUNCH(QuantGemvGrouped(by_pos, own, nullptr));
  same("x by position");

  // no passes: nothing written
  d_got.Poison();
  ASSERT_EQ(cudaMemset(d_count.get(), 0, 4), cudaSuccess);
  K3_ASSERT_LAUNCH(QuantGemvGrouped(grouped, passes, nullptr));
  const std::vector<float> none = d_got.Download();
  EXPECT_TRUE(std::all_of(none.begin(), none.end(), [](float v) { return std::isnan(v); }));
}

TEST(QuantGemvTest, Iq1sGroupedMatchesPerPairLaunches) {
  K3_REQUIRE_GPU();
  RunGrouped({3072, 3584, 40, 30, 16}, 401);  // K3's gate|up shape: ~90 positions of 16 tokens
  RunGrouped({3584, 3072, 24, 20, 64}, 402);  // K3's down shape
  RunGrouped({97, 3328, 9, 11, 5}, 403);      // 13 blocks per row, a last tile of 1 row (cp.async tiles)
  RunGrouped({256, 256, 6, 7, 4}, 404);       // the golden model's expert shape: one warp per block
  RunGrouped({64, 512, 3, 1, 2, 1}, 405);     // one pass of one position
}

TEST(QuantGemvTest, Iq1sGroupedRejects) {
  K3_REQUIRE_GPU();
  DeviceBuffer<uint8_t> w(50 * 64 * 2 + 64);
  DeviceBuffer<float> x(512), y(128);
  DeviceBuffer<int32_t> ints(8);
  QuantGemvParams p = PackedIq1s(w.get(), x.get(), y.get(), 64, 256);
  p.int8_x = true;
  p.mat_stride_bytes = 50 * 64;
  const QuantGemvPasses g{ints.get(), ints.get(), ints.get(), ints.get(), nullptr, 1};
  QuantGemvPasses bad = g;
  bad.n_passes = nullptr;
  EXPECT_EQ(QuantGemvGrouped(p, bad, nullptr), cudaErrorInvalidValue);
  QuantGemvParams q = p;
  q.mat_ids = ints.get();  // the passes name the matrices
  EXPECT_EQ(QuantGemvGrouped(q, g, nullptr), cudaErrorInvalidValue);
  q = p;
  q.mat_stride_bytes = 8;  // matrices overlap
  EXPECT_EQ(QuantGemvGrouped(q, g, nullptr), cudaErrorInvalidValue);
  q = p;
  q.int8_x = false;  // the exact path has no grouped form
  EXPECT_FALSE(QuantGemvGroupedSupports(q));
  EXPECT_EQ(QuantGemvGrouped(q, g, nullptr), cudaErrorInvalidValue);
  QuantGemvGateUpParams gp{p, nullptr, 4.0f, 25.0f};
  EXPECT_EQ(QuantGemvGateUpSituGrouped(gp, g, nullptr), cudaErrorInvalidValue);
}

// The IQ1_S sub-block kernel's order of summation depends on the shape only: token 0's outputs are
// bit-identical whether it comes alone or with 1, 4 or 7 other tokens.
TEST(QuantGemvTest, Iq1sBatchInvariant) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(77);
  const int64_t rows = 3072, cols = 3584;
  const auto w = RandomQuantRows(GgmlType::kIQ1_S, rows, cols, rng);
  const std::vector<float> x = Normal(rng, 8 * cols, 0.0, 1.0);
  DeviceBuffer<uint8_t> d_w(w);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<float> d_y(static_cast<size_t>(8 * rows));
  QuantGemvParams p = PackedIq1s(d_w.get(), d_x.get(), d_y.get(), rows, cols);
  for (bool int8_x : {false, true}) {
    p.int8_x = int8_x;
    std::vector<float> alone;
    for (int64_t tokens : {1, 2, 5, 8}) {
      p.n_tokens = tokens;
      d_y.Poison();
      K3_ASSERT_LAUNCH(QuantGemv(p, nullptr));
      const std::vector<float> y = d_y.Download();
      const std::vector<float> first(y.begin(), y.begin() + rows);
      if (alone.empty()) {
        alone = first;
      } else {
        EXPECT_EQ(0, std::memcmp(first.data(), alone.data(), rows * sizeof(float)))
            << tokens << " tokens, int8_x " << int8_x;
      }
    }
  }
}

// Q8_0 stacks of short rows (the short-row kernel, gemv_q8_0_short.cu): the MLA heads' k_b (512 x
// 128) and v_b (128 x 512) of 96 heads, each slot its own x, 1..16 tokens and 17 (two passes);
// 256-wide rows (2 threads a row), partial row tiles, slots picked through mat_ids; and rows of 96
// weights (3 blocks), which stay on the block GEMV.
TEST(QuantGemvTest, K3MlaHeadStacksQ8_0) {
  K3_REQUIRE_GPU();
  uint64_t seed = 900;
  for (int64_t tokens : {1, 3, 16, 17}) {
    RunCase({GgmlType::kQ8_0, 512, 128, tokens, 96, 96, false}, ++seed);
    RunCase({GgmlType::kQ8_0, 128, 512, tokens, 96, 96, false}, ++seed);
  }
  RunCase({GgmlType::kQ8_0, 100, 256, 5, 7, 4, false}, ++seed);
  RunCase({GgmlType::kQ8_0, 33, 512, 2, 3, 5, true}, ++seed);
  RunCase({GgmlType::kQ8_0, 130, 128, 9, 48, 48, false}, ++seed);
  RunCase({GgmlType::kQ8_0, 64, 96, 4, 5, 5, false}, ++seed);
}

TEST(QuantGemvTest, GoldenModelShapes) {
  K3_REQUIRE_GPU();
  // k3-golden-a: hidden 512, expert latent 256, expert FFN 256 (one IQ1_S block per row)
  RunCase({GgmlType::kIQ1_S, 256, 256, 1, 4, 32, true}, 10);
  RunCase({GgmlType::kQ8_0, 1536, 512, 9}, 11);
  RunCase({GgmlType::kF32, 32, 512, 64}, 12);
}

TEST(QuantGemvTest, RejectsBadArguments) {
  K3_REQUIRE_GPU();
  DeviceBuffer<uint8_t> w(34 * 8 * 4 + 64);
  DeviceBuffer<float> x(512), y(64);
  QuantGemvParams p;
  p.type = GgmlType::kQ8_0;
  p.weight = w.get();
  p.rows = 4;
  p.cols = 256;
  p.row_bytes = 34 * 8;
  p.x = x.get();
  p.x_stride = 256;
  p.y = y.get();
  p.y_stride = 4;
  p.n_tokens = 1;
  EXPECT_EQ(QuantGemv(p, nullptr), cudaSuccess);
  K3_ASSERT_CUDA(cudaDeviceSynchronize());
  QuantGemvParams bad = p;
  bad.row_bytes = 34 * 8 + 2;  // not dense
  EXPECT_EQ(QuantGemv(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.x = x.get() + 1;  // misaligned activations
  EXPECT_EQ(QuantGemv(bad, nullptr), cudaErrorMisalignedAddress);
  bad = p;
  bad.type = GgmlType::kQ8_K;
  EXPECT_EQ(QuantGemv(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.cols = 250;
  EXPECT_EQ(QuantGemv(bad, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace k3::cuda::testing
