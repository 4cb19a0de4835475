#include "worker/engine_cuda/products.h"

#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/quant_gemm/f32_gemm_tf32x3.h"
#include "kernels/cuda/quant_gemm/quant_gemm.h"
#include "kernels/cuda/quant_gemv/gemv_direct.h"
#include "kernels/cuda/quant_gemv/quant_gemv.h"

namespace k3::engine_cuda {
namespace {

// The weight and activation fields every product's params struct shares.
template <class P, class W>
P ProductParams(const W& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t n) {
  P p;
  p.type = w.type;
  p.weight = w.data;
  p.rows = w.rows;
  p.cols = w.cols;
  p.row_bytes = w.row_bytes;
  p.x = x;
  p.x_stride = x_stride;
  p.y = y;
  p.y_stride = y_stride;
  p.n_tokens = n;
  return p;
}

// The params of the direct-load kernels (QuantGemvDirect, QuantGemvMma) on w's direct form.
cuda::QuantGemvDirectParams DirectParams(const DMat& w, const float* x, int64_t x_stride, float* y, int64_t y_stride,
                                         int64_t n) {
  cuda::QuantGemvDirectParams d;
  d.type = w.type;
  d.weight = w.direct;
  d.rows = w.rows;
  d.cols = w.cols;
  d.x = x;
  d.x_stride = x_stride;
  d.y = y;
  d.y_stride = y_stride;
  d.n_tokens = n;
  return d;
}

// The batched GEMV's params over a stack (GemvStack's slots and strides).
cuda::QuantGemvParams StackParams(const DStack& w, const int32_t* ids, int64_t n_mats, const float* x, int64_t x_stride,
                                  int64_t x_mat, float* y, int64_t y_stride, int64_t y_mat, int64_t n_tokens,
                                  bool int8_x) {
  auto p = ProductParams<cuda::QuantGemvParams>(w, x, x_stride, y, y_stride, n_tokens);
  p.int8_x = int8_x;
  p.n_mats = n_mats;
  p.mat_stride_bytes = static_cast<int64_t>(w.matrix_stride);
  if (int8_x && w.ternary != nullptr) {  // the same products on the stack's ternary form
    p.weight = w.ternary;
    p.row_bytes = w.ternary_row_bytes;
    p.mat_stride_bytes = static_cast<int64_t>(w.ternary_stride);
    p.iq1s_ternary = true;
  }
  p.mat_ids = ids;
  p.x_mat_stride = x_mat;
  p.y_mat_stride = y_mat;
  return p;
}

// Whether up has gate's type, shape and strides, and a ternary form where gate has one (the fused
// gate|up launches need it).
bool SameShape(const DStack& gate, const DStack& up) {
  return up.type == gate.type && up.rows == gate.rows && up.cols == gate.cols && up.row_bytes == gate.row_bytes &&
         up.matrix_stride == gate.matrix_stride && (up.ternary == nullptr) == (gate.ternary == nullptr) &&
         up.ternary_stride == gate.ternary_stride;
}
// up's weights for a fused launch whose gate params are p (its ternary form where p reads gate's;
// SameShape: up has the form where gate has it). P: QuantGemvParams or QuantGemmParams.
template <class P>
const void* UpWeights(const DStack& up, const P& p) {
  return p.iq1s_ternary ? up.ternary : up.data;
}

// A grouped expert product's params (GroupedProduct's arguments), on the stack's ternary form where
// it has one (then its only form; the IQ1_S wgmma kernel reads it, which CudaEngine::CheckTernary
// made sure of at Open: the same f16 weights, so the same bits as the ggml rows).
cuda::QuantGemmParams GroupedParams(const DStack& w, int64_t n_groups, const int32_t* offsets, const int32_t* x_rows,
                                    int64_t x_src_rows, const float* x, int64_t x_stride, float* y, int64_t y_stride,
                                    int64_t n_rows, const GemmScratch& ws) {
  auto p = ProductParams<cuda::QuantGemmParams>(w, x, x_stride, y, y_stride, n_rows);
  p.mat_stride_bytes = static_cast<int64_t>(w.matrix_stride);
  if (w.ternary != nullptr) {
    p.weight = w.ternary;
    p.row_bytes = w.ternary_row_bytes;
    p.mat_stride_bytes = static_cast<int64_t>(w.ternary_stride);
    p.iq1s_ternary = true;
  }
  p.x_rows = x_rows;
  p.x_src_rows = x_src_rows;
  p.n_groups = n_groups;
  p.group_offsets = offsets;
  p.workspace = ws.data;
  p.workspace_bytes = ws.bytes;
  return p;
}

// Whether a product of n rows takes cuBLAS (the handle exists only when blas_min_rows > 0).
bool TakesBlas(const GemmScratch& ws, int64_t n) { return ws.blas.handle != nullptr && n >= ws.blas_min_rows; }

}  // namespace

cudaError_t Gemv(const DMat& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t n,
                 cudaStream_t s) {
  if (w.direct != nullptr) {  // the direct-load kernel (decode-sized steps)
    return cuda::QuantGemvDirect(DirectParams(w, x, x_stride, y, y_stride, n), s);
  }
  return cuda::QuantGemv(ProductParams<cuda::QuantGemvParams>(w, x, x_stride, y, y_stride, n), s);
}

cudaError_t GemvStack(const DStack& w, const int32_t* ids, int64_t n_mats, const float* x, int64_t x_stride,
                      int64_t x_mat, float* y, int64_t y_stride, int64_t y_mat, int64_t n_tokens, cudaStream_t s,
                      bool int8_x) {
  return cuda::QuantGemv(StackParams(w, ids, n_mats, x, x_stride, x_mat, y, y_stride, y_mat, n_tokens, int8_x), s);
}

cudaError_t GemvStackGateUp(const DStack& gate, const DStack& up, const int32_t* ids, int64_t n_mats, const float* x,
                            int64_t x_stride, int64_t x_mat, float* g, float* u, int64_t y_stride, int64_t y_mat,
                            const model::K3Config& c, cudaStream_t s, bool int8_x, bool fused) {
  const cuda::QuantGemvParams p = StackParams(gate, ids, n_mats, x, x_stride, x_mat, g, y_stride, y_mat, 1, int8_x);
  if (fused && int8_x && SameShape(gate, up) && cuda::QuantGemvGateUpSupports(p)) {
    return cuda::QuantGemvGateUpSitu(cuda::QuantGemvGateUpParams{p, UpWeights(up, p), c.situ_beta, c.situ_linear_beta},
                                     s);
  }
  cudaError_t e = GemvStack(gate, ids, n_mats, x, x_stride, x_mat, g, y_stride, y_mat, 1, s, int8_x);
  if (e == cudaSuccess) e = GemvStack(up, ids, n_mats, x, x_stride, x_mat, u, y_stride, y_mat, 1, s, int8_x);
  if (e == cudaSuccess) e = SituInto(g, u, n_mats, gate.rows, c, s);
  return e;
}

bool GemvStackGroupedSupports(const DStack& gate, const DStack& up, const DStack& down, const float* x, float* y) {
  auto takes = [&](const DStack& w) {
    return cuda::QuantGemvGroupedSupports(StackParams(w, nullptr, 1, x, w.cols, 0, y, w.rows, 0, 1, true));
  };
  return SameShape(gate, up) && takes(gate) && takes(down);
}

cudaError_t GemvStackGrouped(const DStack& w, const cuda::QuantGemvPasses& g, const float* x, int64_t x_stride,
                             float* y, int64_t y_stride, cudaStream_t s) {
  return cuda::QuantGemvGrouped(StackParams(w, nullptr, 1, x, x_stride, 0, y, y_stride, 0, 1, true), g, s);
}

cudaError_t GemvStackGateUpGrouped(const DStack& gate, const DStack& up, const cuda::QuantGemvPasses& g,
                                   const float* x, int64_t x_stride, float* gy, float* uy, int64_t y_stride,
                                   int64_t n_positions, const model::K3Config& c, cudaStream_t s, bool fused) {
  if (fused) {
    const cuda::QuantGemvParams p = StackParams(gate, nullptr, 1, x, x_stride, 0, gy, y_stride, 0, 1, true);
    return cuda::QuantGemvGateUpSituGrouped(
        cuda::QuantGemvGateUpParams{p, UpWeights(up, p), c.situ_beta, c.situ_linear_beta}, g, s);
  }
  cudaError_t e = GemvStackGrouped(gate, g, x, x_stride, gy, y_stride, s);
  if (e == cudaSuccess) e = GemvStackGrouped(up, g, x, x_stride, uy, y_stride, s);
  if (e == cudaSuccess) e = SituInto(gy, uy, n_positions, gate.rows, c, s);
  return e;
}

namespace {

// Product's dispatch, in its order: the tensor-core GEMV, then the GEMV (direct-load where w has
// the form), then the tile GEMM or cuBLAS.
bool TakesMma(const DMat& w, int64_t n, bool exact_only, int64_t gemv_max_rows, const MmaChoice& mma) {
  return !exact_only && n > gemv_max_rows && n <= mma.max_rows && w.direct != nullptr &&
         cuda::QuantGemvMmaSupports(w.type, w.cols);
}
// p with mma's x scratch where it holds p's x (else each block rounds its own x).
cuda::QuantGemvDirectParams MmaXHalf(cuda::QuantGemvDirectParams p, const MmaChoice& mma) {
  if (mma.shared_x && mma.x_half != nullptr && cuda::QuantGemvMmaXHalfBytes(p.n_tokens, p.cols) <= mma.x_half_bytes) {
    p.x_half = mma.x_half;
    p.x_half_bytes = mma.x_half_bytes;
  }
  return p;
}
bool TakesGemv(const DMat& w, int64_t n, bool exact_only, const MmaChoice& mma) {
  return exact_only || n <= mma.max_rows || w.data == nullptr || !cuda::QuantGemmSupports(w.type) ||
         w.cols % 32 != 0;
}

}  // namespace

bool TakesEpilogueProduct(const DMat& w, int64_t n, bool exact_only, int64_t gemv_max_rows, MmaChoice mma) {
  return w.direct != nullptr && (TakesMma(w, n, exact_only, gemv_max_rows, mma) || TakesGemv(w, n, exact_only, mma));
}

cudaError_t ResidualProduct(const DMat& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t n,
                            const float* add, bool accumulate, bool exact_only, int64_t gemv_max_rows,
                            cudaStream_t s, MmaChoice mma) {
  cuda::QuantGemvDirectParams p = DirectParams(w, x, x_stride, y, y_stride, n);
  p.add = add;
  p.add_stride = add != nullptr ? y_stride : 0;
  p.accumulate = accumulate;
  p.mma_shared_x = mma.shared_x;
  if (TakesMma(w, n, exact_only, gemv_max_rows, mma)) return cuda::QuantGemvMma(MmaXHalf(p, mma), s);
  if (w.direct != nullptr && TakesGemv(w, n, exact_only, mma)) return cuda::QuantGemvDirect(p, s);
  return cudaErrorInvalidValue;
}

cudaError_t Product(const DMat& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t n,
                    bool exact_only, GemmScratch ws, cudaStream_t s, int64_t gemv_max_rows, MmaChoice mma) {
  if (TakesMma(w, n, exact_only, gemv_max_rows, mma)) {
    cuda::QuantGemvDirectParams p = DirectParams(w, x, x_stride, y, y_stride, n);
    p.mma_shared_x = mma.shared_x;
    return cuda::QuantGemvMma(MmaXHalf(p, mma), s);
  }
  if (TakesGemv(w, n, exact_only, mma)) return Gemv(w, x, x_stride, y, y_stride, n, s);
  auto p = ProductParams<cuda::QuantGemmParams>(w, x, x_stride, y, y_stride, n);
  p.workspace = ws.data;
  p.workspace_bytes = ws.bytes;
  if (TakesBlas(ws, n)) {
    const bool rounded = ws.rounded_half != nullptr && x == ws.rounded_from && x_stride == ws.rounded_cols &&
                         w.cols == ws.rounded_cols;
    return cuda::QuantGemmBlas(p, ws.blas, s, w.half, rounded ? ws.rounded_half : nullptr);
  }
  return cuda::QuantGemm(p, s);
}

cudaError_t ExactProduct(const DMat& w, const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t n,
                         GemmScratch ws, cudaStream_t s, bool tf32x3) {
  const void* f32 = w.data != nullptr ? w.data : w.direct;  // F32's direct form is the matrix itself
  if (w.type == quant::GgmlType::kF32 && f32 != nullptr && w.row_bytes == static_cast<size_t>(w.cols) * 4 &&
      TakesBlas(ws, n)) {
    const cuda::F32GemmParams p{static_cast<const float*>(f32), w.rows, w.cols, x, x_stride, y, y_stride, n};
    if (tf32x3 && cuda::F32GemmTf32x3Supports(p)) return cuda::F32GemmTf32x3(p, s);
    return cuda::F32GemmBlas(p, ws.blas.handle, s);
  }
  return Gemv(w, x, x_stride, y, y_stride, n, s);
}

cudaError_t GroupedProduct(const DStack& w, int64_t n_groups, const int32_t* offsets, const int32_t* x_rows,
                           int64_t x_src_rows, const float* x, int64_t x_stride, float* y, int64_t y_stride,
                           int64_t n_rows, GemmScratch ws, cudaStream_t s, const void* x_half) {
  auto p = GroupedParams(w, n_groups, offsets, x_rows, x_src_rows, x, x_stride, y, y_stride, n_rows, ws);
  p.x_half = x_half;
  return cuda::QuantGemm(p, s);
}

bool GroupedTakesHalfX(const DStack& w) {
  return cuda::QuantGemmTakesHalfX(ProductParams<cuda::QuantGemmParams>(w, nullptr, 0, nullptr, 0, 0));
}

cudaError_t GroupedGateUpSitu(const DStack& gate, const DStack& up, int64_t n_groups, const int32_t* offsets,
                              const int32_t* x_rows, int64_t x_src_rows, const float* x, int64_t x_stride, float* g,
                              float* u, int64_t n_rows, const model::K3Config& c, GemmScratch ws, cudaStream_t s,
                              bool fused, void* g_half, bool* wrote_half) {
  if (wrote_half != nullptr) *wrote_half = false;
  const int64_t fw = gate.rows;
  const auto p = GroupedParams(gate, n_groups, offsets, x_rows, x_src_rows, x, x_stride, g, fw, n_rows, ws);
  if (fused && SameShape(gate, up) && cuda::QuantGemmGateUpSupports(p)) {
    const bool half = g_half != nullptr && wrote_half != nullptr && fw % 128 == 0;
    const cuda::QuantGemmGateUpParams gu{p, UpWeights(up, p), c.situ_beta, c.situ_linear_beta,
                                         half ? g_half : nullptr};
    const cudaError_t e = cuda::QuantGemmGateUpSitu(gu, s);
    if (e == cudaSuccess && half) *wrote_half = true;
    return e;
  }
  cudaError_t e = cuda::QuantGemm(p, s);
  if (e == cudaSuccess) {
    e = GroupedProduct(up, n_groups, offsets, x_rows, x_src_rows, x, x_stride, u, fw, n_rows, ws, s);
  }
  if (e == cudaSuccess) e = SituInto(g, u, n_rows, fw, c, s);
  return e;
}

cudaError_t Rms(const float* x, float* y, const float* w, int64_t n, int64_t width, float eps, cudaStream_t s,
                int64_t groups, const float* gate, cuda::NormKind kind, int64_t gate_stride) {
  cuda::RowNormParams p;
  p.x = x;
  p.y = y;
  p.weight = w;
  p.gate = gate;
  p.n_tokens = n;
  p.n_groups = groups;
  p.width = width;
  p.x_stride = groups * width;
  p.y_stride = groups * width;
  p.gate_stride = gate_stride > 0 ? gate_stride : groups * width;
  p.eps = eps;
  p.kind = kind;
  return cuda::RowNorm(p, s);
}

cudaError_t SituInto(float* g, const float* u, int64_t rows, int64_t width, const model::K3Config& c,
                     cudaStream_t s) {
  cuda::SituParams p;
  p.g = g;
  p.u = u;
  p.out = g;
  p.n_tokens = rows;
  p.width = width;
  p.g_stride = width;
  p.u_stride = width;
  p.out_stride = width;
  p.beta = c.situ_beta;
  p.lambda = c.situ_linear_beta;
  return cuda::Situ(p, s);
}

}  // namespace k3::engine_cuda
