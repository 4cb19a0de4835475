// MlaAttention (spec 4.5, absorbed form) against naive double-precision softmax attention:
//   score_t = (1/sqrt(192))·Σ_{d<576} Q[d]·row_t[d]   over the visible rows t = 0..n_rows-1
//   out[d]  = Σ_t softmax(score)_t · row_t[d]           for d < 512 (V = the latent part)
// Real shapes: 96 heads, 576-wide rows (512 latent | 64 rope), page size 16. The cache pages
// are scattered through a pool in a shuffled order, rows are padded (page_row_stride 592), and
// everything the kernel must not read — row padding, the rows of the last page past n_rows,
// unused pool pages — is NaN. The kernel accumulates in double; the tolerance is 1e-5 of
// Σ_t p_t·|row_t[d]| per element (the f32 scale 1/sqrt(192) alone moves large scores by ~1e-6).
#include "kernels/cpu/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace k3::cpu {
namespace {

using namespace k3::cpu::testing;

constexpr int64_t kPageSize = 16;
constexpr int64_t kRowStride = kMlaRow + 16;
constexpr double kRtol = 1e-5;

struct Cache {
  std::vector<float> pool;
  std::vector<const float*> pages;  // logical page i
  std::vector<std::vector<float>> rows;  // the visible rows, [n_rows][576], for the reference
};

Cache MakeCache(std::mt19937_64& rng, int64_t n_rows) {
  const int64_t n_pages = (n_rows + kPageSize - 1) / kPageSize;
  const int64_t pool_pages = n_pages + 3;  // spare pages stay NaN
  Cache c;
  c.pool.assign(pool_pages * kPageSize * kRowStride, kNaN);
  std::vector<int64_t> slot(pool_pages);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), rng);
  for (int64_t i = 0; i < n_pages; ++i) c.pages.push_back(c.pool.data() + slot[i] * kPageSize * kRowStride);
  std::normal_distribution<double> n01(0.0, 1.0);
  for (int64_t t = 0; t < n_rows; ++t) {
    std::vector<float> row(kMlaRow);
    for (int64_t d = 0; d < kMlaRow; ++d) {
      // latent: rms-normed-like values with a per-channel weight; rope part unnormalized
      row[d] = static_cast<float>(d < kKvLora ? n01(rng) * (0.5 + (d % 7) * 0.2) : 2.0 * n01(rng));
    }
    float* dst = const_cast<float*>(c.pages[t / kPageSize]) + (t % kPageSize) * kRowStride;
    std::copy(row.begin(), row.end(), dst);
    c.rows.push_back(std::move(row));
  }
  return c;
}

struct Ref {
  std::vector<double> out;  // [H][512]
  std::vector<double> tol;
};

Ref Reference(const std::vector<float>& q, const Cache& c, int64_t n_heads) {
  const int64_t n_rows = static_cast<int64_t>(c.rows.size());
  const double scale = 1.0 / std::sqrt(static_cast<double>(kQkHeadDim));  // 1/sqrt(192)
  Ref r{std::vector<double>(n_heads * kKvLora, 0.0), std::vector<double>(n_heads * kKvLora, 0.0)};
  std::vector<double> s(n_rows);
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* qh = &q[h * kMlaRow];
    for (int64_t t = 0; t < n_rows; ++t) {
      double dot = 0;
      for (int64_t d = 0; d < kMlaRow; ++d) dot += static_cast<double>(qh[d]) * c.rows[t][d];
      s[t] = scale * dot;
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& v : s) sum += (v = std::exp(v - mx));
    for (int64_t t = 0; t < n_rows; ++t) {
      const double p = s[t] / sum;
      for (int64_t d = 0; d < kKvLora; ++d) {
        r.out[h * kKvLora + d] += p * c.rows[t][d];
        r.tol[h * kKvLora + d] += kRtol * p * std::fabs(c.rows[t][d]);
      }
    }
  }
  return r;
}

