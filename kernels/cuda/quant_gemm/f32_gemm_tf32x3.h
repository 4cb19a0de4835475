// F32 weights times F32 activations on the tensor cores at ~f32 accuracy ("3xTF32"): each operand
// is split into a TF32 high part and the rest, x = hi + lo, and every k-step adds lo·hi, hi·lo and
// then hi·hi (the dropped lo·lo is ~2^-22 of the product; lo's truncation to TF32 ~2^-21), each
// k-tile's sum added into f32 sums rounded to nearest (the tensor cores' own accumulation
// truncates). So the sums carry errors of the order of an f32 GEMM's own summation order
// (~sqrt(K)·2^-24 of Σ|w·x| at K = 7168), not TF32's 2^-11.
//
// Why: the MoE router (F32 {7168, 896} in every K3 file) must stay ~exact (a rounded logit may
// change the chosen experts), and cuBLAS's exact f32 GEMM runs on the FP32 pipes, ~50 TFLOP/s
// on an H100 (1.04 ms a MoE layer at 4096 tokens). Measured so far (H100, 2026-12-07) only a
// first form: cvt.rna.tf32 splits (two per value on the quarter-rate conversion pipe) and one
// accumulator over all of K: 1.11 ms, and 2.3e-4 of L2 off at K = 7168 (the tensor cores'
// truncating accumulation). This form (integer splits, per-k-tile f32 sums) has not run yet:
// CudaEngineOptions::tf32x3_router is off until it has.
//
// Tiles of 128 weight rows x 128 tokens, 8 warps of 64 x 32, K in steps of 32 through 3 cp.async
// stages; mma.sync m16n8k8 (sm_80+). Any rows and tokens (zero-filled edges); cols % 4 == 0,
// x_stride % 4 == 0 and 16-byte aligned w and x (the cp.async pieces): F32GemmTf32x3Supports.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/quant_gemm/blas_gemm.h"

namespace k3::cuda {

// Whether F32GemmTf32x3 takes p (shape, strides and alignment above; non-null pointers).
bool F32GemmTf32x3Supports(const F32GemmParams& p);

// y = W x as F32GemmBlas defines it (y[t][r] = Σ_c W[r][c] x[t][c]). cudaErrorInvalidValue where
// F32GemmTf32x3Supports is false (nothing launched); otherwise the launch's error. No allocation,
// no synchronization: capturable.
cudaError_t F32GemmTf32x3(const F32GemmParams& p, cudaStream_t stream);

}  // namespace k3::cuda
