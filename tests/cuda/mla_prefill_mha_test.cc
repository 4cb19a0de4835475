// MlaPrefillMha against spec 4.5's absorbed form on the CPU: per query row and head, Q =
// attn_k_b[h]ᵀ-absorb(q_nope) | q_pe (double), k3::cpu::MlaAttention over the paged 576-wide rows,
// then o_h = attn_v_b[h] · lat (double). The GPU computes the decompressed form (K_h, V_h per head),
// so agreement checks the algebra as well as the kernels. Paged caches (f32 and f16; pages shuffled
// in a pool, the table padded with -1 beyond the sequence's pages), attn_k_b / attn_v_b as Q8_0 and
// F16 stacks (contiguous and with padding between heads), 96 and 48 heads, runs of 1 to 700 rows at
// positions 0..1500, workspaces that hold all heads or force groups of 7 (a remainder group
// included), and argument checks. q, the cache rows, the weights, K, V and the softmax weights are
// rounded to f16 (f32 accumulation): the bar is a relative L2 error of 3e-3 per output vector.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/mla_attention.h"
#include "kernels/cuda/mla/mla_prefill_mha.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/ggml_type.h"
#include "kernels/quant/half.h"
#include "kernels/quant/quantize_q8_0.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/mla_test_pool.h"

namespace k3::cuda::testing {
namespace {

constexpr double kBar = 3e-3;
constexpr int64_t kNope = kMlaMhaNope, kLat = kMlaMhaLatent, kVal = kMlaMhaValue;

struct MhaCase {
  int64_t n_heads;
  MlaCacheType cache_type;
  quant::GgmlType weight_type;  // kQ8_0 or kF16
  int64_t run;                  // query rows
  int64_t pos;                  // position of the first one (its len is pos + 1)
  int64_t group = 0;            // heads per group the workspace holds (0: all)
  int64_t page_size = 64;
  size_t head_pad = 0;       // bytes between the heads' matrices beyond the matrix itself
  int64_t check_stride = 1;  // CPU reference on rows i % stride == 0 and the last row
};

// A stack of n_heads matrices [rows][cols] of `type` with `pad` bytes after each, random values;
// `values` gets what the GPU decodes (the dequantized matrices, [n_heads][rows][cols]).
std::vector<uint8_t> RandomStack(std::mt19937_64& rng, quant::GgmlType type, int64_t n_heads, int64_t rows,
                                 int64_t cols, size_t pad, size_t* head_bytes, std::vector<float>* values) {
  const quant::TypeTraits& tr = quant::Traits(type);
  const size_t row_bytes = static_cast<size_t>(cols / tr.block_elems) * tr.block_bytes;
  *head_bytes = row_bytes * rows + pad;
  std::vector<uint8_t> bytes(*head_bytes * n_heads, 0);
  values->resize(n_heads * rows * cols);
  const std::vector<float> src = Normal(rng, n_heads * rows * cols, 0.0, 0.06);
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = &src[(h * rows + r) * cols];
      uint8_t* dst = bytes.data() + h * *head_bytes + r * row_bytes;
      if (type == quant::GgmlType::kQ8_0) {
        quant::QuantizeRowQ8_0(x, dst, cols);
      } else {
        for (int64_t c = 0; c < cols; ++c) {
          const uint16_t v = quant::F32ToF16(x[c]);
          std::memcpy(dst + 2 * c, &v, 2);
        }
      }
      quant::DequantizeRow(type, dst, &(*values)[(h * rows + r) * cols], cols);
    }
  }
  return bytes;
}

class CublasHandle {
 public:
  CublasHandle() { ok_ = cublasCreate(&h_) == CUBLAS_STATUS_SUCCESS; }
  ~CublasHandle() {
    if (ok_) cublasDestroy(h_);
  }
  cublasHandle_t get() const { return ok_ ? h_ : nullptr; }

 private:
  cublasHandle_t h_ = nullptr;
  bool ok_ = false;
};

