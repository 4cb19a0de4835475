// QuantGemm (tensor-core prefill products) against k3::quant::MatMul, the CPU reference, on random
// weights of every type and on the real K3 shapes: Q8_0 7168 -> 12288 (600 tokens) and
// 12288 -> 7168, the F32 router 7168 -> 896, and IQ1_S experts 3584 <-> 3072 grouped over 896
// experts with uneven (and empty) groups. y is poisoned with NaN before each call: padding
// columns (y_stride > rows) and sequence rows past the groups' total must stay NaN.
//
// Tolerance per output y[t][r], with L1 = Σ_c |w_c x_c| and L2 = sqrt(Σ_c (w_c x_c)²):
//   |y - y_cpu| <= c2 · L2 + c1 · L1.
// Rounding w and x to f16 (round to nearest, unit roundoff u = 2^-11) perturbs each term by a
// relative δ_c, |δ_c| <= 2u, mean 0, independent across c: the error is a random sum with a
// standard deviation of a few 1e-4 · L2. Emulating the roundings on the host (RandomQuantRows
// weights, N(0,1) x, every type, 3584 and 12288 columns, 1024 outputs each) gave
//   max |err| / L2 = 0.9e-3 .. 1.3e-3 (rms ~3.5e-4) without split_x, 0.6e-3 .. 0.86e-3 with it
//   (the weights are still rounded), ~1.5e-7 with split_x when the weights are exact in f16 (F16,
//   BF16); max |err| / L1 <= 3.7e-5, where the worst case (every δ at its bound) is 2u = 9.8e-4.
// On the H200 the largest |err| / L2 over all these tests is 1.7e-3 (the real K3 shapes).
// c2 = 4e-3 (plain) and 3e-3 (split) are ~10 standard deviations; c1 = 1e-5 covers the f32
// accumulation (about K/16 tensor-core additions per output). With F16/BF16 weights and split_x
// only the accumulation remains: c2 = 2e-4, c1 = 1e-6, which a split that dropped the low half
// would fail by far. A wrong run of 8 weights moves y by ~L2·sqrt(8/cols) (3e-2·L2 at 7168
// columns): caught, where the worst-case bound 1e-3·L1 (~0.07·L2 at 7168) would not catch it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/quant_gemm/blas_gemm.h"
#include "kernels/cuda/quant_gemm/f32_gemm_tf32x3.h"
#include "kernels/cuda/quant_gemm/quant_gemm.h"
#include "kernels/cuda/quant_gemv/iq1s_ternary.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/dot.h"
#include "kernels/quant/half.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/quant_random.h"

namespace k3::cuda::testing {
namespace {

using quant::GgmlType;

size_t RowBytes(GgmlType type, int64_t cols) {
  const quant::TypeTraits& tr = quant::Traits(type);
  return static_cast<size_t>(cols / tr.block_elems) * tr.block_bytes;
}

// CPU product of one matrix with n_tok rows of x (dense [n_tok][x_stride]): y [n_tok][rows] and
// the per-output L1 = Σ|w x| and L2 = sqrt(Σ (w x)²), both through quant::MatMul (F32) on |W|, |x|
// and W², x².
struct Ref {
  std::vector<float> y;
  std::vector<float> l1, l2;
};

Ref CpuProduct(GgmlType type, const uint8_t* mat, int64_t rows, int64_t cols, const float* x, int64_t n_tok,
               int64_t x_stride) {
  Ref r;
  const size_t row_bytes = RowBytes(type, cols);
  r.y.resize(n_tok * rows);
  r.l1.resize(n_tok * rows);
  r.l2.resize(n_tok * rows);
  if (n_tok == 0) return r;
  quant::MatMul({type, mat, rows, cols, row_bytes}, x, n_tok, x_stride, r.y.data(), rows);
  std::vector<float> w(rows * cols), xa(n_tok * cols);
  for (int64_t i = 0; i < rows; ++i) quant::DequantizeRow(type, mat + i * row_bytes, w.data() + i * cols, cols);
  for (float& v : w) v = std::fabs(v);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t c = 0; c < cols; ++c) xa[t * cols + c] = std::fabs(x[t * x_stride + c]);
  }
  const size_t f32_row = static_cast<size_t>(cols) * 4;
  quant::MatMul({GgmlType::kF32, w.data(), rows, cols, f32_row}, xa.data(), n_tok, cols, r.l1.data(), rows);
  for (float& v : w) v *= v;
  for (float& v : xa) v *= v;
  quant::MatMul({GgmlType::kF32, w.data(), rows, cols, f32_row}, xa.data(), n_tok, cols, r.l2.data(), rows);
  for (float& v : r.l2) v = std::sqrt(v);
  return r;
}

struct Tol {
  double c2, c1;
};
Tol TolFor(GgmlType type, bool split) {
  if (split && (type == GgmlType::kF16 || type == GgmlType::kBF16)) return {2e-4, 1e-6};
  return split ? Tol{3e-3, 1e-5} : Tol{4e-3, 1e-5};
}

// Compares rows [0, n) of y (stride y_stride, device rows given by `rows_at`) with ref, and checks
// the padding columns [rows, y_stride) are still NaN. Prints the worst |err| / L2.
::testing::AssertionResult CheckRows(const std::vector<float>& y, int64_t y_stride, const std::vector<int64_t>& rows_at,
                                     const Ref& ref, int64_t rows, Tol tol, const std::string& what) {
  int64_t bad = 0, pad_written = 0;
  double worst = 0.0;
  std::string first;
  for (size_t t = 0; t < rows_at.size(); ++t) {
    const float* yt = y.data() + rows_at[t] * y_stride;
    for (int64_t r = 0; r < rows; ++r) {
      const size_t i = t * rows + r;
      const double want = ref.y[i], got = yt[r];
      const double err = std::fabs(got - want);
      const double lim = tol.c2 * ref.l2[i] + tol.c1 * ref.l1[i] + 1e-30;
      if (ref.l2[i] > 0) worst = std::max(worst, err / ref.l2[i]);
      if (!(err <= lim)) {
        if (bad < 5) {
          first += "\n  seq row " + std::to_string(rows_at[t]) + " out " + std::to_string(r) + ": got " +
                   std::to_string(got) + " want " + std::to_string(want) + " tol " + std::to_string(lim);
        }
        ++bad;
      }
    }
    for (int64_t r = rows; r < y_stride; ++r) pad_written += !std::isnan(yt[r]);
  }
  std::printf("  [gemm accuracy] %s: max |err|/L2 = %.3g over %zu x %lld outputs\n", what.c_str(), worst,
              rows_at.size(), static_cast<long long>(rows));
  if (bad == 0 && pad_written == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " outputs out of tolerance, " << pad_written
                                       << " padding values written; max |err|/L2 " << worst << first;
}

// ---- plain products ----

// The K3 activation constants (activation.situ_beta, situ_linear_beta) for the gate|up tests.
constexpr float kSituBeta = 4.0f, kSituLambda = 25.0f;

// The knobs of QuantGemmParams that must not change any result.
// (wgmma = false keeps IQ1_S on the mma.sync kernel: the same products summed in another order.)
// ternary: the IQ1_S weights passed in their ternary form (iq1s_ternary, converted on the host).
struct Knobs {
  bool generic_decode = false;
  int32_t token_tile = 0;
  bool wgmma = true;
  bool ternary = false;
  std::string Name() const {
    return std::string(generic_decode ? " generic-decode" : "") +
           (token_tile != 0 ? " tile " + std::to_string(token_tile) : std::string()) + (wgmma ? "" : " mma.sync") +
           (ternary ? " ternary" : "");
  }
};

// n_mats IQ1_S matrices of rows x cols (matrix m at m·stride of `mats`) in the ternary form, each
// at m·(*t_stride) of the result: rows·Iq1sTernaryRowBytes(cols) rounded up to 256 bytes.
std::vector<uint8_t> TernaryMatrices(const std::vector<uint8_t>& mats, int64_t n_mats, size_t stride, int64_t rows,
                                     int64_t cols, size_t* t_stride) {
  *t_stride = static_cast<size_t>((rows * Iq1sTernaryRowBytes(cols) + 255) / 256 * 256);
  std::vector<uint8_t> out(*t_stride * n_mats);
  for (int64_t m = 0; m < n_mats; ++m) Iq1sToTernaryHost(mats.data() + m * stride, rows, cols, out.data() + m * *t_stride);
  return out;
}

// Counts the elements whose bits differ; `zero_sign` those that are +0 against -0.
struct BitDiff {
  int64_t differ = 0, zero_sign = 0, first = -1;
};
BitDiff CompareBits(const std::vector<float>& a, const std::vector<float>& b) {
  BitDiff d;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    if (ua == ub) continue;
    if ((ua | ub) == 0x80000000u) {
      ++d.zero_sign;
    } else {
      if (d.first < 0) d.first = static_cast<int64_t>(i);
      ++d.differ;
    }
  }
  if (a.size() != b.size()) d.differ += 1;
  return d;
}

