// Device-resident weights of one rank's shard: views (type, pointer, shape) per tensor, grouped by
// layer kind, and the arena that owns every device allocation of an engine.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/quant/ggml_type.h"
#include "worker/engine_cuda/cuda_status.h"

namespace k3::engine_cuda {

// Device views of the weights.
struct DMat {
  quant::GgmlType type = quant::GgmlType::kF32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  // The direct-load GEMV's copy (Q8_0 repacked into quant and scale planes; F32/F16/BF16: data
  // itself), or nullptr: decode steps then use the block-layout GEMV.
  const void* direct = nullptr;
  // A resident f16 copy of the rows ([rows][cols], the values QuantDequantF16 writes) that the
  // cuBLAS products read instead of decoding per call (half_weights.h), or nullptr.
  const void* half = nullptr;
};
struct DStack {
  quant::GgmlType type = quant::GgmlType::kF32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0, count = 0;
  size_t row_bytes = 0, matrix_stride = 0;
  // IQ1_S stacks with CudaEngineOptions::ternary_experts: the same matrices in their ternary form
  // (kernels/cuda/quant_gemv/iq1s_ternary.h) INSTEAD of data (then nullptr; matrix_stride and
  // row_bytes keep the ggml sizes, the model's bytes that the step floors count), read by the
  // int8-input GEMVs and the IQ1_S wgmma GEMM; nullptr otherwise.
  const void* ternary = nullptr;
  size_t ternary_row_bytes = 0, ternary_stride = 0;
};
using DVec = const float*;

struct DKda {
  DMat q, k, v, f_a, f_b, beta, g, out;
  // q | k | v | g stacked by rows in the direct-GEMV form (all read the normed input): decode steps
  // run them as one launch; empty (direct == nullptr) when they cannot be stacked.
  DMat in_proj;
  DVec conv_q, conv_k, conv_v, a, dt_bias, norm;
};
struct DMla { DMat q_a, q_b, kv_a, gate, out; DVec q_a_norm, kv_a_norm; DStack k_b, v_b; bool has_gate = false; };
struct DDense { DMat gate, up, down; };
struct DMoe {
  DMat router, routed_down, routed_up, shared_gate, shared_up, shared_down;
  DVec selection_bias, routed_norm;
  DStack gate_exps, up_exps, down_exps;
  bool has_routed_norm = false, has_shared = false;
};
struct DLayer { DVec attn_norm, ffn_norm, attn_res_score, ffn_res_score; DKda kda; DMla mla; DDense dense; DMoe moe; };

// The model-wide tensors.
struct DGlobals {
  DMat token_embd, output;
  DVec output_norm = nullptr, output_res_score = nullptr;
};

inline uint64_t MatBytes(const DMat& m) { return static_cast<uint64_t>(m.rows) * m.row_bytes; }

// Owns device allocations (freed together with the arena).
class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena() {
    for (void* p : allocs_) cudaFree(p);
  }
  template <class T>
  absl::StatusOr<T*> Alloc(size_t n) {
    void* p = nullptr;
    K3_CU(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    allocs_.push_back(p);
    return static_cast<T*>(p);
  }
  // Gives back one allocation (p as Alloc returned it) before the arena goes.
  absl::Status Free(const void* p) {
    const auto it = std::find(allocs_.begin(), allocs_.end(), p);
    if (it == allocs_.end()) return absl::InternalError("DeviceArena::Free: not an allocation of this arena");
    allocs_.erase(it);
    K3_CU(cudaFree(const_cast<void*>(p)));
    return absl::OkStatus();
  }

 private:
  std::vector<void*> allocs_;
};

}  // namespace k3::engine_cuda
