// BandTop (the LM head's per-row band summary) against k3::runtime::SummarizeBand, the CPU code it
// replaces, on the real band widths (163840: one rank; 81920: rank 1 of 2, so band_begin != 0):
// the same ids in the same order and the same logits bit for bit, logsumexp within 1e-6
// relative. Rows mix a normal spread, a few exact values (many ties, -0 and +0 among them) and
// -inf entries. Outputs are poisoned with NaN before each call. Also: narrow bands (padding),
// NaN and infinite logits, determinism, graph capture, argument checks (no GPU needed), and a
// timing print on the real band.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/band_top/band_top.h"
#include "tests/cuda/cuda_test_util.h"
#include "worker/runtime/band_merge.h"

namespace k3::cuda::testing {
namespace {

static_assert(sizeof(BandTopCandidate) == sizeof(runtime::Candidate));
static_assert(offsetof(BandTopCandidate, logit) == offsetof(runtime::Candidate, logit));

enum class Kind { kNormal, kFewValues, kWithNegInf };

std::vector<float> Row(std::mt19937_64& rng, int64_t width, Kind kind) {
  std::vector<float> v = Normal(rng, width, 0.0, 3.0);
  if (kind == Kind::kFewValues) {
    const float values[] = {-3.5f, 0.25f, 1.75f, 2.0f, -0.0f, 0.0f};
    for (float& x : v) x = values[rng() % 6];
  } else if (kind == Kind::kWithNegInf) {
    for (size_t i = 0; i < v.size(); i += 7) v[i] = -INFINITY;
  }
  return v;
}

// rows x stride logits (padding columns NaN, never read), row r of kind r % 3.
std::vector<float> Logits(std::mt19937_64& rng, int64_t rows, int64_t width, int64_t stride) {
  std::vector<float> all(static_cast<size_t>(rows * stride), kNaN);
  for (int64_t r = 0; r < rows; ++r) {
    const auto v = Row(rng, width, static_cast<Kind>(r % 3));
    std::copy(v.begin(), v.end(), all.begin() + r * stride);
  }
  return all;
}

struct Output {
  std::vector<BandTopCandidate> top;  // [rows][n] (+ the poisoned slack after it)
  std::vector<float> lse;
};

// Runs BandTop on device logits; top has 4 slack records after [rows][n] that must stay poisoned.
Output RunBandTop(const DeviceBuffer<float>& logits, int64_t rows, int64_t width, int64_t stride, int64_t begin,
                  int32_t n, cudaStream_t stream = nullptr) {
  DeviceBuffer<BandTopCandidate> top(static_cast<size_t>(rows * n + 4));
  DeviceBuffer<float> lse(static_cast<size_t>(rows));
  const size_t ws_bytes = BandTopWorkspaceBytes(rows, width, n);
  DeviceBuffer<uint8_t> ws(ws_bytes);
  top.Poison();
  lse.Poison();
  ws.Poison();
  BandTopParams p{logits.get(), stride, rows, width, begin, n, top.get(), lse.get(), ws.get(), ws_bytes};
  EXPECT_EQ(BandTop(p, stream), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Output out{top.Download(), lse.Download()};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out.top[rows * n + i].token, -1) << "wrote past [rows][n]";
  out.top.resize(static_cast<size_t>(rows * n));
  return out;
}

// Every row against SummarizeBand: ids and logits exactly, logsumexp within 1e-6 relative (absolute
// below 1: f32 exp terms, see band_top.h).
void ExpectMatchesCpu(const std::vector<float>& logits, const Output& got, int64_t rows, int64_t width, int64_t stride,
                      int64_t begin, int32_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    SCOPED_TRACE(::testing::Message() << "row " << r << " of " << rows << ", band " << width << ", n " << n);
    std::vector<runtime::Candidate> want(n);
    float want_lse = 0;
    runtime::SummarizeBand(logits.data() + r * stride, width, begin, n, want.data(), &want_lse);
    int bad = 0;
    for (int32_t i = 0; i < n && bad < 3; ++i) {
      const BandTopCandidate& g = got.top[r * n + i];
      if (g.token != want[i].token || std::memcmp(&g.logit, &want[i].logit, 4) != 0) {
        ADD_FAILURE() << "slot " << i << ": got {" << g.token << ", " << g.logit << "} want {" << want[i].token
                      << ", " << want[i].logit << "}";
        ++bad;
      }
    }
    EXPECT_NEAR(got.lse[r], want_lse, 1e-6 * std::max(1.0f, std::fabs(want_lse)));
  }
}

TEST(CudaBandTopTest, MatchesSummarizeBandOnRealBands) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(11);
  struct Band {
    int64_t width, begin;
  };
  for (const Band band : {Band{163840, 0}, Band{81920, 81920}}) {
    for (int64_t rows : {1, 3, 64}) {
      const auto logits = Logits(rng, rows, band.width, band.width);
      DeviceBuffer<float> d(logits);
      for (int32_t n : {1, 2, 16, 40, 1024}) {
        const Output got = RunBandTop(d, rows, band.width, band.width, band.begin, n);
        ExpectMatchesCpu(logits, got, rows, band.width, band.width, band.begin, n);
      }
    }
  }
}

