#include "worker/engine_cuda/half_weights.h"

#include "kernels/cuda/quant_gemm/quant_gemm.h"
#include "worker/engine_cuda/cuda_status.h"
#include "kernels/quant/ggml_type.h"

namespace k3::engine_cuda {
namespace {

bool Eligible(const DMat& w) {
  if (w.data == nullptr || w.rows <= 0 || w.cols <= 0 || w.type == quant::GgmlType::kF32) return false;
  if (!cuda::QuantGemmSupports(w.type) || w.cols % 32 != 0) return false;
  const quant::TypeTraits& tr = quant::Traits(w.type);
  return w.cols % tr.block_elems == 0 &&
         static_cast<int64_t>(w.row_bytes) == w.cols / tr.block_elems * tr.block_bytes &&
         (reinterpret_cast<uintptr_t>(w.data) & 15u) == 0;
}

}  // namespace

absl::StatusOr<HalfWeightsResult> MakeResidentHalfWeights(std::vector<DLayer>& layers, DeviceArena& arena,
                                                          size_t budget_bytes, size_t reserve_bytes,
                                                          cudaStream_t stream) {
  HalfWeightsResult r;
  auto give = [&](DMat& w) -> absl::Status {
    if (!Eligible(w) || w.half != nullptr) return absl::OkStatus();
    if (w.type == quant::GgmlType::kF16) {  // already the f16 rows cuBLAS reads
      w.half = w.data;
      ++r.matrices;
      return absl::OkStatus();
    }
    const size_t bytes = static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols) * 2;
    size_t free_b = 0, total_b = 0;
    K3_CU(cudaMemGetInfo(&free_b, &total_b));
    if (r.bytes + bytes > budget_bytes || free_b < bytes + reserve_bytes) {
      ++r.skipped;
      return absl::OkStatus();
    }
    K3_ASSIGN_OR_RETURN(uint8_t * out, arena.Alloc<uint8_t>(bytes));
    const cuda::QuantDequantF16Params d{w.type, w.data, w.cols, w.row_bytes, 0, w.rows, out};
    K3_CU(cuda::QuantDequantF16(d, stream));
    w.half = out;
    r.bytes += bytes;
    ++r.matrices;
    return absl::OkStatus();
  };
  for (DLayer& l : layers) {
    for (DMat* w : {&l.kda.q, &l.kda.k, &l.kda.v, &l.kda.f_a, &l.kda.f_b, &l.kda.beta, &l.kda.g, &l.kda.out,
                    &l.mla.q_a, &l.mla.q_b, &l.mla.kv_a, &l.mla.gate, &l.mla.out, &l.dense.gate, &l.dense.up,
                    &l.dense.down, &l.moe.routed_down, &l.moe.routed_up, &l.moe.shared_gate, &l.moe.shared_up,
                    &l.moe.shared_down}) {
      K3_RETURN_IF_ERROR(give(*w));
    }
  }
  K3_CU(cudaStreamSynchronize(stream));
  return r;
}

}  // namespace k3::engine_cuda
