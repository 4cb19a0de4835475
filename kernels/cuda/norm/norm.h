// Row normalizations on the GPU (spec 4 notation): RMS norm with or without weight, L2 norm, and
// the KDA output's gated RMS norm, over groups of `width` values — a whole row (n_groups = 1) or
// every head of a token (n_groups = heads, width = head dim).
//   kRms: y = x / sqrt(mean(x^2) + eps) [* weight]          (k3::cpu::RmsNorm)
//   kL2:  y = x / max(||x||_2, eps)                          (k3::cpu::L2Norm)
// then, when `gate` is set, y *= sigmoid(gate) element-wise (the KDA output gate, spec 4.4).
// Sums of squares in f32 (the CPU reference uses double; the difference is rounding only).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace k3::cuda {

enum class NormKind : int { kRms = 0, kL2 = 1 };

struct RowNormParams {
  const float* x;               // [n_tokens][x_stride]; group g of token t at x + t*x_stride + g*width
  float* y;                     // [n_tokens][y_stride], same group layout; may alias x exactly
  const float* weight = nullptr;  // [width], shared by all groups and tokens, or nullptr (kRms only)
  const float* gate = nullptr;    // [n_tokens][gate_stride], same group layout, or nullptr
  int64_t n_tokens;             // rows
  int64_t n_groups = 1;         // groups per row (heads), each normalized on its own
  int64_t width;                // values per group (7168 hidden, 128 head, 512 kv_lora, ...)
  int64_t x_stride;             // floats between token rows of x, >= n_groups * width
  int64_t y_stride;             // floats between token rows of y
  int64_t gate_stride = 0;      // floats between token rows of gate
  float eps;                    // rms_eps (1e-5), or the L2 floor
  NormKind kind = NormKind::kRms;
};

cudaError_t RowNorm(const RowNormParams& p, cudaStream_t stream);

}  // namespace k3::cuda
