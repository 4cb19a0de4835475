// Element-wise activations: sigmoid, silu, softplus and K3's situ (which replaces SwiGLU).
#pragma once

#include <cmath>
#include <cstdint>

namespace k3::cpu {

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float Silu(float x) { return x * Sigmoid(x); }
inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// situ(g, u) = beta*tanh(g/beta)*sigmoid(g) * lambda*tanh(u/lambda); lambda <= 0 leaves u as is.
inline float Situ(float g, float u, float beta, float lambda) {
  const float a = beta * std::tanh(g / beta) * Sigmoid(g);
  const float b = lambda > 0.0f ? lambda * std::tanh(u / lambda) : u;
  return a * b;
}

// out[i] = situ(g[i], u[i]); out may alias g or u.
void SituRow(const float* g, const float* u, float beta, float lambda, int64_t n, float* out);

}  // namespace k3::cpu
