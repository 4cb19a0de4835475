// Plain quantized products through cuBLAS, for long prefill chunks: the weights are decoded to f16
// into a caller scratch a block of rows at a time (QuantDequantF16), the activations are rounded
// to f16 once (RoundRowsToHalf), and cublasGemmEx multiplies the two (f16 operands, f32
// accumulation and output). The operands are exactly QuantGemm's, so the accuracy contract of
// quant_gemm.h holds unchanged; only the order of the f32 additions differs. What it buys is
// cuBLAS's tensor-core rate: H200, Q8_0 7168 -> 12288 at 4096 tokens, QuantGemm 3.44 ms
// (210 TFLOP/s) against 1.01 ms for cuBLAS's f16 product alone (bench/device/gemm_h200_v1.csv);
// the decode costs one pass over the weights (read the quantized rows, write f16) per call, so it
// pays from a few hundred tokens on.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/quant_gemm/quant_gemm.h"

namespace k3::cuda {

// What the cuBLAS form needs beside QuantGemmParams.
struct BlasScratch {
  cublasHandle_t handle = nullptr;  // the caller's; the call sets its stream to `stream`
  void* weights = nullptr;          // device, 256-byte aligned: f16 rows of W, one block at a time
  size_t weight_bytes = 0;          // its size: at least QuantGemmBlasMinScratch(cols) bytes
};

// Rows decoded per cublasGemmEx call: as many whole 128-row tiles as weight_bytes holds at
// cols f16 each (0 when not even 128 rows fit).
int64_t QuantGemmBlasRowBlock(int64_t cols, size_t weight_bytes);
inline size_t QuantGemmBlasMinScratch(int64_t cols) { return static_cast<size_t>(cols) * 2 * 128; }

// y = W x as QuantGemm computes it (same params, same workspace: its f16 copy of x), for plain
// products only: n_groups 1, no group_offsets, no x_rows, no split_x, and y_stride, rows and the
// row blocks such that every y row block starts 16-byte aligned is not required (cuBLAS takes any
// f32 alignment). Returns cudaErrorInvalidValue for anything else or a short scratch (nothing
// launched then), cudaErrorNotSupported / cudaErrorUnknown when cuBLAS refuses or fails (mapped
// from its status), otherwise the first launch error. No allocation, no host synchronization.
//
// weight_half: the whole matrix already decoded to f16 ([rows][cols], 16-byte aligned, the values
// QuantDequantF16 writes: a resident copy, CudaEngineOptions::prefill_f16_weights_mb), or nullptr.
// Given, the decode is skipped and one cublasGemmEx covers every row (blas.weights may be null).
// x_half: x already rounded (RoundRowsToHalf's [n_tokens][cols] output, 16-byte aligned: several
// products of one input share one rounding), or nullptr; given, x and the workspace are not read.
cudaError_t QuantGemmBlas(const QuantGemmParams& p, const BlasScratch& blas, cudaStream_t stream,
                          const void* weight_half = nullptr, const void* x_half = nullptr);

// y[t][r] = Σ_c W[r][c] x[t][c] with F32 weights and activations as they are: cuBLAS's f32 GEMM
// (no tensor-core rounding: exact up to the order of the f32 additions, like the f32 GEMV), for
// products that must stay exact on long runs (the MoE router: a rounded logit may change the
// chosen experts). w [rows][cols], x [n_tokens][x_stride], y [n_tokens][y_stride], all device f32.
// cudaErrorInvalidValue for a bad shape or pointer (nothing launched), cuBLAS failures as above.
struct F32GemmParams {
  const float* w;    // [rows][cols]
  int64_t rows;      // output columns of y
  int64_t cols;      // input width
  const float* x;    // [n_tokens][x_stride]
  int64_t x_stride;  // >= cols
  float* y;          // [n_tokens][y_stride]
  int64_t y_stride;  // >= rows
  int64_t n_tokens;
};
cudaError_t F32GemmBlas(const F32GemmParams& p, cublasHandle_t handle, cudaStream_t stream);

}  // namespace k3::cuda
