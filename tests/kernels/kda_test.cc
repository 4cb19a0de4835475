// KDA (spec 4.4) — KdaRecurrent and KdaChunked — against a naive double-precision recurrence
// written from the spec, per head (state S[i][j], i = key index, j = value index):
//   S[i][j] *= exp(g[i]);  delta[j] = beta·(v[j] − Σ_i S[i][j]·k[i]);  S[i][j] += k[i]·delta[j];
//   o[j] = (1/sqrt(128))·Σ_i S[i][j]·q[i]        (read-out from the UPDATED state)
// Real per-head sizes dk = dv = 128. Full 96 heads where it is cheap (a few tokens); the sweeps
// over chunk sizes and decays use 4 heads (every head runs the same code on its own slice, and
// 96 heads × 4 chunk sizes × ~70 tokens would cost seconds on 2 cores). Rows are padded
// (strides larger than n_heads·dim) and the output padding holds sentinels that must survive.
//
// Tolerance: the recurrent kernel keeps S in f32 between tokens, so rounding accumulates over
// the run; an element passes at |got − want| <= 1e-5·(|want| + rms(want over the tensor)).
#include "kernels/cpu/kda.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace k3::cpu {
namespace {

using namespace k3::cpu::testing;

constexpr int64_t kDk = kHeadDim, kDv = kHeadDim;
constexpr double kGateLowerBound = -5.0;
constexpr double kRtol = 1e-5;
constexpr float kSentinel = -777.0f;

enum class Decay { kMixed, kStrong, kWeak };

struct Problem {
  int64_t H, T;
  int64_t qk_stride, v_stride, beta_stride, out_stride;
  std::vector<float> q, k, g, v, beta;  // padded rows, as the kernel sees them
  std::vector<float> state0;            // [H][dk][dv]
};

Problem MakeProblem(uint64_t seed, int64_t H, int64_t T, Decay decay, bool zero_state) {
  std::mt19937_64 rng(seed);
  Problem p;
  p.H = H;
  p.T = T;
  p.qk_stride = H * kDk + 16;
  p.v_stride = H * kDv + 8;
  p.beta_stride = H + 3;
  p.out_stride = H * kDv + 24;
  p.q = Poisoned(T * p.qk_stride);  // padding stays NaN: reading it would poison the result
  p.k = Poisoned(T * p.qk_stride);
  p.g = Poisoned(T * p.qk_stride);
  p.v = Poisoned(T * p.v_stride);
  p.beta = Poisoned(T * p.beta_stride);
  std::normal_distribution<double> n01(0.0, 1.0);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      // q, k: l2-normalized per head (the kernel's contract), from values of mixed scale.
      for (std::vector<float>* x : {&p.q, &p.k}) {
        std::vector<double> raw(kDk);
        double ss = 0;
        for (double& r : raw) {
          r = n01(rng) + 0.3;
          ss += r * r;
        }
        const double inv = 1.0 / std::sqrt(ss);
        for (int64_t i = 0; i < kDk; ++i) (*x)[t * p.qk_stride + h * kDk + i] = static_cast<float>(raw[i] * inv);
      }
      for (int64_t i = 0; i < kDk; ++i) {
        double g = 0.0;
        switch (decay) {
          case Decay::kMixed:  // g = lb·σ(x) in (−5, 0), spread over the range
            g = kGateLowerBound * SigmoidD(2.5 * n01(rng) - 1.0);
            break;
          case Decay::kStrong:  // next to the lower bound: each step keeps ~e^-5 of S
            g = kGateLowerBound * (0.98 + 0.0199 * u01(rng));
            break;
          case Decay::kWeak:  // almost no decay, some channels exactly none
            g = (i % 5 == 0) ? 0.0 : -1e-3 * u01(rng);
            break;
        }
        p.g[t * p.qk_stride + h * kDk + i] = static_cast<float>(g);
      }
      for (int64_t j = 0; j < kDv; ++j) p.v[t * p.v_stride + h * kDv + j] = static_cast<float>(n01(rng) * 1.5);
      p.beta[t * p.beta_stride + h] = static_cast<float>(SigmoidD(1.5 * n01(rng)));
    }
  }
  p.state0.assign(H * kDk * kDv, 0.0f);
  if (!zero_state) {
    for (float& s : p.state0) s = static_cast<float>(0.2 * n01(rng));
  }
  return p;
}

struct RefResult {
  std::vector<double> out;    // [T][H][dv], packed
  std::vector<double> state;  // [H][dk][dv]
};