struct PlainCase {
  GgmlType type;
  int64_t rows, cols, n_tokens;
  bool split = false;
  Knobs knobs = {};
  int64_t blas_rows = 0;  // > 0: QuantGemmBlas with a weight scratch of this many rows (multiple of 128)
  bool resident = false;  // with blas_rows: the matrix decoded whole first and passed as weight_half
  bool x_half = false;    // with blas_rows: x rounded first (RoundRowsToHalf) and passed as x_half
};

// A cuBLAS handle for the test's lifetime.
struct BlasHandle {
  cublasHandle_t h = nullptr;
  BlasHandle() { EXPECT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS); }
  ~BlasHandle() {
    if (h != nullptr) cublasDestroy(h);
  }
};

// One QuantGemm call on dense inputs: y [n_tokens][y_stride], poisoned with NaN before the call
// (empty after a failed launch). With `up`: QuantGemmGateUpSitu of w (gate) and up instead.
std::vector<float> LaunchPlain(const PlainCase& c, const std::vector<uint8_t>& w, const std::vector<float>& x,
                               int64_t x_stride, int64_t y_stride, const std::vector<uint8_t>* up = nullptr) {
  const bool ternary = c.knobs.ternary;
  size_t ts = 0;
  auto form = [&](const std::vector<uint8_t>& m) {
    return ternary ? TernaryMatrices(m, 1, 0, c.rows, c.cols, &ts) : m;
  };
  DeviceBuffer<uint8_t> d_w(form(w)), d_up(up != nullptr ? form(*up) : std::vector<uint8_t>(16));
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<float> d_y(static_cast<size_t>(std::max<int64_t>(c.n_tokens, 1) * y_stride));
  d_y.Poison();
  QuantGemmParams p;
  p.type = c.type;
  p.weight = d_w.get();
  p.rows = c.rows;
  p.cols = c.cols;
  p.row_bytes = ternary ? static_cast<size_t>(Iq1sTernaryRowBytes(c.cols)) : RowBytes(c.type, c.cols);
  p.iq1s_ternary = ternary;
  p.x = d_x.get();
  p.x_stride = x_stride;
  p.y = d_y.get();
  p.y_stride = y_stride;
  p.n_tokens = c.n_tokens;
  p.split_x = c.split;
  p.generic_decode = c.knobs.generic_decode;
  p.token_tile = c.knobs.token_tile;
  p.wgmma = c.knobs.wgmma;
  DeviceBuffer<uint8_t> d_ws(std::max<size_t>(QuantGemmWorkspaceBytes(p), 1));
  p.workspace = d_ws.get();
  p.workspace_bytes = d_ws.size();
  cudaError_t e = cudaSuccess;
  if (c.blas_rows > 0) {
    BlasHandle blas;
    if (c.resident) {  // the engine's resident f16 copy (CudaEngineOptions::prefill_f16_weights_mb)
      DeviceBuffer<uint8_t> d_full(static_cast<size_t>(c.rows * c.cols * 2));
      DeviceBuffer<uint8_t> d_xh(static_cast<size_t>(std::max<int64_t>(c.n_tokens, 1) * c.cols * 2));
      const QuantDequantF16Params d{p.type, p.weight, p.cols, p.row_bytes, 0, c.rows, d_full.get()};
      EXPECT_EQ(QuantDequantF16(d, nullptr), cudaSuccess);
      QuantGemmParams q = p;
      if (c.x_half) {  // the engine's shared rounding of one input for several products
        EXPECT_EQ(RoundRowsToHalf(p.x, p.x_stride, p.n_tokens, p.cols, d_xh.get(), nullptr), cudaSuccess);
        q.x = nullptr;
        q.workspace = nullptr;
        q.workspace_bytes = 0;
      }
      e = QuantGemmBlas(q, BlasScratch{blas.h, nullptr, 0}, nullptr, d_full.get(), c.x_half ? d_xh.get() : nullptr);
      const cudaError_t done = cudaDeviceSynchronize();  // before the copy goes
      EXPECT_EQ(done, cudaSuccess) << cudaGetErrorString(done);
    } else {
      DeviceBuffer<uint8_t> d_wh(static_cast<size_t>(c.blas_rows * c.cols * 2));
      e = QuantGemmBlas(p, BlasScratch{blas.h, d_wh.get(), d_wh.size()}, nullptr);
    }
    const cudaError_t done = cudaDeviceSynchronize();  // before the scratch and handle go
    EXPECT_EQ(done, cudaSuccess) << cudaGetErrorString(done);
  } else if (up != nullptr) {
    e = QuantGemmGateUpSitu({p, d_up.get(), kSituBeta, kSituLambda}, nullptr);
  } else {
    e = QuantGemm(p, nullptr);
  }
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  const cudaError_t done = cudaDeviceSynchronize();
  EXPECT_EQ(done, cudaSuccess) << cudaGetErrorString(done);
  if (e != cudaSuccess || done != cudaSuccess) return {};
  return d_y.Download();
}

std::string PlainName(const PlainCase& c) {
  return std::string(quant::TypeName(c.type)) + " " + std::to_string(c.cols) + "->" + std::to_string(c.rows) +
         " tokens " + std::to_string(c.n_tokens) + (c.split ? " split" : "") + c.knobs.Name() +
         (c.blas_rows > 0 ? (c.resident ? std::string(" cuBLAS, resident f16 copy") + (c.x_half ? ", x rounded first" : "")
                                        : " cuBLAS, row blocks of " + std::to_string(c.blas_rows))
                          : std::string());
}

void RunPlain(const PlainCase& c, uint64_t seed) {
  const std::string what = PlainName(c);
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  const std::vector<uint8_t> w = RandomQuantRows(c.type, c.rows, c.cols, rng);
  const int64_t x_stride = c.cols + 4, y_stride = c.rows + 3;
  const std::vector<float> x = Normal(rng, std::max<int64_t>(c.n_tokens, 1) * x_stride, 0.0, 1.0);
  const std::vector<float> y = LaunchPlain(c, w, x, x_stride, y_stride);
  if (y.empty()) return;
  const Ref ref = CpuProduct(c.type, w.data(), c.rows, c.cols, x.data(), c.n_tokens, x_stride);
  std::vector<int64_t> at(c.n_tokens);
  std::iota(at.begin(), at.end(), 0);
  EXPECT_TRUE(CheckRows(y, y_stride, at, ref, c.rows, TolFor(c.type, c.split), what));
}

TEST(QuantGemmTest, EveryTypeSmallShapes) {
  K3_REQUIRE_GPU();
  uint64_t seed = 2000;
  for (GgmlType type : AllGpuTypes()) {
    // 200 rows: a partial second row tile; 512 columns: 2 super-blocks / 16 blocks of 32;
    // 1, 17, 130 tokens: partial token tiles (130 = 128 + 2).
    for (int64_t tokens : {1, 17, 130}) {
      RunPlain({type, 200, 512, tokens, false}, ++seed);
      RunPlain({type, 200, 512, tokens, true}, ++seed);
    }
  }
}

TEST(QuantGemmTest, OddWidthsAndTinyShapes) {
  K3_REQUIRE_GPU();
  // 96 columns: the last K step holds only 32 valid elements (one Q8_0 block in its chunk);
  // 32: a single half step; 1..3 rows; rows 129 = one row past a tile.
  uint64_t seed = 3000;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ5_0, GgmlType::kIQ4_NL, GgmlType::kF32,
                        GgmlType::kF16, GgmlType::kBF16}) {
    RunPlain({type, 129, 96, 5}, ++seed);
    RunPlain({type, 3, 32, 129}, ++seed);
    RunPlain({type, 1, 160, 1, true}, ++seed);
  }
  RunPlain({GgmlType::kIQ1_S, 1, 256, 1}, ++seed);
  RunPlain({GgmlType::kQ6_K, 255, 256, 255}, ++seed);
  RunPlain({GgmlType::kIQ2_XXS, 257, 768, 64}, ++seed);
}

