// MlaPrefill against k3::cpu::MlaAttention per query row: a run of consecutive rows of one
// sequence (row i sees cache rows 0..pos+i), paged 576-wide cache (f32 and f16; pages shuffled in
// a pool, the table padded with -1 beyond the sequence's pages), 96 and 48 heads, runs from 1 to
// 512 rows at positions 0..3584, split counts from MlaPrefillSplits and forced ones (more splits
// than key tiles included), a CUDA-graph replay, batched launches of several sequences (a decode
// step: each its own table, lens, q and out; bit for bit the per-sequence launches), and argument
// checks. q, the cache rows and the
// softmax weights are rounded to f16 (f32 accumulation): the bar is a relative L2 error of 2e-3
// per output vector (row, head); the worst is printed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/mla_attention.h"
#include "kernels/cuda/mla/mla_prefill.h"
#include "kernels/quant/half.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/mla_test_pool.h"

namespace k3::cuda::testing {
namespace {

constexpr double kBar = 2e-3;

struct PrefillCase {
  int64_t n_heads;
  MlaCacheType type;
  int64_t run;             // query rows
  int64_t pos;             // position of the first one (its len is pos + 1)
  int n_splits = 0;        // 0: MlaPrefillSplits
  int64_t page_size = 64;
  int64_t check_stride = 1;  // CPU reference on rows i % stride == 0 and the last row
  bool graph = false;        // capture the call in a CUDA graph and replay it
  bool wgmma = false;        // MlaPrefillParams::wgmma
};

// The engine's bound on the lens: a power of two >= the longest, at least 256.
int64_t Bucket(int64_t max_len) {
  int64_t b = 256;
  while (b < max_len) b *= 2;
  return b;
}

// One MlaPrefill call: on the default stream, or captured in a CUDA graph and replayed twice
// (replays give the same result).
void Launch(const MlaPrefillParams& p, bool graph) {
  if (!graph) {
    K3_ASSERT_LAUNCH(MlaPrefill(p, nullptr));
    return;
  }
  cudaStream_t stream;
  K3_ASSERT_CUDA(cudaStreamCreate(&stream));
  cudaGraph_t g;
  cudaGraphExec_t exec;
  K3_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const cudaError_t e = MlaPrefill(p, stream);
  K3_ASSERT_CUDA(cudaStreamEndCapture(stream, &g));
  K3_ASSERT_CUDA(e);
  K3_ASSERT_CUDA(cudaGraphInstantiate(&exec, g, 0));
  K3_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
  K3_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
  K3_ASSERT_CUDA(cudaStreamSynchronize(stream));
  K3_ASSERT_CUDA(cudaGraphExecDestroy(exec));
  K3_ASSERT_CUDA(cudaGraphDestroy(g));
  K3_ASSERT_CUDA(cudaStreamDestroy(stream));
  K3_ASSERT_CUDA(cudaGetLastError());
}

// Relative L2 error of one output vector (n values) against the reference (NaN stays NaN).
double RelL2(const float* got, const float* ref, int64_t n) {
  double num = 0.0, den = 0.0;
  for (int64_t d = 0; d < n; ++d) {
    const double e = ref[d], a = got[d];
    num += (a - e) * (a - e);
    den += e * e;
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

void RunPrefill(const PrefillCase& c, uint64_t seed) {
  const char* type = c.type == MlaCacheType::kF16 ? "f16" : "f32";
  SCOPED_TRACE(::testing::Message() << "heads " << c.n_heads << " " << type << " run " << c.run << " pos " << c.pos
                                    << " splits " << c.n_splits << " page " << c.page_size << (c.wgmma ? " wgmma" : ""));
  std::mt19937_64 rng(seed);
  const int64_t RW = kMlaRow, VW = kKvLora, ps = c.page_size, nh = c.n_heads;
  const int64_t len_max = c.pos + c.run, bucket = Bucket(len_max);
  const int64_t row_stride = RW + 8, page_stride = ps * row_stride + 64;
  const int64_t n_pages = (len_max + ps - 1) / ps, pool_pages = n_pages + 3;
  MlaTestPool pool;
  FillMlaTestPool(rng, pool_pages, page_stride, c.type, &pool);
  std::vector<int32_t> table((bucket + ps - 1) / ps + 1, -1);  // -1 beyond the sequence's pages
  for (int64_t pg = 0; pg < n_pages; ++pg) table[pg] = pool.order[pg];
  std::vector<int32_t> lens(c.run);
  for (int64_t i = 0; i < c.run; ++i) lens[i] = static_cast<int32_t>(c.pos + i + 1);
  const int64_t q_stride = nh * RW + 4, out_stride = nh * VW + 8;
  const auto q = Normal(rng, c.run * q_stride, 0.0, 1.0);
  const int splits = c.n_splits > 0 ? c.n_splits : MlaPrefillSplits(c.run, nh, bucket);

  DeviceBuffer<int32_t> d_table(table), d_lens(lens);
  DeviceBuffer<float> d_q(q), d_out(c.run * out_stride);
  const int64_t ws_bytes = MlaPrefillWorkspaceBytes(c.type, bucket, c.run, nh, RW, VW, splits);
  DeviceBuffer<uint8_t> d_ws(static_cast<size_t>(std::max<int64_t>(ws_bytes, 16)));
  d_out.Poison();
  d_ws.Poison();
  MlaPrefillParams p;
  p.q = d_q.get();
  p.q_row_stride = q_stride;
  p.cache = pool.device(c.type);
  p.cache_type = c.type;
  p.page_stride = page_stride;
  p.row_stride = row_stride;
  p.page_size = ps;
  p.block_table = d_table.get();
  p.seq_lens = d_lens.get();
  p.n_rows = c.run;
  p.n_heads = nh;
  p.row_width = RW;
  p.value_width = VW;
  p.max_len = bucket;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kQkHeadDim));
  p.out = d_out.get();
  p.out_row_stride = out_stride;
  p.n_splits = splits;
  p.workspace = d_ws.get();
  p.wgmma = c.wgmma;
  Launch(p, c.graph);
  if (::testing::Test::HasFatalFailure()) return;
  const auto out = d_out.Download();

  double worst = 0.0;
  int64_t worst_row = -1, worst_head = -1, checked = 0, bad_padding = 0, not_finite = 0;
  std::vector<const float*> pages(n_pages);
  for (int64_t pg = 0; pg < n_pages; ++pg) pages[pg] = pool.values.data() + table[pg] * page_stride;
  std::vector<float> ref(nh * VW);
  for (int64_t i = 0; i < c.run; ++i) {
    const float* got = out.data() + i * out_stride;
    for (int64_t k = nh * VW; k < out_stride; ++k) bad_padding += std::isnan(got[k]) ? 0 : 1;
    for (int64_t k = 0; k < nh * VW; ++k) not_finite += std::isfinite(got[k]) ? 0 : 1;
    if (i % c.check_stride != 0 && i != c.run - 1) continue;
    cpu::MlaAttention({&q[i * q_stride], pages.data(), ps, row_stride, lens[i], RW, VW, nh, p.scale, ref.data()});
    ++checked;
    for (int64_t h = 0; h < nh; ++h) {
      const double rel = RelL2(got + h * VW, ref.data() + h * VW, VW);
      if (!(rel <= worst)) {  // NaN is the worst
        worst = std::isnan(rel) ? INFINITY : rel;
        worst_row = i;
        worst_head = h;
      }
    }
  }
  std::printf("[ MlaPrefill%s ] heads %3lld %s run %4lld pos %5lld splits %2d page %2lld: %lld rows checked, worst rel L2 %.3e (row %lld head %lld)\n",
              c.wgmma ? " wgmma" : "", static_cast<long long>(nh), type, static_cast<long long>(c.run), static_cast<long long>(c.pos), splits,
              static_cast<long long>(ps), static_cast<long long>(checked), worst, static_cast<long long>(worst_row),
              static_cast<long long>(worst_head));
  EXPECT_EQ(bad_padding, 0) << "output padding written";
  EXPECT_EQ(not_finite, 0) << "outputs not finite";
  EXPECT_LE(worst, kBar) << "row " << worst_row << " head " << worst_head;
}

void RunGrid(int64_t n_heads, MlaCacheType type, int64_t stride_at_1000, uint64_t seed, bool wgmma = false) {
  for (int64_t pos : {int64_t{0}, int64_t{1000}}) {
    for (int64_t run : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{300}}) {
      PrefillCase c{n_heads, type, run, pos};
      if (pos > 0) c.check_stride = stride_at_1000;
      c.wgmma = wgmma;
      RunPrefill(c, seed++);
    }
  }
}

TEST(CudaMlaPrefillTest, K3HeadsF32Cache) {
  K3_REQUIRE_GPU();
  RunGrid(kHeads, MlaCacheType::kF32, 1, 100);
}

TEST(CudaMlaPrefillTest, K3HeadsF16Cache) {
  K3_REQUIRE_GPU();
  RunGrid(kHeads, MlaCacheType::kF16, 1, 200);
}

TEST(CudaMlaPrefillTest, HalfHeadsTp2) {
  K3_REQUIRE_GPU();
  RunGrid(kHeads / 2, MlaCacheType::kF32, 3, 300);
  RunGrid(kHeads / 2, MlaCacheType::kF16, 3, 400);
}

TEST(CudaMlaPrefillTest, ForcedSplits) {
  K3_REQUIRE_GPU();
  for (int s : {1, 3, 7}) {
    RunPrefill({kHeads, MlaCacheType::kF32, 64, 1000, s}, 500 + s);
    RunPrefill({kHeads, MlaCacheType::kF16, 64, 1000, s}, 510 + s);
  }
  RunPrefill({kHeads, MlaCacheType::kF16, 7, 0, 40}, 520);        // more splits than key tiles: empty splits
  RunPrefill({4, MlaCacheType::kF32, 300, 0, 2, 16}, 521);         // golden model: 4 heads, 16 rows per tile
  RunPrefill({20, MlaCacheType::kF16, 37, 100, 1, 7}, 522);        // heads not dividing 64, odd page size
  RunPrefill({kHeads, MlaCacheType::kF32, 100, 30, 1, 64, 1, true}, 523);  // graph replay, 1 split
  RunPrefill({kHeads, MlaCacheType::kF16, 5, 2000, 4, 64, 1, true}, 524);  // graph replay, splits
}

// n_seqs sequences of `run` rows each (the first at positions[s]) in ONE launch, pages of all of
// them shuffled in one pool; every sequence's output against the CPU and, bit for bit, against its
// own single-sequence launch with the same split count.
void RunBatched(int64_t nh, int64_t run, const std::vector<int64_t>& positions, int forced_splits, bool graph,
                uint64_t seed, bool wgmma = false) {
  const int64_t n_seqs = static_cast<int64_t>(positions.size());
  SCOPED_TRACE(::testing::Message() << "batched: heads " << nh << " seqs " << n_seqs << " run " << run << " splits "
                                    << forced_splits << (wgmma ? " wgmma" : ""));
  std::mt19937_64 rng(seed);
  const int64_t RW = kMlaRow, VW = kKvLora, ps = 64;
  int64_t len_max = 1;
  for (int64_t pos : positions) len_max = std::max(len_max, pos + run);
  const int64_t bucket = Bucket(len_max);
  const int64_t row_stride = RW + 8, page_stride = ps * row_stride + 64;
  const int64_t t_stride = (bucket + ps - 1) / ps + 2;
  std::vector<int64_t> n_pages(n_seqs);
  int64_t total_pages = 0;
  for (int64_t s = 0; s < n_seqs; ++s) total_pages += n_pages[s] = (positions[s] + run + ps - 1) / ps;
  MlaTestPool pool;
  FillMlaTestPool(rng, total_pages + 2, page_stride, MlaCacheType::kF16, &pool);
  std::vector<int32_t> table(n_seqs * t_stride, -1), lens(n_seqs * run);
  for (int64_t s = 0, next = 0; s < n_seqs; ++s) {
    for (int64_t pg = 0; pg < n_pages[s]; ++pg) table[s * t_stride + pg] = pool.order[next++];
    for (int64_t i = 0; i < run; ++i) lens[s * run + i] = static_cast<int32_t>(positions[s] + i + 1);
  }
  const int64_t q_stride = nh * RW + 4, out_stride = nh * VW + 8;
  const int64_t q_seq = run * q_stride + 12, out_seq = run * out_stride + 6;
  const auto q = Normal(rng, n_seqs * q_seq, 0.0, 1.0);
  const int splits = forced_splits > 0 ? forced_splits : MlaPrefillSplits(run, nh, bucket, n_seqs);
  DeviceBuffer<int32_t> d_table(table), d_lens(lens);
  DeviceBuffer<float> d_q(q), d_out(n_seqs * out_seq), d_one(run * out_stride);
  const int64_t ws_bytes = MlaPrefillWorkspaceBytes(MlaCacheType::kF16, bucket, n_seqs * run, nh, RW, VW, splits);
  DeviceBuffer<uint8_t> d_ws(static_cast<size_t>(std::max<int64_t>(ws_bytes, 16)));
  d_out.Poison();
  d_ws.Poison();
  MlaPrefillParams p;
  p.q = d_q.get();
  p.q_row_stride = q_stride;
  p.q_seq_stride = q_seq;
  p.cache = pool.device(MlaCacheType::kF16);
  p.cache_type = MlaCacheType::kF16;
  p.page_stride = page_stride;
  p.row_stride = row_stride;
  p.page_size = ps;
  p.block_table = d_table.get();
  p.block_table_stride = t_stride;
  p.seq_lens = d_lens.get();
  p.n_seqs = n_seqs;
  p.n_rows = run;
  p.n_heads = nh;
  p.row_width = RW;
  p.value_width = VW;
  p.max_len = bucket;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kQkHeadDim));
  p.out = d_out.get();
  p.out_row_stride = out_stride;
  p.out_seq_stride = out_seq;
  p.n_splits = splits;
  p.workspace = d_ws.get();
  p.wgmma = wgmma;
  Launch(p, graph);
  if (::testing::Test::HasFatalFailure()) return;
  const auto out = d_out.Download();

  double worst = 0.0;
  int64_t mismatches = 0, bad_padding = 0;
  std::vector<float> ref(nh * VW);
  for (int64_t s = 0; s < n_seqs; ++s) {
    const float* got = out.data() + s * out_seq;
    for (int64_t k = run * out_stride; k < out_seq; ++k) bad_padding += std::isnan(got[k]) ? 0 : 1;
    MlaPrefillParams one = p;  // the same sequence alone
    one.n_seqs = 1;
    one.q = d_q.get() + s * q_seq;
    one.block_table = d_table.get() + s * t_stride;
    one.seq_lens = d_lens.get() + s * run;
    one.out = d_one.get();
    d_one.Poison();
    K3_ASSERT_LAUNCH(MlaPrefill(one, nullptr));
    const auto alone = d_one.Download();
    std::vector<const float*> pages(n_pages[s]);
    for (int64_t pg = 0; pg < n_pages[s]; ++pg) pages[pg] = pool.values.data() + table[s * t_stride + pg] * page_stride;
    for (int64_t i = 0; i < run; ++i) {
      const float* g = got + i * out_stride;
      for (int64_t k = 0; k < nh * VW; ++k) {
        mismatches += std::memcmp(&g[k], &alone[i * out_stride + k], sizeof(float)) != 0 ? 1 : 0;
      }
      for (int64_t k = nh * VW; k < out_stride; ++k) bad_padding += std::isnan(g[k]) ? 0 : 1;
      cpu::MlaAttention({&q[s * q_seq + i * q_stride], pages.data(), ps, row_stride, lens[s * run + i], RW, VW, nh,
                         p.scale, ref.data()});
      for (int64_t h = 0; h < nh; ++h) {
        const double rel = RelL2(g + h * VW, ref.data() + h * VW, VW);
        worst = std::isnan(rel) ? INFINITY : std::max(worst, rel);
      }
    }
  }
  std::printf("[ MlaPrefill%s ] batched: heads %3lld seqs %2lld run %3lld splits %2d: worst rel L2 %.3e, %lld values differ from the single launches\n",
              wgmma ? " wgmma" : "", static_cast<long long>(nh), static_cast<long long>(n_seqs), static_cast<long long>(run), splits, worst,
              static_cast<long long>(mismatches));
  EXPECT_EQ(bad_padding, 0) << "padding written";
  EXPECT_EQ(mismatches, 0) << "batched launch differs from the per-sequence launches";
  EXPECT_LE(worst, kBar);
}

