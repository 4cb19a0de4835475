// Dot products of quantized weight rows with f32 activations, on the CPU.
//
// Summation order (fixed, so results are reproducible bit for bit): products w[i]*x[i] are
// formed in f32 and added into 16 f32 partial sums, element i into sum i % 16, in increasing i;
// the 16 sums are then combined pairwise (s[l] += s[l + 8], then + 4, + 2, + 1). DotRow and
// MatMul follow this order exactly, so for any row r and token t, MatMul's y[t][r] equals
// DotRow(row r, x[t]) bit for bit, whatever n_tokens, strides or thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace k3::quant {

// A row-major weight matrix in one ggml type: row r starts at data + r * row_bytes and holds
// `cols` contiguous elements (ne[0]); cols is a multiple of the type's block size.
struct QuantMatrix {
  GgmlType type;
  const void* data;
  int64_t rows;
  int64_t cols;
  size_t row_bytes;
};

// Σ_i w[i]·x[i] over the n elements of one row of `type` (n a multiple of the block size),
// decoding block by block. Aborts when CanDequantize(type) is false or n is not whole blocks.
float DotRow(GgmlType type, const void* row, const float* x, int64_t n);

// y[t * y_stride + r] = Σ_c w[r][c] · x[t * x_stride + c] for r < w.rows, t < n_tokens.
// Each weight row is decoded once (chunk by chunk into a per-thread buffer) and dotted with every
// token row, so a batch reads the weights once. Parallel over rows with OpenMP.
void MatMul(const QuantMatrix& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y, int64_t y_stride);

}  // namespace k3::quant
