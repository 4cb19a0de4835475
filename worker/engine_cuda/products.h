// The products and small row ops of a GPU forward, as one call each on the engine's weight views:
// GEMV (direct-load or block layout), the tensor-core GEMV for small batches, the tile GEMM, the
// grouped expert GEMM, stacked per-head / per-expert GEMVs, RMS/L2 norms and situ.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/norm/norm.h"
#include "kernels/cuda/quant_gemm/blas_gemm.h"
#include "kernels/cuda/quant_gemv/quant_gemv.h"
#include "worker/engine_cuda/device_weights.h"
#include "worker/model/k3_config.h"

namespace k3::engine_cuda {

// The most rows the f32 GEMV takes for a product (exact up to summation order, batch-invariant):
// prefill runs of up to this many tokens stay exact; decode steps hand Q8_0 products to the
// tensor-core GEMV from CudaEngineOptions::dense_gemv_max_rows (<= this) rows on.
inline constexpr int64_t kGemvMaxRows = cuda::kQuantGemvMaxTokens;
// Decode steps of up to this many rows run the experts' gate|up products and activation as one
// launch (CudaEngineOptions::fused_gate_up): measured +1.5% at batch 1, even at 16, -2% at 64.
inline constexpr int64_t kFusedGateUpMaxRows = 4;

// Steps of more rows than the GEMV takes and at most this many run Q8_0 products that have a
// direct (repacked) form on the tensor-core GEMV (QuantGemvMma: passes of 16 rows, each reading
// the weights once); the tile GEMM takes the rest. H200, slice8: at 16 rows the LM head 2.67 ->
// 0.82 ms per step against two f32 GEMV passes; at 64 rows (four passes) 3.46 ms against the tile
// GEMM's 1.31, hence 32.
inline constexpr int64_t kMmaMaxRows = 32;
// The most rows CudaEngineOptions::mma_max_rows may raise that to.
inline constexpr int64_t kMmaWideMaxRows = 256;

// How Product uses the tensor-core GEMV: up to max_rows rows (kMmaMaxRows, or a decode step's
// CudaEngineOptions::mma_max_rows), in its second form with shared_x
// (QuantGemvDirectParams::mma_shared_x: passes of 64 rows, each weight read once per pass).
struct MmaChoice {
  bool shared_x = false;
  int64_t max_rows = kMmaMaxRows;
  // with shared_x: x rounded to f16 once into this scratch (QuantGemvDirectParams::x_half), or nullptr
  void* x_half = nullptr;
  size_t x_half_bytes = 0;
};
// The LM head (7168 -> 163840: 1.25 GB of Q8_0 decoded to f16 per call, ~1 ms) takes cuBLAS only
// from this many rows (and CudaEngineOptions::blas_min_rows): H200, slice8, batch 64 the tile GEMM
// took 1.22 ms against cuBLAS's 2.27; at 256 rows the tile GEMM 2.82.
inline constexpr int64_t kHeadBlasMinRows = 256;

// Scratch of the tensor-core GEMM (its f16 copy of the activations), and the cuBLAS form's handle
// and f16 weight rows: plain products of at least blas_min_rows rows take QuantGemmBlas
// (kernels/cuda/quant_gemm/blas_gemm.h) when blas.handle is set.
struct GemmScratch {
  void* data = nullptr;
  size_t bytes = 0;
  cuda::BlasScratch blas = {};
  int64_t blas_min_rows = 0;  // used only when blas.handle is set (the engine makes one when > 0)
  // One input already rounded for cuBLAS (RoundRowsToHalf: [n][rounded_cols] halves of
  // rounded_from, rows of stride rounded_cols), or null: products of exactly that x take it instead
  // of rounding their own (the engine's normed stream, read by up to six products a layer).
  const float* rounded_from = nullptr;
  const void* rounded_half = nullptr;
  int64_t rounded_cols = 0;
};

// y = W x for n rows through a GEMV: the direct-load kernel when w has its direct form.
cudaError_t Gemv(const DMat& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t n,
                 cudaStream_t s);

// Batched: slot i uses matrix ids[i] (or i), its x at x + i*x_mat, y at y + i*y_mat. int8_x: IQ1_S
// stacks round x to int8 (QuantGemvParams::int8_x).
cudaError_t GemvStack(const DStack& w, const int32_t* ids, int64_t n_mats, const float* x, int64_t x_stride,
                      int64_t x_mat, float* y, int64_t y_stride, int64_t y_mat, int64_t n_tokens, cudaStream_t s,
                      bool int8_x = false);

// The experts' first half: g = situ(gate·x, up·x) per slot (GemvStack's slots and strides; u: the
// up products' buffer, of g's shape). With `fused` and int8_x, one launch where the kernel takes
// the shape (cuda::QuantGemvGateUpSitu: the same bits as the three launches, u untouched);
// otherwise GemvStack on each stack and SituInto.
cudaError_t GemvStackGateUp(const DStack& gate, const DStack& up, const int32_t* ids, int64_t n_mats, const float* x,
                            int64_t x_stride, int64_t x_mat, float* g, float* u, int64_t y_stride, int64_t y_mat,
                            const model::K3Config& c, cudaStream_t s, bool int8_x, bool fused);

// The expert-grouped decode form (int8 x; cuda::QuantGemvGrouped): whether the routed experts'
// stacks take it (x, y: any 16-byte aligned activation buffers, only checked), the down product (y row p = W_{mat}·x row p over the passes' positions) and the
// gate|up half (x rows through g.x_rows; gy rows situ(gate, up), uy the up products' buffer unless
// fused, n_positions rows of each).
bool GemvStackGroupedSupports(const DStack& gate, const DStack& up, const DStack& down, const float* x, float* y);
cudaError_t GemvStackGrouped(const DStack& w, const cuda::QuantGemvPasses& g, const float* x, int64_t x_stride,
                             float* y, int64_t y_stride, cudaStream_t s);
cudaError_t GemvStackGateUpGrouped(const DStack& gate, const DStack& up, const cuda::QuantGemvPasses& g,
                                   const float* x, int64_t x_stride, float* gy, float* uy, int64_t y_stride,
                                   int64_t n_positions, const model::K3Config& c, cudaStream_t s, bool fused);

// y = W x for n rows: the f32 GEMV up to gemv_max_rows rows (<= kGemvMaxRows); then, up to
// mma.max_rows rows, the tensor-core GEMV where w has a direct Q8_0 form and the f32 GEMV for the
// other matrices (small ones: router, gate and beta projections); the tile GEMM beyond, or cuBLAS
// from ws.blas_min_rows rows (exact_only: always the f32 GEMV). So steps of up to mma.max_rows rows
// never use the GEMM workspace. A matrix with only its direct form (data null: a stack) never takes
// the tile GEMM.
cudaError_t Product(const DMat& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t n,
                    bool exact_only, GemmScratch ws, cudaStream_t s, int64_t gemv_max_rows = kGemvMaxRows,
                    MmaChoice mma = {});

// Whether Product(w, n rows, exact_only, gemv_max_rows, mma) runs a kernel with the epilogue: the
// direct-load GEMV (QuantGemvDirect) or the tensor-core GEMV (QuantGemvMma).
bool TakesEpilogueProduct(const DMat& w, int64_t n, bool exact_only, int64_t gemv_max_rows = kGemvMaxRows,
                          MmaChoice mma = {});

// Product's kernel with its epilogue: y = W x + add (add: rows like y's, or nullptr), then with
// `accumulate` y += that; the bits of Product into a buffer and AddInto's after it (a residual
// stream's x += W·o + shared in one launch). cudaErrorInvalidValue where TakesEpilogueProduct is
// false.
cudaError_t ResidualProduct(const DMat& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t n,
                            const float* add, bool accumulate, bool exact_only, int64_t gemv_max_rows,
                            cudaStream_t s, MmaChoice mma = {});

// y = W x kept exact (up to summation order) at any n: the f32 GEMV, or for F32 weights and runs of
// at least ws.blas_min_rows rows a GEMM (the MoE router: rounding could change routing): with
// `tf32x3` the tensor-core 3xTF32 kernel (cuda::F32GemmTf32x3, ~f32 accuracy) where it takes the
// shape, else cuBLAS's f32 GEMM.
cudaError_t ExactProduct(const DMat& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t n,
                         GemmScratch ws, cudaStream_t s, bool tf32x3 = false);

// Matrix i of a stack as a plain matrix.
inline DMat Slice(const DStack& w, int64_t i) {
  return DMat{w.type, static_cast<const uint8_t*>(w.data) + i * w.matrix_stride, w.rows, w.cols, w.row_bytes};
}

// Grouped expert product: rows [offsets[g], offsets[g+1]) of the grouped sequence through expert g;
// x_rows (when set) names rows of x, which has x_src_rows rows.
// x_half: x already rounded for the kernel (QuantGemmParams::x_half; GroupedGateUpSitu's g_half),
// only where GroupedTakesHalfX(w).
cudaError_t GroupedProduct(const DStack& w, int64_t n_groups, const int32_t* offsets, const int32_t* x_rows,
                           int64_t x_src_rows, const float* x, int64_t x_stride, float* y, int64_t y_stride,
                           int64_t n_rows, GemmScratch ws, cudaStream_t s, const void* x_half = nullptr);

// True when GroupedProduct(w, ...) runs on the IQ1_S wgmma kernel, which may take x_half.
bool GroupedTakesHalfX(const DStack& w);

// The experts' gate and up products and situ of them into g (y_stride Fw = gate.rows), grouped
// as GroupedProduct: with `fused`, one launch where the kernels have it (QuantGemmGateUpSitu:
// IQ1_S on the wgmma kernel, the same bits), else gate into g, up into u and Situ. With g_half
// ([n_rows][Fw] halves, 256-byte aligned) and the fused launch taken, situ goes there instead of
// g, rounded for the next wgmma product (its x_half), and *wrote_half is set; else it is cleared.
cudaError_t GroupedGateUpSitu(const DStack& gate, const DStack& up, int64_t n_groups, const int32_t* offsets,
                              const int32_t* x_rows, int64_t x_src_rows, const float* x, int64_t x_stride, float* g,
                              float* u, int64_t n_rows, const model::K3Config& c, GemmScratch ws, cudaStream_t s,
                              bool fused, void* g_half = nullptr, bool* wrote_half = nullptr);

// Row (or per-group) RMS / L2 norm, optionally times a weight and gated by sigmoid(gate).
// gate_stride: floats between the gate's rows (0: groups * width, the rows of x).
cudaError_t Rms(const float* x, float* y, const float* w, int64_t n, int64_t width, float eps, cudaStream_t s,
                int64_t groups = 1, const float* gate = nullptr, cuda::NormKind kind = cuda::NormKind::kRms,
                int64_t gate_stride = 0);

// g = situ(g, u) (the config's beta and linear beta), rows x width, in place.
cudaError_t SituInto(float* g, const float* u, int64_t rows, int64_t width, const model::K3Config& c,
                     cudaStream_t s);

}  // namespace k3::engine_cuda