TEST(QuantGemmTest, LargeGridsUse128TokenTiles) {
  K3_REQUIRE_GPU();
  // 4168 rows (33 row tiles, the last partial) x 1100 tokens (9 tiles of 128, the last partial):
  // a grid large enough for the 128-token tiles, with and without split_x.
  uint64_t seed = 5000;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kIQ1_S, GgmlType::kF32, GgmlType::kQ4_K, GgmlType::kIQ4_NL}) {
    RunPlain({type, 4168, 512, 1100, false}, ++seed);
    RunPlain({type, 4168, 512, 1100, true}, ++seed);
  }
}

TEST(QuantGemmTest, K3ProjectionQ8_0_7168To12288) {
  K3_REQUIRE_GPU();
  RunPlain({GgmlType::kQ8_0, 12288, 7168, 600}, 1);
  RunPlain({GgmlType::kQ8_0, 12288, 7168, 77, true}, 2);
}

TEST(QuantGemmTest, K3OutputProjectionQ8_0_12288To7168) {
  K3_REQUIRE_GPU();
  RunPlain({GgmlType::kQ8_0, 7168, 12288, 130}, 3);
  RunPlain({GgmlType::kQ8_0, 7168, 12288, 40, true}, 4);
}

TEST(QuantGemmTest, K3RouterF32_7168To896) {
  K3_REQUIRE_GPU();
  RunPlain({GgmlType::kF32, 896, 7168, 100}, 5);
  RunPlain({GgmlType::kF32, 896, 7168, 100, true}, 6);
}

// ---- grouped (expert) products ----

// The CPU grouping (MoeGroupTokens' contract): position p runs over expert 0's (token, choice)
// pairs in flat order, then expert 1's...
void GroupOnHost(const std::vector<int32_t>& ids, int64_t k, int64_t n_experts, std::vector<int32_t>& offsets,
                 std::vector<int32_t>& x_rows) {
  offsets.assign(n_experts + 1, 0);
  for (int32_t e : ids) {
    if (e >= 0 && e < n_experts) ++offsets[e + 1];
  }
  for (int64_t e = 0; e < n_experts; ++e) offsets[e + 1] += offsets[e];
  std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
  x_rows.assign(offsets[n_experts], -1);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= 0 && ids[i] < n_experts) x_rows[next[ids[i]]++] = static_cast<int32_t>(i / k);
  }
}

struct GroupedCase {
  GgmlType type;
  int64_t rows, cols;
  int64_t n_src;          // activation rows (tokens)
  std::vector<int32_t> offsets;  // [n_groups + 1]
  std::vector<int32_t> x_rows;   // [offsets.back()], or empty: no x_rows (then n_src = n_tokens_bound)
  int64_t n_tokens_bound; // >= offsets.back()
  int64_t n_pool;         // distinct matrices; groups pick one through mat_ids (0: none, matrix g)
  bool split = false;
  Knobs knobs = {};
};

// Random inputs of a grouped case.
struct GroupedInputs {
  size_t mat_stride = 0;
  int64_t n_mats = 0;
  std::vector<uint8_t> pool;      // [n_mats][mat_stride]
  std::vector<int32_t> mat_of;    // [n_groups]
  int64_t x_stride = 0, y_stride = 0;
  std::vector<float> x;           // [n_src][x_stride]
  std::vector<int32_t> x_rows;    // [n_tokens_bound]
};

GroupedInputs MakeGroupedInputs(const GroupedCase& c, uint64_t seed) {
  const int64_t n_groups = static_cast<int64_t>(c.offsets.size()) - 1;
  GroupedInputs in;
  std::mt19937_64 rng(seed);
  const size_t row_bytes = RowBytes(c.type, c.cols);
  in.mat_stride = (row_bytes * c.rows + 255) / 256 * 256;
  in.n_mats = c.n_pool > 0 ? c.n_pool : n_groups;
  in.pool.resize(in.mat_stride * in.n_mats);
  for (int64_t m = 0; m < in.n_mats; ++m) {
    const auto mat = RandomQuantRows(c.type, c.rows, c.cols, rng);
    std::copy(mat.begin(), mat.end(), in.pool.begin() + m * in.mat_stride);
  }
  in.mat_of.resize(n_groups);
  for (int64_t g = 0; g < n_groups; ++g) in.mat_of[g] = c.n_pool > 0 ? static_cast<int32_t>(rng() % c.n_pool) : g;
  in.x_stride = c.cols + 8;
  in.y_stride = c.rows + 1;
  in.x = Normal(rng, c.n_src * in.x_stride, 0.0, 1.0);
  in.x_rows.assign(c.n_tokens_bound, -7);  // entries past the total are never read
  std::copy(c.x_rows.begin(), c.x_rows.end(), in.x_rows.begin());
  if (c.x_rows.empty()) std::iota(in.x_rows.begin(), in.x_rows.end(), 0);  // in place: what the reference reads
  return in;
}

// One grouped QuantGemm call: y [n_tokens_bound][y_stride], poisoned with NaN before the call
// (empty after a failed launch). With `up` (pool[n_mats][mat_stride], like in.pool):
// QuantGemmGateUpSitu of in.pool (gate) and up instead, and with y_half its f16 output
// ([n_tokens_bound][rows] f16 bits, QuantGemmGateUpParams::y_half) downloaded there. x_half: the
// product's x already rounded (QuantGemmParams::x_half, [n_src][cols] f16 bits) instead of in.x.
std::vector<float> LaunchGrouped(const GroupedCase& c, const GroupedInputs& in,
                                 const std::vector<uint8_t>* up = nullptr, std::vector<uint16_t>* y_half = nullptr,
                                 const std::vector<uint16_t>* x_half = nullptr) {
  const bool ternary = c.knobs.ternary;
  size_t stride = in.mat_stride;
  auto form = [&](const std::vector<uint8_t>& pool) {
    return ternary ? TernaryMatrices(pool, in.n_mats, in.mat_stride, c.rows, c.cols, &stride) : pool;
  };
  DeviceBuffer<uint8_t> d_w(form(in.pool)), d_up(up != nullptr ? form(*up) : std::vector<uint8_t>(16));
  DeviceBuffer<uint16_t> d_yh(y_half != nullptr ? static_cast<size_t>(c.n_tokens_bound * c.rows) : 0);
  DeviceBuffer<uint16_t> d_xh(x_half != nullptr ? *x_half : std::vector<uint16_t>());
  DeviceBuffer<float> d_x(in.x);
  DeviceBuffer<int32_t> d_ids(in.mat_of), d_off(c.offsets), d_rows(in.x_rows);
  DeviceBuffer<float> d_y(static_cast<size_t>(c.n_tokens_bound * in.y_stride));
  d_y.Poison();
  QuantGemmParams p;
  p.type = c.type;
  p.weight = d_w.get();
  p.rows = c.rows;
  p.cols = c.cols;
  p.row_bytes = ternary ? static_cast<size_t>(Iq1sTernaryRowBytes(c.cols)) : RowBytes(c.type, c.cols);
  p.iq1s_ternary = ternary;
  p.mat_stride_bytes = static_cast<int64_t>(stride);
  p.mat_ids = c.n_pool > 0 ? d_ids.get() : nullptr;
  p.x = d_x.get();
  p.x_stride = in.x_stride;
  p.x_rows = c.x_rows.empty() ? nullptr : d_rows.get();  // empty: x row p for sequence row p
  p.y = d_y.get();
  p.y_stride = in.y_stride;
  p.n_tokens = c.n_tokens_bound;
  p.n_groups = static_cast<int64_t>(c.offsets.size()) - 1;
  p.group_offsets = d_off.get();
  p.split_x = c.split;
  p.x_src_rows = c.n_src;
  p.generic_decode = c.knobs.generic_decode;
  p.token_tile = c.knobs.token_tile;
  p.wgmma = c.knobs.wgmma;
  DeviceBuffer<uint8_t> d_ws(QuantGemmWorkspaceBytes(p));
  p.workspace = d_ws.get();
  p.workspace_bytes = d_ws.size();
  if (x_half != nullptr) {
    p.x_half = d_xh.get();
    p.x = nullptr;  // not read
  }
  const cudaError_t e = up != nullptr ? QuantGemmGateUpSitu({p, d_up.get(), kSituBeta, kSituLambda,
                                                             y_half != nullptr ? d_yh.get() : nullptr},
                                                            nullptr)
                                      : QuantGemm(p, nullptr);
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  const cudaError_t done = cudaDeviceSynchronize();
  EXPECT_EQ(done, cudaSuccess) << cudaGetErrorString(done);
  if (e != cudaSuccess || done != cudaSuccess) return {};
  if (y_half != nullptr) *y_half = d_yh.Download();
  return d_y.Download();
}