void RunMha(const MhaCase& c, uint64_t seed) {
  const char* ctype = c.cache_type == MlaCacheType::kF16 ? "f16" : "f32";
  const char* wtype = c.weight_type == quant::GgmlType::kQ8_0 ? "q8_0" : "f16";
  SCOPED_TRACE(::testing::Message() << "heads " << c.n_heads << " cache " << ctype << " weights " << wtype << " run "
                                    << c.run << " pos " << c.pos << " group " << c.group << " page " << c.page_size
                                    << " pad " << c.head_pad);
  std::mt19937_64 rng(seed);
  const int64_t RW = kMlaRow, ps = c.page_size, nh = c.n_heads, QK = kQkHeadDim;
  const int64_t kv_len = c.pos + c.run;
  const int64_t row_stride = RW + 8, page_stride = ps * row_stride + 64;
  const int64_t n_pages = (kv_len + ps - 1) / ps, pool_pages = n_pages + 3;
  MlaTestPool pool;
  FillMlaTestPool(rng, pool_pages, page_stride, c.cache_type, &pool);
  std::vector<int32_t> table(n_pages + 2, -1);  // -1 beyond the sequence's pages
  for (int64_t pg = 0; pg < n_pages; ++pg) table[pg] = pool.order[pg];
  std::vector<int32_t> lens(c.run);
  for (int64_t i = 0; i < c.run; ++i) lens[i] = static_cast<int32_t>(c.pos + i + 1);
  const int64_t q_stride = nh * QK + 4, out_stride = nh * kVal + 8;
  const auto q = Normal(rng, c.run * q_stride, 0.0, 1.0);
  size_t kb_head = 0, vb_head = 0;
  std::vector<float> kb, vb;  // [h][512][128], [h][128][512]
  const auto kb_bytes = RandomStack(rng, c.weight_type, nh, kLat, kNope, c.head_pad, &kb_head, &kb);
  const auto vb_bytes = RandomStack(rng, c.weight_type, nh, kVal, kLat, c.head_pad, &vb_head, &vb);

  DeviceBuffer<int32_t> d_table(table), d_lens(lens);
  DeviceBuffer<float> d_q(q), d_out(c.run * out_stride);
  DeviceBuffer<uint8_t> d_kb(kb_bytes), d_vb(vb_bytes);
  const size_t ws_bytes = MlaPrefillMhaWorkspaceBytes(kv_len, nh, c.group > 0 ? c.group : nh);
  ASSERT_EQ(MlaPrefillMhaGroup(kv_len, nh, ws_bytes), c.group > 0 ? c.group : nh);
  DeviceBuffer<uint8_t> d_ws(ws_bytes);
  d_out.Poison();
  d_ws.Poison();
  CublasHandle blas;
  ASSERT_NE(blas.get(), nullptr);
  MlaPrefillMhaParams p;
  p.q = d_q.get();
  p.q_row_stride = q_stride;
  p.cache = pool.device(c.cache_type);
  p.cache_type = c.cache_type;
  p.page_stride = page_stride;
  p.row_stride = row_stride;
  p.page_size = ps;
  p.block_table = d_table.get();
  p.kv_len = kv_len;
  p.seq_lens = d_lens.get();
  p.n_rows = c.run;
  p.n_heads = nh;
  p.weight_type = c.weight_type;
  p.k_b = d_kb.get();
  p.k_b_head_bytes = kb_head;
  p.v_b = d_vb.get();
  p.v_b_head_bytes = vb_head;
  p.scale = 1.0f / std::sqrt(static_cast<float>(QK));
  p.out = d_out.get();
  p.out_row_stride = out_stride;
  p.blas = blas.get();
  p.workspace = d_ws.get();
  p.workspace_bytes = ws_bytes;
  K3_ASSERT_LAUNCH(MlaPrefillMha(p, nullptr));
  const auto out = d_out.Download();

  double worst = 0.0;
  int64_t worst_row = -1, worst_head = -1, checked = 0, bad_padding = 0, not_finite = 0;
  std::vector<const float*> pages(n_pages);
  for (int64_t pg = 0; pg < n_pages; ++pg) pages[pg] = pool.values.data() + table[pg] * page_stride;
  std::vector<float> qabs(nh * RW), lat(nh * kLat);
  for (int64_t i = 0; i < c.run; ++i) {
    const float* got = out.data() + i * out_stride;
    for (int64_t k = nh * kVal; k < out_stride; ++k) bad_padding += std::isnan(got[k]) ? 0 : 1;
    for (int64_t k = 0; k < nh * kVal; ++k) not_finite += std::isfinite(got[k]) ? 0 : 1;
    if (i % c.check_stride != 0 && i != c.run - 1) continue;
    ++checked;
    for (int64_t h = 0; h < nh; ++h) {  // the absorbed query: Q[j] = Σ_n q_nope[n] k_b[h][j][n] | q_pe
      const float* qh = &q[i * q_stride + h * QK];
      for (int64_t j = 0; j < kLat; ++j) {
        double acc = 0.0;
        for (int64_t n = 0; n < kNope; ++n) acc += static_cast<double>(qh[n]) * kb[(h * kLat + j) * kNope + n];
        qabs[h * RW + j] = static_cast<float>(acc);
      }
      for (int64_t r = 0; r < RW - kLat; ++r) qabs[h * RW + kLat + r] = qh[kNope + r];
    }
    cpu::MlaAttention({qabs.data(), pages.data(), ps, row_stride, lens[i], RW, kLat, nh, p.scale, lat.data()});
    for (int64_t h = 0; h < nh; ++h) {
      double num = 0.0, den = 0.0;
      for (int64_t n = 0; n < kVal; ++n) {
        double e = 0.0;
        for (int64_t j = 0; j < kLat; ++j) e += static_cast<double>(vb[(h * kVal + n) * kLat + j]) * lat[h * kLat + j];
        const double a = got[h * kVal + n];
        num += (a - e) * (a - e);
        den += e * e;
      }
      const double rel = std::sqrt(num / std::max(den, 1e-300));
      if (!(rel <= worst)) {  // NaN is the worst
        worst = std::isnan(rel) ? INFINITY : rel;
        worst_row = i;
        worst_head = h;
      }
    }
  }
  std::printf(
      "[ MlaPrefillMha ] heads %2lld cache %s weights %s run %4lld pos %5lld group %2lld page %2lld pad %zu: "
      "%lld rows checked, worst rel L2 %.3e (row %lld head %lld)\n",
      static_cast<long long>(nh), ctype, wtype, static_cast<long long>(c.run), static_cast<long long>(c.pos),
      static_cast<long long>(c.group), static_cast<long long>(ps), c.head_pad, static_cast<long long>(checked), worst,
      static_cast<long long>(worst_row), static_cast<long long>(worst_head));
  EXPECT_EQ(bad_padding, 0) << "output padding written";
  EXPECT_EQ(not_finite, 0) << "outputs not finite";
  EXPECT_LE(worst, kBar) << "row " << worst_row << " head " << worst_head;
}