// A decode step's shapes: one row per sequence, lens far apart (a short sequence next to long ones:
// its blocks find no rows in most splits).
TEST(CudaMlaPrefillTest, BatchedSequences) {
  K3_REQUIRE_GPU();
  RunBatched(kHeads, 1, {4095, 0, 700, 2047, 1, 3000, 64, 4000}, 0, false, 700);
  RunBatched(kHeads, 1, {4095, 0, 700, 2047}, 5, true, 701);  // forced splits, graph replay
  RunBatched(kHeads / 2, 1, {100, 2500, 9}, 0, false, 702);    // 2-GPU heads
  RunBatched(kHeads, 3, {10, 500}, 1, false, 703);             // runs of several rows, 1 split
  RunBatched(20, 2, {1000, 30, 77}, 3, false, 704);            // heads not dividing 64
}

// The warpgroup kernel (MlaPrefillParams::wgmma) on the same cases: the same CPU bar, batched
// launches bit for bit their single-sequence launches, and a 32k-row decode context.
#define K3_REQUIRE_MLA_WGMMA()                                                   \
  do {                                                                           \
    K3_REQUIRE_GPU();                                                            \
    if (!MlaPrefillWgmmaSupports(kMlaRow, kKvLora)) GTEST_SKIP() << "no sm_90a"; \
  } while (0)