std::string GroupedName(const GroupedCase& c) {
  return std::string(quant::TypeName(c.type)) + " " + std::to_string(c.cols) + "->" + std::to_string(c.rows) +
         " grouped " + std::to_string(c.offsets.size() - 1) + " groups, " + std::to_string(c.offsets.back()) +
         " rows" + (c.split ? " split" : "") + c.knobs.Name();
}

void RunGrouped(const GroupedCase& c, uint64_t seed) {
  const int64_t n_groups = static_cast<int64_t>(c.offsets.size()) - 1;
  const int64_t total = c.offsets.back();
  const std::string what = GroupedName(c);
  SCOPED_TRACE(what);
  const GroupedInputs in = MakeGroupedInputs(c, seed);
  const std::vector<float> y = LaunchGrouped(c, in);
  if (y.empty()) return;
  const int64_t y_stride = in.y_stride;

  // Per distinct matrix: gather the rows of every group using it, one CPU product.
  std::vector<std::vector<int64_t>> rows_of(in.n_mats);
  for (int64_t g = 0; g < n_groups; ++g) {
    for (int64_t q = c.offsets[g]; q < c.offsets[g + 1]; ++q) rows_of[in.mat_of[g]].push_back(q);
  }
  const Tol tol = TolFor(c.type, c.split);
  for (int64_t m = 0; m < in.n_mats; ++m) {
    const auto& at = rows_of[m];
    if (at.empty()) continue;
    std::vector<float> xg(at.size() * c.cols, 0.0f);
    for (size_t i = 0; i < at.size(); ++i) {
      const int32_t src = in.x_rows[at[i]];
      if (src >= 0) std::copy(&in.x[src * in.x_stride], &in.x[src * in.x_stride] + c.cols, &xg[i * c.cols]);
    }
    const Ref ref = CpuProduct(c.type, in.pool.data() + m * in.mat_stride, c.rows, c.cols, xg.data(),
                               static_cast<int64_t>(at.size()), c.cols);
    EXPECT_TRUE(CheckRows(y, y_stride, at, ref, c.rows, tol, what + " matrix " + std::to_string(m)));
  }
  int64_t past_written = 0;
  for (int64_t q = total; q < c.n_tokens_bound; ++q) {
    for (int64_t r = 0; r < y_stride; ++r) past_written += !std::isnan(y[q * y_stride + r]);
  }
  EXPECT_EQ(past_written, 0) << "rows past the groups' total were written";
}

// Routes n_src tokens to k distinct experts each, with uneven expert popularity (log-normal) and
// a share of experts never chosen; returns the grouping.
void RandomRouting(int64_t n_src, int64_t k, int64_t n_experts, double empty_share, std::mt19937_64& rng,
                   std::vector<int32_t>& offsets, std::vector<int32_t>& x_rows) {
  std::normal_distribution<double> nd(0.0, 1.5);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  std::vector<double> weight(n_experts);
  for (auto& w : weight) w = ud(rng) < empty_share ? 0.0 : std::exp(nd(rng));
  std::vector<int32_t> ids(n_src * k);
  for (int64_t t = 0; t < n_src; ++t) {
    std::vector<double> w = weight;
    for (int64_t j = 0; j < k; ++j) {
      std::discrete_distribution<int> pick(w.begin(), w.end());
      const int e = pick(rng);
      ids[t * k + j] = e;
      w[e] = 0.0;  // distinct experts per token
    }
  }
  GroupOnHost(ids, k, n_experts, offsets, x_rows);
}

TEST(QuantGemmTest, GroupedEdgeCases) {
  K3_REQUIRE_GPU();
  // Groups of 0, 1, 63, 64, 65, 130 rows (tile edges at 64), empty first and last groups, a
  // bound above the total, a negative x row (reads zeros), matrices without mat_ids.
  std::vector<int32_t> sizes = {0, 1, 63, 64, 0, 65, 130, 7, 0};
  std::vector<int32_t> off(1, 0);
  for (int32_t s : sizes) off.push_back(off.back() + s);
  std::mt19937_64 rng(11);
  uint64_t seed = 4000;
  for (GgmlType type : {GgmlType::kIQ1_S, GgmlType::kQ8_0, GgmlType::kF32, GgmlType::kQ4_K, GgmlType::kIQ3_S}) {
    std::vector<int32_t> xr(off.back());
    for (auto& r : xr) r = static_cast<int32_t>(rng() % 50);
    xr[70] = -1;
    for (bool split : {false, true}) {
      RunGrouped({type, 136, 512, 50, off, xr, off.back() + 37, 0, split}, ++seed);
    }
    if (type == GgmlType::kIQ1_S) {  // the mma.sync kernel: the other decode and both token tiles
      for (Knobs k : {Knobs{true, 0}, Knobs{false, 64}, Knobs{false, 128}, Knobs{true, 128}, Knobs{false, 0, false}}) {
        RunGrouped({type, 136, 512, 50, off, xr, off.back() + 37, 0, false, k}, ++seed);
      }
    }
  }
}

TEST(QuantGemmTest, GroupedK3ExpertsIQ1S) {
  K3_REQUIRE_GPU();
  // T = 512 tokens, top-16 of 896 experts (~9 rows per expert on average, very uneven, 10% of
  // experts empty); 32 distinct weight matrices in memory, picked per expert through mat_ids.
  std::mt19937_64 rng(12);
  std::vector<int32_t> off, xr;
  RandomRouting(512, 16, 896, 0.1, rng, off, xr);
  RunGrouped({GgmlType::kIQ1_S, 3072, 3584, 512, off, xr, 512 * 16, 32, false}, 21);  // gate / up
  RunGrouped({GgmlType::kIQ1_S, 3584, 3072, 512, off, xr, 512 * 16, 32, false}, 22);  // down
  RunGrouped({GgmlType::kIQ1_S, 3072, 3584, 512, off, xr, 512 * 16, 32, true}, 23);
  RunGrouped({GgmlType::kIQ1_S, 3072, 3584, 512, off, xr, 512 * 16, 32, false, Knobs{false, 0, false}}, 25);
  // T = 4096 on 64 experts (~1000 rows per expert): long groups, many tiles each.
  RandomRouting(4096, 2, 64, 0.05, rng, off, xr);
  RunGrouped({GgmlType::kIQ1_S, 512, 3584, 4096, off, xr, 4096 * 2 + 5, 8, false}, 24);
}