// The spec's recurrence, token by token, in double, from state0.
RefResult Reference(const Problem& p) {
  RefResult r{std::vector<double>(p.T * p.H * kDv), std::vector<double>(p.state0.begin(), p.state0.end())};
  const double scale = 1.0 / std::sqrt(128.0);
  std::vector<double> delta(kDv);
  for (int64_t h = 0; h < p.H; ++h) {
    double* S = &r.state[h * kDk * kDv];
    for (int64_t t = 0; t < p.T; ++t) {
      const float* q = &p.q[t * p.qk_stride + h * kDk];
      const float* k = &p.k[t * p.qk_stride + h * kDk];
      const float* g = &p.g[t * p.qk_stride + h * kDk];
      const float* v = &p.v[t * p.v_stride + h * kDv];
      const double beta = p.beta[t * p.beta_stride + h];
      for (int64_t i = 0; i < kDk; ++i) {
        const double decay = std::exp(static_cast<double>(g[i]));
        for (int64_t j = 0; j < kDv; ++j) S[i * kDv + j] *= decay;
      }
      for (int64_t j = 0; j < kDv; ++j) {
        double sk = 0;
        for (int64_t i = 0; i < kDk; ++i) sk += S[i * kDv + j] * k[i];
        delta[j] = beta * (v[j] - sk);
      }
      for (int64_t i = 0; i < kDk; ++i) {
        for (int64_t j = 0; j < kDv; ++j) S[i * kDv + j] += k[i] * delta[j];
      }
      for (int64_t j = 0; j < kDv; ++j) {
        double o = 0;
        for (int64_t i = 0; i < kDk; ++i) o += S[i * kDv + j] * q[i];
        r.out[(t * p.H + h) * kDv + j] = scale * o;
      }
    }
  }
  return r;
}

struct KernelResult {
  std::vector<float> out;  // [T][H][dv], packed
  std::vector<float> state;
};

// Runs the kernel over the problem as consecutive calls of the given token counts (state
// carried); chunk == 0 means KdaRecurrent. With decode_recurrent, single-token calls use
// KdaRecurrent as the engine does.
KernelResult RunKda(const Problem& p, int64_t chunk, const std::vector<int64_t>& pieces,
                 bool decode_recurrent = false) {
  KernelResult r{{}, p.state0};
  std::vector<float> out(p.T * p.out_stride, kNaN);
  for (int64_t t = 0; t < p.T; ++t) {
    std::fill(out.begin() + t * p.out_stride + p.H * kDv, out.begin() + (t + 1) * p.out_stride, kSentinel);
  }
  int64_t t0 = 0;
  for (int64_t n : pieces) {
    KdaParams kp{r.state.data(),
                 p.q.data() + t0 * p.qk_stride,
                 p.k.data() + t0 * p.qk_stride,
                 p.g.data() + t0 * p.qk_stride,
                 p.v.data() + t0 * p.v_stride,
                 p.beta.data() + t0 * p.beta_stride,
                 out.data() + t0 * p.out_stride,
                 p.qk_stride, p.v_stride, p.beta_stride, p.out_stride,
                 p.H, kDk, kDv, n, static_cast<float>(1.0 / std::sqrt(128.0))};
    if (chunk == 0 || (decode_recurrent && n == 1)) {
      KdaRecurrent(kp);
    } else {
      KdaChunked(kp, chunk);
    }
    t0 += n;
  }
  EXPECT_EQ(t0, p.T);
  r.out.resize(p.T * p.H * kDv);
  for (int64_t t = 0; t < p.T; ++t) {
    std::copy(out.begin() + t * p.out_stride, out.begin() + t * p.out_stride + p.H * kDv,
              r.out.begin() + t * p.H * kDv);
    for (int64_t c = p.H * kDv; c < p.out_stride; ++c) {
      EXPECT_EQ(out[t * p.out_stride + c], kSentinel) << "output padding written at token " << t;
    }
  }
  return r;
}

KernelResult RunKda(const Problem& p, int64_t chunk) { return RunKda(p, chunk, {p.T}); }

double Rms(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s / static_cast<double>(x.size()));
}

::testing::AssertionResult Close(const std::vector<float>& got, const std::vector<double>& want) {
  return AllClose(got, want, kRtol, kRtol * Rms(want));
}

::testing::AssertionResult Close(const std::vector<float>& got, const std::vector<float>& want) {
  return Close(got, std::vector<double>(want.begin(), want.end()));
}