TEST(CudaMlaPrefillWgmmaTest, K3HeadsF16Cache) {
  K3_REQUIRE_MLA_WGMMA();
  RunGrid(kHeads, MlaCacheType::kF16, 1, 1200, true);
}

TEST(CudaMlaPrefillWgmmaTest, K3HeadsF32CacheAndHalfHeads) {
  K3_REQUIRE_MLA_WGMMA();
  RunGrid(kHeads, MlaCacheType::kF32, 3, 1100, true);
  RunGrid(kHeads / 2, MlaCacheType::kF16, 3, 1300, true);
}

TEST(CudaMlaPrefillWgmmaTest, ForcedSplitsAndOddShapes) {
  K3_REQUIRE_MLA_WGMMA();
  for (int s : {1, 3, 7}) {
    PrefillCase c{kHeads, MlaCacheType::kF16, 64, 1000, s};
    c.wgmma = true;
    RunPrefill(c, 1500 + s);
  }
  const PrefillCase odd[] = {
      {kHeads, MlaCacheType::kF16, 7, 0, 40},             // more splits than key tiles: empty splits
      {4, MlaCacheType::kF32, 300, 0, 2, 16},              // golden model: 4 heads, 16 rows per page
      {20, MlaCacheType::kF16, 37, 100, 1, 7},             // heads not dividing 64, odd page size
      {kHeads, MlaCacheType::kF16, 100, 30, 1, 64, 1, true},  // graph replay, 1 split
      {kHeads, MlaCacheType::kF16, 5, 2000, 4, 64, 1, true},  // graph replay, splits
      {kHeads, MlaCacheType::kF16, 1, 32767},              // a decode step at 32k rows, the default splits
  };
  uint64_t seed = 1520;
  for (PrefillCase c : odd) {
    c.wgmma = true;
    RunPrefill(c, seed++);
  }
}

