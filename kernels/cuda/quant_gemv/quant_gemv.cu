// Host side of the dequantizing GEMV: validation, chunk geometry, token passes, dispatch.
#include "kernels/cuda/quant_gemv/quant_gemv.h"

#include <mutex>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_gemv/gemv_impl.cuh"
#include "kernels/cuda/quant_gemv/gemv_iq1s_rows.cuh"
#include "kernels/cuda/quant_gemv/gemv_iq1s_sub.cuh"
#include "kernels/cuda/quant_gemv/gemv_q8_0_short.cuh"
#include "kernels/cuda/quant_gemv/iq1s_ternary.h"

namespace k3::cuda {
namespace qgemv {

cudaError_t PrepareKernel(const void* kernel, int threads, int smem_bytes, int* blocks_per_sm) {
  struct Entry {
    const void* kernel;
    int device, threads, smem, per_sm;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  int dev = 0;
  K3_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  bool attr_set = false;
  for (const Entry& e : cache) {
    if (e.kernel == kernel && e.device == dev) {
      attr_set = true;
      if (e.threads == threads && e.smem == smem_bytes) {
        *blocks_per_sm = e.per_sm;
        return cudaSuccess;
      }
    }
  }
  if (!attr_set) {
    int optin = 0;
    cudaFuncAttributes attr{};
    K3_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    K3_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    K3_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       optin - static_cast<int>(attr.sharedSizeBytes)));
  }
  int per_sm = 0;
  K3_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes));
  if (per_sm < 1) return cudaErrorInvalidConfiguration;  // does not fit: shared memory too large
  cache.push_back({kernel, dev, threads, smem_bytes, per_sm});
  *blocks_per_sm = per_sm;
  return cudaSuccess;
}