TEST(KdaTest, RecurrentFullHeadsMatchesDouble) {
  const auto p = MakeProblem(501, kHeads, 6, Decay::kMixed, /*zero_state=*/true);
  const auto ref = Reference(p);
  const auto got = RunKda(p, 0);
  EXPECT_TRUE(Close(got.out, ref.out));
  EXPECT_TRUE(Close(got.state, ref.state));
}

TEST(KdaTest, RecurrentLongRunFromNonZeroState) {
  for (Decay d : {Decay::kMixed, Decay::kStrong, Decay::kWeak}) {
    SCOPED_TRACE(static_cast<int>(d));
    const auto p = MakeProblem(502 + static_cast<int>(d), 4, 70, d, /*zero_state=*/false);
    const auto ref = Reference(p);
    const auto got = RunKda(p, 0);
    EXPECT_TRUE(Close(got.out, ref.out));
    EXPECT_TRUE(Close(got.state, ref.state));
  }
}

// Decode: one token per call equals one call over the run (state carried in between).
TEST(KdaTest, RecurrentOneTokenPerCallEqualsOneCall) {
  const auto p = MakeProblem(505, 4, 9, Decay::kMixed, false);
  const auto whole = RunKda(p, 0);
  const auto steps = RunKda(p, 0, std::vector<int64_t>(9, 1));
  EXPECT_TRUE(BitEqual(steps.out.data(), whole.out.data(), static_cast<int64_t>(whole.out.size())));
  EXPECT_TRUE(BitEqual(steps.state.data(), whole.state.data(), static_cast<int64_t>(whole.state.size())));
}

// Chunked == recurrent == double, outputs and final state, for chunk sizes 1, 3, 16, 64 and
// token counts that are not multiples of the chunk (70 = 64+6 = 4·16+6 = 23·3+1; 37 < 64).
TEST(KdaTest, ChunkedMatchesRecurrentAndDouble) {
  for (int64_t T : {int64_t{70}, int64_t{37}}) {
    const auto p = MakeProblem(510 + T, 4, T, Decay::kMixed, /*zero_state=*/false);
    const auto ref = Reference(p);
    const auto rec = RunKda(p, 0);
    for (int64_t chunk : {1, 3, 16, 64}) {
      SCOPED_TRACE(::testing::Message() << "T " << T << " chunk " << chunk);
      const auto got = RunKda(p, chunk);
      EXPECT_TRUE(Close(got.out, ref.out));
      EXPECT_TRUE(Close(got.state, ref.state));
      EXPECT_TRUE(Close(got.out, rec.out));
      EXPECT_TRUE(Close(got.state, rec.state));
    }
  }
}

// Strong decay (g next to −5; over a 64-token chunk the cumulative decay reaches e^-320) and
// weak decay (g in [−1e-3, 0], some exactly 0).
TEST(KdaTest, ChunkedStrongAndWeakDecay) {
  for (Decay d : {Decay::kStrong, Decay::kWeak}) {
    const auto p = MakeProblem(520 + static_cast<int>(d), 4, 70, d, /*zero_state=*/false);
    const auto ref = Reference(p);
    for (int64_t chunk : {3, 16, 64}) {
      SCOPED_TRACE(::testing::Message() << "decay " << static_cast<int>(d) << " chunk " << chunk);
      const auto got = RunKda(p, chunk);
      EXPECT_TRUE(Close(got.out, ref.out));
      EXPECT_TRUE(Close(got.state, ref.state));
    }
  }
}

// A prompt in two chunked calls, then decode steps: the state carries between calls.
TEST(KdaTest, ChunkedAcrossCallsThenRecurrent) {
  const auto p = MakeProblem(530, 4, 45, Decay::kMixed, /*zero_state=*/true);
  const auto ref = Reference(p);
  // Prompt 0..22 and 23..39 chunked (chunk 16), then 40..44 one token at a time (recurrent).
  const auto chunked = RunKda(p, 16, {23, 17, 1, 1, 1, 1, 1}, /*decode_recurrent=*/true);
  EXPECT_TRUE(Close(chunked.out, ref.out));
  EXPECT_TRUE(Close(chunked.state, ref.state));
}

// The real head count through the chunked form (chunk 16 as in the reference, 20 tokens).
TEST(KdaTest, ChunkedFullHeads) {
  const auto p = MakeProblem(540, kHeads, 20, Decay::kMixed, /*zero_state=*/true);
  const auto ref = Reference(p);
  const auto got = RunKda(p, 16);
  EXPECT_TRUE(Close(got.out, ref.out));
  EXPECT_TRUE(Close(got.state, ref.state));
}

}  // namespace
}  // namespace k3::cpu
