// MoeGroupTokens against a CPU grouping, exactly (offsets, positions, source rows), including ids
// of other ranks and -1; MoeCombineGrouped against the CPU's combination bit for bit; and the
// whole expert path (group -> grouped QuantGemm -> combine) against CPU products.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/quant_gemm/quant_gemm.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/dot.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/quant_random.h"

namespace k3::cuda::testing {
namespace {

using quant::GgmlType;

struct Grouping {
  std::vector<int32_t> offsets, x_rows, slot_of;
};

// The contract: position p runs over local expert 0's (t, j) in flat order, then expert 1's...
Grouping GroupOnHost(const std::vector<int32_t>& ids, int64_t k, int64_t n_experts, int32_t expert_begin) {
  Grouping g;
  auto local = [&](int32_t id) {
    const int64_t e = static_cast<int64_t>(id) - expert_begin;
    return e >= 0 && e < n_experts ? e : int64_t{-1};
  };
  g.offsets.assign(n_experts + 1, 0);
  for (int32_t id : ids) {
    if (local(id) >= 0) ++g.offsets[local(id) + 1];
  }
  for (int64_t e = 0; e < n_experts; ++e) g.offsets[e + 1] += g.offsets[e];
  std::vector<int32_t> next(g.offsets.begin(), g.offsets.end() - 1);
  g.x_rows.assign(g.offsets[n_experts], -1);
  g.slot_of.assign(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t e = local(ids[i]);
    if (e < 0) continue;
    const int32_t p = next[e]++;
    g.x_rows[p] = static_cast<int32_t>(i / k);
    g.slot_of[i] = p;
  }
  return g;
}

// Random router output: k distinct experts per token out of n_global, some entries -1.
std::vector<int32_t> RandomIds(int64_t n_tokens, int64_t k, int64_t n_global, double minus_one, std::mt19937_64& rng) {
  std::vector<int32_t> ids(n_tokens * k);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  std::vector<int32_t> perm(n_global);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t e = 0; e < n_global; ++e) perm[e] = static_cast<int32_t>(e);
    for (int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct
      const int64_t s = j + static_cast<int64_t>(rng() % (n_global - j));
      std::swap(perm[j], perm[s]);
      ids[t * k + j] = ud(rng) < minus_one ? -1 : perm[j];
    }
  }
  return ids;
}

struct DeviceGrouping {
  DeviceBuffer<int32_t> offsets, x_rows, slot_of;
  DeviceBuffer<uint8_t> workspace;
  DeviceBuffer<int32_t> n_passes, pass_mat, pass_row0, pass_n;  // with pass_rows > 0
};

// The passes' contract: expert e's positions in runs of pass_rows (the last shorter), experts in order.
struct Passes {
  std::vector<int32_t> mat, row0, n;
};
Passes PassesOnHost(const std::vector<int32_t>& offsets, int32_t pass_rows) {
  Passes p;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    for (int32_t r = offsets[e]; r < offsets[e + 1]; r += pass_rows) {
      p.mat.push_back(static_cast<int32_t>(e));
      p.row0.push_back(r);
      p.n.push_back(std::min(pass_rows, offsets[e + 1] - r));
    }
  }
  return p;
}