std::vector<float> RunMla(const std::vector<float>& q, const Cache& c, int64_t n_heads) {
  auto out = Poisoned(n_heads * kKvLora);
  MlaAttention({q.data(), c.pages.data(), kPageSize, kRowStride, static_cast<int64_t>(c.rows.size()),
                kMlaRow, kKvLora, n_heads, static_cast<float>(1.0 / std::sqrt(192.0)), out.data()});
  return out;
}

// n_rows not a multiple of 16: 4 full pages and 13 rows of the fifth.
TEST(MlaAttentionTest, PagedMatchesNaive) {
  std::mt19937_64 rng(601);
  const auto c = MakeCache(rng, 77);
  const auto q = Normal(rng, kHeads * kMlaRow);
  const auto ref = Reference(q, c, kHeads);
  EXPECT_TRUE(AllClose(RunMla(q, c, kHeads), ref.out, 0.0, 0.0, &ref.tol));
}

// Page boundaries: fewer rows than a page, exactly a page, one past, two pages and one past.
TEST(MlaAttentionTest, RowCountsAroundPageBoundaries) {
  std::mt19937_64 rng(602);
  for (int64_t n_rows : {2, 15, 16, 17, 32, 33}) {
    SCOPED_TRACE(n_rows);
    const auto c = MakeCache(rng, n_rows);
    const auto q = Normal(rng, kHeads * kMlaRow);
    const auto ref = Reference(q, c, kHeads);
    EXPECT_TRUE(AllClose(RunMla(q, c, kHeads), ref.out, 0.0, 0.0, &ref.tol));
  }
}

// The first token sees only itself: the output is its latent, whatever the score.
TEST(MlaAttentionTest, SingleRowIsItsLatent) {
  std::mt19937_64 rng(603);
  const auto c = MakeCache(rng, 1);
  const auto q = Normal(rng, kHeads * kMlaRow, 0.0, 50.0);
  const auto out = RunMla(q, c, kHeads);
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t d = 0; d < kKvLora; ++d) ASSERT_EQ(out[h * kKvLora + d], c.rows[0][d]) << h << " " << d;
  }
}

// A long context (1000 rows = 62 pages + 8) and large scores (softmax near one-hot: the max
// must be subtracted before exp).
TEST(MlaAttentionTest, LongContextAndLargeScores) {
  std::mt19937_64 rng(604);
  const auto c = MakeCache(rng, 1000);
  for (double q_sd : {1.0, 30.0}) {
    SCOPED_TRACE(q_sd);
    const auto q = Normal(rng, kHeads * kMlaRow, 0.0, q_sd);
    const auto ref = Reference(q, c, kHeads);
    EXPECT_TRUE(AllClose(RunMla(q, c, kHeads), ref.out, 0.0, 0.0, &ref.tol));
  }
}

// The rope part scores but is not a value: changing only row_t[512:576] changes the output
// exactly as the reference says (and a scale of 1/sqrt(576) would not match).
TEST(MlaAttentionTest, RopePartScoresOnly) {
  std::mt19937_64 rng(605);
  auto c = MakeCache(rng, 40);
  const auto q = Normal(rng, kHeads * kMlaRow);
  const auto before = RunMla(q, c, kHeads);
  for (int64_t t = 0; t < 40; ++t) {
    float* dst = const_cast<float*>(c.pages[t / kPageSize]) + (t % kPageSize) * kRowStride;
    for (int64_t d = kKvLora; d < kMlaRow; ++d) dst[d] = c.rows[t][d] = -c.rows[t][d] * 1.5f;
  }
  const auto after = RunMla(q, c, kHeads);
  const auto ref = Reference(q, c, kHeads);
  EXPECT_TRUE(AllClose(after, ref.out, 0.0, 0.0, &ref.tol));
  EXPECT_FALSE(AllClose(before, ref.out, 0.0, 0.0, &ref.tol));

  // Wrong-scale reference: must be clearly distinguishable from the kernel's output.
  std::vector<float> q576(q);
  for (float& v : q576) v = static_cast<float>(v * std::sqrt(192.0 / 576.0));
  const auto wrong = Reference(q576, c, kHeads);
  EXPECT_FALSE(AllClose(after, wrong.out, 0.0, 0.0, &wrong.tol));
}

}  // namespace
}  // namespace k3::cpu