// Bands narrower than n pad with {INT32_MAX, -inf}; odd widths and strides; one chunk or a ragged last one.
TEST(CudaBandTopTest, NarrowAndRaggedBands) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(12);
  struct Case {
    int64_t rows, width, stride, begin;
    int32_t n;
  };
  for (const Case c : {Case{2, 10, 12, 100, 40}, Case{3, 1000, 1003, 7, 1024}, Case{1, 1, 1, 5, 2},
                       Case{5, 5000, 5003, 20480, 40}, Case{4, 20480, 20480, 143360, 1024},
                       Case{2, 4097, 4101, 1, 16}}) {
    const auto logits = Logits(rng, c.rows, c.width, c.stride);
    DeviceBuffer<float> d(logits);
    const Output got = RunBandTop(d, c.rows, c.width, c.stride, c.begin, c.n);
    ExpectMatchesCpu(logits, got, c.rows, c.width, c.stride, c.begin, c.n);
  }
}

// NaN ranks below -inf: never chosen, the slots beyond the non-NaN logits padded; logsumexp NaN.
// A row of -inf only: the lowest ids, logsumexp -inf. A +inf logit comes first; logsumexp NaN.
TEST(CudaBandTopTest, NaNAndInfinities) {
  K3_REQUIRE_GPU();
  const int64_t width = 9000;
  const int32_t n = 8;
  std::mt19937_64 rng(13);
  std::vector<float> logits(3 * width, kNaN);        // row 0: NaN but for four entries
  logits[5] = 1.0f;
  logits[17] = 1.0f;
  logits[4200] = -INFINITY;
  logits[8999] = 3.0f;
  std::fill(logits.begin() + width, logits.begin() + 2 * width, -INFINITY);  // row 1: -inf only
  auto row2 = Row(rng, width, Kind::kNormal);  // row 2: normal, one +inf, a few NaN
  row2[6000] = INFINITY;
  for (int64_t i = 3; i < width; i += 1000) row2[i] = kNaN;
  std::copy(row2.begin(), row2.end(), logits.begin() + 2 * width);
  DeviceBuffer<float> d(logits);
  const Output got = RunBandTop(d, 3, width, width, 1000, n);

  const std::vector<runtime::Candidate> want0 = {{9999, 3.0f}, {1005, 1.0f}, {1017, 1.0f}, {5200, -INFINITY}};
  for (int32_t i = 0; i < n; ++i) {
    const BandTopCandidate& g = got.top[i];
    if (i < 4) {
      EXPECT_EQ(g.token, want0[i].token) << "slot " << i;
      EXPECT_EQ(g.logit, want0[i].logit) << "slot " << i;
    } else {
      EXPECT_EQ(g.token, INT32_MAX) << "slot " << i;
      EXPECT_EQ(g.logit, -INFINITY) << "slot " << i;
    }
  }
  EXPECT_TRUE(std::isnan(got.lse[0]));
  for (int32_t i = 0; i < n; ++i) {
    EXPECT_EQ(got.top[n + i].token, 1000 + i);
    EXPECT_EQ(got.top[n + i].logit, -INFINITY);
  }
  EXPECT_EQ(got.lse[1], -INFINITY);
  // Row 2: the order of its non-NaN logits (SummarizeBand on a copy with the NaNs made -inf has
  // the same top, since more than n finite logits remain).
  std::vector<float> clean(row2);
  for (float& x : clean) x = std::isnan(x) ? -INFINITY : x;
  std::vector<runtime::Candidate> want2(n);
  float unused = 0;
  runtime::SummarizeBand(clean.data(), width, 1000, n, want2.data(), &unused);
  EXPECT_EQ(got.top[2 * n].token, 7000);
  for (int32_t i = 0; i < n; ++i) {
    EXPECT_EQ(got.top[2 * n + i].token, want2[i].token) << "slot " << i;
    EXPECT_EQ(got.top[2 * n + i].logit, want2[i].logit) << "slot " << i;
  }
  EXPECT_TRUE(std::isnan(got.lse[2]));
}