void RunGroup(const std::vector<int32_t>& ids, int64_t n_tokens, int64_t k, int64_t n_experts, int32_t expert_begin,
              DeviceGrouping& d, int32_t pass_rows = 0) {
  d.offsets.Resize(n_experts + 1);
  d.x_rows.Resize(std::max<int64_t>(n_tokens * k, 1));
  d.slot_of.Resize(std::max<int64_t>(n_tokens * k, 1));
  d.workspace.Resize(std::max<size_t>(MoeGroupWorkspaceBytes(n_tokens, k, n_experts), 1));
  d.offsets.Poison();
  ASSERT_EQ(cudaMemset(d.x_rows.get(), 0x7f, d.x_rows.size() * 4), cudaSuccess);  // 0x7f7f7f7f: untouched marker
  ASSERT_EQ(cudaMemset(d.slot_of.get(), 0x7f, d.slot_of.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(d.workspace.get(), 0xab, d.workspace.size()), cudaSuccess);  // garbage: must not matter
  DeviceBuffer<int32_t> d_ids(std::max<size_t>(ids.size(), 1));
  if (!ids.empty()) d_ids.Upload(ids);
  MoeGroupParams p;
  p.ids = d_ids.get();
  p.n_tokens = n_tokens;
  p.k = k;
  p.n_experts = n_experts;
  p.expert_begin = expert_begin;
  p.group_offsets = d.offsets.get();
  p.x_rows = d.x_rows.get();
  p.slot_of = d.slot_of.get();
  p.workspace = d.workspace.get();
  if (pass_rows > 0) {
    const int64_t n = std::max<int64_t>(n_tokens * k, 1);
    d.n_passes.Resize(1);
    d.pass_mat.Resize(n);
    d.pass_row0.Resize(n);
    d.pass_n.Resize(n);
    for (auto* b : {&d.n_passes, &d.pass_mat, &d.pass_row0, &d.pass_n}) {
      ASSERT_EQ(cudaMemset(b->get(), 0x7f, b->size() * 4), cudaSuccess);
    }
    p.pass_rows = pass_rows;
    p.n_passes = d.n_passes.get();
    p.pass_mat = d.pass_mat.get();
    p.pass_row0 = d.pass_row0.get();
    p.pass_n = d.pass_n.get();
  }
  K3_ASSERT_LAUNCH(MoeGroupTokens(p, nullptr));
}

void CheckGroup(int64_t n_tokens, int64_t k, int64_t n_experts, int32_t expert_begin, int64_t n_global,
                double minus_one, uint64_t seed, int32_t pass_rows = 2) {
  SCOPED_TRACE(::testing::Message() << "tokens " << n_tokens << " k " << k << " experts " << n_experts << " begin "
                                    << expert_begin << " of " << n_global << " pass rows " << pass_rows);
  std::mt19937_64 rng(seed);
  const std::vector<int32_t> ids = RandomIds(n_tokens, k, n_global, minus_one, rng);
  const Grouping want = GroupOnHost(ids, k, n_experts, expert_begin);
  DeviceGrouping d;
  RunGroup(ids, n_tokens, k, n_experts, expert_begin, d, pass_rows);
  if (pass_rows > 0) {
    const Passes pw = PassesOnHost(want.offsets, pass_rows);
    const size_t np = pw.mat.size();
    ASSERT_EQ(d.n_passes.Download()[0], static_cast<int32_t>(np));
    const std::vector<int32_t> pm = d.pass_mat.Download(), pr = d.pass_row0.Download(), pn = d.pass_n.Download();
    EXPECT_TRUE(std::equal(pw.mat.begin(), pw.mat.end(), pm.begin())) << "pass experts differ";
    EXPECT_TRUE(std::equal(pw.row0.begin(), pw.row0.end(), pr.begin())) << "pass rows differ";
    EXPECT_TRUE(std::equal(pw.n.begin(), pw.n.end(), pn.begin())) << "pass sizes differ";
    int64_t past_written = 0;
    for (size_t i = np; i < pm.size(); ++i) past_written += pm[i] != 0x7f7f7f7f;
    EXPECT_EQ(past_written, 0) << "passes past the count were written";
  }
  const std::vector<int32_t> off = d.offsets.Download(), xr = d.x_rows.Download(), so = d.slot_of.Download();
  EXPECT_EQ(off, want.offsets);
  const int32_t total = want.offsets.back();
  EXPECT_TRUE(std::equal(want.x_rows.begin(), want.x_rows.end(), xr.begin())) << "x_rows differ";
  int64_t past_written = 0;
  for (size_t p = total; p < xr.size(); ++p) past_written += xr[p] != 0x7f7f7f7f;
  EXPECT_EQ(past_written, 0) << "x_rows past the total were written";
  if (n_tokens * k > 0) {
    EXPECT_TRUE(std::equal(want.slot_of.begin(), want.slot_of.end(), so.begin())) << "slot_of differs";
  }
}

TEST(MoeGroupTest, MatchesCpuGroupingExactly) {
  K3_REQUIRE_GPU();
  uint64_t seed = 100;
  CheckGroup(0, 16, 896, 0, 896, 0.0, ++seed);         // empty batch: offsets all 0
  CheckGroup(1, 1, 1, 0, 1, 0.0, ++seed);
  CheckGroup(7, 3, 5, 0, 5, 0.2, ++seed);
  CheckGroup(100, 8, 896, 0, 896, 0.05, ++seed);
  CheckGroup(512, 16, 896, 0, 896, 0.0, ++seed);        // T = 512, top-16: 8192 entries, 8 chunks
  CheckGroup(4096, 16, 896, 0, 896, 0.01, ++seed);      // 65536 entries, 64 chunks
  CheckGroup(8192, 16, 896, 0, 896, 0.0, ++seed);       // 131072 entries
  CheckGroup(3000, 16, 112, 224, 896, 0.0, ++seed);     // rank 2 of 8: experts [224, 336)
  CheckGroup(1000, 64, 4096, 0, 4096, 0.3, ++seed);     // the limits: k = 64, 4096 experts
  CheckGroup(33, 16, 17, 5, 40, 0.1, ++seed);           // partial last chunk, ids below and above the rank
  CheckGroup(64, 16, 896, 0, 896, 0.0, ++seed, 0);      // no passes asked for
  CheckGroup(64, 16, 896, 0, 896, 0.0, ++seed, 3);      // passes of 3
  CheckGroup(300, 4, 8, 0, 8, 0.0, ++seed, 2);          // many passes per expert
}

TEST(MoeGroupTest, AllChoicesOnOneExpert) {
  K3_REQUIRE_GPU();
  // Worst case for the per-warp placement: every lane of every round picks the same expert.
  const int64_t n = 3000, k = 4, E = 8;
  std::vector<int32_t> ids(n * k, 3);
  for (int64_t i = 0; i < n * k; i += 5) ids[i] = -1;
  const Grouping want = GroupOnHost(ids, k, E, 0);
  DeviceGrouping d;
  RunGroup(ids, n, k, E, 0, d);
  EXPECT_EQ(d.offsets.Download(), want.offsets);
  const auto xr = d.x_rows.Download();
  EXPECT_TRUE(std::equal(want.x_rows.begin(), want.x_rows.end(), xr.begin()));
  EXPECT_EQ(d.slot_of.Download(), want.slot_of);
}

// CPU combination: for each token, its slots in increasing order, acc += w · y (product rounded,
// then added; volatile keeps the compiler from contracting into an FMA); choice_order: in the
// token's choice order, acc = fma(w, y, acc).
std::vector<float> CombineOnHost(const std::vector<float>& y, int64_t y_stride, const std::vector<int32_t>& slot_of,
                                 const std::vector<float>& w, int64_t n_tokens, int64_t k, int64_t cols,
                                 const std::vector<float>* init, int64_t out_stride, bool choice_order = false) {
  std::vector<float> out(n_tokens * out_stride, 0.0f);
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::vector<std::pair<int32_t, float>> s;
    for (int64_t j = 0; j < k; ++j) {
      if (slot_of[t * k + j] >= 0) s.push_back({slot_of[t * k + j], w[t * k + j]});
    }
    if (!choice_order) std::sort(s.begin(), s.end());
    for (int64_t c = 0; c < cols; ++c) {
      float acc = init != nullptr ? (*init)[t * out_stride + c] : 0.0f;
      for (const auto& [slot, wt] : s) {
        if (choice_order) {
          acc = std::fma(wt, y[slot * y_stride + c], acc);
          continue;
        }
        volatile float prod = wt * y[slot * y_stride + c];
        acc = acc + prod;
      }
      out[t * out_stride + c] = acc;
    }
  }
  return out;
}