// IQ1_S's f16 decode (wgmma and mma.sync kernels) against the f16 rounding of the CPU decoder's
// weights, value for value, and against the generic decode bit for bit: every finite f16 scale d (63488), each over two
// rows that give it all eight K = 2·ls + 1 with both signs of δ, random grid indices (one block per row). x is the
// identity (token t = e_t), so y[t][r] = f16(W[r][t]) exactly: subnormal and underflowing weights included. Rows with a
// weight past the f16 range (|d|·K·9/8 >= 65520) hold inf, so their outputs are NaN (inf·0); there only the decodes are
// compared.
TEST(QuantGemmTest, Iq1sF16DecodeIsExactForEveryScale) {
  K3_REQUIRE_GPU();
  constexpr int64_t kCols = 256, kScales = 63488, kRows = 2 * kScales, kBlock = 50;
  std::mt19937_64 rng(41);
  std::vector<uint8_t> w = RandomQuantRows(GgmlType::kIQ1_S, kRows, kCols, rng);
  int64_t n = 0;
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    if ((bits & 0x7c00u) == 0x7c00u) continue;  // inf, NaN: outside QuantGemm's contract
    for (int64_t half = 0; half < 2; ++half) {
      uint8_t* const blk = w.data() + (2 * n + half) * kBlock;
      const auto d = static_cast<uint16_t>(bits);
      std::memcpy(blk, &d, 2);
      for (int ib = 0; ib < 8; ++ib) {
        uint16_t qh;
        std::memcpy(&qh, blk + 34 + 2 * ib, 2);
        qh = static_cast<uint16_t>((qh & 0x0fffu) | (ib << 12) | (((ib + half) & 1) << 15));
        std::memcpy(blk + 34 + 2 * ib, &qh, 2);
      }
    }
    ++n;
  }
  ASSERT_EQ(n, kScales);
  std::vector<float> x(kCols * kCols, 0.0f);
  for (int64_t t = 0; t < kCols; ++t) x[t * kCols + t] = 1.0f;
  // The f16 decode on the wgmma kernel (x permuted inside windows of 128: a wrong permutation
  // moves weights to other outputs here) and on the mma.sync kernel, and the generic decode.
  PlainCase c{GgmlType::kIQ1_S, kRows, kCols, kCols};
  const std::vector<float> y_wgmma = LaunchPlain(c, w, x, kCols, kRows);
  c.knobs.wgmma = false;
  const std::vector<float> y_f16 = LaunchPlain(c, w, x, kCols, kRows);
  c.knobs.generic_decode = true;
  const std::vector<float> y_gen = LaunchPlain(c, w, x, kCols, kRows);
  ASSERT_FALSE(y_wgmma.empty() || y_f16.empty() || y_gen.empty());
  const std::vector<float>* const outs[3] = {&y_wgmma, &y_f16, &y_gen};
  const char* const names[3] = {"wgmma f16 decode", "mma.sync f16 decode", "mma.sync generic decode"};

  BitDiff d;
  for (int i = 0; i < 2; ++i) {
    d = CompareBits(*outs[i], y_gen);
    EXPECT_EQ(d.differ, 0) << names[i] << " and the generic decode differ, first at seq row " << d.first / kRows
                           << " out " << d.first % kRows;
  }
  // Against the CPU: values (the sums start from +0, so a zero weight gives +0 either way). A
  // subnormal f16 weight that comes out 0 would be the tensor cores flushing it (every path
  // alike), which is counted apart; any other difference is an error.
  int64_t bad[3] = {0, 0, 0}, flushed[3] = {0, 0, 0};
  int64_t overflow_rows = 0, subnormal = 0, underflow = 0;
  std::vector<float> row(kCols);
  std::vector<uint16_t> want(kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    quant::DequantizeRow(GgmlType::kIQ1_S, w.data() + r * kBlock, row.data(), kCols);
    bool overflow = false;
    for (int64_t t = 0; t < kCols; ++t) {
      const uint16_t h = quant::F32ToF16(row[t]);
      overflow |= (h & 0x7c00u) == 0x7c00u;
      subnormal += (h & 0x7c00u) == 0 && (h & 0x3ffu) != 0;
      underflow += (h & 0x7fffu) == 0 && row[t] != 0.0f;
      want[t] = h;
    }
    if (overflow) {
      ++overflow_rows;
      continue;
    }
    for (int64_t t = 0; t < kCols; ++t) {
      const float v = quant::F16ToF32(want[t]);
      const bool sub = (want[t] & 0x7c00u) == 0 && (want[t] & 0x3ffu) != 0;
      for (int i = 0; i < 3; ++i) {
        const float got = (*outs[i])[t * kRows + r];
        if (got == v) continue;
        if (sub && got == 0.0f) {
          ++flushed[i];
        } else {
          ++bad[i];
        }
      }
    }
  }
  std::printf(
      "  [iq1s f16 decode] %lld rows (%lld with f16 overflow), %lld subnormal and %lld underflowing "
      "weights; outputs differing from the generic decode only in the sign of zero: %lld; subnormal "
      "weights read as 0: %lld (wgmma), %lld (mma.sync f16 decode), %lld (generic)\n",
      static_cast<long long>(kRows), static_cast<long long>(overflow_rows), static_cast<long long>(subnormal),
      static_cast<long long>(underflow), static_cast<long long>(d.zero_sign), static_cast<long long>(flushed[0]),
      static_cast<long long>(flushed[1]), static_cast<long long>(flushed[2]));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(bad[i], 0) << names[i] << ": outputs differ from f16(CPU weight)";
    EXPECT_EQ(flushed[i], flushed[2]) << names[i];
  }
  EXPECT_GT(overflow_rows, 0);
  EXPECT_GT(subnormal, 0);
  EXPECT_GT(underflow, 0);
}

// On the mma.sync kernel, both IQ1_S decodes and both token tiles give the same outputs bit for
// bit (with split_x too):
// grouped experts at the K3 width with 73 rows per group on average (a 4096-token prefill's
// top-16 of 896) but uneven (groups of 0 to hundreds of rows), and a plain product with a
// partial row tile and a partial last token tile.
TEST(QuantGemmTest, Iq1sDecodesAndTilesAgreeBitForBit) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(51);
  std::vector<int32_t> off, xr;
  RandomRouting(1024, 16, 224, 0.05, rng, off, xr);
  GroupedCase g{GgmlType::kIQ1_S, 512, 3584, 1024, off, xr, 1024 * 16 + 3, 16, false};
  const GroupedInputs in = MakeGroupedInputs(g, 52);
  for (bool split : {false, true}) {
    g.split = split;
    g.knobs = Knobs{false, 0, false};
    const std::vector<float> want = LaunchGrouped(g, in);
    for (Knobs k : {Knobs{true, 64}, Knobs{true, 128}, Knobs{false, 64}, Knobs{false, 128}}) {
      g.knobs = k;
      const BitDiff d = CompareBits(LaunchGrouped(g, in), want);
      EXPECT_TRUE(d.differ == 0 && d.zero_sign == 0)
          << GroupedName(g) << ": " << d.differ << " outputs differ (first at " << d.first << "), " << d.zero_sign
          << " in the sign of zero";
    }
  }
  PlainCase c{GgmlType::kIQ1_S, 4168, 512, 1100};
  std::mt19937_64 prng(53);
  const std::vector<uint8_t> w = RandomQuantRows(c.type, c.rows, c.cols, prng);
  const std::vector<float> x = Normal(prng, c.n_tokens * c.cols, 0.0, 1.0);
  c.knobs = Knobs{false, 0, false};
  const std::vector<float> want = LaunchPlain(c, w, x, c.cols, c.rows);
  for (Knobs k : {Knobs{true, 0}, Knobs{false, 64}, Knobs{true, 64}}) {
    c.knobs = k;
    const BitDiff d = CompareBits(LaunchPlain(c, w, x, c.cols, c.rows), want);
    EXPECT_TRUE(d.differ == 0 && d.zero_sign == 0) << PlainName(c) << ": " << d.differ << " outputs differ";
  }
}

// Situ (activation.h) of rows [0, n) of g and u ([*][stride], `width` values a row), on the GPU.
std::vector<float> SituOnGpu(const std::vector<float>& g, const std::vector<float>& u, int64_t n, int64_t width,
                             int64_t stride) {
  DeviceBuffer<float> d_g(g), d_u(u);
  const SituParams p{d_g.get(), d_u.get(), d_g.get(), n, width, stride, stride, stride, kSituBeta, kSituLambda};
  const cudaError_t e = Situ(p, nullptr);
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d_g.Download();
}

// QuantGemmGateUpSitu is QuantGemm(gate), QuantGemm(up) and Situ, bit for bit (rows past the
// groups and the padding columns left as they were): grouped over uneven experts at the K3 widths
// (3584 -> 3072, every wgmma width from tiles of 1 to 128 tokens), with a partial 64-row tile
// (200 rows), and plain with partial row and token tiles.
TEST(QuantGemmTest, Iq1sGateUpSituIsGateUpThenSituBitForBit) {
  K3_REQUIRE_GPU();
  QuantGemmParams probe{};  // no shape: rows 0
  probe.type = GgmlType::kIQ1_S;
  if (!QuantGemmGateUpSupports(probe)) GTEST_SKIP() << "no IQ1_S wgmma kernel here";
  std::mt19937_64 rng(61);
  std::vector<int32_t> off, xr;
  RandomRouting(1024, 16, 224, 0.05, rng, off, xr);
  for (int64_t rows : {int64_t{3072}, int64_t{200}}) {
    GroupedCase g{GgmlType::kIQ1_S, rows, 3584, 1024, off, xr, 1024 * 16 + 3, 16, false};
    const GroupedInputs in = MakeGroupedInputs(g, 62), in_up = MakeGroupedInputs(g, 63);
    GroupedInputs up = in;
    up.pool = in_up.pool;
    const std::vector<float> yg = LaunchGrouped(g, in), yu = LaunchGrouped(g, up);
    const std::vector<float> fused = LaunchGrouped(g, in, &up.pool);
    ASSERT_FALSE(yg.empty() || yu.empty() || fused.empty());
    const std::vector<float> want = SituOnGpu(yg, yu, off.back(), rows, in.y_stride);
    const BitDiff d = CompareBits(fused, want);
    EXPECT_TRUE(d.differ == 0 && d.zero_sign == 0)
        << GroupedName(g) << " gate|up: " << d.differ << " outputs differ (first at " << d.first << "), "
        << d.zero_sign << " in the sign of zero";
  }
  PlainCase c{GgmlType::kIQ1_S, 200, 512, 1100};
  std::mt19937_64 prng(64);
  const std::vector<uint8_t> w = RandomQuantRows(c.type, c.rows, c.cols, prng);
  const std::vector<uint8_t> wu = RandomQuantRows(c.type, c.rows, c.cols, prng);
  const std::vector<float> x = Normal(prng, c.n_tokens * c.cols, 0.0, 1.0);
  const int64_t y_stride = c.rows + 3;
  const std::vector<float> yg = LaunchPlain(c, w, x, c.cols, y_stride), yu = LaunchPlain(c, wu, x, c.cols, y_stride);
  const std::vector<float> fused = LaunchPlain(c, w, x, c.cols, y_stride, &wu);
  ASSERT_FALSE(yg.empty() || yu.empty() || fused.empty());
  const BitDiff d = CompareBits(fused, SituOnGpu(yg, yu, c.n_tokens, c.rows, y_stride));
  EXPECT_TRUE(d.differ == 0 && d.zero_sign == 0) << PlainName(c) << " gate|up: " << d.differ << " outputs differ";
}