namespace {

using LaunchFn = cudaError_t (*)(const Args&, int, cudaStream_t);

LaunchFn FindLaunch(quant::GgmlType type) {
  using quant::GgmlType;
  switch (type) {
    case GgmlType::kF32: return LaunchF32;
    case GgmlType::kF16: return LaunchF16;
    case GgmlType::kBF16: return LaunchBF16;
    case GgmlType::kQ8_0: return LaunchQ8_0;
    case GgmlType::kQ4_0: return LaunchQ4_0;
    case GgmlType::kQ5_0: return LaunchQ5_0;
    case GgmlType::kIQ4_NL: return LaunchIQ4_NL;
    case GgmlType::kQ2_K: return LaunchQ2_K;
    case GgmlType::kQ3_K: return LaunchQ3_K;
    case GgmlType::kQ4_K: return LaunchQ4_K;
    case GgmlType::kQ5_K: return LaunchQ5_K;
    case GgmlType::kQ6_K: return LaunchQ6_K;
    case GgmlType::kIQ2_XXS: return LaunchIQ2_XXS;
    case GgmlType::kIQ2_XS: return LaunchIQ2_XS;
    case GgmlType::kIQ2_S: return LaunchIQ2_S;
    case GgmlType::kIQ3_XXS: return LaunchIQ3_XXS;
    case GgmlType::kIQ3_S: return LaunchIQ3_S;
    case GgmlType::kIQ1_S: return LaunchIQ1_S;
    case GgmlType::kIQ1_M: return LaunchIQ1_M;
    case GgmlType::kIQ4_XS: return LaunchIQ4_XS;
    default: return nullptr;
  }
}

int FormatTableBytes(quant::GgmlType type) {
  int bytes = -1;
  VisitFormat(type, [&](auto f) { bytes = TableBytes<decltype(f)>(); });
  return bytes;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace
}  // namespace qgemv

bool QuantGemvSupports(quant::GgmlType type) { return qgemv::FindLaunch(type) != nullptr; }

size_t QuantGemvMinBytes(const QuantGemvParams& p) {
  return static_cast<size_t>(p.n_mats) *
         (static_cast<size_t>(p.rows) * p.row_bytes +
          static_cast<size_t>(p.n_tokens) * (static_cast<size_t>(p.cols) + static_cast<size_t>(p.rows)) * 4u);
}

namespace qgemv {
namespace {

// Validates p and fills the kernels' arguments (x, y and n_tokens are the caller's to set per pass)
// and the block-layout kernel's shared memory. cudaSuccess with *empty set: nothing to launch.
cudaError_t MakeArgs(const QuantGemvParams& p, Args* out, int* smem_bytes, bool* empty) {
  *empty = false;
  if (FindLaunch(p.type) == nullptr) return cudaErrorInvalidValue;
  const quant::TypeTraits& tr = quant::Traits(p.type);
  const int64_t be = tr.block_elems, bb = tr.block_bytes;
  if (p.rows < 0 || p.cols <= 0 || p.n_mats < 0 || p.n_tokens < 0) return cudaErrorInvalidValue;
  if (p.rows == 0 || p.n_mats == 0 || p.n_tokens == 0) {
    *empty = true;
    return cudaSuccess;
  }
  if (p.cols % be != 0 || p.cols % 8 != 0) return cudaErrorInvalidValue;
  const int64_t bpr = p.cols / be;
  if (p.iq1s_ternary && (p.type != quant::GgmlType::kIQ1_S || !p.int8_x || !p.iq1s_row_lanes)) {
    return cudaErrorInvalidValue;
  }
  const int64_t want_row_bytes = p.iq1s_ternary ? Iq1sTernaryRowBytes(p.cols) : bpr * bb;
  if (static_cast<int64_t>(p.row_bytes) != want_row_bytes || bpr > (int64_t{1} << 30)) return cudaErrorInvalidValue;
  if (p.weight == nullptr || p.x == nullptr || p.y == nullptr) return cudaErrorInvalidValue;
  if (!Aligned16(p.weight) || !Aligned16(p.x)) return cudaErrorMisalignedAddress;
  if ((p.n_mats > 1 || p.mat_ids != nullptr) && (p.mat_stride_bytes % 16 != 0 || p.mat_stride_bytes < p.rows * static_cast<int64_t>(p.row_bytes))) {
    return cudaErrorInvalidValue;
  }
  if (p.x_stride % 4 != 0 || p.x_mat_stride % 4 != 0 || p.x_stride < p.cols || p.y_stride < p.rows) {
    return cudaErrorInvalidValue;
  }

  // Chunks of about kChunkTargetBytes per row, balanced, each a multiple of 256 elements where
  // the row allows (so the 32 lanes get whole rounds of 8-weight runs).
  const int64_t q = be >= 256 ? 1 : 256 / be;
  const int64_t want_chunks = (bpr * bb + kChunkTargetBytes - 1) / kChunkTargetBytes;
  int64_t cb = (bpr + want_chunks - 1) / want_chunks;
  cb = (cb + q - 1) / q * q;
  if (cb > bpr) cb = bpr;
  const int64_t n_chunks = (bpr + cb - 1) / cb;

  Args a{};
  a.w = static_cast<const uint8_t*>(p.weight);
  a.mat_stride = p.mat_stride_bytes;
  a.mat_ids = p.mat_ids;
  a.n_mats = p.n_mats;
  a.rows = p.rows;
  a.row_bytes = static_cast<int64_t>(p.row_bytes);
  a.mat_bytes = p.rows * static_cast<int64_t>(p.row_bytes);
  a.tiles_per_mat = (p.rows + kRows - 1) / kRows;
  a.bpr = static_cast<int32_t>(bpr);
  a.cb = static_cast<int32_t>(cb);
  a.n_chunks = static_cast<int32_t>(n_chunks);
  a.ternary = p.iq1s_ternary;
  a.region_bytes = static_cast<int32_t>((cb * bb + 32 + 15) & ~int64_t{15});
  a.table_bytes = FormatTableBytes(p.type);
  a.x_stride = p.x_stride;
  a.x_mat_stride = p.x_mat_stride;
  a.y_stride = p.y_stride;
  a.y_mat_stride = p.y_mat_stride;
  *smem_bytes = a.table_bytes + kWarps * 2 * kRows * a.region_bytes;  // two stages per warp
  *out = a;
  return cudaSuccess;
}

}  // namespace
}  // namespace qgemv

cudaError_t QuantGemv(const QuantGemvParams& p, cudaStream_t stream) {
  using namespace qgemv;
  Args a{};
  int smem = 0;
  bool empty = false;
  K3_CUDA_CHECK(MakeArgs(p, &a, &smem, &empty));
  if (empty) return cudaSuccess;
  const LaunchFn launch = FindLaunch(p.type);

  // IQ1_S with int8 x (the routed experts at decode): the lane-per-row kernel, a token at a time.
  if (p.type == quant::GgmlType::kIQ1_S && p.int8_x && p.iq1s_row_lanes && Iq1sRowsApplies(a)) {
    a.n_tokens = 1;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      a.x = p.x + t * p.x_stride;
      a.y = p.y + t * p.y_stride;
      K3_CUDA_CHECK(LaunchIq1sRows(a, stream));
    }
    return cudaSuccess;
  }
  if (p.iq1s_ternary) return cudaErrorInvalidValue;  // a shape the lane-per-row kernel does not take
  // IQ1_S at decode sizes (the routed experts): the sub-block kernel, passes of up to 8 tokens.
  if (p.type == quant::GgmlType::kIQ1_S && p.n_tokens <= kIq1sSubMaxTokens && p.cols <= kIq1sSubMaxCols) {
    a.n_tokens = static_cast<int32_t>(p.n_tokens);
    a.x = p.x;
    a.y = p.y;
    return LaunchIq1sSub(a, p.int8_x, stream);
  }
  // Q8_0 stacks of rows of 128..512 weights (the MLA heads' k_b and v_b): a thread per 128 weights.
  const bool short_rows = Q8_0ShortApplies(p.type, a);
  for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kQuantGemvMaxTokens) {
    const int64_t nt = p.n_tokens - t0 < kQuantGemvMaxTokens ? p.n_tokens - t0 : kQuantGemvMaxTokens;
    a.n_tokens = static_cast<int32_t>(nt);
    a.x = p.x + t0 * p.x_stride;
    a.y = p.y + t0 * p.y_stride;
    K3_CUDA_CHECK(short_rows ? LaunchQ8_0Short(a, stream) : launch(a, smem, stream));
  }
  return cudaSuccess;
}