void CheckCombine(int64_t n_tokens, int64_t k, int64_t cols, int64_t y_stride, int64_t out_stride, bool accumulate,
                  uint64_t seed, bool choice_order = false) {
  SCOPED_TRACE(::testing::Message() << "tokens " << n_tokens << " k " << k << " cols " << cols << " accumulate "
                                    << accumulate << " choice order " << choice_order);
  std::mt19937_64 rng(seed);
  const int64_t E = k + 30;  // k distinct experts per token
  const std::vector<int32_t> ids = RandomIds(n_tokens, k, E, 0.15, rng);
  const Grouping g = GroupOnHost(ids, k, E, 0);
  const int64_t n_grouped = std::max<int64_t>(g.offsets.back(), 1);
  const std::vector<float> y = Normal(rng, n_grouped * y_stride, 0.0, 1.0);
  const std::vector<float> w = Uniform(rng, n_tokens * k, 0.0, 1.0);
  const std::vector<float> init = Normal(rng, n_tokens * out_stride, 0.0, 1.0);
  DeviceBuffer<float> d_y(y), d_w(w), d_out(init);
  DeviceBuffer<int32_t> d_slot(g.slot_of);
  MoeCombineParams p;
  p.y = d_y.get();
  p.y_stride = y_stride;
  p.slot_of = d_slot.get();
  p.weights = d_w.get();
  p.n_tokens = n_tokens;
  p.k = k;
  p.cols = cols;
  p.out = d_out.get();
  p.out_stride = out_stride;
  p.accumulate = accumulate;
  p.choice_order = choice_order;
  K3_ASSERT_LAUNCH(MoeCombineGrouped(p, nullptr));
  const std::vector<float> got = d_out.Download();
  std::vector<float> want =
      CombineOnHost(y, y_stride, g.slot_of, w, n_tokens, k, cols, accumulate ? &init : nullptr, out_stride, choice_order);
  for (int64_t t = 0; t < n_tokens; ++t) {  // the padding keeps its initial values
    for (int64_t c = cols; c < out_stride; ++c) want[t * out_stride + c] = init[t * out_stride + c];
  }
  EXPECT_TRUE(BitEqual(got.data(), want.data(), n_tokens * out_stride));
}