// The gate|up launch's f16 output (y_half) feeds the next product as it would its own pre-pass:
// the experts' down product (3072 -> 3584) with x_half gives the bits it gives with x = situ in
// f32 (rows past the groups are never read, so they may differ: NaN in f32, unwritten in f16).
TEST(QuantGemmTest, Iq1sGateUpHalfOutputIsTheNextProductsRoundedX) {
  K3_REQUIRE_GPU();
  QuantGemmParams probe{};  // no shape: rows 0
  probe.type = GgmlType::kIQ1_S;
  if (!QuantGemmGateUpSupports(probe) || !QuantGemmTakesHalfX(probe)) GTEST_SKIP() << "no IQ1_S wgmma kernel here";
  std::mt19937_64 rng(71);
  std::vector<int32_t> off, xr;
  RandomRouting(1024, 16, 224, 0.05, rng, off, xr);
  const int64_t bound = 1024 * 16 + 3, total = off.back();
  GroupedCase g{GgmlType::kIQ1_S, 3072, 3584, 1024, off, xr, bound, 16, false};
  const GroupedInputs in = MakeGroupedInputs(g, 72), in_up = MakeGroupedInputs(g, 73);
  const std::vector<float> act = LaunchGrouped(g, in, &in_up.pool);
  std::vector<uint16_t> act_half;
  LaunchGrouped(g, in, &in_up.pool, &act_half);
  ASSERT_FALSE(act.empty());
  ASSERT_EQ(act_half.size(), static_cast<size_t>(bound * 3072));

  // The down product over the same groups, its rows in grouped order (x row p = sequence row p).
  std::vector<int32_t> identity(total);
  for (int64_t p = 0; p < total; ++p) identity[p] = static_cast<int32_t>(p);
  GroupedCase d{GgmlType::kIQ1_S, 3584, 3072, bound, off, identity, bound, 16, false};
  GroupedInputs down = MakeGroupedInputs(d, 74);
  down.x.assign(static_cast<size_t>(bound * down.x_stride), 0.0f);
  for (int64_t p = 0; p < total; ++p) {
    std::copy_n(act.begin() + p * in.y_stride, 3072, down.x.begin() + p * down.x_stride);
  }
  const std::vector<float> from_f32 = LaunchGrouped(d, down);
  const std::vector<float> from_half = LaunchGrouped(d, down, nullptr, nullptr, &act_half);
  ASSERT_FALSE(from_f32.empty() || from_half.empty());
  const BitDiff diff = CompareBits(from_half, from_f32);
  EXPECT_TRUE(diff.differ == 0 && diff.zero_sign == 0)
      << "down from the f16 output: " << diff.differ << " outputs differ (first at " << diff.first << ")";

  // The same down product with its x rows in place (no x_rows, as the engine's prefill runs it),
  // from f32 and from the f16 output: bit for bit the gathered form's.
  GroupedCase in_place = d;
  in_place.x_rows.clear();
  const std::vector<float> in_place_f32 = LaunchGrouped(in_place, down);
  const std::vector<float> in_place_half = LaunchGrouped(in_place, down, nullptr, nullptr, &act_half);
  ASSERT_FALSE(in_place_f32.empty() || in_place_half.empty());
  for (const auto& [got, want, name] :
       {std::tuple{&in_place_f32, &from_f32, "from f32"}, std::tuple{&in_place_half, &from_half, "from f16"}}) {
    const BitDiff dd = CompareBits(*got, *want);
    EXPECT_TRUE(dd.differ == 0 && dd.zero_sign == 0)
        << "down with x in place, " << name << ": " << dd.differ << " outputs differ (first at " << dd.first << ")";
  }
}

// The wgmma kernel on the ternary form (iq1s_ternary) gives the ggml rows' outputs bit for bit
// (the same f16 weights into the same wgmma sequence): grouped over uneven experts at the K3 widths,
// gate (3584 -> 3072) and down (3072 -> 3584), a partial row tile (200 rows), the fused gate|up
// launch in f32 and in f16 (y_half), and plain products with partial row and token tiles, whose
// row offsets alternate between 16-byte aligned and not (odd 8-byte words per row).
TEST(QuantGemmTest, Iq1sTernaryFormIsTheGgmlRowsBitForBit) {
  K3_REQUIRE_GPU();
  QuantGemmParams probe{};  // no shape: rows 0
  probe.type = GgmlType::kIQ1_S;
  if (!QuantGemmTakesTernary(probe)) GTEST_SKIP() << "no IQ1_S wgmma kernel here";
  auto expect_same = [](const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_FALSE(got.empty() || want.empty()) << what;
    const BitDiff d = CompareBits(got, want);
    EXPECT_TRUE(d.differ == 0 && d.zero_sign == 0)
        << what << ": " << d.differ << " outputs differ (first at " << d.first << "), " << d.zero_sign
        << " in the sign of zero";
  };
  std::mt19937_64 rng(81);
  std::vector<int32_t> off, xr;
  RandomRouting(1024, 16, 224, 0.05, rng, off, xr);
  const Knobs tern{false, 0, true, true};
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{3072, 3584}, {3584, 3072}, {200, 3584}}) {
    GroupedCase g{GgmlType::kIQ1_S, rows, cols, 1024, off, xr, 1024 * 16 + 3, 16, false};
    const GroupedInputs in = MakeGroupedInputs(g, 82 + rows), in_up = MakeGroupedInputs(g, 83 + rows);
    const std::vector<float> want = LaunchGrouped(g, in);
    std::vector<uint16_t> want_half, got_half;
    const std::vector<float> want_fused = LaunchGrouped(g, in, &in_up.pool);
    const bool half = rows % 128 == 0;  // y_half takes whole permutation windows
    if (half) LaunchGrouped(g, in, &in_up.pool, &want_half);
    g.knobs = tern;
    expect_same(LaunchGrouped(g, in), want, GroupedName(g));
    expect_same(LaunchGrouped(g, in, &in_up.pool), want_fused, GroupedName(g) + " gate|up");
    if (half) {
      LaunchGrouped(g, in, &in_up.pool, &got_half);
      EXPECT_TRUE(!got_half.empty() && got_half == want_half) << GroupedName(g) << " gate|up, f16 output";
    }
  }
  std::mt19937_64 prng(85);
  for (const auto& [rows, cols, tokens] : {std::tuple<int64_t, int64_t, int64_t>{4168, 512, 1100}, {200, 3584, 37}}) {
    PlainCase c{GgmlType::kIQ1_S, rows, cols, tokens};
    const std::vector<uint8_t> w = RandomQuantRows(c.type, c.rows, c.cols, prng);
    const std::vector<uint8_t> wu = RandomQuantRows(c.type, c.rows, c.cols, prng);
    const std::vector<float> x = Normal(prng, c.n_tokens * c.cols, 0.0, 1.0);
    const std::vector<float> want = LaunchPlain(c, w, x, c.cols, c.rows);
    const std::vector<float> want_fused = LaunchPlain(c, w, x, c.cols, c.rows, &wu);
    c.knobs = tern;
    expect_same(LaunchPlain(c, w, x, c.cols, c.rows), want, PlainName(c));
    expect_same(LaunchPlain(c, w, x, c.cols, c.rows, &wu), want_fused, PlainName(c) + " gate|up");
  }
}