using quant::GgmlType;

TEST(CudaMlaPrefillMhaTest, K3HeadsF16CacheQ8Weights) {
  K3_REQUIRE_GPU();
  RunMha({kHeads, MlaCacheType::kF16, GgmlType::kQ8_0, 300, 0, 0, 64, 0, 7}, 100);
  RunMha({kHeads, MlaCacheType::kF16, GgmlType::kQ8_0, 1, 0, 0, 64, 0, 1}, 101);
  RunMha({kHeads, MlaCacheType::kF16, GgmlType::kQ8_0, 64, 1000, 0, 64, 0, 9}, 102);
}

TEST(CudaMlaPrefillMhaTest, F32CacheF16WeightsHalfHeadsTp2) {
  K3_REQUIRE_GPU();
  RunMha({kHeads / 2, MlaCacheType::kF32, GgmlType::kF16, 700, 100, 0, 64, 0, 23}, 200);
  RunMha({kHeads / 2, MlaCacheType::kF32, GgmlType::kQ8_0, 129, 1500, 0, 16, 0, 16}, 201);
}

TEST(CudaMlaPrefillMhaTest, HeadGroupsAndPaddedStacks) {
  K3_REQUIRE_GPU();
  // 96 = 13 groups of 7 + 5; heads' matrices 48 bytes apart beyond their size (one dequant per head).
  RunMha({kHeads, MlaCacheType::kF16, GgmlType::kQ8_0, 200, 37, 7, 64, 0, 13}, 300);
  RunMha({kHeads, MlaCacheType::kF32, GgmlType::kF16, 75, 300, 7, 32, 48, 11}, 301);
  RunMha({4, MlaCacheType::kF16, GgmlType::kQ8_0, 300, 0, 1, 16, 16, 1}, 302);  // golden model: 4 heads
}

