// How much each way of rounding the activations x to 8 bits moves y = W·x for IQ1_S-like rows
// (kernels/cuda/README.md, the 8-bit expert products): relL2 of y over 256 rows x 64 tokens at
// K = 3584 (the experts' latent width), for x gaussian and with 8 outlier channels scaled 10x and
// 50x. Roundings: e4m3 with one scale per token (amax -> 448), int8 with one scale per token, per
// 256 values and per 32 values (the decode's and llama.cpp's), each q = rn(x / s), s = amax / 127.
// Rows: groups of 32 weights m·(t + δ), m = 2s + 1 (s uniform 0..7), t uniform in {-1, 0, 1},
// δ = ±1/8, one scale for the row (it cancels in relL2). Deterministic (seeded).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

// v rounded to e4m3 (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; subnormals below 2^-6),
// to nearest with ties to even, saturating at ±448.
float RoundE4m3(float v) {
  if (v == 0.0f) return 0.0f;
  const float a = std::fabs(v);
  int e = 0;
  std::frexp(a, &e);                              // a = f · 2^e, f in [0.5, 1)
  const float ulp = std::ldexp(1.0f, std::max(e - 1, -6) - 3);
  return std::copysign(std::min(std::nearbyint(a / ulp) * ulp, 448.0f), v);
}

// x rounded to int8 with one scale per block of `block` values.
std::vector<float> RoundInt8(const std::vector<float>& x, int block) {
  std::vector<float> q(x.size());
  for (size_t b = 0; b < x.size(); b += block) {
    float amax = 0.0f;
    for (size_t k = b; k < b + block; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float s = amax / 127.0f;
    for (size_t k = b; k < b + block; ++k) q[k] = s > 0.0f ? std::nearbyint(x[k] / s) * s : 0.0f;
  }
  return q;
}

std::vector<float> RoundE4m3PerToken(const std::vector<float>& x) {
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float s = amax / 448.0f;
  std::vector<float> q(x.size());
  for (size_t k = 0; k < x.size(); ++k) q[k] = s > 0.0f ? RoundE4m3(x[k] / s) * s : 0.0f;
  return q;
}

}  // namespace

int main() {
  constexpr int kCols = 3584, kRows = 256, kTokens = 64;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> w(static_cast<size_t>(kRows) * kCols);
  for (int r = 0; r < kRows; ++r) {
    for (int g = 0; g < kCols / 32; ++g) {
      const float m = static_cast<float>(2 * static_cast<int>(rng() % 8) + 1);
      const float delta = (rng() & 1u) ? 0.125f : -0.125f;
      for (int j = 0; j < 32; ++j) {
        const float t = static_cast<float>(static_cast<int>(rng() % 3) - 1);
        w[static_cast<size_t>(r) * kCols + g * 32 + j] = m * (t + delta);
      }
    }
  }
  const char* const kCase[] = {"gaussian", "8 outlier channels x10", "8 outlier channels x50"};
  const float kOutlier[] = {1.0f, 10.0f, 50.0f};
  std::printf("relL2 of W·x, K = %d (%d rows x %d tokens)\n", kCols, kRows, kTokens);
  std::printf("%-24s %12s %12s %12s %12s\n", "x", "e4m3/token", "int8/token", "int8/256", "int8/32");
  for (int c = 0; c < 3; ++c) {
    double err[4] = {}, ref = 0.0;
    for (int tok = 0; tok < kTokens; ++tok) {
      std::vector<float> x(kCols);
      for (float& v : x) v = normal(rng);
      for (int o = 0; o < 8; ++o) x[(o * 997) % kCols] *= kOutlier[c];
      const std::vector<float> xq[4] = {RoundE4m3PerToken(x), RoundInt8(x, kCols), RoundInt8(x, 256),
                                        RoundInt8(x, 32)};
      for (int r = 0; r < kRows; ++r) {
        const float* row = &w[static_cast<size_t>(r) * kCols];
        double y = 0.0, yq[4] = {};
        for (int k = 0; k < kCols; ++k) {
          y += static_cast<double>(row[k]) * x[k];
          for (int i = 0; i < 4; ++i) yq[i] += static_cast<double>(row[k]) * xq[i][k];
        }
        ref += y * y;
        for (int i = 0; i < 4; ++i) err[i] += (yq[i] - y) * (yq[i] - y);
      }
    }
    std::printf("%-24s", kCase[c]);
    for (double e : err) std::printf(" %12.4f", std::sqrt(e / ref));
    std::printf("\n");
  }
  return 0;
}