TEST(MoeGroupTest, CombineMatchesCpuBitForBit) {
  K3_REQUIRE_GPU();
  CheckCombine(300, 16, 3584, 3584, 3584, false, 1);  // float4 path, K3's latent width
  CheckCombine(300, 16, 3584, 3588, 3592, true, 2);   // strided, accumulate
  CheckCombine(50, 8, 1001, 1003, 1010, false, 3);    // scalar path (odd width)
  CheckCombine(17, 64, 70, 70, 70, true, 4);          // k = 64
  CheckCombine(64, 16, 3584, 3584, 3584, false, 5, /*choice_order=*/true);  // the expert-grouped decode's form
  CheckCombine(50, 8, 1001, 1003, 1010, true, 6, /*choice_order=*/true);
}

// The whole routed-expert path on a small model: tokens routed to k of E experts, grouped on the
// device, gate products on the grouped sequence (IQ1_S, 512 -> 256), combined with the router
// weights; against per-token CPU products summed in expert order.
TEST(MoeGroupTest, EndToEndExpertPath) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(77);
  const int64_t T = 333, k = 6, E = 24, rows = 256, cols = 512;
  const GgmlType type = GgmlType::kIQ1_S;
  const size_t row_bytes = static_cast<size_t>(cols / 256) * 50, mat_stride = row_bytes * rows;
  std::vector<uint8_t> pool(mat_stride * E);
  for (int64_t e = 0; e < E; ++e) {
    const auto m = RandomQuantRows(type, rows, cols, rng);
    std::copy(m.begin(), m.end(), pool.begin() + e * mat_stride);
  }
  const std::vector<int32_t> ids = RandomIds(T, k, E, 0.1, rng);
  const std::vector<float> wts = Uniform(rng, T * k, 0.0, 1.0);
  const std::vector<float> x = Normal(rng, T * cols, 0.0, 1.0);

  DeviceGrouping d;
  RunGroup(ids, T, k, E, 0, d);
  DeviceBuffer<uint8_t> d_pool(pool);
  DeviceBuffer<float> d_x(x), d_w(wts), d_y(T * k * rows), d_out(T * rows);
  d_out.Poison();
  QuantGemmParams gp;
  gp.type = type;
  gp.weight = d_pool.get();
  gp.rows = rows;
  gp.cols = cols;
  gp.row_bytes = row_bytes;
  gp.mat_stride_bytes = static_cast<int64_t>(mat_stride);
  gp.x = d_x.get();
  gp.x_stride = cols;
  gp.x_rows = d.x_rows.get();
  gp.y = d_y.get();
  gp.y_stride = rows;
  gp.n_tokens = T * k;  // the host's bound; the device offsets say how many are real
  gp.n_groups = E;
  gp.group_offsets = d.offsets.get();
  gp.x_src_rows = T;
  DeviceBuffer<uint8_t> d_ws(QuantGemmWorkspaceBytes(gp));
  gp.workspace = d_ws.get();
  gp.workspace_bytes = d_ws.size();
  K3_ASSERT_LAUNCH(QuantGemm(gp, nullptr));
  MoeCombineParams cp;
  cp.y = d_y.get();
  cp.y_stride = rows;
  cp.slot_of = d.slot_of.get();
  cp.weights = d_w.get();
  cp.n_tokens = T;
  cp.k = k;
  cp.cols = rows;
  cp.out = d_out.get();
  cp.out_stride = rows;
  K3_ASSERT_LAUNCH(MoeCombineGrouped(cp, nullptr));
  const std::vector<float> got = d_out.Download();

  // CPU: per token, its experts in index order, out += w · (W_e x_t). Tolerance: the GEMM's
  // (tests/cuda/quant_gemm_test.cc) on Σ_e w_e·L2_e and Σ_e w_e·L1_e.
  std::vector<double> want(T * rows, 0.0), l2(T * rows, 0.0), l1(T * rows, 0.0);
  std::vector<float> wrow(cols), ye(rows);
  std::vector<std::vector<float>> deq(E, std::vector<float>(rows * cols));
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = 0; r < rows; ++r) quant::DequantizeRow(type, pool.data() + e * mat_stride + r * row_bytes, deq[e].data() + r * cols, cols);
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      if (e < 0) continue;
      const float wt = wts[t * k + j];
      quant::MatMul({type, pool.data() + e * mat_stride, rows, cols, row_bytes}, &x[t * cols], 1, cols, ye.data(), rows);
      for (int64_t r = 0; r < rows; ++r) {
        double a1 = 0, a2 = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double v = static_cast<double>(deq[e][r * cols + c]) * x[t * cols + c];
          a1 += std::fabs(v);
          a2 += v * v;
        }
        want[t * rows + r] += static_cast<double>(wt) * ye[r];
        l1[t * rows + r] += wt * a1;
        l2[t * rows + r] += wt * std::sqrt(a2);
      }
    }
  }
  std::vector<double> tol(T * rows);
  for (size_t i = 0; i < tol.size(); ++i) tol[i] = 4e-3 * l2[i] + 1e-5 * l1[i] + 1e-30;
  EXPECT_TRUE(AllClose(got, want, 0.0, 0.0, &tol));
}