// Repeated runs and a graph replay give the same bytes.
TEST(CudaBandTopTest, DeterministicAndCapturable) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(14);
  const int64_t rows = 8, width = 81920;
  const int32_t n = 64;
  const auto logits = Logits(rng, rows, width, width);
  DeviceBuffer<float> d(logits);
  const Output a = RunBandTop(d, rows, width, width, 0, n);
  const Output b = RunBandTop(d, rows, width, width, 0, n);
  ASSERT_EQ(std::memcmp(a.top.data(), b.top.data(), a.top.size() * sizeof(BandTopCandidate)), 0);
  ASSERT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0);

  cudaStream_t stream;
  K3_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer<BandTopCandidate> top(rows * n);
  DeviceBuffer<float> lse(rows);
  const size_t ws_bytes = BandTopWorkspaceBytes(rows, width, n);
  DeviceBuffer<uint8_t> ws(ws_bytes);
  top.Poison();
  lse.Poison();
  BandTopParams p{d.get(), width, rows, width, 0, n, top.get(), lse.get(), ws.get(), ws_bytes};
  cudaGraph_t graph = nullptr;
  K3_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const cudaError_t launched = BandTop(p, stream);
  K3_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  K3_ASSERT_CUDA(launched);
  cudaGraphExec_t exec = nullptr;
  K3_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  K3_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
  K3_ASSERT_CUDA(cudaStreamSynchronize(stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  const auto gt = top.Download();
  const auto gl = lse.Download();
  EXPECT_EQ(std::memcmp(a.top.data(), gt.data(), gt.size() * sizeof(BandTopCandidate)), 0);
  EXPECT_EQ(std::memcmp(a.lse.data(), gl.data(), gl.size() * sizeof(float)), 0);
}

// Device time per call on the real band (CUDA events, mean of 20 back-to-back calls), for the
// record; nothing asserted. Bytes read: rows x 640 KB of logits.
TEST(CudaBandTopTest, TimesRealShapes) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(15);
  const int64_t width = 163840, max_rows = 256;
  DeviceBuffer<float> d(Normal(rng, max_rows * width, 0.0, 3.0));
  DeviceBuffer<BandTopCandidate> top(max_rows * kBandTopMaxN);
  DeviceBuffer<float> lse(max_rows);
  const size_t ws_bytes = BandTopWorkspaceBytes(max_rows, width, kBandTopMaxN);
  DeviceBuffer<uint8_t> ws(ws_bytes);
  cudaEvent_t t0, t1;
  K3_ASSERT_CUDA(cudaEventCreate(&t0));
  K3_ASSERT_CUDA(cudaEventCreate(&t1));
  for (int64_t rows : {1, 8, 64, 256}) {
    for (int32_t n : {1, 40, 1024}) {
      BandTopParams p{d.get(), width, rows, width, 0, n, top.get(), lse.get(), ws.get(), ws_bytes};
      K3_ASSERT_LAUNCH(BandTop(p, nullptr));  // warm-up
      constexpr int kIters = 20;
      K3_ASSERT_CUDA(cudaEventRecord(t0));
      for (int it = 0; it < kIters; ++it) K3_ASSERT_CUDA(BandTop(p, nullptr));
      K3_ASSERT_CUDA(cudaEventRecord(t1));
      K3_ASSERT_CUDA(cudaEventSynchronize(t1));
      float ms = 0;
      K3_ASSERT_CUDA(cudaEventElapsedTime(&ms, t0, t1));
      const double us = 1e3 * ms / kIters;
      std::printf("band_top band %ld rows %3ld n %4d: %8.1f us  (%.0f GB/s of logits)\n", static_cast<long>(width),
                  static_cast<long>(rows), n, us, rows * width * 4.0 / (us * 1e3));
    }
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
}

// Bad arguments are refused before anything is launched (no device needed).
TEST(CudaBandTopTest, RejectsBadArguments) {
  // Never dereferenced: the checks come first.
  float* logits = reinterpret_cast<float*>(uintptr_t{256});
  auto* top = reinterpret_cast<BandTopCandidate*>(uintptr_t{512});
  float* lse = reinterpret_cast<float*>(uintptr_t{768});
  void* ws = reinterpret_cast<void*>(uintptr_t{1024});
  const size_t ws_bytes = BandTopWorkspaceBytes(2, 4096, 16);
  const BandTopParams good{logits, 4096, 2, 4096, 0, 16, top, lse, ws, ws_bytes};
  auto bad = [&](auto edit) {
    BandTopParams p = good;
    edit(p);
    return BandTop(p, nullptr);
  };
  EXPECT_EQ(bad([](BandTopParams& p) { p.n = 0; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad([](BandTopParams& p) { p.n = kBandTopMaxN + 1; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad([](BandTopParams& p) { p.band_width = 0; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad([](BandTopParams& p) { p.logits_stride = 4095; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad([](BandTopParams& p) { p.band_begin = -1; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad([](BandTopParams& p) { p.band_begin = INT32_MAX - 100; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad([](BandTopParams& p) { p.rows = 65536; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad([](BandTopParams& p) { p.workspace_bytes -= 1; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad([](BandTopParams& p) { p.workspace = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad([](BandTopParams& p) { p.top = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad([](BandTopParams& p) { p.workspace = reinterpret_cast<void*>(uintptr_t{1032}); }),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(bad([](BandTopParams& p) { p.rows = 0; }), cudaSuccess);  // nothing to do
}

}  // namespace
}  // namespace k3::cuda::testing