TEST(CudaMlaPrefillWgmmaTest, BatchedSequences) {
  K3_REQUIRE_MLA_WGMMA();
  RunBatched(kHeads, 1, {4095, 0, 700, 2047, 1, 3000, 64, 4000}, 0, false, 1700, true);
  RunBatched(kHeads, 1, {4095, 0, 700, 2047}, 5, true, 1701, true);
  RunBatched(kHeads / 2, 1, {100, 2500, 9}, 0, false, 1702, true);
  RunBatched(20, 2, {1000, 30, 77}, 3, false, 1704, true);
}

TEST(CudaMlaPrefillLargeTest, Run512At3584) {
  K3_REQUIRE_GPU();
  RunPrefill({kHeads, MlaCacheType::kF32, 512, 3584, 0, 64, 5}, 600);
  RunPrefill({kHeads, MlaCacheType::kF16, 512, 3584, 0, 64, 5}, 601);
}

// Validation happens before anything touches the device: runs without a GPU too.
TEST(CudaMlaPrefillTest, BadArguments) {
  alignas(16) static float q[16], out[16];
  alignas(16) static int32_t table[4], lens[4];
  alignas(16) static uint8_t ws[16];
  MlaPrefillParams ok;
  ok.q = q;
  ok.q_row_stride = 576;
  ok.cache = q;
  ok.cache_type = MlaCacheType::kF16;
  ok.page_stride = 64 * 576;
  ok.row_stride = 576;
  ok.page_size = 64;
  ok.block_table = table;
  ok.seq_lens = lens;
  ok.n_rows = 1;
  ok.n_heads = 1;
  ok.row_width = 576;
  ok.value_width = 512;
  ok.max_len = 256;
  ok.scale = 0.07f;
  ok.out = out;
  ok.out_row_stride = 512;
  ok.n_splits = 1;
  ok.workspace = ws;
  auto with = [&](auto change) {
    MlaPrefillParams p = ok;
    change(p);
    return MlaPrefill(p, nullptr);
  };
  EXPECT_EQ(with([](auto& p) { p.n_splits = 0; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.n_rows = -1; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.row_width = 600; p.q_row_stride = 600; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.row_width = 640; p.q_row_stride = 640; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.value_width = 520; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.value_width = 500; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.wgmma = true; p.value_width = 256; }), cudaErrorInvalidValue);  // K3's widths only
  EXPECT_EQ(with([](auto& p) { p.q = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.block_table = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.page_size = 0; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.max_len = 0; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.q_row_stride = 500; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.out_row_stride = 100; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.cache_type = MlaCacheType::kF32; p.workspace = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.n_splits = 2; p.workspace = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.row_stride = 580; }), cudaErrorMisalignedAddress);
  EXPECT_EQ(with([](auto& p) { p.q = q + 1; }), cudaErrorMisalignedAddress);
  EXPECT_EQ(with([](auto& p) { p.out = out + 1; }), cudaErrorMisalignedAddress);
  EXPECT_EQ(with([](auto& p) { p.n_seqs = -1; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& p) { p.n_seqs = 2; p.q_seq_stride = 576; p.out_seq_stride = 512; }),
            cudaErrorInvalidValue);  // no table stride
  EXPECT_EQ(with([](auto& p) { p.n_seqs = 2; p.block_table_stride = 1; p.q_seq_stride = 100; p.out_seq_stride = 512; }),
            cudaErrorInvalidValue);  // sequences' q overlap
  EXPECT_EQ(with([](auto& p) {
              p.n_seqs = 2;
              p.block_table_stride = 1;
              p.q_seq_stride = 576;
              p.out_seq_stride = 512;
              p.cache_type = MlaCacheType::kF32;
            }),
            cudaErrorInvalidValue);  // an f32 cache is one sequence a launch
  EXPECT_EQ(with([](auto& p) { p.n_seqs = 2; p.block_table_stride = 1; p.q_seq_stride = 578; p.out_seq_stride = 512; }),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(with([](auto& p) { p.n_rows = 0; }), cudaSuccess);  // nothing to do
  EXPECT_EQ(with([](auto& p) { p.n_seqs = 0; }), cudaSuccess);
}

}  // namespace
}  // namespace k3::cuda::testing
