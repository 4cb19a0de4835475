#include "kernels/cpu/kda.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace k3::cpu {
namespace {

void RecurrentHead(const KdaParams& p, int64_t h) {
  const int64_t dk = p.dk, dv = p.dv;
  float* S = p.state + h * dk * dv;
  std::vector<double> acc(dv);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const float* q = p.q + t * p.qk_stride + h * dk;
    const float* k = p.k + t * p.qk_stride + h * dk;
    const float* g = p.g + t * p.qk_stride + h * dk;
    const float* v = p.v + t * p.v_stride + h * dv;
    const double beta = p.beta[t * p.beta_stride + h];
    float* o = p.out + t * p.out_stride + h * dv;
    // Decay along the key index, then S^T k.
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t i = 0; i < dk; ++i) {
      const float decay = std::exp(g[i]);
      float* row = S + i * dv;
      for (int64_t j = 0; j < dv; ++j) {
        row[j] *= decay;
        acc[j] += static_cast<double>(row[j]) * k[i];
      }
    }
    for (int64_t j = 0; j < dv; ++j) acc[j] = beta * (v[j] - acc[j]);  // delta
    std::vector<double> out(dv, 0.0);
    for (int64_t i = 0; i < dk; ++i) {
      float* row = S + i * dv;
      for (int64_t j = 0; j < dv; ++j) {
        row[j] += static_cast<float>(k[i] * acc[j]);
        out[j] += static_cast<double>(row[j]) * q[i];
      }
    }
    for (int64_t j = 0; j < dv; ++j) o[j] = static_cast<float>(p.scale * out[j]);
  }
}

// One chunk of n tokens starting at t0, for head h. With b_t = Σ_{s<=t} g_s (per key channel):
//   u_t = beta_t (v_t - S0^T (e^{b_t} k_t) - Σ_{s<t} A_ts u_s),  A_ts = Σ_i k_t k_s e^{b_t - b_s}
//   o_t = scale (S0^T (e^{b_t} q_t) + Σ_{s<=t} (Σ_i q_t k_s e^{b_t - b_s}) u_s)
//   S   = e^{b_last} S0 + Σ_s (e^{b_last - b_s} k_s) u_s^T
// Every exponent is <= 0, so nothing overflows.
void ChunkHead(const KdaParams& p, int64_t h, int64_t t0, int64_t n) {
  const int64_t dk = p.dk, dv = p.dv;
  float* S = p.state + h * dk * dv;
  std::vector<double> b(n * dk), u(n * dv), out(n * dv, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const float* g = p.g + (t0 + t) * p.qk_stride + h * dk;
    for (int64_t i = 0; i < dk; ++i) b[t * dk + i] = (t > 0 ? b[(t - 1) * dk + i] : 0.0) + g[i];
  }
  auto key = [&](int64_t t) { return p.k + (t0 + t) * p.qk_stride + h * dk; };
  auto query = [&](int64_t t) { return p.q + (t0 + t) * p.qk_stride + h * dk; };
  for (int64_t t = 0; t < n; ++t) {
    const float* k = key(t);
    const float* q = query(t);
    const float* v = p.v + (t0 + t) * p.v_stride + h * dv;
    const double beta = p.beta[(t0 + t) * p.beta_stride + h];
    double* ut = &u[t * dv];
    double* ot = &out[t * dv];
    // Contributions of the chunk's starting state.
    for (int64_t j = 0; j < dv; ++j) ut[j] = 0.0;
    for (int64_t i = 0; i < dk; ++i) {
      const double e = std::exp(b[t * dk + i]);
      const double ke = k[i] * e, qe = q[i] * e;
      const float* row = S + i * dv;
      for (int64_t j = 0; j < dv; ++j) {
        ut[j] += ke * row[j];
        ot[j] += qe * row[j];
      }
    }
    // Earlier tokens of the chunk: the triangular solve, row t.
    for (int64_t s = 0; s < t; ++s) {
      const float* ks = key(s);
      double a = 0.0;
      for (int64_t i = 0; i < dk; ++i) a += static_cast<double>(k[i]) * ks[i] * std::exp(b[t * dk + i] - b[s * dk + i]);
      for (int64_t j = 0; j < dv; ++j) ut[j] += a * u[s * dv + j];
    }
    for (int64_t j = 0; j < dv; ++j) ut[j] = beta * (v[j] - ut[j]);
    // Read-out: the state after token t includes u_0..u_t.
    for (int64_t s = 0; s <= t; ++s) {
      const float* ks = key(s);
      double a = 0.0;
      for (int64_t i = 0; i < dk; ++i) a += static_cast<double>(q[i]) * ks[i] * std::exp(b[t * dk + i] - b[s * dk + i]);
      for (int64_t j = 0; j < dv; ++j) ot[j] += a * u[s * dv + j];
    }
    float* o = p.out + (t0 + t) * p.out_stride + h * dv;
    for (int64_t j = 0; j < dv; ++j) o[j] = static_cast<float>(p.scale * ot[j]);
  }
  // The state at the end of the chunk.
  const int64_t last = n - 1;
  std::vector<double> acc(dv);
  for (int64_t i = 0; i < dk; ++i) {
    const double e_last = std::exp(b[last * dk + i]);
    float* row = S + i * dv;
    for (int64_t j = 0; j < dv; ++j) acc[j] = e_last * row[j];
    for (int64_t s = 0; s < n; ++s) {
      const double f = key(s)[i] * std::exp(b[last * dk + i] - b[s * dk + i]);
      for (int64_t j = 0; j < dv; ++j) acc[j] += f * u[s * dv + j];
    }
    for (int64_t j = 0; j < dv; ++j) row[j] = static_cast<float>(acc[j]);
  }
}

}  // namespace

// Threads only for enough work (see kernels/quant/dot.cc: a region costs a barrier).
bool WorthThreads(const KdaParams& p) { return p.n_heads > 1 && p.n_heads * p.n_tokens * p.dk * p.dv >= (1 << 22); }

void KdaRecurrent(const KdaParams& p) {
#pragma omp parallel for schedule(dynamic, 1) if (WorthThreads(p))
  for (int64_t h = 0; h < p.n_heads; ++h) RecurrentHead(p, h);
}

void KdaChunked(const KdaParams& p, int64_t chunk) {
  if (chunk < 1) chunk = 1;
#pragma omp parallel for schedule(dynamic, 1) if (WorthThreads(p))
  for (int64_t h = 0; h < p.n_heads; ++h) {
    for (int64_t t0 = 0; t0 < p.n_tokens; t0 += chunk) {
      ChunkHead(p, h, t0, std::min(chunk, p.n_tokens - t0));
    }
  }
}

}  // namespace k3::cpu
