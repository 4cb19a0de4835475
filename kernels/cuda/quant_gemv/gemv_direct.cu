// Host side of the direct-load GEMV: the plan (how a shape is cut), validation, token passes,
// dispatch. The kernel: gemv_direct_kernel.cuh; the interface: gemv_direct.h.
#include "kernels/cuda/quant_gemv/gemv_direct.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_gemv/gemv_direct_kernel.cuh"

namespace k3::cuda {
namespace direct {
namespace {

// Items ((row group, slice) pairs, one warp's job each) a shape is cut into when it can be: about
// 4096 = 132 SMs x 31 warps, enough to keep every SM full and the tail short. A constant (not the
// device's SM count), so the numerics are the same on every GPU.
constexpr int64_t kTargetItems = 4096;
// Below this many items with 4 rows per warp, a shape is "narrow": 1 row per warp instead.
constexpr int64_t kNarrowItems = 1024;
constexpr int kMaxSlices = 16;
// Bounds of a forced cut (QuantGemvDirectPlanWith): the slice sums of a block fit 32 KB of shared
// memory (items x 8 tokens x 4 rows x 4 bytes).
constexpr int kMaxGroupsPerBlock = 64;
constexpr int kMaxItemsPerBlock = 256;
constexpr int64_t kMaxCols = int64_t{1} << 28;  // keeps a group's row offsets and x's token offsets 32-bit

int ElemsPerChunk(quant::GgmlType type) {
  switch (type) {
    case quant::GgmlType::kQ8_0: return DirectQ8_0::kElems;
    case quant::GgmlType::kF32: return DirectF32::kElems;
    case quant::GgmlType::kF16: return DirectF16::kElems;
    case quant::GgmlType::kBF16: return DirectBF16::kElems;
    default: return 0;
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

size_t WeightBytes(quant::GgmlType type, int64_t rows, int64_t cols) {
  if (type == quant::GgmlType::kQ8_0) return RepackedQ8_0Bytes(rows, cols);
  const size_t elem = type == quant::GgmlType::kF32 ? 4 : 2;
  return static_cast<size_t>(rows) * static_cast<size_t>(cols) * elem;
}

using LaunchFn = cudaError_t (*)(const Args&, int, int, int64_t, int, int, cudaStream_t);

LaunchFn FindLaunch(quant::GgmlType type) {
  switch (type) {
    case quant::GgmlType::kQ8_0: return LaunchDirectQ8_0;
    case quant::GgmlType::kF32: return LaunchDirectF32;
    case quant::GgmlType::kF16: return LaunchDirectF16;
    case quant::GgmlType::kBF16: return LaunchDirectBF16;
    default: return nullptr;
  }
}

int FindMaxThreads(quant::GgmlType type, int m, int r) {
  switch (type) {
    case quant::GgmlType::kQ8_0: return MaxThreads<DirectQ8_0>(m, r);
    case quant::GgmlType::kF32: return MaxThreads<DirectF32>(m, r);
    case quant::GgmlType::kF16: return MaxThreads<DirectF16>(m, r);
    case quant::GgmlType::kBF16: return MaxThreads<DirectBF16>(m, r);
    default: return 0;
  }
}

}  // namespace
}  // namespace direct

bool QuantGemvDirectSupports(quant::GgmlType type) { return direct::ElemsPerChunk(type) > 0; }

bool QuantGemvDirectPlanFor(quant::GgmlType type, int64_t rows, int64_t cols, QuantGemvDirectPlan* plan) {
  return QuantGemvDirectPlanWith(type, rows, cols, 0, 0, plan);
}

bool QuantGemvDirectPlanWith(quant::GgmlType type, int64_t rows, int64_t cols, int slices, int groups_per_block,
                             QuantGemvDirectPlan* plan) {
  using namespace direct;
  const int elems = ElemsPerChunk(type);
  if (elems == 0 || rows < 1 || cols < 1 || cols > kMaxCols) return false;
  if (cols % elems != 0 || (type == quant::GgmlType::kQ8_0 && cols % 32 != 0)) return false;
  QuantGemvDirectPlan p;
  p.elems_per_chunk = elems;
  p.chunks = cols / elems;
  p.steps = static_cast<int>(CeilDiv(p.chunks, kStepChunks));
  const int max_slices = p.steps < kMaxSlices ? p.steps : kMaxSlices;
  if (slices < 0 || slices > max_slices || groups_per_block < 0 || groups_per_block > kMaxGroupsPerBlock) return false;
  // Narrow outputs (few rows, so few items even when cut into the most slices): one row per warp
  // gives 4x the warps, hence 4x the loads in flight; otherwise 4 rows per warp share each x load.
  p.rows_per_warp = CeilDiv(rows, 4) * max_slices >= kNarrowItems ? 4 : 1;
  const int64_t groups = CeilDiv(rows, p.rows_per_warp);
  if (slices == 0) {
    const int64_t want = CeilDiv(kTargetItems, groups);
    slices = static_cast<int>(want < max_slices ? want : max_slices);
  }
  p.slices = slices;
  // Wide shapes (4 rows per warp): a block is one row group (its `slices` warps), the finest grain
  // for the block scheduler; measured on an H100 (2026-12-06): decode b4 +1.3%, b1 unchanged, against
  // 8 / slices groups. Narrow shapes keep 8 / slices groups so a block still holds ~8 warps.
  if (groups_per_block == 0) groups_per_block = p.rows_per_warp == 4 || p.slices > 8 ? 1 : 8 / p.slices;
  p.groups_per_block = groups_per_block;
  p.items_per_block = p.groups_per_block * p.slices;
  if (p.items_per_block > kMaxItemsPerBlock) return false;
  p.blocks = CeilDiv(groups, p.groups_per_block);
  if (p.blocks > 0x7fffffff) return false;
  *plan = p;
  return true;
}

size_t QuantGemvDirectMinBytes(const QuantGemvDirectParams& p) {
  if (!QuantGemvDirectSupports(p.type) || p.rows < 0 || p.cols < 0 || p.n_tokens < 0) return 0;
  return direct::WeightBytes(p.type, p.rows, p.cols) +
         static_cast<size_t>(p.n_tokens) * (static_cast<size_t>(p.cols) + static_cast<size_t>(p.rows)) * 4u;
}

cudaError_t QuantGemvDirect(const QuantGemvDirectParams& p, cudaStream_t stream) {
  using namespace direct;
  const LaunchFn launch = FindLaunch(p.type);
  if (launch == nullptr) return cudaErrorInvalidValue;
  if (p.rows < 0 || p.cols <= 0 || p.n_tokens < 0) return cudaErrorInvalidValue;
  QuantGemvDirectPlan plan;
  if (!QuantGemvDirectPlanWith(p.type, p.rows > 0 ? p.rows : 1, p.cols, p.plan_slices, p.plan_groups_per_block,
                               &plan)) {
    return cudaErrorInvalidValue;
  }
  if (p.weight == nullptr || p.x == nullptr || p.y == nullptr) return cudaErrorInvalidValue;
  if (p.x_stride % 4 != 0 || p.x_stride < p.cols || p.x_stride > kMaxCols || p.y_stride < p.rows) {
    return cudaErrorInvalidValue;
  }
  if (p.add != nullptr && p.add_stride < p.rows) return cudaErrorInvalidValue;
  if (!Aligned16(p.weight) || !Aligned16(p.x)) return cudaErrorMisalignedAddress;
  if (p.rows == 0 || p.n_tokens == 0) return cudaSuccess;

  Args a{};
  a.w = static_cast<const uint8_t*>(p.weight);
  a.scales = p.type == quant::GgmlType::kQ8_0
                 ? reinterpret_cast<const uint16_t*>(a.w + RepackedQ8_0ScaleOffset(p.rows, p.cols))
                 : nullptr;
  a.rows = p.rows;
  a.row_bytes = plan.chunks * 16;
  a.scale_stride = p.cols / 32;
  a.n_chunks = static_cast<int32_t>(plan.chunks);
  a.steps = plan.steps;
  a.slices = plan.slices;
  a.groups_per_block = plan.groups_per_block;
  a.items = plan.items_per_block;
  a.x_stride = p.x_stride;
  a.y_stride = p.y_stride;
  a.add_stride = p.add_stride;
  a.accumulate = p.accumulate;

  for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kQuantGemvDirectMaxTokens) {
    const int m = static_cast<int>(p.n_tokens - t0 < kQuantGemvDirectMaxTokens ? p.n_tokens - t0
                                                                                : kQuantGemvDirectMaxTokens);
    a.x = p.x + t0 * p.x_stride;
    a.y = p.y + t0 * p.y_stride;
    a.add = p.add != nullptr ? p.add + t0 * p.add_stride : nullptr;
    // Warps per block: the instantiation's most, balanced so that no warp has more items than needed.
    const int max_warps = FindMaxThreads(p.type, m, plan.rows_per_warp) / 32;
    int warps = a.items < max_warps ? a.items : max_warps;
    const int per_warp = (a.items + warps - 1) / warps;
    warps = (a.items + per_warp - 1) / per_warp;
    const int smem = a.slices > 1 ? a.items * m * plan.rows_per_warp * static_cast<int>(sizeof(float)) : 0;
    K3_CUDA_CHECK(launch(a, m, plan.rows_per_warp, plan.blocks, 32 * warps, smem, stream));
  }
  return cudaSuccess;
}

}  // namespace k3::cuda