TEST(QuantGemmTest, GraphCaptureAndReplay) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(31);
  const int64_t rows = 256, cols = 1024, n = 200;
  const auto w = RandomQuantRows(GgmlType::kQ8_0, rows, cols, rng);
  const auto x = Normal(rng, n * cols, 0.0, 1.0);
  DeviceBuffer<uint8_t> d_w(w);
  DeviceBuffer<float> d_x(x), d_y(n * rows), d_y2(n * rows);
  QuantGemmParams p;
  p.type = GgmlType::kQ8_0;
  p.weight = d_w.get();
  p.rows = rows;
  p.cols = cols;
  p.row_bytes = RowBytes(p.type, cols);
  p.x = d_x.get();
  p.x_stride = cols;
  p.y = d_y.get();
  p.y_stride = rows;
  p.n_tokens = n;
  DeviceBuffer<uint8_t> ws(QuantGemmWorkspaceBytes(p));
  p.workspace = ws.get();
  p.workspace_bytes = ws.size();
  K3_ASSERT_LAUNCH(QuantGemm(p, nullptr));  // first call outside capture (sets kernel attributes)
  cudaStream_t stream;
  K3_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  K3_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  p.y = d_y2.get();
  const cudaError_t e = QuantGemm(p, stream);
  K3_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  K3_ASSERT_CUDA(e);
  K3_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  d_y2.Poison();
  K3_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
  K3_ASSERT_CUDA(cudaStreamSynchronize(stream));
  EXPECT_TRUE(BitEqual(d_y.Download().data(), d_y2.Download().data(), n * rows));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---- the cuBLAS form ----

// QuantDequantF16 writes the CPU decoder's value rounded to nearest f16, bit for bit (a zero's sign
// aside: IQ1_S's f16 decode may give -0 for d = -0), for every type, from an inner row on.
TEST(QuantGemmBlasTest, DequantF16IsTheDecoderRoundedToHalf) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(7000);
  const int64_t rows = 37, cols = 512, begin = 5, n = 30;
  for (GgmlType type : AllGpuTypes()) {
    SCOPED_TRACE(quant::TypeName(type));
    const std::vector<uint8_t> w = RandomQuantRows(type, rows, cols, rng);
    DeviceBuffer<uint8_t> d_w(w);
    DeviceBuffer<uint16_t> d_out(static_cast<size_t>(n * cols));
    QuantDequantF16Params p{type, d_w.get(), cols, RowBytes(type, cols), begin, n, d_out.get()};
    K3_ASSERT_LAUNCH(QuantDequantF16(p, nullptr));
    const std::vector<uint16_t> got = d_out.Download();
    std::vector<float> row(cols);
    int64_t differ = 0;
    for (int64_t r = 0; r < n; ++r) {
      quant::DequantizeRow(type, w.data() + (begin + r) * RowBytes(type, cols), row.data(), cols);
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t want = quant::F32ToF16(row[c]), have = got[r * cols + c];
        differ += want != have && (want | have) != 0x8000u;
      }
    }
    EXPECT_EQ(differ, 0);
  }
}

TEST(QuantGemmBlasTest, EveryTypeInRowBlocks) {
  K3_REQUIRE_GPU();
  // 300 rows in blocks of 128: two whole blocks and a partial one; 17 and 130 tokens.
  uint64_t seed = 7100;
  for (GgmlType type : AllGpuTypes()) {
    for (int64_t tokens : {17, 130}) RunPlain({type, 300, 512, tokens, false, {}, 128}, ++seed);
  }
}

TEST(QuantGemmBlasTest, K3ProjectionsQ8_0) {
  K3_REQUIRE_GPU();
  // The engine's scratch is 64 MiB: 4608 rows of 7168 columns, 2688 of 12288.
  RunPlain({GgmlType::kQ8_0, 12288, 7168, 600, false, {}, 4608}, 7201);
  RunPlain({GgmlType::kQ8_0, 7168, 12288, 530, false, {}, 2688}, 7202);
}

// The resident f16 copy (weight_half): no decode in the call, one cuBLAS product over every row;
// the same operands, so the same bars.
TEST(QuantGemmBlasTest, ResidentHalfWeights) {
  K3_REQUIRE_GPU();
  uint64_t seed = 7150;
  for (GgmlType type : AllGpuTypes()) RunPlain({type, 300, 512, 130, false, {}, 128, true}, ++seed);
  RunPlain({GgmlType::kQ8_0, 12288, 7168, 600, false, {}, 128, true}, 7203);
  RunPlain({GgmlType::kQ8_0, 12288, 7168, 600, false, {}, 128, true, true}, 7204);
  RunPlain({GgmlType::kQ4_K, 300, 512, 130, false, {}, 128, true, true}, 7205);
}

// The router's exact path: cuBLAS's f32 GEMM against the CPU at f32 summation-order tolerance
// (c2 1e-5, several times the f32 rounding of a 7168-term sum; a product rounded to f16 or TF32
// anywhere would be off by ~5e-4 · L2).
TEST(QuantGemmBlasTest, F32GemmIsExactUpToSummationOrder) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(7300);
  const int64_t rows = 896, cols = 7168, n = 600, xs = cols + 4, ys = rows + 3;
  const std::vector<float> w = Normal(rng, rows * cols, 0.0, 0.02), x = Normal(rng, n * xs, 0.0, 1.0);
  DeviceBuffer<float> d_w(w), d_x(x), d_y(static_cast<size_t>(n * ys));
  d_y.Poison();
  BlasHandle blas;
  const F32GemmParams p{d_w.get(), rows, cols, d_x.get(), xs, d_y.get(), ys, n};
  K3_ASSERT_LAUNCH(F32GemmBlas(p, blas.h, nullptr));
  const std::vector<float> y = d_y.Download();
  std::vector<uint8_t> wb(w.size() * 4);
  std::memcpy(wb.data(), w.data(), wb.size());
  const Ref ref = CpuProduct(GgmlType::kF32, wb.data(), rows, cols, x.data(), n, xs);
  std::vector<int64_t> at(n);
  std::iota(at.begin(), at.end(), 0);
  EXPECT_TRUE(CheckRows(y, ys, at, ref, rows, Tol{1e-5, 1e-7}, "F32GemmBlas router 7168->896"));
  EXPECT_EQ(F32GemmBlas(F32GemmParams{d_w.get(), rows, cols, d_x.get(), cols - 1, d_y.get(), ys, n}, blas.h, nullptr),
            cudaErrorInvalidValue);
}

// The router's tensor-core form (3xTF32) held to the same f32 summation-order tolerance as cuBLAS's
// exact f32 GEMM (a plain TF32 product would be ~5e-4 · L2 off): the router's shape, the KDA beta's
// 96 rows (a partial row tile), ragged tokens and a K that is not a whole k-tile; padding untouched.
TEST(F32GemmTf32x3Test, MatchesCpuAtF32SummationOrderTolerance) {
  K3_REQUIRE_GPU();
  struct Shape {
    int64_t rows, cols, n;
  };
  std::mt19937_64 rng(7301);
  for (const Shape sh : {Shape{896, 7168, 600}, Shape{96, 7168, 130}, Shape{200, 100, 1}, Shape{1, 4, 3},
                         Shape{128, 256, 2000}}) {
    const int64_t xs = sh.cols + 4, ys = sh.rows + 3;
    const std::vector<float> w = Normal(rng, sh.rows * sh.cols, 0.0, 0.02), x = Normal(rng, sh.n * xs, 0.0, 1.0);
    DeviceBuffer<float> d_w(w), d_x(x), d_y(static_cast<size_t>(sh.n * ys));
    d_y.Poison();
    const F32GemmParams p{d_w.get(), sh.rows, sh.cols, d_x.get(), xs, d_y.get(), ys, sh.n};
    ASSERT_TRUE(F32GemmTf32x3Supports(p));
    K3_ASSERT_LAUNCH(F32GemmTf32x3(p, nullptr));
    const std::vector<float> y = d_y.Download();
    std::vector<uint8_t> wb(w.size() * 4);
    std::memcpy(wb.data(), w.data(), wb.size());
    const Ref ref = CpuProduct(GgmlType::kF32, wb.data(), sh.rows, sh.cols, x.data(), sh.n, xs);
    std::vector<int64_t> at(sh.n);
    std::iota(at.begin(), at.end(), 0);
    const std::string what = "F32GemmTf32x3 " + std::to_string(sh.cols) + "->" + std::to_string(sh.rows) + " x" +
                             std::to_string(sh.n);
    EXPECT_TRUE(CheckRows(y, ys, at, ref, sh.rows, Tol{1e-5, 1e-7}, what));
  }
}