TEST(MoeGroupTest, RejectsBadArguments) {
  K3_REQUIRE_GPU();
  DeviceBuffer<int32_t> ids(16), off(9), xr(16), so(16);
  DeviceBuffer<uint8_t> ws(MoeGroupWorkspaceBytes(4, 4, 8));
  MoeGroupParams p;
  p.ids = ids.get();
  p.n_tokens = 4;
  p.k = 4;
  p.n_experts = 8;
  p.group_offsets = off.get();
  p.x_rows = xr.get();
  p.slot_of = so.get();
  p.workspace = ws.get();
  ids.Poison();  // all -1: nobody on this rank
  EXPECT_EQ(MoeGroupTokens(p, nullptr), cudaSuccess);
  K3_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(off.Download(), std::vector<int32_t>(9, 0));
  MoeGroupParams bad = p;
  bad.k = 65;
  EXPECT_EQ(MoeGroupTokens(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.n_experts = 4097;
  EXPECT_EQ(MoeGroupTokens(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.workspace = nullptr;
  EXPECT_EQ(MoeGroupTokens(bad, nullptr), cudaErrorInvalidValue);
  MoeCombineParams c;
  c.y = nullptr;
  c.y_stride = 8;
  c.slot_of = so.get();
  c.weights = nullptr;
  c.n_tokens = 2;
  c.k = 4;
  c.cols = 8;
  c.out = nullptr;
  c.out_stride = 8;
  EXPECT_EQ(MoeCombineGrouped(c, nullptr), cudaErrorInvalidValue);
  c.n_tokens = 0;
  EXPECT_EQ(MoeCombineGrouped(c, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace k3::cuda::testing