namespace qgemv {
namespace {

// MakeArgs for the fused gate|up launch: cudaErrorInvalidValue unless the lane-per-row IQ1_S kernel
// takes gate's shape (int8 x; *empty: nothing to launch).
cudaError_t MakeGateUpArgs(const QuantGemvParams& gate, Args* a, bool* empty) {
  if (gate.type != quant::GgmlType::kIQ1_S || !gate.int8_x || !gate.iq1s_row_lanes) return cudaErrorInvalidValue;
  int smem = 0;
  K3_CUDA_CHECK(MakeArgs(gate, a, &smem, empty));
  return *empty || Iq1sRowsApplies(*a) ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace
}  // namespace qgemv

bool QuantGemvGateUpSupports(const QuantGemvParams& gate) {
  qgemv::Args a{};
  bool empty = false;
  return qgemv::MakeGateUpArgs(gate, &a, &empty) == cudaSuccess;
}

cudaError_t QuantGemvGateUpSitu(const QuantGemvGateUpParams& p, cudaStream_t stream) {
  using namespace qgemv;
  Args a{};
  bool empty = false;
  K3_CUDA_CHECK(MakeGateUpArgs(p.gate, &a, &empty));
  if (p.up_weight == nullptr || p.situ_beta == 0.0f) return cudaErrorInvalidValue;
  if (!Aligned16(p.up_weight)) return cudaErrorMisalignedAddress;
  if (empty) return cudaSuccess;
  a.n_tokens = 1;
  for (int64_t t = 0; t < p.gate.n_tokens; ++t) {
    a.x = p.gate.x + t * p.gate.x_stride;
    a.y = p.gate.y + t * p.gate.y_stride;
    K3_CUDA_CHECK(LaunchIq1sRowsGateUp(a, static_cast<const uint8_t*>(p.up_weight), p.situ_beta, p.situ_lambda, stream));
  }
  return cudaSuccess;
}

namespace qgemv {
namespace {

static_assert(kQuantGemvPassRows == kIq1sRowsPassRows);

// The grouped launch's Args from the public form (a position's x and y rows as the "matrix"
// strides, max_passes as the matrix count); cudaErrorInvalidValue when the shape does not apply.
// QuantGemvGroupedSupports and both launches decide by this one check.
cudaError_t MakeGroupedArgs(const QuantGemvParams& p, int64_t max_passes, Args* a, bool* empty) {
  if (p.mat_ids != nullptr || max_passes < 0) return cudaErrorInvalidValue;
  if (p.mat_stride_bytes % 16 != 0 || p.mat_stride_bytes < p.rows * static_cast<int64_t>(p.row_bytes)) {
    return cudaErrorInvalidValue;
  }
  QuantGemvParams q = p;
  q.n_tokens = 1;
  q.n_mats = max_passes;
  q.x_mat_stride = p.x_stride;
  q.y_mat_stride = p.y_stride;
  K3_CUDA_CHECK(MakeGateUpArgs(q, a, empty));
  a->n_tokens = 1;  // MakeArgs leaves x, y and the token count to the caller
  a->x = p.x;
  a->y = p.y;
  return cudaSuccess;
}

// The passes' device arrays, or cudaErrorInvalidValue when one is missing.
cudaError_t MakeRowPasses(const QuantGemvPasses& g, RowPasses* rp) {
  if (g.n_passes == nullptr || g.mat == nullptr || g.row0 == nullptr || g.n_rows == nullptr) {
    return cudaErrorInvalidValue;
  }
  *rp = RowPasses{g.n_passes, g.mat, g.row0, g.n_rows, g.x_rows};
  return cudaSuccess;
}

}  // namespace
}  // namespace qgemv

bool QuantGemvGroupedSupports(const QuantGemvParams& p) {
  qgemv::Args a{};
  bool empty = false;
  return qgemv::MakeGroupedArgs(p, 1, &a, &empty) == cudaSuccess;
}

cudaError_t QuantGemvGrouped(const QuantGemvParams& p, const QuantGemvPasses& g, cudaStream_t stream) {
  using namespace qgemv;
  Args a{};
  RowPasses rp{};
  bool empty = false;
  K3_CUDA_CHECK(MakeRowPasses(g, &rp));
  K3_CUDA_CHECK(MakeGroupedArgs(p, g.max_passes, &a, &empty));
  if (empty) return cudaSuccess;
  return LaunchIq1sRowsGrouped(a, rp, stream);
}

cudaError_t QuantGemvGateUpSituGrouped(const QuantGemvGateUpParams& p, const QuantGemvPasses& g,
                                       cudaStream_t stream) {
  using namespace qgemv;
  Args a{};
  RowPasses rp{};
  bool empty = false;
  K3_CUDA_CHECK(MakeRowPasses(g, &rp));
  K3_CUDA_CHECK(MakeGroupedArgs(p.gate, g.max_passes, &a, &empty));
  if (p.up_weight == nullptr || p.situ_beta == 0.0f) return cudaErrorInvalidValue;
  if (!Aligned16(p.up_weight)) return cudaErrorMisalignedAddress;
  if (empty) return cudaSuccess;
  return LaunchIq1sRowsGateUpGrouped(a, static_cast<const uint8_t*>(p.up_weight), p.situ_beta, p.situ_lambda, rp,
                                     stream);
}

}  // namespace k3::cuda