TEST(F32GemmTf32x3Test, RejectsWhatItCannotCopy) {
  K3_REQUIRE_GPU();
  DeviceBuffer<float> d_w(64 * 64 + 4), d_x(8 * 68 + 4), d_y(8 * 64);
  const F32GemmParams ok{d_w.get(), 64, 64, d_x.get(), 68, d_y.get(), 64, 8};
  EXPECT_TRUE(F32GemmTf32x3Supports(ok));
  F32GemmParams p = ok;
  p.cols = 62;  // not whole 16-byte pieces
  EXPECT_FALSE(F32GemmTf32x3Supports(p));
  EXPECT_EQ(F32GemmTf32x3(p, nullptr), cudaErrorInvalidValue);
  p = ok;
  p.x_stride = 66;
  EXPECT_FALSE(F32GemmTf32x3Supports(p));
  p = ok;
  p.x = d_x.get() + 1;  // 4-byte aligned only
  EXPECT_FALSE(F32GemmTf32x3Supports(p));
  p = ok;
  p.y_stride = 63;
  EXPECT_FALSE(F32GemmTf32x3Supports(p));
  p = ok;
  p.y = nullptr;
  EXPECT_EQ(F32GemmTf32x3(p, nullptr), cudaErrorInvalidValue);
  p = ok;
  p.n_tokens = 0;
  EXPECT_EQ(F32GemmTf32x3(p, nullptr), cudaSuccess);
}

TEST(QuantGemmBlasTest, RejectsBadArguments) {
  K3_REQUIRE_GPU();
  BlasHandle blas;
  DeviceBuffer<uint8_t> d_w(RowBytes(GgmlType::kQ8_0, 256) * 256), d_ws(1 << 20), d_wh(256 * 256 * 2);
  DeviceBuffer<float> d_x(64 * 256), d_y(64 * 256);
  DeviceBuffer<int32_t> d_rows(64);
  QuantGemmParams p;
  p.type = GgmlType::kQ8_0;
  p.weight = d_w.get();
  p.rows = 256;
  p.cols = 256;
  p.row_bytes = RowBytes(GgmlType::kQ8_0, 256);
  p.x = d_x.get();
  p.x_stride = 256;
  p.y = d_y.get();
  p.y_stride = 256;
  p.n_tokens = 64;
  p.workspace = d_ws.get();
  p.workspace_bytes = d_ws.size();
  const BlasScratch ok{blas.h, d_wh.get(), d_wh.size()};
  EXPECT_EQ(QuantGemmBlas(p, ok, nullptr), cudaSuccess);
  EXPECT_EQ(QuantGemmBlas(p, BlasScratch{blas.h, d_wh.get(), 127 * 256 * 2}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(QuantGemmBlas(p, BlasScratch{nullptr, d_wh.get(), d_wh.size()}, nullptr), cudaErrorInvalidValue);
  // A resident copy needs no scratch, but 16-byte alignment.
  EXPECT_EQ(QuantGemmBlas(p, BlasScratch{blas.h, nullptr, 0}, nullptr, d_wh.get()), cudaSuccess);
  EXPECT_EQ(QuantGemmBlas(p, BlasScratch{blas.h, nullptr, 0}, nullptr, d_wh.get() + 2), cudaErrorMisalignedAddress);
  EXPECT_EQ(QuantGemmBlas(p, BlasScratch{blas.h, nullptr, 0}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(QuantGemmBlas(p, ok, nullptr, nullptr, d_wh.get() + 2), cudaErrorMisalignedAddress);
  QuantGemmParams q = p;
  q.split_x = true;
  EXPECT_EQ(QuantGemmBlas(q, ok, nullptr), cudaErrorInvalidValue);
  q = p;
  q.x_rows = d_rows.get();
  q.x_src_rows = 64;
  EXPECT_EQ(QuantGemmBlas(q, ok, nullptr), cudaErrorInvalidValue);
  q = p;
  q.workspace_bytes = 100;
  EXPECT_EQ(QuantGemmBlas(q, ok, nullptr), cudaErrorInvalidValue);
  q = p;
  q.cols = 250;  // not whole blocks
  q.row_bytes = 0;
  EXPECT_NE(QuantGemmBlas(q, ok, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(QuantGemmTest, RejectsBadArguments) {
  K3_REQUIRE_GPU();
  DeviceBuffer<uint8_t> w(34 * 8 * 4 + 64);
  DeviceBuffer<float> x(1024), y(64);
  DeviceBuffer<int32_t> off(4);
  QuantGemmParams p;
  p.type = GgmlType::kQ8_0;
  p.weight = w.get();
  p.rows = 4;
  p.cols = 256;
  p.row_bytes = 34 * 8;
  p.x = x.get();
  p.x_stride = 256;
  p.y = y.get();
  p.y_stride = 4;
  p.n_tokens = 2;
  DeviceBuffer<uint8_t> ws(4096);
  p.workspace = ws.get();
  p.workspace_bytes = ws.size();
  EXPECT_EQ(QuantGemm(p, nullptr), cudaSuccess);
  K3_ASSERT_CUDA(cudaDeviceSynchronize());
  QuantGemmParams bad = p;
  bad.row_bytes = 34 * 8 + 2;  // not dense
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.x = x.get() + 1;  // misaligned activations
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorMisalignedAddress);
  bad = p;
  bad.weight = w.get() + 2;  // misaligned weights
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorMisalignedAddress);
  bad = p;
  bad.type = GgmlType::kQ8_K;  // no decoder
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.type = GgmlType::kF32;
  bad.cols = 48;  // not a multiple of 32
  bad.row_bytes = 48 * 4;
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.x_stride = 250;  // < cols
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.y_stride = 3;  // < rows
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.n_groups = 3;  // several groups need group_offsets
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.n_groups = 3;
  bad.group_offsets = off.get();
  bad.mat_stride_bytes = 8;  // not a multiple of 16, and smaller than a matrix
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.token_tile = 32;  // 0, 64 or 128
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.y = nullptr;
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.workspace_bytes = QuantGemmWorkspaceBytes(p) - 1;  // short workspace
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.workspace = nullptr;
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.x_rows = off.get();  // gathered x without x_src_rows
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(QuantGemmWorkspaceBytes(p), 1024u);  // 2 rows x 256 halves x 2 bytes
  bad = p;
  bad.split_x = true;
  EXPECT_EQ(QuantGemmWorkspaceBytes(bad), 2048u);
  bad = p;
  bad.iq1s_ternary = true;  // the ternary form of a type that has none
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.n_tokens = 0;  // nothing to do
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaSuccess);
  EXPECT_TRUE(QuantGemmSupports(GgmlType::kIQ1_S));
  EXPECT_FALSE(QuantGemmSupports(GgmlType::kQ8_K));

  // IQ1_S in the ternary form: its row bytes, and only where the wgmma kernel runs it
  QuantGemmParams t = p;
  t.type = GgmlType::kIQ1_S;
  t.row_bytes = static_cast<size_t>(Iq1sTernaryRowBytes(256));  // 72 + 8 (one block: odd 8-byte words)
  t.iq1s_ternary = true;
  if (QuantGemmTakesTernary(t)) {
    EXPECT_EQ(QuantGemm(t, nullptr), cudaSuccess);
    K3_ASSERT_CUDA(cudaDeviceSynchronize());
  }
  bad = t;
  bad.row_bytes = 50;  // the ggml rows' size
  EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue);
  for (int knob = 0; knob < 4; ++knob) {  // each keeps the product off the wgmma kernel
    bad = t;
    bad.wgmma = knob != 0;
    bad.split_x = knob == 1;
    bad.generic_decode = knob == 2;
    bad.token_tile = knob == 3 ? 64 : 0;
    EXPECT_FALSE(QuantGemmTakesTernary(bad)) << knob;
    EXPECT_EQ(QuantGemm(bad, nullptr), cudaErrorInvalidValue) << knob;
  }
}

}  // namespace
}  // namespace k3::cuda::testing