TEST(CudaMlaPrefillMhaTest, RejectsBadArguments) {
  K3_REQUIRE_GPU();
  CublasHandle blas;
  ASSERT_NE(blas.get(), nullptr);
  const int64_t nh = 4, kv_len = 100, n = 10;
  DeviceBuffer<float> d_q(n * nh * kQkHeadDim), d_out(n * nh * kVal), d_cache(2 * 64 * kMlaRow);
  DeviceBuffer<int32_t> d_table(std::vector<int32_t>{0, 1}), d_lens(n);
  DeviceBuffer<uint8_t> d_kb(nh * kLat * kNope * 2), d_vb(nh * kLat * kVal * 2);
  const size_t ws = MlaPrefillMhaWorkspaceBytes(kv_len, nh, 1);
  DeviceBuffer<uint8_t> d_ws(ws);
  MlaPrefillMhaParams good;
  good.q = d_q.get();
  good.q_row_stride = nh * kQkHeadDim;
  good.cache = d_cache.get();
  good.cache_type = MlaCacheType::kF32;
  good.page_stride = 64 * kMlaRow;
  good.row_stride = kMlaRow;
  good.page_size = 64;
  good.block_table = d_table.get();
  good.kv_len = kv_len;
  good.seq_lens = d_lens.get();
  good.n_rows = n;
  good.n_heads = nh;
  good.weight_type = GgmlType::kF16;
  good.k_b = d_kb.get();
  good.k_b_head_bytes = kLat * kNope * 2;
  good.v_b = d_vb.get();
  good.v_b_head_bytes = kLat * kVal * 2;
  good.scale = 0.07f;
  good.out = d_out.get();
  good.out_row_stride = nh * kVal;
  good.blas = blas.get();
  good.workspace = d_ws.get();
  good.workspace_bytes = ws;
  EXPECT_EQ(MlaPrefillMhaGroup(kv_len, nh, ws - 1), 0);
  auto expect = [&](cudaError_t want, auto&& edit, const char* what) {
    MlaPrefillMhaParams p = good;
    edit(p);
    EXPECT_EQ(MlaPrefillMha(p, nullptr), want) << what;
  };
  expect(
      cudaErrorInvalidValue, [](auto& p) { p.blas = nullptr; }, "no cuBLAS handle");
  expect(
      cudaErrorInvalidValue, [](auto& p) { p.workspace_bytes -= 1; }, "short workspace");
  expect(
      cudaErrorInvalidValue, [](auto& p) { p.kv_len = 0; }, "kv_len 0");
  expect(
      cudaErrorInvalidValue, [](auto& p) { p.weight_type = GgmlType::kQ4_K; }, "256-wide blocks");
  expect(
      cudaErrorInvalidValue, [](auto& p) { p.k_b_head_bytes -= 16; }, "short k_b heads");
  expect(
      cudaErrorInvalidValue, [](auto& p) { p.q_row_stride -= 4; }, "short q rows");
  expect(
      cudaErrorInvalidValue, [](auto& p) { p.out_row_stride -= 2; }, "short out rows");
  expect(
      cudaErrorInvalidValue, [](auto& p) { p.row_stride = kMlaRow - 8; }, "narrow cache rows");
  expect(
      cudaErrorMisalignedAddress, [](auto& p) { p.q_row_stride += 1; }, "odd q stride");
  expect(
      cudaErrorMisalignedAddress, [&](auto& p) { p.workspace = d_ws.get() + 16; }, "workspace not 256-B aligned");
  expect(
      cudaSuccess, [](auto& p) { p.n_rows = 0; }, "empty run");
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace k3::cuda::testing
